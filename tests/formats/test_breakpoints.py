"""The caller's cache breakpoints of removed messages move onto the checkpoint or marker."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import ContextEngine, ContextSummary, Message
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.breakpoints import body_breakpoints, breakpoints_of, keep_breakpoints
from context_engine.strategies import HardTruncate
from context_engine.structure import TRUNCATION_KEY
from context_engine.testing import FixedTokenCounter
from tests.fakes import Checkpointer

COUNTER = FixedTokenCounter()
FIVE = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def body() -> dict[str, Any]:
    return {
        "system": [{"type": "text", "text": "rules", "cache_control": HOUR}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "fix it " * 200, "cache_control": FIVE}],
            },
            {"role": "assistant", "content": "looking " * 200},
            {"role": "user", "content": "more " * 200},
            {"role": "assistant", "content": "done " * 200},
            {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": FIVE}]},
        ],
    }


@pytest.mark.parametrize(
    "strategy", [Checkpointer(), HardTruncate()], ids=["checkpoint", "truncation-marker"]
)
def test_a_breakpoint_of_a_removed_message_moves_onto_its_replacement(strategy: Any) -> None:
    """The request keeps every breakpoint the caller set, in the same order."""
    engine = ContextEngine(900, [strategy], reserve_tokens=200, token_counter=COUNTER)
    result = engine.project_sync(from_anthropic(body()))
    assert result.event is not None
    assert result.event.strategy == strategy.name
    written = to_anthropic(result.messages)
    assert len(written["messages"]) < len(body()["messages"])
    assert body_breakpoints(written) == body_breakpoints(body())
    (replacement,) = [m for m in result.messages if m.is_summary or TRUNCATION_KEY in m.metadata]
    assert breakpoints_of(replacement) == [FIVE]


def test_without_a_replacement_a_breakpoint_goes_with_its_message() -> None:
    """No message is given a breakpoint it did not have, and none is added."""
    transcript = from_anthropic(body())
    view = (transcript[0], *transcript[3:])
    assert keep_breakpoints(transcript, view) == (view, 0)


def test_a_replacement_that_came_with_the_transcript_is_left_alone() -> None:
    old = ContextSummary(summary="earlier work", tokens_before=10)
    transcript = (*from_anthropic(body()), old)
    view = (transcript[0], old, *transcript[4:6])
    moved_view, moved = keep_breakpoints(transcript, view)
    assert moved == 0
    assert moved_view is view


def test_a_view_that_kept_every_breakpoint_is_returned_as_it_is() -> None:
    transcript = tuple(from_anthropic(body()))
    shortened = (transcript[0], transcript[1], Message.user("more"), *transcript[3:])
    assert keep_breakpoints(transcript, shortened) == (shortened, 0)
