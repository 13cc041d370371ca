"""Pure functions that read the shape of a transcript: leading system block, turns, tool groups.

Strategies decide where they may cut with these, so that every strategy keeps
the same invariants: a tool group is never split, calls still waiting at the
end stay as they are, and the newest user message stays.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine.messages import Message

__all__ = [
    "ARCHIVED_KEY",
    "CLEARED_KEY",
    "TRIMMED_KEY",
    "TRUNCATION_KEY",
    "Shape",
    "analyze",
    "is_user_message",
]

ARCHIVED_KEY = "context_engine.archived"
"""Metadata key on a shortened message or marker: the archive references it names."""
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
        lead_end: Number of leading system/developer messages.
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


def analyze(view: Sequence[Message]) -> Shape:
    """Read the shape of ``view`` in linear time."""
    n = len(view)
    lead_end = 0
    while lead_end < n and view[lead_end].role in ("system", "developer"):
        lead_end += 1
    group_end = list(range(n))
    last_user = -1
    call_owner: dict[str, int] = {}
    # (owner index, call id): ids may be reused across turns by some providers.
    answered: set[tuple[int, str]] = set()
    for index, message in enumerate(view):
        role = message.role
        if role == "user" and not message.is_summary:
            last_user = index
        elif role == "assistant":
            for call in message.tool_calls:
                call_owner[call.id] = index
        elif role == "tool" and message.tool_call_id in call_owner:
            owner = call_owner[message.tool_call_id]
            answered.add((owner, message.tool_call_id))
            group_end[owner] = max(group_end[owner], index)
    group_start = list(range(n))
    index = 0
    while index < n:
        end = group_end[index]
        scan = index
        while scan <= end:
            end = max(end, group_end[scan])
            scan += 1
        for inner in range(index, end + 1):
            group_start[inner] = index
            group_end[inner] = end
        index = end + 1
    pending_start = n
    newest_group = -1
    for index in range(n - 1, last_user, -1):
        calls = view[index].tool_calls if view[index].role == "assistant" else ()
        if not calls:
            continue
        waiting = any((index, call.id) not in answered for call in calls)
        if waiting and pending_start == n and _only_tools_after(view, group_end[index]):
            pending_start = group_start[index]
            continue
        newest_group = group_start[index]
        break
    if newest_group >= 0:
        tail_start = newest_group
    elif pending_start < n:
        tail_start = pending_start
    else:
        tail_start = last_user if last_user >= 0 else n
    return Shape(
        lead_end=lead_end,
        last_user=last_user,
        group_start=tuple(group_start),
        group_end=tuple(group_end),
        pending_start=pending_start,
        tail_start=max(tail_start, lead_end),
    )


def _only_tools_after(view: Sequence[Message], end: int) -> bool:
    return all(m.role == "tool" for m in view[end + 1 :])
