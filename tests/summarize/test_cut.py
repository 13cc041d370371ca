"""find_cut_point: where a checkpoint may cut a view, shared by SessionMemory and FullSummary."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.messages import ContextSummary, Message, ToolCall
from context_engine.structure import analyze, is_user_message
from context_engine.summarize.cut import (
    CutPoint,
    find_cut_point,
    leading_checkpoint,
    rebuild_view,
    replaced_messages,
)
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts
from tests.transcripts import transcripts

# FixedTokenCounter(): text of 4*n characters is n tokens; a message adds 4 tokens of
# framing; a call to "bash" with "{}" adds 3 + 1 + 1. So user/assistant/tool messages
# of text(10) count 14 tokens, an assistant message with one call and no text 9.
FAST = settings(max_examples=60, deadline=None)


def text(tokens: int, fill: str = "x") -> str:
    return fill * (4 * tokens)


def group(*ids: str) -> list[Message]:
    """An assistant message calling ``ids`` in parallel, then one result per call."""
    calls = [ToolCall(cid, "bash", "{}") for cid in ids]
    return [Message.assistant(tool_calls=calls)] + [Message.tool(cid, text(10)) for cid in ids]


def sample_view() -> list[Message]:
    return [
        Message.system(text(10)),  # 0  14  leading block
        Message.user(text(10, "a")),  # 1  14  turn A
        Message.assistant(text(10)),  # 2  14
        Message.user(text(10, "b")),  # 3  14  turn B
        *group("c1"),  # 4  9, 5  14
        Message.assistant(text(10)),  # 6  14
        Message.user(text(10, "c")),  # 7  14  turn C (newest)
        *group("c2"),  # 8  9, 9  14
        *group("c3"),  # 10 9, 11 14  protected tail
    ]


def cut_of(
    view: Sequence[Message], counter: FixedTokenCounter, keep: int, **kwargs: int
) -> CutPoint | None:
    before = copy.deepcopy(list(view))
    cut = find_cut_point(view, analyze(view), counter, keep, **kwargs)
    assert list(view) == before, "input mutated"
    if cut is not None:
        checkpoint = ContextSummary(summary="summary")
        rebuilt = rebuild_view(view, cut, checkpoint)
        assert check_view(view, rebuilt) == []
        assert len(rebuilt) + len(replaced_messages(view, cut)) == len(view) + 1
    return cut


@pytest.mark.parametrize(
    ("keep", "slack", "index", "turn_start", "split", "compacted", "kept"),
    [
        pytest.param(0, None, 10, 7, True, 8, 23 + 14, id="zero-keep-cuts-at-the-protected-tail"),
        pytest.param(30, None, 8, 7, True, 6, 46 + 14, id="inside-newest-turn-is-a-split-turn"),
        pytest.param(30, 14, 7, 7, False, 6, 60, id="slack-moves-back-to-the-user-message"),
        pytest.param(30, 13, 8, 7, True, 6, 60, id="one-token-short-of-slack-stays-split"),
        pytest.param(60, None, 7, 7, False, 6, 60, id="lands-on-a-user-message"),
        pytest.param(61, None, 6, 3, True, 4, 74 + 14, id="split-older-turn-keeps-its-user"),
        pytest.param(61, 37, 3, 3, False, 2, 111, id="older-turn-start-within-slack"),
        pytest.param(111, None, 3, 3, False, 2, 111, id="keeps-all-but-the-first-turn"),
    ],
)
def test_cut_keeps_at_least_keep_recent_tokens(
    counter: FixedTokenCounter,
    keep: int,
    slack: int | None,
    index: int,
    turn_start: int,
    split: bool,
    compacted: int,
    kept: int,
) -> None:
    view = sample_view()
    kwargs = {} if slack is None else {"slack_tokens": slack}
    cut = cut_of(view, counter, keep, **kwargs)
    assert cut is not None
    assert (cut.index, cut.turn_start, cut.is_split_turn) == (index, turn_start, split)
    assert (cut.lead_end, cut.start) == (1, 1)
    assert cut.compacted_count == compacted
    assert cut.kept_tokens == kept
    assert cut.kept_tokens >= keep


@pytest.mark.parametrize(
    "keep",
    [
        pytest.param(125, id="only-the-first-user-message-would-go-but-it-opens-the-kept-turn"),
        pytest.param(139, id="everything-fits-in-the-kept-part"),
        pytest.param(10_000, id="keep-larger-than-the-view"),
    ],
)
def test_nothing_to_compact_gives_none(counter: FixedTokenCounter, keep: int) -> None:
    assert cut_of(sample_view(), counter, keep) is None


def test_default_slack_is_a_quarter_of_keep(counter: FixedTokenCounter) -> None:
    view = [
        Message.system(text(10)),  # 0  14
        Message.user(text(10)),  # 1  14
        Message.assistant(text(10)),  # 2  14
        Message.user(text(1)),  # 3  5   opens the turn the cut falls in
        Message.assistant(text(1)),  # 4  5
        Message.assistant(text(40)),  # 5  44  raw cut for keep=72
        Message.user(text(10)),  # 6  14
        Message.assistant(text(10)),  # 7  14
    ]
    moved = cut_of(view, counter, 72)  # slack 18 covers the 10 tokens of messages 3-4
    assert moved is not None
    assert (moved.index, moved.is_split_turn, moved.kept_tokens) == (3, False, 82)
    split = cut_of(view, counter, 72, slack_tokens=9)
    assert split is not None
    assert (split.index, split.turn_start, split.is_split_turn) == (5, 3, True)
    for keep in range(0, 150):
        assert cut_of(view, counter, keep) == cut_of(view, counter, keep, slack_tokens=keep // 4)


def test_history_and_turn_prefix_ranges(counter: FixedTokenCounter) -> None:
    cut = cut_of(sample_view(), counter, 30)
    assert cut is not None
    assert list(cut.history) == [1, 2, 3, 4, 5, 6]
    assert list(cut.turn_prefix) == []  # cut at 8, right after the user message at 7
    cut = cut_of(sample_view(), counter, 0)
    assert cut is not None
    assert list(cut.turn_prefix) == [8, 9]
    assert cut.compacted_count == len(cut.history) + len(cut.turn_prefix) == 8


def test_never_cuts_inside_a_parallel_tool_group(counter: FixedTokenCounter) -> None:
    view = [
        Message.system(text(10)),
        Message.user(text(10)),
        *group("p1", "p2", "p3"),  # 2 assistant, 3 4 5 results
        Message.assistant(text(10)),  # 6
        Message.user(text(10)),  # 7
        Message.assistant(text(10)),  # 8
    ]
    shape = analyze(view)
    cuts = {keep: cut_of(view, counter, keep) for keep in range(0, 120)}
    found = {cut.index for cut in cuts.values() if cut is not None}
    assert found  # the table is not vacuous
    assert not found & {3, 4, 5}
    assert all(shape.is_safe_cut(index) for index in found)


def test_pending_calls_at_the_end_stay_in_the_kept_part(counter: FixedTokenCounter) -> None:
    view = [
        *sample_view(),
        Message.assistant(tool_calls=[ToolCall("w1", "bash"), ToolCall("w2", "bash")]),
        Message.tool("w1", text(10)),
    ]
    shape = analyze(view)
    assert shape.pending_start == 12
    cut = cut_of(view, counter, 0)
    assert cut is not None
    assert cut.index == shape.tail_start == 10
    assert rebuild_view(view, cut, ContextSummary(summary="s"))[-2:] == tuple(view[-2:])


def test_only_pending_calls_after_the_user_keeps_the_user_and_calls(
    counter: FixedTokenCounter,
) -> None:
    view = [
        Message.system(text(10)),
        Message.user(text(10)),
        Message.assistant(text(10)),
        Message.user(text(10)),
        Message.assistant(tool_calls=[ToolCall("w1", "approve")]),
    ]
    cut = cut_of(view, counter, 0)
    assert cut is not None
    assert (cut.index, cut.is_split_turn, cut.compacted_count) == (4, True, 2)


@pytest.mark.parametrize(
    "view",
    [
        pytest.param([], id="empty"),
        pytest.param([Message.system(text(10))], id="only-a-system-prompt"),
        pytest.param([Message.system(text(10)), Message.user(text(10))], id="only-the-newest-user"),
        pytest.param(
            [Message.system(text(10)), Message.user(text(10)), *group("c1")],
            id="user-and-its-only-tool-group",
        ),
        pytest.param(
            [
                Message.system(text(10)),
                ContextSummary(summary="old"),
                Message.user(text(10)),
                *group("c1"),
            ],
            id="checkpoint-then-only-the-protected-tail",
        ),
    ],
)
@pytest.mark.parametrize("keep", [0, 20, 8000])
def test_no_compactable_history_gives_none(
    counter: FixedTokenCounter, view: list[Message], keep: int
) -> None:
    assert cut_of(view, counter, keep) is None


def test_without_any_user_message_there_is_no_turn(counter: FixedTokenCounter) -> None:
    view = [Message.system(text(10))] + [Message.assistant(text(10)) for _ in range(4)]
    cut = cut_of(view, counter, 20)
    assert cut is not None
    assert (cut.index, cut.turn_start, cut.is_split_turn, cut.compacted_count) == (3, -1, False, 2)
    everything = cut_of(view, counter, 0)
    assert everything is not None
    assert everything.index == len(view)  # nothing is protected: all of it may go


def test_existing_leading_checkpoint_is_never_the_cut_and_is_replaced(
    counter: FixedTokenCounter,
) -> None:
    old = ContextSummary(summary="older history")
    view = [Message.system(text(10)), old, *sample_view()[1:]]
    shape = analyze(view)
    assert leading_checkpoint(view, shape) == 1
    for keep in range(0, 200, 5):
        cut = cut_of(view, counter, keep)
        if cut is None:
            continue
        assert cut.start == 2
        assert cut.index > 2
        rebuilt = rebuild_view(view, cut, ContextSummary(summary="new"))
        assert sum(m.is_summary for m in rebuilt) == 1
        assert old in replaced_messages(view, cut)


def test_checkpoint_elsewhere_is_not_leading(counter: FixedTokenCounter) -> None:
    view = [Message.system("s"), Message.user("u"), ContextSummary(summary="mid")]
    assert leading_checkpoint(view, analyze(view)) == -1


def test_one_huge_turn_of_300_tool_steps_is_split_and_keeps_its_user(
    counter: FixedTokenCounter,
) -> None:
    view = [Message.system(text(10)), Message.user(text(10))]
    for step in range(300):
        view += group(f"s{step}")
    cut = cut_of(view, counter, 1000)
    assert cut is not None
    assert cut.is_split_turn
    assert cut.turn_start == 1
    assert view[cut.index].role == "assistant"
    assert 1000 <= cut.kept_tokens - 14 < 1000 + 23
    assert cut.compacted_count == cut.index - 2
    rebuilt = rebuild_view(view, cut, ContextSummary(summary="s"))
    assert rebuilt[2] is view[1]


def test_same_input_gives_the_same_cut(counter: FixedTokenCounter) -> None:
    view = sample_view()
    assert (
        cut_of(view, counter, 40)
        == cut_of(view, counter, 40)
        == cut_of(view, FixedTokenCounter(), 40)
    )


def test_cut_of_a_rebuilt_view_finds_nothing_more(counter: FixedTokenCounter) -> None:
    """A checkpoint strategy run on its own output changes nothing."""
    view = sample_view()
    for keep in (0, 30, 61, 111):
        cut = cut_of(view, counter, keep)
        assert cut is not None
        rebuilt = rebuild_view(view, cut, ContextSummary(summary="s"))
        assert cut_of(rebuilt, counter, keep) is None


def latest_valid_cut(view: Sequence[Message], counter: FixedTokenCounter, keep: int) -> int | None:
    """Brute force: the latest boundary that is safe, outside the tail and keeps enough."""
    shape = analyze(view)
    start = shape.lead_end + (1 if leading_checkpoint(view, shape) >= 0 else 0)
    best = None
    for index in range(start + 1, min(shape.tail_start, len(view)) + 1):
        kept = sum(counter.count_message(m) for m in view[index:])
        if shape.is_safe_cut(index) and kept >= keep:
            best = index
    return best


def assert_latest_cut_without_slack(
    view: Sequence[Message], counter: FixedTokenCounter, keep: int
) -> None:
    """Without slack the cut is exactly the brute-force one, or None when it compacts nothing."""
    expected = latest_valid_cut(view, counter, keep)
    cut = cut_of(view, counter, keep, slack_tokens=0)
    if expected is None:
        assert cut is None
        return
    shape = analyze(view)
    start = shape.lead_end + (1 if leading_checkpoint(view, shape) >= 0 else 0)
    opens_turn = any(map(is_user_message, view[start:expected])) and not (
        expected < len(view) and is_user_message(view[expected])
    )
    if expected - start - opens_turn == 0:
        assert cut is None
    else:
        assert cut is not None
        assert cut.index == expected


@FAST
@given(transcript=transcripts(max_turns=5, max_steps=6), keep=st.integers(0, 6000))
def test_every_cut_keeps_the_rules(transcript: list[Message], keep: int) -> None:
    counter = FixedTokenCounter()
    shape = analyze(transcript)
    assert_latest_cut_without_slack(transcript, counter, keep)
    cut = cut_of(transcript, counter, keep)
    if cut is None:
        return
    assert cut.start < cut.index <= shape.tail_start
    assert shape.is_safe_cut(cut.index)
    assert cut.kept_tokens >= keep
    assert cut.compacted_count > 0
    if cut.is_split_turn:
        assert is_user_message(transcript[cut.turn_start])
        assert not any(map(is_user_message, transcript[cut.turn_start + 1 : cut.index]))
    if cut.index > shape.last_user >= 0:
        assert cut.is_split_turn
        assert cut.turn_start == shape.last_user


@pytest.mark.parametrize("keep", [0, 2_000, 8_000, 20_000])
def test_corpus_cuts_keep_the_invariants(corpus_path: Path, keep: int) -> None:
    counter = FixedTokenCounter()
    view = from_openai(load_corpus_dicts(corpus_path))
    shape = analyze(view)
    assert_latest_cut_without_slack(view, counter, keep)
    cut = cut_of(view, counter, keep)
    if cut is not None:
        assert cut.index <= shape.tail_start
        assert cut.kept_tokens >= keep
