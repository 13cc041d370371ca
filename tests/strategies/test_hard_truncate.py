"""HardTruncate: the last resort drops the oldest turns, then the oldest steps, behind a marker."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.messages import ContextSummary, ImageBlock, Message, TextBlock, ToolCall
from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    Strategy,
    StrategyResult,
)
from context_engine.strategies.hard_truncate import (
    HardTruncate,
    is_truncation_marker,
    trim_user_message,
    truncate_view,
    truncation_marker,
)
from context_engine.strategies.microcompact import ToolResultMicrocompact
from context_engine.strategies.tool_result_cap import MIN_CAP_TOKENS, cap_tool_result
from context_engine.structure import (
    CAPPED_KEY,
    TRIMMED_KEY,
    TRUNCATION_KEY,
    analyze,
    is_user_message,
)
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts
from tests.transcripts import transcripts

FAST = settings(max_examples=60, deadline=None)
TRIM_MARKER = regex.compile(r"\n\[(\d+) characters trimmed\]\n")
MARKER_TOKENS = 37  # FixedTokenCounter tokens of a marker for 2 to 999 messages


def text(tokens: int, fill: str = "x") -> str:
    return fill * (4 * tokens)


def measure_with(counter: FixedTokenCounter) -> Callable[[Sequence[Message]], int]:
    return lambda messages: sum(counter.count_message(m) for m in messages)


def budget_for(
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int,
    max_user_share: float | None = 0.5,
) -> Budget:
    measure = measure_with(counter)
    return Budget(
        tokens=measure(view),
        window=threshold * 2 + 1,
        threshold=threshold,
        counter=counter,
        measure=measure,
        max_user_share=max_user_share,
    )


def group(cid: str, tokens: int = 10) -> list[Message]:
    return [
        Message.assistant(tool_calls=[ToolCall(cid, "bash", "{}")]),
        Message.tool(cid, text(tokens)),
    ]


def chat(turns: int = 6) -> list[Message]:
    """``turns`` turns of a 14-token user message and a 54-token answer (68 a turn)."""
    view = [Message.system(text(10))]
    for turn in range(turns):
        view += [Message.user(text(10, chr(ord("a") + turn))), Message.assistant(text(50))]
    return view


def steps(count: int, prefix: str = "s") -> list[Message]:
    """``count`` tool steps of 23 tokens each."""
    return [m for step in range(count) for m in group(f"{prefix}{step}")]


def agent_session(count: int = 20) -> list[Message]:
    """One user request, then ``count`` tool steps."""
    return [Message.system(text(10)), Message.user(text(10, "u")), *steps(count)]


def markers(view: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(view) if TRUNCATION_KEY in m.metadata]


def slot_of(view: Sequence[Message]) -> int:
    """Where the marker belongs: after the leading block and a leading checkpoint."""
    slot = analyze(view).lead_end
    if slot < len(view) and view[slot].is_summary:
        slot += 1
    return slot


def at_floor(view: Sequence[Message]) -> bool:
    """Only what HardTruncate must keep is left."""
    shape = analyze(view)
    start = slot_of(view)
    if start < len(view) and is_truncation_marker(view[start]):
        start += 1
    return all(i == shape.last_user or i >= shape.tail_start for i in range(start, len(view)))


async def run(
    strategy: HardTruncate,
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int,
    *,
    transcript: Sequence[Message] | None = None,
    max_user_share: float | None = 0.5,
) -> StrategyResult:
    """Apply, then check what every run must keep."""
    source = list(view if transcript is None else transcript)
    before_view, before_source = copy.deepcopy(list(view)), copy.deepcopy(source)
    budget = budget_for(view, counter, threshold, max_user_share)
    result = await strategy.apply(source, view, budget)
    assert list(view) == before_view, "view mutated"
    assert source == before_source, "transcript mutated"
    assert check_view(source, result.messages) == []
    assert result.info is None
    if not result.applied:
        assert result.messages == tuple(view)
        assert result.replaced == ()
        return result
    measure = measure_with(counter)
    assert result.tokens_saved == budget.tokens - measure(result.messages) > 0
    assert measure(result.messages) <= threshold or at_floor(result.messages)
    found = markers(result.messages)
    assert len(found) <= 1
    position = {id(m): i for i, m in enumerate(view)}
    assert all(id(m) in position for m in result.replaced)
    for removal in result.removed:  # each removal keeps its originals in view order
        order = [position[id(m)] for m in removal.originals]
        assert order == sorted(order)
    kinds = [r.kind for r in result.removed]
    # Whole messages, the newest user message's text, then the last resorts: the newest
    # results, then the checkpoint's text, then the checkpoint itself; each step at most
    # once (results one by one).
    steps = [k for n, k in enumerate(kinds) if not (k == "tool_result" and kinds[n - 1 : n] == [k])]
    pattern = ["messages", "text", "tool_result", "text", "messages"]
    position = 0
    for kind in steps:
        assert kind in pattern[position:], kinds
        position = pattern.index(kind, position) + 1
    in_view = {id(m) for m in view}
    trimmed = [
        m
        for m in result.messages
        if is_user_message(m) and TRIMMED_KEY in m.metadata and id(m) not in in_view
    ]
    assert len(trimmed) <= 1
    dropped = sum(len(r.originals) for r in result.removed if r.kind == "messages")
    old = [m for m in view if is_truncation_marker(m)]
    if dropped and not found:  # a view of the floor fits only without its marker
        prior = old[0].metadata[TRUNCATION_KEY] if old else 0
        brief = truncation_marker(prior + dropped, brief=True)
        assert measure((brief, *result.messages)) > threshold
    elif dropped:
        (index,) = found
        marker = result.messages[index]
        assert index == slot_of(result.messages)
        assert marker.role == "user"
        prior = old[0].metadata[TRUNCATION_KEY] if old else 0
        assert marker.metadata[TRUNCATION_KEY] == prior + dropped
    else:
        checkpoint_cut = any(
            r.kind == "text" and any(isinstance(m, ContextSummary) for m in r.originals)
            for r in result.removed
        )
        assert trimmed or checkpoint_cut or any(r.kind == "tool_result" for r in result.removed)
        assert [result.messages[i] for i in found] == old  # an earlier marker stays as it was
    return result


def test_is_a_plain_strategy_without_llm_not_a_force_compaction_one() -> None:
    """compact() and recover_overflow() must not run it before cheaper strategies."""
    strategy = HardTruncate()
    assert isinstance(strategy, Strategy)
    assert not isinstance(strategy, ForceCompactionStrategy)
    assert not hasattr(strategy, "force_apply")
    assert strategy.name == "hard_truncate"
    assert HardTruncate.uses_llm is False
    assert not hasattr(strategy, "max_user_share")  # the share is the budget's, not its own


@pytest.mark.parametrize(
    "share",
    [
        pytest.param(0, id="zero"),
        pytest.param(-0.1, id="negative"),
        pytest.param(1.5, id="above-one"),
        pytest.param(True, id="bool"),
        pytest.param("half", id="str"),
    ],
)
def test_bad_max_user_share_says_how_to_fix_it(share: Any) -> None:
    """The share is the engine's setting now (its floor and the strategy use the same one)."""
    with pytest.raises(ConfigurationError, match=r"max_user_share=.* must be .*number in \(0, 1\]"):
        ContextEngine(8_000, [HardTruncate()], max_user_share=share)


async def test_drops_the_oldest_whole_turns_first(counter: FixedTokenCounter) -> None:
    view = chat(6)  # 422 tokens
    result = await run(HardTruncate(), view, counter, 300)
    # 422 - 3 * 68 + 37 = 255 fits; two turns would leave 323.
    assert result.replaced == tuple(view[1:7])
    assert result.messages[0] is view[0]
    assert result.messages[1] == truncation_marker(6)
    assert result.messages[1].metadata[TRUNCATION_KEY] == 6
    assert list(result.messages[2:]) == view[7:]
    assert result.tokens_saved == 422 - 255


async def test_then_the_oldest_tool_steps_of_the_current_turn(
    counter: FixedTokenCounter,
) -> None:
    view = agent_session(20)  # 28 + 20 * 23 = 488 tokens
    result = await run(HardTruncate(), view, counter, 300)
    # 488 - 10 * 23 + 37 = 295 fits; nine steps would leave 318.
    assert result.messages[1].metadata[TRUNCATION_KEY] == 20
    assert result.messages[2] is view[1]  # the request stays
    assert list(result.messages[3:]) == view[22:]
    assert result.replaced == tuple(view[2:22])


async def test_turns_go_before_any_step_of_the_current_turn(counter: FixedTokenCounter) -> None:
    view = [*chat(2), Message.user(text(10, "c")), *steps(10)]  # 14 + 136 + 14 + 230 = 394
    result = await run(HardTruncate(), view, counter, 200)
    # both older turns (136), then 5 steps (115): 394 - 251 + 37 = 180; 4 steps leave 203.
    assert result.messages[1].metadata[TRUNCATION_KEY] == 4 + 10
    assert result.messages[2] is view[5]
    assert list(result.messages[3:]) == view[16:]


async def test_one_huge_turn_of_300_tool_steps(counter: FixedTokenCounter) -> None:
    view = agent_session(300)  # 6928 tokens
    result = await run(HardTruncate(), view, counter, 2_000)
    kept_steps = (len(result.messages) - 3) // 2
    assert kept_steps == (2_000 - 28 - MARKER_TOKENS) // 23
    assert result.messages[1].metadata[TRUNCATION_KEY] == 2 * (300 - kept_steps)
    assert result.messages[2] is view[1]
    assert result.messages[-2:] == tuple(view[-2:])


async def test_parallel_calls_go_as_one_group(counter: FixedTokenCounter) -> None:
    parallel = [
        Message.assistant(tool_calls=[ToolCall(f"p{i}", "bash", "{}") for i in range(3)]),
        *[Message.tool(f"p{i}", text(10)) for i in range(3)],
    ]  # 4 + 15 + 42 = 61 tokens
    view = [Message.system(text(10)), Message.user(text(10)), *parallel, *steps(3)]
    result = await run(HardTruncate(), view, counter, 155)  # 158 - 61 + 37 = 134
    assert result.replaced == tuple(parallel)
    assert result.messages[1].metadata[TRUNCATION_KEY] == 4


async def test_pending_calls_and_the_newest_group_are_never_dropped(
    counter: FixedTokenCounter,
) -> None:
    pending = [
        Message.assistant(tool_calls=[ToolCall("w1", "approve"), ToolCall("w2", "bash")]),
        Message.tool("w2", text(10)),
    ]
    view = [*agent_session(10), *pending]
    result = await run(HardTruncate(), view, counter, 100)  # the floor is 117 tokens
    assert at_floor(result.messages)
    assert list(result.messages[2:]) == [view[1], *view[20:]]
    assert result.messages[1].metadata[TRUNCATION_KEY] == 18


async def test_leading_checkpoint_stays_and_the_marker_follows_it(
    counter: FixedTokenCounter,
) -> None:
    checkpoint = ContextSummary(summary="earlier work", tokens_before=50_000)
    view = [chat(1)[0], checkpoint, *chat(6)[1:]]
    result = await run(HardTruncate(), view, counter, 300)
    assert result.messages[1] is checkpoint
    assert is_truncation_marker(result.messages[2])
    assert checkpoint not in result.replaced


async def test_without_any_user_message_drops_the_oldest_messages(
    counter: FixedTokenCounter,
) -> None:
    view = [Message.system(text(10)), *[Message.assistant(text(50)) for _ in range(6)]]
    result = await run(HardTruncate(), view, counter, 200)  # 338 before
    # 338 - 4 * 54 + 37 = 159; three dropped would leave 213.
    assert result.replaced == tuple(view[1:5])
    assert result.messages[1].role == "user"  # the marker now opens the conversation
    assert list(result.messages[2:]) == view[5:]


@pytest.mark.parametrize(
    "view",
    [
        pytest.param([Message.system(text(1000))], id="only-a-system-prompt"),
        pytest.param([Message.system(text(1000)), Message.user(text(10))], id="only-a-small-user"),
        pytest.param(
            [Message.system(text(1000)), Message.user(text(10)), *group("c1")],
            id="user-and-its-only-tool-group",
        ),
    ],
)
async def test_nothing_droppable_is_a_no_op(
    counter: FixedTokenCounter, view: list[Message]
) -> None:
    result = await run(HardTruncate(), view, counter, 50)
    assert not result.applied


async def test_at_the_floor_a_second_run_changes_nothing(counter: FixedTokenCounter) -> None:
    view = [
        Message.system(text(1000)),
        *chat(2)[1:],
        Message.user(text(10)),
        *steps(3),
    ]
    first = await run(HardTruncate(), view, counter, 100)
    assert at_floor(first.messages)
    assert first.messages[1].metadata[TRUNCATION_KEY] == 4 + 4
    again = await run(HardTruncate(), first.messages, counter, 100, transcript=view)
    assert not again.applied


async def test_running_again_merges_into_the_same_marker(counter: FixedTokenCounter) -> None:
    view = chat(6)
    first = await run(HardTruncate(), view, counter, 300)
    second = await run(HardTruncate(), first.messages, counter, 200, transcript=view)
    # 255 tokens: one more turn goes (255 - 68 = 187), the marker now counts 6 + 2.
    assert markers(second.messages) == [1]
    assert second.messages[1].metadata[TRUNCATION_KEY] == 8
    assert second.replaced == tuple(view[7:9])
    assert first.messages[1] not in second.replaced
    assert list(second.messages[2:]) == view[9:]


async def test_fits_already_is_a_no_op(counter: FixedTokenCounter) -> None:
    view = chat(6)
    first = await run(HardTruncate(), view, counter, 300)
    assert not (await run(HardTruncate(), first.messages, counter, 300, transcript=view)).applied
    assert not (await run(HardTruncate(), view, counter, 10_000)).applied


async def test_truncates_the_view_it_is_given_not_the_transcript(
    counter: FixedTokenCounter,
) -> None:
    transcript = chat(6)
    view = [transcript[0], *transcript[3:]]  # already lost a turn
    result = await run(HardTruncate(), view, counter, 300, transcript=transcript)
    assert result.replaced == tuple(transcript[3:7])
    assert list(result.messages[2:]) == transcript[7:]


async def test_same_input_gives_the_same_view(counter: FixedTokenCounter) -> None:
    view = [*chat(3), Message.user(text(3000))]
    first = await run(HardTruncate(), view, counter, 1_000)
    second = await run(HardTruncate(), view, counter, 1_000)
    assert first.messages == second.messages


def newest_user_view(tokens: int) -> list[Message]:
    return [*chat(1), Message.user(text(tokens, "L") + text(tokens, "R"))]  # 82 + 2 * tokens + 4


@pytest.mark.parametrize(
    ("user_tokens", "turns", "threshold"),
    [
        pytest.param(9_000, 118, 15_904, id="9k-user-8k-history"),
        pytest.param(904, 8, 1_400, id="user-above-its-share"),
        pytest.param(2_004, 20, 2_100, id="user-near-the-threshold"),
    ],
)
async def test_history_goes_before_the_newest_user_message_is_trimmed(
    counter: FixedTokenCounter, user_tokens: int, turns: int, threshold: int
) -> None:
    """Dropping turns is enough, so the newest user message stays verbatim."""
    view = [*chat(turns), Message.user(text(user_tokens - 4, "n"))]
    assert counter.count_message(view[-1]) == user_tokens > threshold // 2
    result = await run(HardTruncate(), view, counter, threshold)
    assert result.messages[-1] is view[-1]
    assert not any(TRIMMED_KEY in m.metadata for m in result.messages)
    dropped_turns = result.messages[1].metadata[TRUNCATION_KEY] // 2
    assert result.replaced == tuple(view[1 : 1 + 2 * dropped_turns])
    tokens = measure_with(counter)(result.messages)
    assert tokens <= threshold < tokens + 68  # one turn fewer would not fit


async def test_oversized_newest_user_message_is_trimmed_head_and_tail(
    counter: FixedTokenCounter,
) -> None:
    view = newest_user_view(1000)
    result = await run(HardTruncate(), view, counter, 1_000)
    # The older turn goes first (14 + 37 + 2004 still above 1000), then the message
    # is cut to what is left: 1000 - 14 - 37 = 949 tokens.
    assert result.replaced == tuple(view[1:])
    assert result.messages[1] == truncation_marker(2)
    trimmed = result.messages[-1]
    assert trimmed.metadata[TRIMMED_KEY] == 1
    assert 0.95 * 949 <= counter.count_message(trimmed) <= 949
    (removed,) = TRIM_MARKER.findall(trimmed.text)
    head, tail = TRIM_MARKER.split(trimmed.text)[::2]
    assert set(head) == {"L"}
    assert set(tail) == {"R"}
    assert len(head) + len(tail) + int(removed) == len(view[-1].text)
    assert result.messages[0] is view[0]


async def test_newest_user_message_is_cut_only_by_what_does_not_fit(
    counter: FixedTokenCounter,
) -> None:
    view = [Message.system(text(10)), Message.user(text(3000))]  # 14 + 3004
    result = await run(HardTruncate(), view, counter, 2_000)  # share 0.5 would allow only 1000
    assert result.replaced == (view[1],)
    assert markers(result.messages) == []
    assert 0.95 * (2_000 - 14) <= counter.count_message(result.messages[1]) <= 2_000 - 14


async def test_newest_user_message_within_its_share_is_untouched(
    counter: FixedTokenCounter,
) -> None:
    view = [*chat(6), Message.user(text(200))]
    result = await run(HardTruncate(), view, counter, 500)  # limit 250, message 204
    assert result.messages[-1] is view[-1]
    assert markers(result.messages) == [1]


@pytest.mark.parametrize(
    ("share", "limit", "fits"),
    [
        pytest.param(0.25, 949, True, id="quarter-cut-to-what-fits"),
        pytest.param(0.5, 949, True, id="default-half-cut-to-what-fits"),
        # 14 + 960 leaves no room for the full marker (37); its brief form fits.
        pytest.param(0.96, 960, True, id="share-leaves-room-only-for-a-brief-marker"),
        pytest.param(1.0, 1000, False, id="whole-threshold-is-the-floor"),
    ],
)
async def test_max_user_share_is_the_least_the_newest_user_message_keeps(
    counter: FixedTokenCounter, share: float, limit: int, fits: bool
) -> None:
    view = newest_user_view(1500)  # 3004-token message; 1000 - 14 - 37 = 949 would fit
    strategy = HardTruncate()
    result = await run(strategy, view, counter, 1_000, max_user_share=share)
    user = next(m for m in result.messages if TRIMMED_KEY in m.metadata)
    assert 0.95 * limit <= counter.count_message(user) <= limit
    assert (measure_with(counter)(result.messages) <= 1_000) is fits
    again = await run(
        strategy, result.messages, counter, 1_000, transcript=view, max_user_share=share
    )
    assert not again.applied


async def test_trimming_keeps_images_and_metadata(counter: FixedTokenCounter) -> None:
    image = ImageBlock(url="https://example.invalid/screenshot.png")
    newest = Message(
        "user",
        (TextBlock(text(1000)), image, TextBlock(text(1000))),
        name="ana",
        metadata={"trace": "t-1"},
    )
    view = [*chat(1), newest]
    result = await run(HardTruncate(), view, counter, 1_500)
    trimmed = result.messages[-1]
    assert trimmed.content[1] is image
    assert trimmed.metadata == {"trace": "t-1", TRIMMED_KEY: 2}
    assert trimmed.name == "ana"


def test_trim_user_message_edges(counter: FixedTokenCounter) -> None:
    images_only = Message("user", (ImageBlock(url="https://example.invalid/a.png"),))
    assert trim_user_message(images_only, counter, 10) is None
    small = Message.user(text(10))
    assert trim_user_message(small, counter, 100) is None
    smallest = trim_user_message(Message.user(text(1000)), counter, 0)
    assert smallest is not None
    assert TRIM_MARKER.fullmatch(smallest.text)
    assert trim_user_message(smallest, counter, 0) is None  # never trimmed twice


@FAST
@given(transcript=transcripts(max_turns=5, max_steps=5), threshold=st.integers(0, 30_000))
def test_generated_transcripts_fit_or_reach_the_floor(
    transcript: list[Message], threshold: int
) -> None:
    counter = FixedTokenCounter()
    strategy = HardTruncate()
    result = asyncio.run(run(strategy, transcript, counter, threshold))
    again = asyncio.run(run(strategy, result.messages, counter, threshold, transcript=transcript))
    assert not again.applied


async def test_when_only_the_checkpoint_can_shrink_it_is_cut_and_nothing_else_goes() -> None:
    # Found by the property test: a checkpoint, the newest user message and the reply.
    checkpoint = ContextSummary(
        summary=" ".join(["step done, tests pass"] * 60), tokens_before=1000
    )
    transcript = [checkpoint, Message.user("fix the loop"), Message.assistant("fixed it")]
    result = await run(HardTruncate(), transcript, FixedTokenCounter(), 144)
    assert result.applied
    assert [r.kind for r in result.removed] == ["text"]
    assert result.removed[0].originals == (checkpoint,)
    assert result.messages[1:] == tuple(transcript[1:])


async def test_a_checkpoint_cut_and_then_dropped_is_removed_as_it_came_in() -> None:
    # Found by the property test: the removal named the cut copy, not the original.
    checkpoint = ContextSummary(
        summary=" ".join(["step done, tests pass"] * 60), tokens_before=1000
    )
    transcript = [checkpoint, Message.user("fix the loop"), Message.assistant("fixed it")]
    counter = FixedTokenCounter()
    floor = measure_with(counter)((truncation_marker(1, brief=True), *transcript[1:]))
    result = await run(HardTruncate(), transcript, counter, floor)
    assert [(r.kind, r.originals) for r in result.removed] == [("messages", (checkpoint,))]
    assert result.messages[1:] == tuple(transcript[1:])


@pytest.mark.parametrize("fraction", [0.02, 0.1, 0.3, 0.6, 0.9])
async def test_corpus_transcripts_fit_or_reach_the_floor(
    corpus_path: Path, fraction: float
) -> None:
    counter = FixedTokenCounter()
    transcript = from_openai(load_corpus_dicts(corpus_path))
    threshold = int(measure_with(counter)(transcript) * fraction)
    result = await run(HardTruncate(), transcript, counter, threshold)
    assert result.applied
    tokens = measure_with(counter)(result.messages)
    assert tokens <= threshold or at_floor(result.messages)
    again = await run(HardTruncate(), result.messages, counter, threshold, transcript=transcript)
    assert not again.applied


class CountingMeasure:
    """A `Budget.measure` that disagrees with the counter and counts its calls."""

    def __init__(self, counter: FixedTokenCounter, fn: Callable[[int], int]) -> None:
        self.counter = counter
        self.fn = fn
        self.calls = 0

    def counted(self, messages: Sequence[Message]) -> int:
        return sum(self.counter.count_message(m) for m in messages)

    def __call__(self, messages: Sequence[Message]) -> int:
        self.calls += 1
        return self.fn(self.counted(messages))


def tiny_steps_session(count: int) -> list[Message]:
    """One request and ``count`` tool steps of 15 tokens each (2 + 2 * count messages)."""
    view = [Message.system(text(10)), Message.user(text(10, "u"))]
    for step in range(count):
        call = ToolCall(f"c{step}", "bash", "{}")
        view += [Message.assistant(tool_calls=[call]), Message.tool(call.id, "ok")]
    return view


@pytest.mark.parametrize(
    ("fn", "tokens_from_measure", "exact"),
    [
        pytest.param(lambda n: n + 500, False, True, id="offset-budget-from-counter"),
        pytest.param(lambda n: n + 500, True, True, id="offset-budget-from-measure"),
        pytest.param(lambda n: 2 * n, False, False, id="measure-twice-the-counter"),
        pytest.param(lambda n: n // 2, False, False, id="measure-half-the-counter"),
        pytest.param(lambda n: 3 * n // 2 + 500, True, False, id="scaled-and-offset"),
    ],
)
async def test_16k_messages_need_only_a_few_measures_when_measure_disagrees(
    counter: FixedTokenCounter, fn: Callable[[int], int], tokens_from_measure: bool, exact: bool
) -> None:
    """The drop loop is linear: per-unit costs once, then a bounded number of measures."""
    view = tiny_steps_session(8_000)
    measure = CountingMeasure(counter, fn)
    threshold = 20_000
    tokens = measure(view) if tokens_from_measure else measure.counted(view)
    budget = Budget(
        tokens=tokens, window=2 * threshold, threshold=threshold, counter=counter, measure=measure
    )
    measure.calls = 0
    result = await HardTruncate().apply(view, view, budget)
    assert measure.calls <= 10
    assert result.applied
    assert check_view(view, result.messages) == []
    assert fn(measure.counted(result.messages)) <= threshold
    if exact:  # the offset is learned from one measure: no step more than needed goes
        assert fn(measure.counted(result.messages)) > threshold - 15 - 1


def test_truncate_view_learns_a_constant_offset_from_one_measure(
    counter: FixedTokenCounter,
) -> None:
    """A budget in the counter's arithmetic, 500 short of the measure: one correction."""
    view = tiny_steps_session(8_000)
    measure = CountingMeasure(counter, lambda n: n + 500)
    budget = Budget(
        tokens=measure.counted(view),
        window=40_000,
        threshold=20_000,
        counter=counter,
        measure=measure,
    )
    messages, replaced = truncate_view(view, budget)
    assert measure.calls == 2
    assert check_view(view, messages) == []
    assert 20_000 - 15 - 2 < measure.counted(messages) + 500 <= 20_000
    assert len(replaced) == len(view) - len(messages) + 1  # the marker stands for them


async def test_a_measure_that_ignores_the_view_stops_at_the_floor(
    counter: FixedTokenCounter,
) -> None:
    view = tiny_steps_session(8_000)
    measure = CountingMeasure(counter, lambda n: 50_000)
    budget = Budget(
        tokens=50_000, window=60_000, threshold=20_000, counter=counter, measure=measure
    )
    result = await HardTruncate().apply(view, view, budget)
    assert measure.calls <= 10
    assert not result.applied  # nothing it may drop makes the measured view smaller


async def test_overflow_recovery_lets_microcompact_finish_before_dropping_turns(
    counter: FixedTokenCounter,
) -> None:
    """Clearing old tool results meets the target, so no turn or step is dropped."""
    transcript = [Message.system(text(10)), Message.user(text(10))]
    transcript += [m for step in range(30) for m in group(f"r{step}", 500)]  # 15 418 tokens
    engine = ContextEngine(
        10_000,
        [ToolResultMicrocompact(), HardTruncate()],
        reserve_tokens=1_000,
        token_counter=counter,
    )
    recovered = await engine.recover_overflow(transcript, "prompt is too long")
    assert recovered.changed
    assert markers(recovered.messages) == []
    assert len(recovered.messages) == len(transcript)
    assert recovered.event is not None
    applied = [step.name for step in recovered.event.steps if step.applied]
    assert applied == ["tool_result_microcompact"]
    assert check_view(transcript, recovered.messages) == []


async def test_the_newest_tool_results_are_capped_when_nothing_else_is_left() -> None:
    """Last resort: the protected newest tool group is capped from its originals (never below
    the minimum cap) by what still does not fit, so a view whose lead, user message and
    capped results fit does fit."""
    counter = FixedTokenCounter()
    calls = [ToolCall(f"c{n}", "grep", "{}") for n in range(3)]
    view = [
        Message.system("You are a coding agent."),
        Message.user("Find the callers."),
        Message.assistant(tool_calls=calls),
        *(Message.tool(call.id, f"{call.id}: match\n" * 500) for call in calls),
    ]
    threshold = 1_200
    assert measure_with(counter)(view) > 3 * threshold
    result = await run(HardTruncate(), view, counter, threshold)
    assert result.applied
    assert measure_with(counter)(result.messages) <= threshold
    assert check_view(view, result.messages) == []
    assert [r.kind for r in result.removed] == ["tool_result"] * 3
    for original, capped in zip(view[3:], result.messages[3:], strict=True):
        assert capped.tool_call_id == original.tool_call_id
        assert counter.count_message(capped) >= MIN_CAP_TOKENS // 2
        assert "tokens" in capped.text  # the preview names the original's size


def instructed_checkpoint() -> tuple[str, ContextSummary]:
    """A long checkpoint opened by the user's instructions section, and that section."""
    section = "<user-instructions>\nTask statement (the first request):\nFix the parser.\n"
    section += "Constraints the user stated (verbatim):\n- Never change the public API.\n"
    section += "</user-instructions>\n\n"
    checkpoint = ContextSummary(
        summary=section + " ".join(["ran the tests, all green"] * 80),
        tokens_before=5000,
        read_files=tuple(f"src/module_{n}.py" for n in range(20)),
    )
    return section, checkpoint


async def test_the_checkpoint_trim_keeps_the_user_instructions_section_longest() -> None:
    section, checkpoint = instructed_checkpoint()
    transcript = [checkpoint, Message.user("go on"), Message.assistant("on it")]
    counter = FixedTokenCounter()
    after_section = counter.count_message(
        ContextSummary(summary=section + "[9999 characters trimmed]")
    )
    result = await run(HardTruncate(), transcript, counter, after_section + 40)
    assert result.applied
    trimmed = result.messages[0]
    assert isinstance(trimmed, ContextSummary)
    assert trimmed.summary.startswith(section)
    assert trimmed.read_files == ()  # the file lists went before the instructions


async def test_a_recovery_caps_again_a_committed_preview_in_the_protected_tail() -> None:
    # Found by the property test: the caller committed the capped copy, so its original is
    # gone, and the newest group's preview alone kept the recovery above its target.
    counter = FixedTokenCounter()
    call = ToolCall("c1", "bash", '{"command": "grep -rn TODO ."}')
    big = Message.tool("c1", "".join(f"src/m{i}.py:{i}: TODO\n" for i in range(3_000)))
    preview, _ = cap_tool_result(big, max_tokens=3_000, counter=counter)
    assert CAPPED_KEY in preview.metadata
    pending = ToolCall("c2", "bash", '{"command": "make"}')
    transcript = [
        Message.system("You are a coding agent."),
        Message.user("Find every TODO."),
        Message.assistant("Searching.", tool_calls=[call]),
        preview,
        Message.assistant("Building.", tool_calls=[pending]),
    ]
    threshold = counter.count_message(preview) // 2
    result = await run(HardTruncate(), transcript, counter, threshold)
    assert result.applied
    assert [r.kind for r in result.removed] == ["tool_result"]
    assert counter.count_message(result.messages[3]) < counter.count_message(preview)
    assert result.messages[-1] == transcript[-1]  # the pending call stays as it was


async def test_a_recovery_below_every_view_keeps_the_checkpoint_instructions() -> None:
    """A recovery's target can be a guess far below the real threshold: the checkpoint's
    text is cut, its file lists too, but the goal and constraints stay for the retry."""
    section, checkpoint = instructed_checkpoint()
    view = [checkpoint, Message.user("go on"), Message.assistant("on it")]
    counter = FixedTokenCounter()
    budget = attrs.evolve(budget_for(view, counter, 10), reason="overflow")
    result = await HardTruncate().apply(view, view, budget)
    assert result.applied
    trimmed = result.messages[0]
    assert isinstance(trimmed, ContextSummary)
    assert trimmed.summary.startswith(section)
    assert counter.count_message(trimmed) < counter.count_message(checkpoint)
    assert result.messages[1:] == tuple(view[1:])
