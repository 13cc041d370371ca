"""Reasoning bound to its prefix: what a rewrite does to thinking blocks after the change.

Current reasoning models tie each reasoning item or thinking block to the
prompt before it: OpenAI's Responses API discards reasoning whose prefix was
edited, and Anthropic drops such a thinking block or, with the setting that
asks for it, rejects the request. A rewrite therefore never edits a
`ThinkingBlock` (``check_view`` enforces it); it keeps it whole or drops it
whole. With the ``"drop"`` policy the engine drops, after a rewrite, every
thinking block that now follows a changed message, except in the current
turn (after the newest user message): a tool loop in progress needs its own
reasoning (Anthropic rejects a tool-use turn without it), and a rewrite
inside the current turn does not earn the model's present plan being thrown
away. The tokens dropped are reported as ``reasoning_tokens_dropped``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

import attrs

from context_engine.errors import ConfigurationError
from context_engine.formats._anthropic_blocks import BLOCKS_KEY
from context_engine.messages import Message, ThinkingBlock
from context_engine.structure import is_user_message
from context_engine.tokens import TokenCounter

__all__ = [
    "REASONING_POLICIES",
    "ReasoningPolicy",
    "checked_reasoning_policy",
    "drop_unbound_reasoning",
    "first_change",
    "without_reasoning",
]

ReasoningPolicy: TypeAlias = Literal["drop", "keep"]
REASONING_POLICIES: frozenset[str] = frozenset({"drop", "keep"})


def checked_reasoning_policy(value: object) -> ReasoningPolicy:
    """``value`` when it is a known policy; a `ConfigurationError` says which are."""
    if value == "drop":
        return "drop"
    if value == "keep":
        return "keep"
    raise ConfigurationError(
        f"reasoning must be 'drop' (drop thinking blocks after a rewritten prefix) or "
        f"'keep' (send them unchanged), got {value!r}"
    )


def first_change(transcript: Sequence[Message], view: Sequence[Message]) -> int:
    """Index of the first view message that is not the transcript's message at that place."""
    for index, (old, new) in enumerate(zip(transcript, view, strict=False)):
        if old is not new and old != new:
            return index
    return min(len(transcript), len(view))


def without_reasoning(message: Message) -> Message | None:
    """``message`` without its thinking blocks; None when nothing else is left in it.

    The Anthropic block layout kept in metadata loses the entries of the
    dropped blocks too, so the details of the blocks that stay (a caller's
    ``cache_control`` breakpoint above all) still fit and are written back.
    """
    kept = tuple(b for b in message.content if not isinstance(b, ThinkingBlock))
    if len(kept) == len(message.content):
        return message
    if not kept:
        return None
    metadata = dict(message.metadata)
    layout = metadata.get(BLOCKS_KEY)
    if isinstance(layout, list):
        metadata[BLOCKS_KEY] = _layout_without_reasoning(layout, message.content)
    return attrs.evolve(message, content=kept, metadata=metadata)


def _layout_without_reasoning(layout: list[object], blocks: Sequence[object]) -> list[object]:
    consuming = [e for e in layout if not (isinstance(e, dict) and "opaque" in e)]
    if len(consuming) != len(blocks):
        return layout  # already stale: the writer ignores it either way
    remaining = iter(blocks)
    out: list[object] = []
    for entry in layout:
        opaque = isinstance(entry, dict) and "opaque" in entry
        if opaque or not isinstance(next(remaining), ThinkingBlock):
            out.append(entry)  # an opaque entry holds no block; the others follow the blocks
    return out


def drop_unbound_reasoning(
    transcript: Sequence[Message], view: tuple[Message, ...], counter: TokenCounter
) -> tuple[tuple[Message, ...], int]:
    """The view without the reasoning a rewrite cut off from its prefix, and its tokens.

    Thinking blocks in messages at or after the first change and before the
    newest user message are dropped whole; an assistant message that held
    nothing else goes with them. Returns ``view`` itself and 0 when nothing
    changed before any reasoning.
    """
    start = first_change(transcript, view)
    end = next((i for i in range(len(view) - 1, -1, -1) if is_user_message(view[i])), -1)
    if start >= end:
        return view, 0
    out: list[Message] = list(view[:start])
    dropped = 0
    for message in view[start:end]:
        kept = without_reasoning(message)
        if kept is not message:
            dropped += counter.count_message(message) - (
                counter.count_message(kept) if kept is not None else 0
            )
        if kept is not None:
            out.append(kept)
    out.extend(view[end:])
    if len(out) == len(view) and all(a is b for a, b in zip(out, view, strict=True)):
        return view, 0
    return tuple(out), max(0, dropped)
