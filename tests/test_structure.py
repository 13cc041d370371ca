"""Shape analysis: the leading block, newest user message, tool groups, pending calls, tail."""

from __future__ import annotations

import pytest

from context_engine.messages import ContextSummary, Message, ToolCall
from context_engine.structure import Shape, analyze, is_user_message


def sys(text: str = "be brief") -> Message:
    return Message.system(text)


def dev(text: str = "use tools") -> Message:
    return Message.developer(text)


def user(text: str = "hi") -> Message:
    return Message.user(text)


def summary(text: str = "earlier work") -> ContextSummary:
    return ContextSummary(summary=text, tokens_before=1_000)


def say(text: str = "ok") -> Message:
    return Message.assistant(text)


def call(*ids: str) -> Message:
    return Message.assistant(tool_calls=[ToolCall(i, "bash", "{}") for i in ids])


def result(call_id: str) -> Message:
    return Message.tool(call_id, f"output of {call_id}")


def groups(shape: Shape) -> list[tuple[int, int]]:
    """The (start, end) of every multi-message unit, in order."""
    return sorted(
        {(s, e) for s, e in zip(shape.group_start, shape.group_end, strict=True) if e > s}
    )


# ---------------------------------------------------------------- lead_end and last_user


@pytest.mark.parametrize(
    ("view", "lead_end"),
    [
        ([], 0),
        ([sys()], 1),
        ([sys(), dev(), user()], 2),
        ([user(), sys()], 0),
        ([sys(), user(), sys()], 1),
        ([summary(), user()], 0),
    ],
    ids=[
        "empty",
        "system-only",
        "system-and-developer",
        "late-system-is-not-leading",
        "only-the-first-block-counts",
        "checkpoint-is-not-leading",
    ],
)
def test_lead_end_counts_leading_system_and_developer_messages(
    view: list[Message], lead_end: int
) -> None:
    assert analyze(view).lead_end == lead_end


@pytest.mark.parametrize(
    ("view", "last_user"),
    [
        ([sys()], -1),
        ([sys(), user("a"), say(), user("b"), say()], 3),
        ([sys(), summary(), say()], -1),
        ([sys(), user(), say(), summary()], 1),
        ([user(), call("a"), result("a")], 0),
    ],
    ids=[
        "no-user",
        "newest-of-two",
        "checkpoint-is-not-a-user-message",
        "checkpoint-after-user-does-not-count",
        "tool-results-are-not-user-messages",
    ],
)
def test_last_user_is_the_newest_message_the_user_wrote(
    view: list[Message], last_user: int
) -> None:
    assert analyze(view).last_user == last_user


def test_is_user_message_excludes_checkpoints() -> None:
    assert is_user_message(user())
    assert not is_user_message(summary())
    assert not is_user_message(say())


# ---------------------------------------------------------------- tool groups


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        ([user(), call("a"), result("a"), say()], [(1, 2)]),
        ([user(), call("a"), result("a"), call("b"), result("b"), say()], [(1, 2), (3, 4)]),
        ([user(), call("a", "b", "c"), result("b"), result("c"), result("a"), say()], [(1, 4)]),
        ([user(), call("a"), call("b"), result("b"), result("a"), say()], [(1, 4)]),
        ([user(), call("a"), call("b"), result("a"), result("b"), say()], [(1, 4)]),
        ([user(), call("a"), say("thinking"), result("a"), say()], [(1, 3)]),
        ([user(), call("a"), result("a"), result("ghost"), say()], [(1, 2)]),
        ([user(), result("early"), call("early"), say()], []),
    ],
    ids=[
        "one-sequential-call",
        "two-sequential-groups-stay-apart",
        "parallel-calls-answered-out-of-order",
        "overlapping-groups-merge",
        "interleaved-groups-merge",
        "message-between-call-and-result-joins-the-group",
        "orphan-result-stays-outside",
        "result-before-its-call-is-not-a-group",
    ],
)
def test_tool_groups_span_a_call_and_all_its_results(
    view: list[Message], expected: list[tuple[int, int]]
) -> None:
    shape = analyze(view)
    assert groups(shape) == expected
    for start, end in expected:
        for index in range(start, end + 1):
            assert (shape.group_start[index], shape.group_end[index]) == (start, end)
            assert shape.unit_end(index) == end + 1


def test_messages_outside_groups_are_their_own_unit() -> None:
    view = [sys(), user(), say(), user()]
    shape = analyze(view)
    assert shape.group_start == (0, 1, 2, 3)
    assert shape.group_end == (0, 1, 2, 3)
    assert [shape.unit_end(i) for i in range(4)] == [1, 2, 3, 4]


def test_is_safe_cut_only_between_whole_units() -> None:
    view = [sys(), user(), call("a", "b"), result("a"), result("b"), call("c"), result("c"), say()]
    shape = analyze(view)
    safe = [i for i in range(len(view) + 1) if shape.is_safe_cut(i)]
    assert safe == [0, 1, 2, 5, 7, 8]
    assert shape.is_safe_cut(-1)
    assert shape.is_safe_cut(100)


# ---------------------------------------------------------------- pending calls


@pytest.mark.parametrize(
    ("view", "pending_start"),
    [
        ([user(), call("a")], 1),
        ([user(), call("a", "b"), result("b")], 1),
        ([user(), call("a"), result("a"), call("b", "c")], 3),
        ([user(), call("a"), result("a")], 3),
        ([user(), call("a"), result("a"), say()], 4),
        ([user(), call("a"), say("waiting")], 3),
        ([user(), call("a"), user("never mind")], 3),
        ([sys(), summary(), call("a")], 2),
        ([user("a"), call("c0"), result("c0"), say(), user("b"), call("c0")], 5),
    ],
    ids=[
        "trailing-unanswered-call",
        "parallel-calls-partly-answered",
        "pending-after-complete-group",
        "everything-answered",
        "turn-finished",
        "assistant-spoke-after-the-call",
        "user-spoke-after-the-call",
        "pending-right-after-checkpoint",
        "call-id-reused-from-an-earlier-turn",
    ],
)
def test_pending_start_marks_calls_still_waiting_at_the_end(
    view: list[Message], pending_start: int
) -> None:
    assert analyze(view).pending_start == pending_start


# ---------------------------------------------------------------- tail_start


@pytest.mark.parametrize(
    ("view", "tail_start"),
    [
        ([sys(), user(), call("a"), result("a"), call("b"), result("b"), say()], 4),
        ([sys(), user(), call("a", "b"), result("a"), result("b")], 2),
        ([sys(), user(), call("a"), result("a"), call("b")], 2),
        ([sys(), user(), say(), call("a")], 3),
        ([sys(), user(), call("a", "b"), result("a")], 2),
        ([sys(), user("a"), call("x"), result("x"), say(), user("b"), say()], 5),
        ([sys(), user("a"), call("x"), result("x"), say(), user("b")], 5),
        ([sys(), summary(), call("a"), result("a"), say()], 2),
        ([sys(), summary(), say()], 3),
        ([sys(), dev()], 2),
        ([], 0),
    ],
    ids=[
        "newest-of-two-groups",
        "parallel-group",
        "complete-group-before-pending-call",
        "pending-call-without-earlier-group",
        "partly-answered-parallel-call",
        "groups-of-older-turns-do-not-count",
        "fresh-user-message",
        "checkpoint-then-group",
        "nothing-to-protect-but-the-lead",
        "system-only",
        "empty",
    ],
)
def test_tail_start_protects_the_newest_group_else_pending_else_newest_user(
    view: list[Message], tail_start: int
) -> None:
    assert analyze(view).tail_start == tail_start


def test_is_protected_covers_lead_newest_user_and_tail() -> None:
    view = [sys(), user("a"), say(), user("b"), call("x"), result("x"), call("y"), result("y")]
    shape = analyze(view)
    assert shape.tail_start == 6
    assert [i for i in range(len(view)) if shape.is_protected(i)] == [0, 3, 6, 7]


def test_empty_transcript_has_an_empty_shape() -> None:
    shape = analyze([])
    assert shape == Shape(
        lead_end=0, last_user=-1, group_start=(), group_end=(), pending_start=0, tail_start=0
    )
    assert shape.is_safe_cut(0)


def test_system_only_transcript_is_all_lead() -> None:
    shape = analyze([sys(), dev()])
    assert (shape.lead_end, shape.last_user, shape.pending_start, shape.tail_start) == (2, -1, 2, 2)
    assert shape.is_protected(0)
    assert shape.is_protected(1)
