"""SessionMemory: old history becomes a checkpoint holding the caller's own memory text."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.errors import ConfigurationError
from context_engine.events import SummaryInfo
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.messages import ContextSummary, Message, ToolCall
from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    Strategy,
    StrategyResult,
)
from context_engine.strategies.session_memory import SessionMemory, cut_seed_text
from context_engine.structure import analyze
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts
from tests.transcripts import transcripts

MEMORY = "# Memory\n- the failing test is test_parse\n- fix goes in parser.py\n"
FAST = settings(max_examples=40, deadline=None)


def text(tokens: int, fill: str = "x") -> str:
    return fill * (4 * tokens)


def measure_with(counter: FixedTokenCounter) -> Callable[[Sequence[Message]], int]:
    return lambda messages: sum(counter.count_message(m) for m in messages)


def budget_for(view: Sequence[Message], counter: FixedTokenCounter, threshold: int) -> Budget:
    measure = measure_with(counter)
    return Budget(
        tokens=measure(view),
        window=threshold * 2 + 1,
        threshold=threshold,
        counter=counter,
        measure=measure,
    )


def group(cid: str, tokens: int = 10) -> list[Message]:
    return [
        Message.assistant(tool_calls=[ToolCall(cid, "bash", "{}")]),
        Message.tool(cid, text(tokens)),
    ]


def agent_session(steps: int = 20) -> list[Message]:
    """One user request, then ``steps`` tool steps of 23 tokens each."""
    view = [Message.system(text(10)), Message.user(text(10, "u"))]
    for step in range(steps):
        view += group(f"s{step}")
    return view


def chat(turns: int = 6) -> list[Message]:
    """``turns`` turns of a user message and a 54-token answer."""
    view = [Message.system(text(10))]
    for turn in range(turns):
        view += [Message.user(text(10, chr(ord("a") + turn))), Message.assistant(text(50))]
    return view


def calls_counted(result: str | BaseException = MEMORY) -> tuple[Callable[[], str], list[int]]:
    calls: list[int] = []

    def seed() -> str:
        calls.append(1)
        if isinstance(result, BaseException):
            raise result
        return result

    return seed, calls


async def run(
    strategy: SessionMemory,
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int,
    *,
    force: bool = False,
    transcript: Sequence[Message] | None = None,
) -> StrategyResult:
    """Apply (or force), then check what every run must keep."""
    source = list(view if transcript is None else transcript)
    before_view, before_source = copy.deepcopy(list(view)), copy.deepcopy(source)
    budget = budget_for(source if force else view, counter, threshold)
    if force:
        result = await strategy.force_apply(source, budget, instructions="keep names")
    else:
        result = await strategy.apply(source, view, budget)
    assert list(view) == before_view, "view mutated"
    assert source == before_source, "transcript mutated"
    assert check_view(source, result.messages) == []
    base = source if force else list(view)
    if not result.applied:
        assert result.messages == tuple(base)  # a forced no-op hands the transcript on
        assert result.info is None
        assert result.replaced == ()
        return result
    info = result.info
    assert isinstance(info, SummaryInfo)
    measure = measure_with(counter)
    assert info.tokens_before == budget.measure(base)
    assert info.tokens_after == measure(result.messages)
    assert result.tokens_saved == info.tokens_before - info.tokens_after > 0
    assert info.compacted_count == len(result.replaced)
    assert info.messages_before == len(base)
    assert info.messages_after == len(result.messages)
    lead = analyze(base).lead_end
    assert info.kept_count == len(result.messages) - lead - 1
    assert info.compacted_count + info.kept_count == len(base) - lead
    assert info.duration >= 0
    checkpoint = result.messages[lead]
    assert isinstance(checkpoint, ContextSummary)
    assert info.summary_chars == len(checkpoint.summary)
    assert checkpoint.tokens_before == info.tokens_before
    assert sum(m.is_summary for m in result.messages) == 1
    position = {id(m): i for i, m in enumerate(base)}
    originals = [*result.replaced, *result.messages[lead + 1 :]]
    assert sorted(position[id(m)] for m in originals) == list(range(lead, len(base)))
    return result


def test_is_a_force_compaction_strategy_without_llm() -> None:
    strategy = SessionMemory(seed=lambda: MEMORY)
    assert isinstance(strategy, Strategy)
    assert isinstance(strategy, ForceCompactionStrategy)
    assert SessionMemory.uses_llm is False
    assert strategy.name == "session_memory"
    assert SessionMemory(label="notes").name == "notes"
    assert (strategy.keep_recent_tokens, strategy.max_seed_chars, strategy.label) == (
        8000,
        20000,
        None,
    )


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        pytest.param({"keep_recent_tokens": -1}, "keep_recent_tokens=-1", id="negative-keep"),
        pytest.param({"keep_recent_tokens": 1.5}, "keep_recent_tokens=1.5", id="float-keep"),
        pytest.param({"max_seed_chars": 0}, "max_seed_chars=0", id="zero-max-chars"),
        pytest.param({"label": ""}, "label=''", id="empty-label"),
        pytest.param({"label": "  "}, "label='  '", id="blank-label"),
        pytest.param({"seed": "memory text"}, "coroutine function", id="seed-not-callable"),
    ],
)
def test_bad_configuration_says_how_to_fix_it(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match="SessionMemory") as caught:
        SessionMemory(**kwargs)
    assert fragment in str(caught.value)


def sync_seed() -> str:
    return MEMORY


async def async_seed() -> str:
    await asyncio.sleep(0)
    return MEMORY


class CallableSeed:
    def __call__(self) -> Awaitable[str]:
        return async_seed()


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(sync_seed, id="plain-function"),
        pytest.param(async_seed, id="coroutine-function"),
        pytest.param(lambda: MEMORY, id="lambda"),
        pytest.param(CallableSeed(), id="callable-returning-an-awaitable"),
    ],
)
async def test_seed_text_becomes_the_checkpoint(
    counter: FixedTokenCounter, seed: Callable[[], Any]
) -> None:
    view = chat(6)
    result = await run(SessionMemory(seed=seed, keep_recent_tokens=100), view, counter, 300)
    assert result.applied
    assert result.error is None
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    assert checkpoint.summary == MEMORY
    # keep 100 tokens: the last two turns (68 + 68) stay, the first four go.
    assert result.messages[0] is view[0]
    assert list(result.messages[2:]) == view[9:]
    assert all(a is b for a, b in zip(result.messages[2:], view[9:], strict=True))
    assert result.replaced == tuple(view[1:9])
    assert result.info is not None
    assert (result.info.compacted_count, result.info.kept_count) == (8, 4)
    assert not result.info.is_split_turn


@pytest.mark.parametrize(
    ("seed", "fragment"),
    [
        pytest.param(None, "no seed configured", id="no-seed"),
        pytest.param(lambda: "", "empty", id="empty-text"),
        pytest.param(lambda: "  \n\t ", "empty", id="whitespace-only"),
        pytest.param(lambda: None, "returned NoneType", id="returns-none"),
        pytest.param(lambda: 42, "returned int", id="returns-an-int"),
    ],
)
async def test_unusable_seed_is_a_recorded_no_op(
    counter: FixedTokenCounter, seed: Callable[[], Any] | None, fragment: str
) -> None:
    view = chat(6)
    result = await run(SessionMemory(seed=seed, keep_recent_tokens=100), view, counter, 300)
    assert not result.applied
    assert result.error is not None
    assert fragment in result.error
    forced = await run(
        SessionMemory(seed=seed, keep_recent_tokens=100), view, counter, 300, force=True
    )
    assert not forced.applied
    assert forced.error == result.error


async def raising_async_seed() -> str:
    await asyncio.sleep(0)
    raise OSError("memory file is gone")


def raising_sync_seed() -> str:
    raise ValueError("bad memory")


@pytest.mark.parametrize(
    ("seed", "expected"),
    [
        pytest.param(raising_sync_seed, "seed raised ValueError: bad memory", id="sync"),
        pytest.param(raising_async_seed, "seed raised OSError: memory file is gone", id="async"),
    ],
)
async def test_raising_seed_is_a_no_op_naming_the_exception(
    counter: FixedTokenCounter, seed: Callable[[], Any], expected: str
) -> None:
    result = await run(SessionMemory(seed=seed, keep_recent_tokens=100), chat(6), counter, 300)
    assert not result.applied
    assert result.error == expected


async def test_below_the_threshold_apply_does_nothing_and_never_calls_the_seed(
    counter: FixedTokenCounter,
) -> None:
    seed, calls = calls_counted()
    view = chat(6)
    result = await run(SessionMemory(seed=seed, keep_recent_tokens=100), view, counter, 10_000)
    assert not result.applied
    assert result.error is None
    assert calls == []


async def test_nothing_to_compact_never_calls_the_seed(counter: FixedTokenCounter) -> None:
    seed, calls = calls_counted()
    view = [Message.system(text(10)), Message.user(text(2000))]
    result = await run(SessionMemory(seed=seed), view, counter, 100)
    assert not result.applied
    assert result.error is None
    assert calls == []


async def test_force_apply_runs_below_the_threshold_from_the_transcript(
    counter: FixedTokenCounter,
) -> None:
    seed, calls = calls_counted()
    transcript = chat(6)
    strategy = SessionMemory(seed=seed, keep_recent_tokens=100)
    result = await run(strategy, transcript, counter, 10_000, force=True)
    assert result.applied
    assert calls == [1]
    assert result.replaced == tuple(transcript[1:9])
    assert list(result.messages[2:]) == transcript[9:]


async def test_force_apply_no_op_hands_the_transcript_on_unchanged(
    counter: FixedTokenCounter,
) -> None:
    transcript = chat(6)
    strategy = SessionMemory(seed=raising_sync_seed, keep_recent_tokens=100)
    result = await run(strategy, transcript, counter, 300, force=True)
    assert not result.applied
    assert result.messages == tuple(transcript)
    assert result.error == "seed raised ValueError: bad memory"


async def test_parallel_tool_calls_stay_together(counter: FixedTokenCounter) -> None:
    parallel = [
        Message.assistant(tool_calls=[ToolCall(f"p{i}", "bash", "{}") for i in range(3)]),
        *[Message.tool(f"p{i}", text(10)) for i in range(3)],
    ]  # 61 tokens
    view = [*agent_session(4), *parallel, *group("last")]
    # keep 50: the last group (23) is not enough; the cut cannot fall among the
    # parallel results, so it keeps the whole parallel group (61 + 23).
    result = await run(SessionMemory(seed=sync_seed, keep_recent_tokens=50), view, counter, 100)
    assert result.applied
    assert all(a is b for a, b in zip(result.messages[3:], view[-6:], strict=True))
    assert result.info is not None
    assert result.info.compacted_count == 8


async def test_force_apply_ignores_instructions(counter: FixedTokenCounter) -> None:
    transcript = chat(6)
    strategy = SessionMemory(seed=sync_seed, keep_recent_tokens=100)
    budget = budget_for(transcript, counter, 10_000)
    plain = await strategy.force_apply(transcript, budget)
    steered = await strategy.force_apply(transcript, budget, instructions="be brief")
    assert plain.messages == steered.messages


async def test_existing_leading_checkpoint_is_replaced_not_stacked(
    counter: FixedTokenCounter,
) -> None:
    old = ContextSummary(summary="what happened before", tokens_before=9_000)
    view = [chat(1)[0], old, *chat(6)[1:]]
    result = await run(SessionMemory(seed=sync_seed, keep_recent_tokens=100), view, counter, 300)
    assert result.applied
    assert sum(m.is_summary for m in result.messages) == 1
    assert result.messages[1].is_summary
    assert result.messages[1] != old
    assert result.replaced[0] is old
    assert result.info is not None
    assert result.info.compacted_count == 9  # the old checkpoint and eight messages


async def test_cut_inside_the_newest_turn_keeps_its_user_message(
    counter: FixedTokenCounter,
) -> None:
    """One request, many tool steps: the request stays verbatim right after the checkpoint."""
    view = agent_session(20)
    result = await run(SessionMemory(seed=sync_seed, keep_recent_tokens=100), view, counter, 300)
    assert result.applied
    assert result.info is not None
    assert result.info.is_split_turn
    assert result.messages[2] is view[1]
    # keep 100 tokens: five steps of 23 tokens; fifteen steps (30 messages) go.
    assert list(result.messages[3:]) == view[-10:]
    assert result.info.compacted_count == 30
    assert result.replaced == tuple(view[2:32])


async def test_one_huge_turn_of_300_tool_steps(counter: FixedTokenCounter) -> None:
    view = agent_session(300)
    result = await run(SessionMemory(seed=sync_seed), view, counter, 4_000)
    assert result.applied
    assert result.info is not None
    assert result.info.is_split_turn
    kept_steps = (len(result.messages) - 3) // 2
    assert kept_steps == 87  # keep capped at threshold // 2 = 2000 tokens: ceil(2000 / 23)
    assert result.info.compacted_count == 2 * (300 - kept_steps)


async def test_keep_recent_tokens_is_capped_at_half_the_threshold(
    counter: FixedTokenCounter,
) -> None:
    view = chat(6)  # 418 tokens
    strategy = SessionMemory(seed=sync_seed)  # keeps 8000 tokens by default
    result = await run(strategy, view, counter, 300)
    assert result.applied  # keeps at least 150 tokens instead: the last three turns
    assert list(result.messages[2:]) == view[7:]


async def test_pending_calls_at_the_end_stay(counter: FixedTokenCounter) -> None:
    view = [
        *agent_session(10),
        Message.assistant(tool_calls=[ToolCall("w1", "approve"), ToolCall("w2", "bash")]),
        Message.tool("w2", text(10)),
    ]
    result = await run(SessionMemory(seed=sync_seed, keep_recent_tokens=0), view, counter, 100)
    assert result.applied
    assert list(result.messages[-4:]) == view[-4:]  # newest group and the pending calls
    assert result.messages[2] is view[1]


async def test_without_any_user_message(counter: FixedTokenCounter) -> None:
    view = [Message.system(text(10))] + [Message.assistant(text(50)) for _ in range(6)]
    result = await run(SessionMemory(seed=sync_seed, keep_recent_tokens=100), view, counter, 200)
    assert result.applied
    assert result.info is not None
    assert not result.info.is_split_turn
    assert list(result.messages[2:]) == view[-2:]


async def test_only_a_system_prompt_is_left_alone(counter: FixedTokenCounter) -> None:
    view = [Message.system(text(1000))]
    result = await run(SessionMemory(seed=sync_seed), view, counter, 100)
    assert not result.applied
    assert result.error is None


async def test_memory_larger_than_what_it_replaces_is_a_recorded_no_op(
    counter: FixedTokenCounter,
) -> None:
    strategy = SessionMemory(seed=lambda: text(5000), keep_recent_tokens=100)
    result = await run(strategy, chat(6), counter, 300)
    assert not result.applied
    assert result.error is not None
    assert "would not shrink" in result.error


async def test_oversized_seed_is_cut_at_a_line_boundary_with_a_notice(
    counter: FixedTokenCounter,
) -> None:
    lines = [f"- fact number {n:03d}" for n in range(100)]  # 17 characters each
    memory = "\n".join(lines)
    strategy = SessionMemory(seed=lambda: memory, keep_recent_tokens=100, max_seed_chars=100)
    result = await run(strategy, chat(6), counter, 300)
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    body, notice = checkpoint.summary.rsplit("\n", 1)
    assert body == "\n".join(lines[:5])  # 5 lines + 4 newlines = 89 characters; 6 take 107
    assert len(body) == 89
    assert notice == (
        f"[session memory cut to fit: {len(memory) - 89} more characters of the memory "
        "were left out here]"
    )
    assert result.info is not None
    assert result.info.summary_chars == len(checkpoint.summary)


@pytest.mark.parametrize(
    ("memory", "limit", "kept"),
    [
        pytest.param("abc\ndef", 7, "abc\ndef", id="at-the-limit-unchanged"),
        pytest.param("abc\ndef\nghi", 8, "abc\ndef", id="newline-right-after-the-limit"),
        pytest.param("abc\ndef\nghi", 7, "abc\ndef", id="limit-at-a-line-end"),
        pytest.param("abc\ndef\nghi", 6, "abc", id="back-to-the-previous-line"),
        pytest.param("abcdefghij\nk", 4, "abcd", id="first-line-too-long-is-cut-mid-line"),
        pytest.param("abc\n\n\ndefghij", 5, "abc", id="blank-lines-before-the-cut-go-too"),
    ],
)
def test_cut_seed_text(memory: str, limit: int, kept: str) -> None:
    result = cut_seed_text(memory, limit)
    if kept == memory:
        assert result == memory
        return
    body, notice = result.rsplit("\n", 1)
    assert body == kept
    assert len(body) <= limit
    assert notice == (
        f"[session memory cut to fit: {len(memory) - len(kept)} more characters of the memory "
        "were left out here]"
    )


async def test_running_again_on_its_own_output_changes_nothing(
    counter: FixedTokenCounter,
) -> None:
    view = [*agent_session(40), *group("big", 400)]  # the protected last step: 413 tokens
    strategy = SessionMemory(seed=sync_seed, keep_recent_tokens=300)
    first = await run(strategy, view, counter, 200)  # still over: the tail alone is 413
    assert first.applied
    assert budget_for(first.messages, counter, 200).tokens > 200
    again = await run(strategy, first.messages, counter, 200)
    assert not again.applied
    forced = await run(strategy, first.messages, counter, 200, force=True)
    assert not forced.applied


async def test_same_input_gives_the_same_view(counter: FixedTokenCounter) -> None:
    view = chat(6)
    strategy = SessionMemory(seed=async_seed, keep_recent_tokens=100)
    first = await run(strategy, view, counter, 300)
    second = await run(strategy, view, counter, 300)
    assert first.messages == second.messages


@FAST
@given(
    transcript=transcripts(max_turns=5, max_steps=5),
    keep=st.integers(0, 4000),
    threshold=st.integers(0, 20_000),
)
def test_generated_transcripts_keep_the_invariants(
    transcript: list[Message], keep: int, threshold: int
) -> None:
    counter = FixedTokenCounter()
    strategy = SessionMemory(seed=lambda: "memory", keep_recent_tokens=keep)
    result = asyncio.run(run(strategy, transcript, counter, threshold, force=True))
    if result.applied:
        again = asyncio.run(run(strategy, result.messages, counter, threshold, force=True))
        assert not again.applied


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6, 0.9])
async def test_corpus_transcripts_keep_the_invariants(corpus_path: Path, fraction: float) -> None:
    counter = FixedTokenCounter()
    transcript = from_openai(load_corpus_dicts(corpus_path))
    threshold = int(measure_with(counter)(transcript) * fraction)
    strategy = SessionMemory(seed=sync_seed, keep_recent_tokens=4_000)
    result = await run(strategy, transcript, counter, threshold)
    assert result.error is None
    if result.applied:
        again = await run(strategy, result.messages, counter, threshold)
        assert not again.applied
