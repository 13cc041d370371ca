"""The /compact chat command."""

from __future__ import annotations

import pytest

from context_engine import ContextEngine
from context_engine.commands import (
    CompactCommand,
    compact_from_chat,
    compact_from_chat_sync,
    parse_compact_command,
)
from context_engine.errors import BlockingCallInEventLoopError
from context_engine.invariants import check_view
from context_engine.testing import FixedTokenCounter
from tests.fakes import Checkpointer, agent_session


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("/compact", CompactCommand(None)),
        ("/compact keep the failing test names", CompactCommand("keep the failing test names")),
        ("  /COMPACT   keep the paths  \n", CompactCommand("keep the paths")),
        ("/Compact\tkeep\ttabs", CompactCommand("keep\ttabs")),
        (
            "/compact\nkeep the plan\nand the errors",
            CompactCommand("keep the plan\nand the errors"),
        ),
        ("/compact    ", CompactCommand(None)),
    ],
    ids=["bare", "with-instructions", "case-and-spaces", "tabs", "multi-line", "trailing-space"],
)
def test_compact_command_is_parsed(line: str, expected: CompactCommand) -> None:
    assert parse_compact_command(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        "/compaction",
        "/compacted notes",
        "/compact:keep",
        "compact",
        "please /compact",
        "/ compact",
        "",
        "/help",
        None,
    ],
    ids=[
        "longer-word",
        "longer-word-with-text",
        "colon",
        "no-slash",
        "not-at-start",
        "space-after-slash",
        "empty",
        "other-command",
        "not-a-str",
    ],
)
def test_other_lines_are_not_the_command(line: str) -> None:
    assert parse_compact_command(line) is None


def make_engine(summary: Checkpointer) -> ContextEngine:
    return ContextEngine(20_000, [summary], reserve_tokens=4096, token_counter=FixedTokenCounter())


async def test_compact_from_chat_passes_the_instructions_to_the_engine() -> None:
    summary = Checkpointer()
    messages = agent_session(5)

    result = await compact_from_chat(make_engine(summary), messages, "/compact keep test names")

    assert result is not None
    assert result.changed
    assert summary.instructions == ["keep test names"]
    assert result.messages[1].is_summary
    assert check_view(messages, result.messages) == []


async def test_compact_from_chat_ignores_normal_messages() -> None:
    summary = Checkpointer()

    result = await compact_from_chat(make_engine(summary), agent_session(5), "what next?")

    assert result is None
    assert summary.calls == 0


def test_blocking_twin_compacts_without_a_loop() -> None:
    summary = Checkpointer()
    messages = agent_session(5)

    result = compact_from_chat_sync(make_engine(summary), messages, "/compact")

    assert result is not None
    assert result.changed
    assert summary.instructions == [None]
    assert compact_from_chat_sync(make_engine(summary), messages, "hello") is None


async def test_blocking_twin_inside_a_loop_names_the_async_function() -> None:
    with pytest.raises(BlockingCallInEventLoopError, match="compact"):
        compact_from_chat_sync(make_engine(Checkpointer()), agent_session(3), "/compact")
