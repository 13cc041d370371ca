"""Where a provider compaction call cuts a view: pure decisions, no client, no event loop."""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.messages import Message, ToolCall
from context_engine.native._compact_plan import plan_compaction
from context_engine.strategies.base import Budget
from context_engine.testing import FixedTokenCounter

COUNTER = FixedTokenCounter()
SYSTEM = Message.system("You are a coding agent.")
# A provider checkpoint as `formats.anthropic` holds a returned compaction block.
CHECKPOINT = Message(
    "assistant",
    (),
    metadata={"anthropic.blocks": [{"opaque": {"type": "compaction", "content": "earlier"}}]},
)


def budget(view: Sequence[Message], threshold: int) -> Budget:
    def measure(messages: Sequence[Message]) -> int:
        return sum(COUNTER.count_message(m) for m in messages)

    return Budget(
        tokens=measure(view),
        window=threshold + 1000,
        threshold=threshold,
        counter=COUNTER,
        measure=measure,
    )


def chat(turns: int, start: int = 0) -> list[Message]:
    out: list[Message] = []
    for i in range(start, start + turns):
        out += [Message.user(f"question {i}"), Message.assistant(f"answer {i} " * 50)]
    return out


def agent_turn(steps: int) -> list[Message]:
    out = [Message.user("Fix every failing test.")]
    for i in range(steps):
        out += [
            Message.assistant(tool_calls=[ToolCall(f"c{i}", "read_file", "{}")]),
            Message.tool(f"c{i}", f"file {i} " * 50),
        ]
    return out


def test_whole_turns_are_sent_and_replaced_and_the_rest_is_kept() -> None:
    view = [SYSTEM, *chat(10)]
    plan = plan_compaction(view, budget(view, 1000), 400, send_split_user=False, expected=None)

    assert plan is not None
    assert plan.lead == (SYSTEM,)
    assert plan.sent == plan.replaced
    assert not plan.is_split_turn
    assert plan.view(()) == (SYSTEM, *plan.kept)
    assert (*plan.lead, *plan.replaced, *plan.kept) == tuple(view)
    assert plan.kept[0].role == "user"


def test_a_split_turns_user_message_is_kept_and_sent_only_where_asked() -> None:
    view = [SYSTEM, *agent_turn(20)]
    for send_split_user in (False, True):
        plan = plan_compaction(
            view, budget(view, 1000), 400, send_split_user=send_split_user, expected=None
        )
        assert plan is not None
        assert plan.is_split_turn
        assert plan.kept[0] == view[1]
        assert view[1] not in plan.replaced
        assert (view[1] in plan.sent) is send_split_user


def test_an_earlier_provider_checkpoint_is_sent_again_and_replaced() -> None:
    view = [SYSTEM, CHECKPOINT, *chat(10)]
    plan = plan_compaction(view, budget(view, 1000), 400, send_split_user=False, expected=None)

    assert plan is not None
    assert plan.replaced[0] is CHECKPOINT
    assert plan.is_incremental


def test_the_cut_moves_later_when_the_window_and_the_kept_part_could_not_fit() -> None:
    view = [SYSTEM, *chat(10)]
    at_keep = plan_compaction(view, budget(view, 1000), 600, send_split_user=False, expected=None)
    later = plan_compaction(
        view, budget(view, 1000), 600, send_split_user=False, expected=lambda sent: 700
    )

    assert at_keep is not None
    assert later is not None
    assert len(later.kept) < len(at_keep.kept)
    assert sum(COUNTER.count_message(m) for m in later.kept) <= 1000 - 700


def test_nothing_to_compact_gives_no_plan() -> None:
    view = [SYSTEM, CHECKPOINT, Message.user("go on")]
    assert plan_compaction(view, budget(view, 10), 0, send_split_user=False, expected=None) is None
