"""The ``/compact`` chat command, for runtimes that expose slash commands.

``/compact`` asks the engine to compact now; the text after it says what the
checkpoint should focus on::

    /compact                                  -> compact, no instructions
    /compact keep the failing test names      -> instructions "keep the failing test names"
    /COMPACT   keep the paths                 -> instructions "keep the paths"
    /compaction                               -> not the command

`parse_compact_command` reads a line; `compact_from_chat` runs
`ContextEngine.compact` when the line is the command.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import regex

from context_engine.messages import Message

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine
    from context_engine.results import CompactResult

__all__ = [
    "COMPACT_COMMAND",
    "CompactCommand",
    "compact_from_chat",
    "compact_from_chat_sync",
    "parse_compact_command",
]

COMPACT_COMMAND = "/compact"
"""The command word, matched case-insensitively."""

_COMMAND = regex.compile(r"\A\s*/compact(?:\s+(?P<rest>.*))?\s*\Z", regex.IGNORECASE | regex.DOTALL)


@attrs.frozen
class CompactCommand:
    """A parsed ``/compact`` command.

    Attributes:
        instructions: What the checkpoint should focus on, or None when the
            command came alone.
    """

    instructions: str | None = None


def parse_compact_command(text: str) -> CompactCommand | None:
    """Read ``text`` as a ``/compact`` command.

    Leading and trailing whitespace and the case of the command word are
    ignored; the instructions are the rest of the text, trimmed, possibly over
    several lines.

    Returns:
        The command, or None when ``text`` is something else (``/compaction``,
        ``/compactly``, a normal message, a non-str).
    """
    if not isinstance(text, str):
        return None
    match = _COMMAND.match(text)
    if match is None:
        return None
    rest = (match.group("rest") or "").strip()
    return CompactCommand(instructions=rest or None)


async def compact_from_chat(
    engine: ContextEngine, messages: Sequence[Message], line: str
) -> CompactResult | None:
    """Run ``engine.compact`` when ``line`` is a ``/compact`` command.

    Args:
        engine: The engine of the session.
        messages: The transcript to compact.
        line: What the user typed.

    Returns:
        The engine's `CompactResult` (replace the transcript with its
        ``messages`` when ``changed``), or None when ``line`` is not the command;
        then handle it as a normal message.

    Raises:
        CompactionError: as `ContextEngine.compact`.
    """
    command = parse_compact_command(line)
    if command is None:
        return None
    return await engine.compact(messages, instructions=command.instructions)


def compact_from_chat_sync(
    engine: ContextEngine, messages: Sequence[Message], line: str
) -> CompactResult | None:
    """Blocking `compact_from_chat`; raises `BlockingCallInEventLoopError` inside a running loop."""
    command = parse_compact_command(line)
    if command is None:
        return None
    return engine.compact_sync(messages, instructions=command.instructions)
