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
from itertools import accumulate

import attrs

from context_engine.assembly.provider import Item, Placement
from context_engine.assembly.trace import DeltaKind
from context_engine.messages import Message, Role
from context_engine.structure import is_user_message

__all__ = [
    "PROVIDED_KEY",
    "Block",
    "Delta",
    "Prompt",
    "delta_of",
    "is_provided",
    "lead_end",
    "mark",
    "newest_user",
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
    """``view`` with ``blocks`` placed.

    Stable blocks go after the system prompt, volatile ones before the newest
    user message (at the end when there is none), tail ones after the last message.
    """
    stable = tuple(m for b in blocks if b.placement == "stable" for m in b.messages)
    volatile = tuple(m for b in blocks if b.placement == "volatile" for m in b.messages)
    tail = tuple(m for b in blocks if b.placement == "tail" for m in b.messages)
    if not stable and not volatile and not tail:
        return view
    lead = lead_end(view)
    task = newest_user(view)
    if task < lead:
        task = len(view)
    return view[:lead] + stable + view[lead:task] + volatile + view[task:] + tail


def lead_end(view: Sequence[Message]) -> int:
    """How many system/developer messages ``view`` starts with."""
    end = 0
    while end < len(view) and view[end].role in ("system", "developer"):
        end += 1
    return end


def newest_user(view: Sequence[Message]) -> int:
    """Index of the newest message the user wrote, or -1 (a scan from the end)."""
    for index in range(len(view) - 1, -1, -1):
        if is_user_message(view[index]):
            return index
    return -1


@attrs.frozen
class Delta:
    """How a prompt relates to the previous one (seed 003's incremental builder)."""

    kind: DeltaKind
    reused_tokens: int


@attrs.frozen
class Prompt:
    """A prompt as the next comparison needs it.

    ``cumulative`` holds the token prefix sums of the leading messages counted
    so far (``cumulative[i]``: tokens of ``view[:i]``); the next comparison
    counts only the messages between that and the prefix it shares.
    """

    view: tuple[Message, ...]
    stable_hash: str
    cumulative: tuple[int, ...] = (0,)


def stable_hash(view: tuple[Message, ...], blocks: Sequence[Block]) -> str:
    """Hash of the system prompt and the stable provider blocks placed after it."""
    digest = hashlib.sha256()
    stable = (m for b in blocks if b.placement == "stable" for m in b.messages)
    for message in (*view[: lead_end(view)], *stable):
        digest.update(repr((message.role, message.text)).encode())
    return digest.hexdigest()


def delta_of(
    view: tuple[Message, ...],
    current: str,
    previous: Prompt | None,
    count: Callable[[Message], int],
) -> tuple[Delta, Prompt]:
    """Compare ``view`` (stable hash ``current``) with the previous prompt.

    Returns its kind and the tokens of the leading messages the two share, and
    ``view`` as the next call's previous prompt.
    """
    if previous is None:
        return Delta("first", 0), Prompt(view, current)
    shared = 0
    for mine, theirs in zip(view, previous.view, strict=False):
        if mine is not theirs and mine != theirs:
            break
        shared += 1
    known = previous.cumulative[: shared + 1]
    if len(known) <= shared:  # count only what the last comparison did not
        more = accumulate(map(count, view[len(known) - 1 : shared]), initial=known[-1])
        known += tuple(more)[1:]
    if current != previous.stable_hash:
        kind: DeltaKind = "full_rebuild"
    elif shared == len(previous.view):
        kind = "append_only"
    else:
        kind = "history_only"
    return Delta(kind, known[-1]), Prompt(view, current, known)
