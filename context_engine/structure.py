"""Pure functions that read the shape of a transcript: leading system block, turns, tool groups.

Strategies decide where they may cut with these, so that every strategy keeps
the same invariants: a tool group is never split, calls still waiting at the
end stay as they are, and the newest user message stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import attrs

from context_engine._native_checkpoint import carries_native_checkpoint
from context_engine.messages import Message

__all__ = [
    "ARCHIVED_KEY",
    "CAPPED_KEY",
    "CLEARED_KEY",
    "TRIMMED_KEY",
    "TRUNCATION_KEY",
    "Shape",
    "analyze",
    "is_user_message",
    "shared_shapes",
]

ARCHIVED_KEY = "context_engine.archived"
"""Metadata key on a shortened message or marker: the archive references it names."""
CAPPED_KEY = "context_engine.capped"
"""Metadata key on a tool result `ToolResultCap` shortened to a preview; value: the
original's size, ``{"tokens": ..., "lines": ..., "characters": ...}``."""
CLEARED_KEY = "context_engine.cleared"
"""Metadata key on a tool result whose content microcompact replaced."""
TRIMMED_KEY = "context_engine.trimmed"
"""Metadata key on a message with text blocks shortened by a marker; value: block count."""
TRUNCATION_KEY = "context_engine.truncated"
"""Metadata key on the marker message hard truncation leaves where it cut."""


def is_user_message(message: Message) -> bool:
    """A message the user wrote: role ``user`` and not a checkpoint."""
    return message.role == "user" and not message.is_summary


@attrs.frozen
class Shape:
    """The structure of one view, computed once by `analyze`.

    Attributes:
        lead_end: Number of leading system/developer messages, plus a provider's
            compaction checkpoint right after them (and its tool results).
        last_user: Index of the newest user message, or -1.
        group_start: For each index, the first index of the tool group it
            belongs to (the index itself outside groups).
        group_end: For each index, the last index of its tool group.
        pending_start: First index of a trailing assistant message whose calls
            still wait for results, or ``len(view)``.
        tail_start: First index of the protected tail: the newest tool group of
            the current turn (pending calls included) and everything after it;
            without one, the newest user message and what follows it.
    """

    lead_end: int
    last_user: int
    group_start: tuple[int, ...]
    group_end: tuple[int, ...]
    pending_start: int
    tail_start: int

    def is_safe_cut(self, index: int) -> bool:
        """Whether a boundary before ``index`` leaves every tool group whole."""
        if index <= 0 or index >= len(self.group_start):
            return True
        return self.group_start[index] == index

    def unit_end(self, index: int) -> int:
        """One past the last index of the unit (tool group or single message) at ``index``."""
        return self.group_end[index] + 1

    def is_protected(self, index: int) -> bool:
        """Whether no strategy may remove the message at ``index``."""
        return index < self.lead_end or index == self.last_user or index >= self.tail_start


# Shapes computed within the current `shared_shapes` block, by the id of the
# (immutable) tuple they describe; the tuple is kept with its shape, so the id
# cannot be reused while the entry lives.
_SHAPES: ContextVar[dict[int, tuple[tuple[Message, ...], Shape]] | None] = ContextVar(
    "context_engine_shapes", default=None
)


@contextlib.contextmanager
def shared_shapes() -> Iterator[None]:
    """Within the block, `analyze` reads the shape of each tuple view once.

    The engine wraps each call in it: the floor it measures and the strategies
    it runs all read the shape of the same view, and a view is immutable.
    """
    token = _SHAPES.set({})
    try:
        yield
    finally:
        _SHAPES.reset(token)


def analyze(view: Sequence[Message]) -> Shape:
    """Read the shape of ``view`` in linear time (once per tuple inside `shared_shapes`)."""
    memo = _SHAPES.get()
    if memo is None or type(view) is not tuple:
        return _analyze(view)
    hit = memo.get(id(view))
    if hit is not None and hit[0] is view:
        return hit[1]
    shape = _analyze(view)
    memo[id(view)] = (view, shape)
    return shape


def _analyze(view: Sequence[Message]) -> Shape:
    n = len(view)
    lead_end = 0
    while lead_end < n and view[lead_end].role in ("system", "developer"):
        lead_end += 1
    # Issue 19: a provider's compaction checkpoint right after them is never
    # rewritten either; its tool results (if it called tools) stay with it.
    if lead_end < n and carries_native_checkpoint(view[lead_end]):
        lead_end += 1
        while lead_end < n and view[lead_end].role == "tool":
            lead_end += 1
    group_end = list(range(n))
    owners: list[int] = []
    last_user = -1
    call_owner: dict[str | None, int] = {}
    # (owner index, call id): ids may be reused across turns by some providers.
    answered: set[tuple[int, str | None]] = set()
    for index, message in enumerate(view):
        role = message.role
        if role == "assistant":
            for call in message.tool_calls:
                call_owner[call.id] = index
        elif role == "tool":
            call_id = message.tool_call_id
            owner = call_owner.get(call_id)
            if owner is not None:
                answered.add((owner, call_id))
                if group_end[owner] == owner:
                    owners.append(owner)
                if index > group_end[owner]:
                    group_end[owner] = index
        elif role == "user" and not message.is_summary:
            last_user = index
    group_start = _merge_groups(group_end, owners)
    pending_start, tail_start = _tail(view, group_start, group_end, answered, last_user)
    return Shape(
        lead_end=lead_end,
        last_user=last_user,
        group_start=tuple(group_start),
        group_end=tuple(group_end),
        pending_start=pending_start,
        tail_start=max(tail_start, lead_end),
    )


def _tail(
    view: Sequence[Message],
    group_start: list[int],
    group_end: list[int],
    answered: set[tuple[int, str | None]],
    last_user: int,
) -> tuple[int, int]:
    """Where calls still pending at the end start, and where the protected tail starts."""
    n = len(view)
    pending_start = n
    for index in range(n - 1, last_user, -1):
        calls = view[index].tool_calls if view[index].role == "assistant" else ()
        if not calls:
            continue
        waiting = any((index, call.id) not in answered for call in calls)
        if waiting and pending_start == n and _only_tools_after(view, group_end[index]):
            pending_start = group_start[index]
            continue
        return pending_start, group_start[index]  # the newest group of the current turn
    if pending_start < n:
        return pending_start, pending_start
    return pending_start, last_user if last_user >= 0 else n


def _merge_groups(group_end: list[int], owners: list[int]) -> list[int]:
    """Merge overlapping groups in ``group_end`` (in place); return each index's group start.

    ``owners`` are the indices whose group reaches past themselves (assistant
    messages with answered calls); every other index is a unit of its own.
    """
    group_start = list(range(len(group_end)))
    spans: list[tuple[int, int]] = []
    first, last = -1, -1
    for owner in sorted(owners):
        end = group_end[owner]
        if owner <= last:  # inside the current group: the two merge
            last = max(last, end)
            continue
        if last >= 0:
            spans.append((first, last))
        first, last = owner, end
    if last >= 0:
        spans.append((first, last))
    for first, last in spans:
        if last == first + 1:  # the usual group: one call, one result
            group_start[last] = first
            group_end[first] = last
        else:
            size = last + 1 - first
            group_start[first : last + 1] = [first] * size
            group_end[first : last + 1] = [last] * size
    return group_start


def _only_tools_after(view: Sequence[Message], end: int) -> bool:
    return all(m.role == "tool" for m in view[end + 1 :])
