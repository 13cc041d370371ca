"""Where provider blocks go in the view, and how a prompt relates to the previous one.

Stable blocks go right after the leading system/developer messages, so they
are part of the prefix a provider's prompt cache reuses; volatile blocks go
just before the newest user message, so a change in them never moves that
prefix. Every placed message carries `PROVIDED_KEY` in its metadata, which is
how `strip_provided` takes them out again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

import attrs

from context_engine.assembly.provider import Item, Placement
from context_engine.assembly.trace import DeltaKind
from context_engine.messages import Message, Role
from context_engine.structure import analyze

__all__ = [
    "PROVIDED_KEY",
    "Block",
    "Delta",
    "delta_of",
    "is_provided",
    "mark",
    "place",
    "render_items",
    "stable_hash",
    "strip_provided",
]

PROVIDED_KEY = "context_engine.provided"
"""Metadata key on every message a provider contributed; its value is the provider's name."""


@attrs.frozen
class Block:
    """One provider's messages for one call, and where they go."""

    source: str
    placement: Placement
    role: Role
    messages: tuple[Message, ...]


def mark(message: Message, source: str) -> Message:
    """A copy of ``message`` marked as ``source``'s contribution."""
    return attrs.evolve(message, metadata={**message.metadata, PROVIDED_KEY: source})


def render_items(source: str, role: Role, items: Sequence[Item]) -> tuple[Message, ...]:
    """``items`` as one marked message (none when there are no items)."""
    if not items:
        return ()
    text = "\n\n".join(item.text for item in items)
    return (mark(Message(role=role, content=text), source),)


def is_provided(message: Message) -> bool:
    """Whether ``message`` came from a provider rather than the transcript."""
    return PROVIDED_KEY in message.metadata


def strip_provided(view: Sequence[Message]) -> tuple[Message, ...]:
    """``view`` without the provider blocks: the part the strategies made from the transcript."""
    return tuple(message for message in view if not is_provided(message))


def place(view: tuple[Message, ...], blocks: Sequence[Block]) -> tuple[Message, ...]:
    """``view`` with ``blocks`` placed: stable after the system prompt, volatile before the task."""
    stable = tuple(m for b in blocks if b.placement == "stable" for m in b.messages)
    volatile = tuple(m for b in blocks if b.placement == "volatile" for m in b.messages)
    if not stable and not volatile:
        return view
    shape = analyze(view)
    lead = shape.lead_end
    task = shape.last_user if shape.last_user >= lead else len(view)
    return view[:lead] + stable + view[lead:task] + volatile + view[task:]


@attrs.frozen
class Delta:
    """How a prompt relates to the previous one (seed 003's incremental builder)."""

    kind: DeltaKind
    reused_tokens: int
    stable_hash: str


def stable_hash(view: tuple[Message, ...], blocks: Sequence[Block]) -> str:
    """Hash of the system prompt and the stable provider blocks placed after it."""
    digest = hashlib.sha256()
    stable = (m for b in blocks if b.placement == "stable" for m in b.messages)
    for message in (*view[: analyze(view).lead_end], *stable):
        digest.update(repr((message.role, message.text)).encode())
    return digest.hexdigest()


def delta_of(
    view: tuple[Message, ...],
    current: str,
    previous: tuple[Message, ...] | None,
    previous_hash: str | None,
    count: Callable[[Message], int],
) -> Delta:
    """Compare ``view`` (stable hash ``current``) with the previous prompt.

    Returns its kind and the tokens of the leading messages the two share.
    """
    if previous is None:
        return Delta("first", 0, current)
    shared = 0
    for mine, theirs in zip(view, previous, strict=False):
        if mine is not theirs and mine != theirs:
            break
        shared += 1
    reused = sum(map(count, view[:shared]))
    if current != previous_hash:
        kind: DeltaKind = "full_rebuild"
    elif shared == len(previous):
        kind = "append_only"
    else:
        kind = "history_only"
    return Delta(kind, reused, current)
