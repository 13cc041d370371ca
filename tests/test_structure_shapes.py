"""`analyze` against a plain definition of tool groups, and the per-call shape memo."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine import Message, ToolCall
from context_engine.structure import analyze, shared_shapes
from tests.transcripts import transcripts


def plain_groups(view: list[Message]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Units by their definition: a boundary before ``k`` may be cut unless some call's
    message lies before it and that call's result at or after it; units lie between cuts."""
    owner: dict[str, int] = {}
    inside = [False] * (len(view) + 1)
    for index, message in enumerate(view):
        if message.role == "assistant":
            owner.update((call.id, index) for call in message.tool_calls)
        elif message.role == "tool" and message.tool_call_id in owner:
            for boundary in range(owner[message.tool_call_id] + 1, index + 1):
                inside[boundary] = True
    start, end = list(range(len(view))), list(range(len(view)))
    first = 0
    for boundary in range(1, len(view) + 1):
        if boundary == len(view) or not inside[boundary]:
            for index in range(first, boundary):
                start[index], end[index] = first, boundary - 1
            first = boundary
    return tuple(start), tuple(end)


def shuffled(view: list[Message], seed: int) -> list[Message]:
    """The same messages with a few swapped: results before, between and after their calls."""
    rnd = random.Random(seed)
    view = list(view)
    for _ in range(rnd.randint(1, 4)):
        if len(view) > 1:
            i, j = rnd.randrange(len(view)), rnd.randrange(len(view))
            view[i], view[j] = view[j], view[i]
    return view


@settings(max_examples=150, deadline=None)
@given(transcripts(), st.integers(0, 10_000))
def test_groups_follow_their_definition_in_any_message_order(
    transcript: list[Message], seed: int
) -> None:
    for view in (transcript, shuffled(transcript, seed)):
        shape = analyze(view)
        assert (shape.group_start, shape.group_end) == plain_groups(view)


def test_overlapping_parallel_groups_merge_into_one_unit() -> None:
    a, b = ToolCall("a", "t"), ToolCall("b", "t")
    view = [
        Message.user("go"),
        Message.assistant(tool_calls=[a]),
        Message.assistant(tool_calls=[b]),
        Message.tool("a", "ra"),
        Message.tool("b", "rb"),
        Message.user("next"),
    ]
    shape = analyze(view)
    assert shape.group_start == (0, 1, 1, 1, 1, 5)
    assert shape.group_end == (0, 4, 4, 4, 4, 5)


def test_inside_shared_shapes_a_tuple_is_analyzed_once() -> None:
    view = (Message.system("s"), Message.user("u"))
    with shared_shapes():
        first = analyze(view)
        assert analyze(view) is first
        assert analyze(view[:1] + view[1:]) is not first  # an equal tuple, analyzed anew
    assert analyze(view) is not first  # outside: nothing is kept


def test_lists_are_never_remembered_they_may_change() -> None:
    view = [Message.system("s"), Message.user("u")]
    with shared_shapes():
        first = analyze(view)
        view.append(Message.user("again"))
        assert analyze(view).last_user == 2
        assert first.last_user == 1


def test_shared_shapes_blocks_nest_and_restore() -> None:
    view = (Message.user("u"),)
    with shared_shapes():
        outer = analyze(view)
        with shared_shapes():
            assert analyze(view) is not outer
        assert analyze(view) is outer


@pytest.mark.parametrize("steps", [0, 1, 7], ids=["empty", "one-step", "seven-steps"])
def test_shape_is_the_same_inside_and_outside_the_memo(steps: int) -> None:
    view: list[Message] = [Message.system("s"), Message.user("u")]
    for n in range(steps):
        call = ToolCall(f"c{n}", "t")
        view += [Message.assistant(tool_calls=[call]), Message.tool(call.id, "r")]
    with shared_shapes():
        inside = analyze(tuple(view))
    assert inside == analyze(view)
