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

`place_breakpoints` is the engine's own placement (``cache_breakpoints=True``):
one breakpoint after the stable prefix (the leading system messages and the
checkpoint that follows them) and one on the view's last message, within
the four a request may carry once the caller's own are counted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from context_engine.formats._anthropic_blocks import BLOCKS_KEY, TOOL_RESULT_KEY, layout_fits
from context_engine.formats._openai_parts import copy_json
from context_engine.messages import Message, TextBlock, ThinkingBlock
from context_engine.structure import TRUNCATION_KEY

__all__ = [
    "ENGINE_BREAKPOINT_KEY",
    "MAX_BREAKPOINTS",
    "body_breakpoints",
    "breakpoints_of",
    "keep_breakpoints",
    "place_breakpoints",
    "stable_prefix_end",
]

ENGINE_BREAKPOINT_KEY = "context_engine.breakpoint"
"""Metadata of a message the engine gave a breakpoint: what it carried before.

A view passed back as a transcript is recognised by it: the engine takes its
own breakpoints off again before it places this call's, so they move with
the conversation and are never counted as the caller's.
"""

MAX_BREAKPOINTS = 4
"""Breakpoints an Anthropic request may carry (``CachePricing.max_breakpoints``)."""

_EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}


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


def stable_prefix_end(view: Sequence[Message]) -> int:
    """Index of the last message of the stable prefix: system messages, then a checkpoint.

    -1 when the view starts with neither.
    """
    end = 0
    while end < len(view) and view[end].role in ("system", "developer"):
        end += 1
    if end < len(view) and view[end].is_summary:
        end += 1
    return end - 1


def _takes_breakpoint(message: Message) -> bool:
    """Whether ``message`` can carry one more breakpoint on its last block."""
    if breakpoints_of(message) or not message.content:
        return False
    if message.role == "tool":
        return True  # on the tool_result block itself
    layout = message.metadata.get(BLOCKS_KEY)
    if layout is not None and not layout_fits(layout, message.content):
        return False  # a layout the writer ignores would drop the breakpoint with it
    last = layout[-1] if isinstance(layout, list) and layout else None
    if isinstance(last, Mapping) and "opaque" in last:
        return False  # a block kept whole is written as it came
    # Thinking blocks cannot carry a breakpoint.
    return not isinstance(message.content[-1], ThinkingBlock)


def _marked(message: Message) -> Message:
    """``message`` with a breakpoint on its last block, remembering what it carried before."""
    meta = dict(message.metadata)
    before = {"blocks": meta.get(BLOCKS_KEY), "tool_result": meta.get(TOOL_RESULT_KEY)}
    if message.role == "tool":
        details = dict(meta.get(TOOL_RESULT_KEY) or {})
        details["cache_control"] = dict(_EPHEMERAL)
        meta[TOOL_RESULT_KEY] = details
    else:
        layout = list(meta.get(BLOCKS_KEY) or [None] * len(message.content))
        last = dict(layout[-1] or {})
        last["extra"] = {**(last.get("extra") or {}), "cache_control": dict(_EPHEMERAL)}
        layout[-1] = last
        meta[BLOCKS_KEY] = layout
    meta[ENGINE_BREAKPOINT_KEY] = before
    return attrs.evolve(message, metadata=meta)


def _unmarked(message: Message) -> Message:
    """``message`` as it was before the engine gave it a breakpoint."""
    before = message.metadata.get(ENGINE_BREAKPOINT_KEY)
    if not isinstance(before, Mapping):
        return message
    meta = {k: v for k, v in message.metadata.items() if k != ENGINE_BREAKPOINT_KEY}
    for key, name in ((BLOCKS_KEY, "blocks"), (TOOL_RESULT_KEY, "tool_result")):
        if before.get(name) is None:
            meta.pop(key, None)
        else:
            meta[key] = before[name]
    return attrs.evolve(message, metadata=meta)


def place_breakpoints(
    view: Sequence[Message],
    prefix_tokens: Callable[[int], int],
    *,
    limit: int = MAX_BREAKPOINTS,
    min_tokens: int = 0,
) -> tuple[Message, ...]:
    """``view`` with the engine's Anthropic breakpoints: after the stable prefix, at the end.

    The caller's breakpoints stay where they are and count against ``limit``;
    the last message's breakpoint comes first when only one fits (it caches
    the whole prompt; the stable prefix's keeps the system prompt and the
    checkpoint cached across a rewrite of what follows them). A message that
    already has a breakpoint, ends in a thinking block or whose prefix is
    shorter than ``min_tokens`` (``prefix_tokens(index)``: tokens up to and
    including message ``index``; the provider ignores a shorter one) gets
    none. Breakpoints the engine placed on an earlier view (a view passed
    back as a transcript) are taken off first.

    Args:
        view: The messages to send.
        prefix_tokens: Tokens of ``view[: index + 1]``.
        limit: Breakpoints the request may carry.
        min_tokens: The model's minimum cacheable prefix.
    """
    out = [_unmarked(message) for message in view]
    room = limit - sum(len(breakpoints_of(message)) for message in out)
    wanted = [len(out) - 1, stable_prefix_end(out)]
    for index in dict.fromkeys(wanted):  # the last message first; each index once
        if room <= 0 or index < 0:
            continue
        if _takes_breakpoint(out[index]) and prefix_tokens(index) >= min_tokens:
            out[index] = _marked(out[index])
            room -= 1
    return tuple(out)
