"""Request-boundary compaction (`compact_if_needed`), with seed 001's checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_engine import (
    CompactionError,
    CompactResult,
    ConfigurationError,
    ContextSummary,
    Message,
    RewriteEvent,
)
from context_engine.archive import MemoryArchive
from context_engine.boundary import boundary_due
from context_engine.engine import ContextEngine
from context_engine.formats.openai import to_openai
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.testing import FixedTokenCounter, RecordingSummarizer


def stored(messages: int, tokens: int) -> list[Message]:
    """A stored conversation of ``messages`` messages weighing about ``tokens`` tokens."""
    per = tokens // messages
    out = [Message.system("You are a coder.")]
    for i in range(messages - 1):
        body = f"{i:04d} " + "word " * ((per * 4 - 16) // 5)
        out.append(Message.user(f"Question {body}") if i % 2 == 0 else Message.assistant(body))
    return out


class Recorder:
    def __init__(self) -> None:
        self.compacts: list[RewriteEvent] = []
        self.starts: list[int] = []
        self.ends: list[CompactResult | None] = []
        self.summarizer = RecordingSummarizer()

    def engine(self, **options: Any) -> ContextEngine:
        return ContextEngine(
            100_000,
            [FullSummary(summarizer=self.summarizer), HardTruncate()],
            reserve_tokens=options.pop("reserve_tokens", 10_000),
            token_counter=FixedTokenCounter(),
            on_compact=self.compacts.append,
            **options,
        )

    async def compact(self, engine: ContextEngine, messages: list[Message]) -> CompactResult | None:
        return await engine.compact_if_needed(
            messages, on_start=self.starts.append, on_end=self.ends.append
        )


async def test_a_long_stored_session_gets_one_checkpoint_and_each_event_once() -> None:
    seen = Recorder()
    engine = seen.engine(archive=MemoryArchive(), session_id="s1")
    messages = stored(25, 85_000)
    assert engine.estimate(messages).tokens > 80_000
    result = await seen.compact(engine, messages)
    assert result is not None
    assert result.commit is not None
    assert [m for m in result.commit if isinstance(m, ContextSummary)] == [result.commit[1]]
    assert check_view(messages, result.commit) == []
    assert len(seen.compacts) == 1
    assert seen.compacts[0].reason == "request_boundary"
    assert seen.starts == [engine.estimate(messages).tokens]
    assert seen.ends == [result]
    assert {r.reason for r in seen.summarizer.requests} == {"request_boundary"}


async def test_recall_returns_the_replaced_originals_unchanged() -> None:
    seen = Recorder()
    engine = seen.engine(archive=MemoryArchive(), session_id="s1")
    messages = stored(25, 85_000)
    result = await seen.compact(engine, messages)
    assert result is not None
    assert result.commit is not None
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    (reference,) = checkpoint.references
    kept = len(result.commit) - 2
    originals = await engine.recall(reference)
    assert originals == tuple(messages[1 : len(messages) - kept])
    replaced = messages[1 : len(messages) - kept]
    assert json.dumps(to_openai(originals)) == json.dumps(to_openai(replaced))


@pytest.mark.parametrize(
    ("messages", "tokens"),
    [(19, 85_000), (40, 79_000)],
    ids=["too-few-messages", "below-the-trigger"],
)
async def test_short_or_small_sessions_are_left_alone(messages: int, tokens: int) -> None:
    seen = Recorder()
    engine = seen.engine()
    result = await seen.compact(engine, stored(messages, tokens))
    assert result is None
    assert (seen.compacts, seen.starts, seen.ends, seen.summarizer.calls) == ([], [], [], 0)


async def test_on_end_hears_a_failure_too() -> None:
    seen = Recorder()
    seen.summarizer.fail = RuntimeError("summarizer endpoint is down")
    engine = seen.engine()
    with pytest.raises(CompactionError):
        await seen.compact(engine, stored(25, 85_000))
    assert len(seen.starts) == 1
    assert seen.ends == [None]


def test_the_blocking_twin_compacts_too() -> None:
    seen = Recorder()
    result = seen.engine().compact_if_needed_sync(stored(25, 85_000))
    assert result is not None
    assert result.commit is not None


@pytest.mark.parametrize(
    ("tokens", "messages", "due"),
    [(80_001, 20, True), (80_000, 20, False), (90_000, 19, False)],
    ids=["just-above", "at-the-trigger", "one-message-short"],
)
def test_the_trigger_is_exceeded_tokens_and_at_least_min_messages(
    tokens: int, messages: int, due: bool
) -> None:
    assert boundary_due(tokens, messages, 80_000, 20) is due


async def test_bad_settings_name_the_argument() -> None:
    with pytest.raises(ConfigurationError, match="trigger_tokens"):
        await Recorder().engine().compact_if_needed([], trigger_tokens=-1)
