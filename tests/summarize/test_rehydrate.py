"""Re-hydration: the files the agent used last come back after a checkpoint, bounded."""

from __future__ import annotations

import json

import pytest

from context_engine import ContextEngine, ContextSummary, Message, ToolCall
from context_engine.errors import ConfigurationError
from context_engine.summarize import ExtractiveSummarizer
from context_engine.summarize.pinned import INJECTED_KEY
from context_engine.summarize.rehydrate import Rehydration, recent_files
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter(4)


def read(index: int, path: str) -> list[Message]:
    call = ToolCall(f"r{index}", "read_file", json.dumps({"path": path}))
    text = f"# {path} as read in round {index}\n" + f"value_{index} = {index}\n" * 60
    return [Message.assistant(tool_calls=[call]), Message.tool(f"r{index}", text, name="read_file")]


def session(rounds: int) -> list[Message]:
    messages = [Message.system("You are a coding agent."), Message.user("Tidy src/.")]
    for index in range(rounds):
        messages += read(index, f"src/f{index % 20}.py")
    return messages


def engine(rehydrate: Rehydration | None, summarizer: object = None) -> ContextEngine:
    return ContextEngine.default(
        8_000,
        summarizer=summarizer or ExtractiveSummarizer(),
        tool_result_cap=None,
        reserve_tokens=1_500,
        token_counter=COUNTER,
        rehydrate=rehydrate,
    )


def attached(messages: tuple[Message, ...] | list[Message]) -> list[Message]:
    return [m for m in messages if m.metadata.get(INJECTED_KEY) == "file"]


def test_recent_files_are_listed_newest_use_first_with_their_last_read() -> None:
    found = recent_files(session(25))
    assert [path for path, _ in found][:6] == [f"src/f{n}.py" for n in (4, 3, 2, 1, 0, 19)]
    assert len(found) == 20
    assert found[0][1] is not None
    assert "as read in round 24" in found[0][1]


async def test_the_current_text_of_recent_files_comes_back_named_in_the_checkpoint() -> None:
    """The newest files of the replaced range, not those the kept messages still show."""
    current = {f"src/f{n}.py": f"CURRENT TEXT OF f{n}" for n in range(20)}
    result = await engine(Rehydration(reader=current.get, max_files=3)).compact(session(40))
    assert result.commit is not None
    files = attached(result.commit)
    kept = result.commit[2 + len(files) :]
    still_shown = {path for path, _ in recent_files(kept)}
    replaced = session(40)[2 : len(session(40)) - len(kept)]
    expected = [p for p, _ in recent_files(replaced) if p not in still_shown][:3]
    assert len(expected) == 3
    assert [m.text.split("\n", 1)[1] for m in files] == [
        f"CURRENT TEXT OF {path[4:-3]}" for path in expected
    ]
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    names = ", ".join(f"`{path}`" for path in expected)
    assert f"Re-attached after this checkpoint: {names}" in checkpoint.summary
    assert result.commit[2:5] == tuple(files)  # right after the checkpoint


async def test_without_a_reader_the_last_read_comes_back_marked_as_possibly_outdated() -> None:
    result = await engine(Rehydration(max_files=1)).compact(session(40))
    (only,) = attached(result.messages)
    assert "text as last read (it may have changed since)" in only.text
    assert "as read in round" in only.text


async def test_a_failing_reader_falls_back_to_the_last_read() -> None:
    def broken(path: str) -> str:
        raise OSError("disk gone")

    result = await engine(Rehydration(reader=broken, max_files=1)).compact(session(40))
    (only,) = attached(result.messages)
    assert "as last read" in only.text


async def test_re_attached_files_are_bounded_per_file_and_in_total() -> None:
    big = {f"src/f{n}.py": "y" * 40_000 for n in range(20)}
    rehydrate = Rehydration(reader=big.get, max_files=5, max_tokens_per_file=300)
    eng = engine(rehydrate)
    result = await eng.compact(session(40))
    files = attached(result.messages)
    assert files
    assert all(COUNTER.count_message(m) <= 300 for m in files)
    assert all("more characters not re-attached" in m.text for m in files)
    assert sum(COUNTER.count_message(m) for m in files) <= int(0.25 * eng.threshold)
    assert eng.estimate(result.messages).tokens <= eng.threshold


async def test_off_by_default() -> None:
    result = await engine(None).compact(session(40))
    assert attached(result.messages) == []
    assert "Re-attached" not in result.messages[1].text


async def test_the_next_checkpoint_replaces_re_attached_files_instead_of_summarizing_them() -> None:
    summarizer = RecordingSummarizer(["## Goal\n- tidy src/"])
    current = {f"src/f{n}.py": f"CURRENT TEXT OF f{n}" for n in range(20)}
    eng = engine(Rehydration(reader=current.get, max_files=2), summarizer)
    first = await eng.compact(session(40))
    assert first.commit is not None
    asked = len(summarizer.requests)
    second = await eng.compact([*first.commit, *session(60)[len(session(40)) :]])
    sent = [m.text for r in summarizer.requests[asked:] for m in r.messages]
    assert not any("CURRENT TEXT OF" in text for text in sent)
    assert second.commit is not None
    assert len(attached(second.commit)) == 2
    assert second.commit[1].text.count("Re-attached after this checkpoint") == 1


def test_rehydrate_without_a_summarizer_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="summarizer"):
        ContextEngine.default(8_000, rehydrate=Rehydration())


def test_a_reader_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="reader"):
        Rehydration(reader="src/")  # type: ignore[arg-type]
