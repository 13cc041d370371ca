"""Where the micro tier cuts: the oldest few API rounds, never the recent ones.

An API round is one model call: an assistant message and the tool results
answering it (a tool group, never split). The micro tier folds only the
oldest ``batch_groups`` rounds after the leading block and checkpoint (more
when they hold fewer than ``min_tokens``), keeps the last
``preserve_recent_rounds`` rounds and the protected tail verbatim, and keeps
the user message of the turn it cuts into verbatim (the current request in an
agent loop). The result is a `CutPoint`, so `rebuild_view` and
`replaced_messages` assemble the view exactly as for a full summary.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.messages import Message
from context_engine.structure import Shape, is_user_message
from context_engine.summarize.cut import CutPoint, leading_checkpoint
from context_engine.tokens import TokenCounter

__all__ = ["micro_cut", "round_starts"]


def round_starts(view: Sequence[Message], shape: Shape, start: int) -> list[int]:
    """Indices at or after ``start`` where an API round begins (a safe cut before an assistant)."""
    return [
        index
        for index in range(start, len(view))
        if view[index].role == "assistant" and shape.is_safe_cut(index)
    ]


def micro_cut(
    view: Sequence[Message],
    shape: Shape,
    counter: TokenCounter,
    *,
    batch_groups: int,
    preserve_recent_rounds: int,
    min_tokens: int = 0,
) -> CutPoint | None:
    """The cut after the oldest ``batch_groups`` rounds (or more, to reach ``min_tokens``).

    None when the rounds outside the preserved ones cannot supply a batch:
    fewer than ``batch_groups`` of them, or fewer than ``min_tokens`` tokens.
    """
    checkpoint = leading_checkpoint(view, shape)
    start = checkpoint + 1 if checkpoint >= 0 else shape.lead_end
    starts = round_starts(view, shape, start)
    limit = min(shape.tail_start, len(view))
    if preserve_recent_rounds:
        if len(starts) <= preserve_recent_rounds:
            return None
        limit = min(limit, starts[-preserve_recent_rounds])
    candidates = [index for index in starts if index <= limit]
    removed, turn_start = 0, -1
    position = start
    for rounds, index in enumerate(candidates):
        for message_index in range(position, index):
            if is_user_message(view[message_index]):
                turn_start = message_index
            removed += counter.count_message(view[message_index])
        position = index
        if rounds >= batch_groups and removed - _kept(view, counter, turn_start) >= min_tokens:
            return _cut(view, shape, counter, start, index, turn_start)
    return None


def _kept(view: Sequence[Message], counter: TokenCounter, turn_start: int) -> int:
    return counter.count_message(view[turn_start]) if turn_start >= 0 else 0


def _cut(
    view: Sequence[Message],
    shape: Shape,
    counter: TokenCounter,
    start: int,
    index: int,
    turn_start: int,
) -> CutPoint | None:
    kept = sum(counter.count_message(message) for message in view[index:])
    cut = CutPoint(
        index=index,
        turn_start=turn_start,
        is_split_turn=turn_start >= 0,
        lead_end=shape.lead_end,
        start=start,
        kept_tokens=kept + _kept(view, counter, turn_start),
    )
    return cut if cut.compacted_count > 0 else None
