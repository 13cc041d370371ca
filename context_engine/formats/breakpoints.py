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
checkpoint that follows them), one on the view's last message, one on the
clearing frontier (the last message before anything a later clearing may
rewrite, so that clearing still reads everything before it) and, when none
of those is close enough behind it, one on the previous request's breakpoint
this view still starts with, within the four a request may carry once the
caller's own are counted. `cached_prefix` says how much of a view such a
cache serves: Anthropic reads only an entry an earlier request wrote at one
of its breakpoints, found within ``lookback`` blocks of one of this request's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from itertools import compress
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
    "cached_prefix",
    "keep_breakpoints",
    "marked",
    "place_breakpoints",
    "request_blocks",
    "stable_prefix_end",
    "unmarked",
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
_METADATA = operator.attrgetter("metadata")


def breakpoints_of(message: Message) -> list[Mapping[str, Any]]:
    """The ``cache_control`` values ``message`` carries, in block order."""
    metadata = message.metadata
    if BLOCKS_KEY not in metadata and TOOL_RESULT_KEY not in metadata:
        return []  # most messages: asked of every message of a view on every priced call
    found: list[Mapping[str, Any]] = []
    layout = metadata.get(BLOCKS_KEY)
    for entry in layout if isinstance(layout, list) else []:
        extra = entry.get("extra") if isinstance(entry, Mapping) else None
        if isinstance(extra, Mapping) and isinstance(extra.get("cache_control"), Mapping):
            found.append(extra["cache_control"])
    details = metadata.get(TOOL_RESULT_KEY)
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


def unmarked(message: Message) -> Message:
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
    frontier: int | None = None,
    anchor: int | None = None,
    lookback: int | None = None,
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
        frontier: The clearing frontier: the last message before the first one a
            later clearing may rewrite. It gets the third breakpoint (or the
            nearest message before it that can carry one), so the cache entry
            there survives that clearing.
        anchor: The previous request's deepest breakpoint this view still
            starts with (after a rewrite behind its last one). It gets the
            fourth breakpoint when no other lies within ``lookback`` blocks
            after it, so this request still reads the entry written there.
        lookback: Blocks the provider looks back from a breakpoint for an entry.
    """
    out = [unmarked(message) for message in view]
    room = limit - sum(len(breakpoints_of(message)) for message in out)

    def take(index: int) -> bool:
        nonlocal room
        if room <= 0 or not 0 <= index < len(out) or not _takes_breakpoint(out[index]):
            return False
        if prefix_tokens(index) < min_tokens:
            return False
        out[index] = _marked(out[index])
        room -= 1
        return True

    stable = stable_prefix_end(out)
    take(len(out) - 1)  # the last message first: it caches the whole prompt
    take(stable)
    if frontier is not None and stable < frontier < len(out) - 1:
        # The nearest message at or before the frontier that can carry one (none may be needed).
        index = frontier
        while index > stable and not breakpoints_of(out[index]) and not take(index):
            index -= 1
    if (
        anchor is not None
        and lookback is not None
        and 0 <= anchor < len(out)
        and not _reaches(out, marked(out), anchor, lookback)
    ):
        take(anchor)
    return tuple(out)


def request_blocks(message: Message) -> int:
    """Content blocks ``message`` makes in an Anthropic request (a tool result is one).

    Its content blocks, each ``tool_use`` among them once (a `ToolCall` is a
    content block); at least one.
    """
    if message.role == "tool":
        return 1
    return max(1, len(message.content))


def marked(view: Sequence[Message]) -> tuple[int, ...]:
    """Indices of the messages of ``view`` that carry a breakpoint, ascending."""
    # Only a message with metadata can carry one; picking those out runs at C speed.
    candidates = compress(range(len(view)), map(_METADATA, view))
    return tuple(index for index in candidates if breakpoints_of(view[index]))


def _reaches(view: Sequence[Message], marks: Sequence[int], entry: int, lookback: int) -> bool:
    """Whether a breakpoint in ``marks`` finds an entry ending at ``entry`` within ``lookback``."""
    blocks = 0
    ahead = set(marks)
    for index in range(entry, len(view)):
        if index > entry:
            blocks += request_blocks(view[index])
        if blocks >= lookback:
            return False
        if index in ahead:
            return True
    return False


def cached_prefix(
    view: Sequence[Message],
    shared: int,
    previous_marks: Sequence[int],
    marks: Sequence[int],
    lookback: int | None,
) -> int:
    """Leading messages of ``view`` a breakpoint cache serves, as Anthropic's reads them.

    The previous request wrote an entry at each of ``previous_marks``; ``view``
    shares its first ``shared`` messages with that request and carries
    breakpoints at ``marks``. It reads the longest entry within the shared
    prefix that one of its own breakpoints finds looking back ``lookback``
    blocks (the breakpoint's own block included). ``lookback`` None is a
    prefix cache: the whole shared prefix is served.
    """
    if lookback is None:
        return shared
    for entry in sorted(previous_marks, reverse=True):
        if 0 <= entry < shared and _reaches(view, marks, entry, lookback):
            return entry + 1
    return 0
