"""Which part of a view a provider's compaction call replaces: pure functions.

A compaction call (`OpenAICompactCall`, `AnthropicCompactCall`) turns a view into::

    leading system/developer block   (sent with the call, kept as it is)
    the provider's window            (replaces ``replaced``; opaque)
    user message of the cut turn     (only for a split turn, kept verbatim)
    the kept messages                (verbatim)

The cut is `find_cut_point`'s, so tool groups stay whole and the protected
tail (the newest tool group, pending calls, the newest user message) stays.
Unlike a `ContextSummary`, an earlier provider checkpoint right after the
leading block is sent again and replaced: the provider folds it into the new
one (incremental compaction).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from context_engine._native_checkpoint import carries_native_checkpoint
from context_engine.messages import Message
from context_engine.strategies.base import Budget
from context_engine.structure import analyze
from context_engine.summarize.cut import CutPoint, find_cut_point

__all__ = ["CompactPlan", "plan_compaction"]


@attrs.frozen(kw_only=True)
class CompactPlan:
    """What one compaction call sends and what its window replaces.

    Attributes:
        lead: The leading system/developer messages: sent first, kept as they are.
        sent: The messages the provider compacts, after ``lead``.
        replaced: The messages leaving the view (archived under one reference).
        kept: The messages after the window: the split turn's user message,
            if any, then the kept messages.
        is_split_turn: The cut falls inside a turn.
    """

    lead: tuple[Message, ...]
    sent: tuple[Message, ...]
    replaced: tuple[Message, ...]
    kept: tuple[Message, ...]
    is_split_turn: bool

    @property
    def is_incremental(self) -> bool:
        """Whether an earlier checkpoint (the provider's or a summary) is among the replaced."""
        return any(m.is_summary or carries_native_checkpoint(m) for m in self.replaced)

    def view(self, window: Sequence[Message]) -> tuple[Message, ...]:
        """The view with ``window`` in place of the replaced messages."""
        return (*self.lead, *window, *self.kept)


def plan_compaction(
    view: Sequence[Message],
    budget: Budget,
    keep_recent_tokens: int,
    *,
    send_split_user: bool,
    expected: Callable[[Sequence[Message]], int] | None,
) -> CompactPlan | None:
    """Where a compaction call cuts ``view``, or None when there is nothing to compact.

    Args:
        view: The view.
        budget: The budget (its counter, threshold and overhead).
        keep_recent_tokens: Tokens kept verbatim at the end.
        send_split_user: Send a split turn's user message with the call too
            (Anthropic needs the roles to alternate); it is kept verbatim
            after the window either way.
        expected: Tokens the provider's window will likely take for the
            messages sent; with it, the cut moves later when the window and
            the kept messages could not fit the threshold together. None keeps
            ``keep_recent_tokens`` as it is.
    """
    shape = analyze(view)
    cut = find_cut_point(view, shape, budget.counter, keep_recent_tokens)
    if cut is None:
        return None
    plan = _plan(view, cut, send_split_user)
    if expected is None:
        return plan
    room = _room(view, budget) - expected(plan.sent)
    if cut.kept_tokens <= room:
        return plan
    # A later cut, so a last-resort truncation need not drop kept messages the window left out.
    for target in (room, 0):
        later = find_cut_point(view, shape, budget.counter, max(0, target), slack_tokens=0)
        if later is not None and later.index > cut.index:
            plan = _plan(view, later, send_split_user)
            if later.kept_tokens <= room:
                break
    return plan


def _plan(view: Sequence[Message], cut: CutPoint, send_split_user: bool) -> CompactPlan:
    start = _system_end(view)
    compacted = tuple(view[start : cut.index])
    kept = tuple(view[cut.index :])
    if not cut.is_split_turn:
        return CompactPlan(
            lead=tuple(view[:start]),
            sent=compacted,
            replaced=compacted,
            kept=kept,
            is_split_turn=False,
        )
    user = cut.turn_start - start
    replaced = (*compacted[:user], *compacted[user + 1 :])
    return CompactPlan(
        lead=tuple(view[:start]),
        sent=compacted if send_split_user else replaced,
        replaced=replaced,
        kept=(view[cut.turn_start], *kept),
        is_split_turn=True,
    )


def _system_end(view: Sequence[Message]) -> int:
    end = 0
    while end < len(view) and view[end].role in ("system", "developer"):
        end += 1
    return end


def _room(view: Sequence[Message], budget: Budget) -> int:
    """Tokens left under the threshold once the leading block and the overhead are counted."""
    lead = sum(budget.counter.count_message(view[i]) for i in range(_system_end(view)))
    return budget.threshold - budget.overhead_tokens - lead
