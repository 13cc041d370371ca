"""The caller's Anthropic ``cache_control`` breakpoints, kept through rewrites that remove messages.

A breakpoint lives in the block layout (``anthropic.blocks``) or tool-result
details (``anthropic.tool_result``) of the message `from_anthropic` read it
from. Strategies that shorten a message keep its metadata, so its breakpoint
stays. When a rewrite removes messages that held breakpoints, their place is
taken by a checkpoint or a truncation marker; `keep_breakpoints` puts the
newest lost breakpoint (the one that covered the longest prefix) on that
replacement, so the request carries as many of the caller's breakpoints as
before (never more: Anthropic takes at most four) and the stable prefix up to
the replacement is cached again. A breakpoint with no replacement to take it
goes with its message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_engine.formats._anthropic_blocks import BLOCKS_KEY, TOOL_RESULT_KEY
from context_engine.formats._openai_parts import copy_json
from context_engine.messages import Message, TextBlock
from context_engine.structure import TRUNCATION_KEY

__all__ = ["body_breakpoints", "breakpoints_of", "keep_breakpoints"]


def breakpoints_of(message: Message) -> list[Mapping[str, Any]]:
    """The ``cache_control`` values ``message`` carries, in block order."""
    found: list[Mapping[str, Any]] = []
    layout = message.metadata.get(BLOCKS_KEY)
    for entry in layout if isinstance(layout, list) else []:
        extra = entry.get("extra") if isinstance(entry, Mapping) else None
        if isinstance(extra, Mapping) and isinstance(extra.get("cache_control"), Mapping):
            found.append(extra["cache_control"])
    details = message.metadata.get(TOOL_RESULT_KEY)
    if isinstance(details, Mapping) and isinstance(details.get("cache_control"), Mapping):
        found.append(details["cache_control"])
    return found


def body_breakpoints(written: object) -> list[Mapping[str, Any]]:
    """Every ``cache_control`` in a written Anthropic body (or any part of one), in order.

    For checking that a rewritten request still carries the caller's breakpoints.
    """
    if isinstance(written, Mapping):
        control = written.get("cache_control")
        found = [control] if isinstance(control, Mapping) else []
        return found + [c for value in written.values() for c in body_breakpoints(value)]
    if isinstance(written, list):
        return [c for value in written for c in body_breakpoints(value)]
    return []


def _replacement(message: Message) -> bool:
    """A checkpoint or truncation marker of plain text, with no breakpoint of its own."""
    return (
        (message.is_summary or TRUNCATION_KEY in message.metadata)
        and bool(message.content)
        and all(isinstance(b, TextBlock) for b in message.content)
        and not breakpoints_of(message)
    )


def _with_breakpoint(message: Message, control: Mapping[str, Any]) -> Message:
    layout: list[Any] = [None] * (len(message.content) - 1)
    layout.append({"extra": {"cache_control": copy_json(dict(control))}})
    return attrs.evolve(message, metadata={**message.metadata, BLOCKS_KEY: layout})


def keep_breakpoints(
    transcript: Sequence[Message], view: tuple[Message, ...]
) -> tuple[tuple[Message, ...], int]:
    """The view with lost breakpoints moved onto the replacements; also how many moved."""
    present = {id(m) for m in view}
    lost = [c for m in transcript if id(m) not in present for c in breakpoints_of(m)]
    missing = sum(len(breakpoints_of(m)) for m in transcript) - sum(
        len(breakpoints_of(m)) for m in view
    )
    if not lost or missing <= 0:
        return view, 0
    lost = lost[-missing:]
    known = {id(m) for m in transcript}
    out = list(view)
    moved = 0
    for index in range(len(out) - 1, -1, -1):
        if lost and id(out[index]) not in known and _replacement(out[index]):
            out[index] = _with_breakpoint(out[index], lost.pop())
            moved += 1
    return (tuple(out), moved) if moved else (view, 0)
