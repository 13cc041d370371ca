"""What comes back right after a checkpoint: the pinned messages, then re-hydrated files.

Both are optional and both are bounded by the room the checkpoint left under
the threshold (and never make the view larger than it was before the
checkpoint), so the view still fits; `FullSummary` calls `reattach` once,
before its post-summary hooks, which get what is left.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from context_engine.messages import ContextSummary, Message
from context_engine.summarize.files import DEFAULT_FILE_TOOLS, FileToolRule
from context_engine.summarize.rehydrate import Rehydration, name_files

if TYPE_CHECKING:  # the strategies package imports this module
    from context_engine.strategies.base import Budget, StrategyResult

__all__ = ["reattach", "with_pinned"]

logger = logging.getLogger(__name__)


async def reattach(
    view: tuple[Message, ...],
    lead_end: int,
    checkpoint: ContextSummary,
    budget: Budget,
    originals: Sequence[Message],
    rehydration: Rehydration | None,
    file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS,
) -> tuple[tuple[Message, ...], ContextSummary]:
    """``(view, checkpoint)`` with the pinned messages and re-attached files after the checkpoint.

    ``view`` holds ``checkpoint`` at ``lead_end``; ``originals`` are the
    messages it replaced. The checkpoint names the re-attached files.
    """
    ceiling = min(budget.threshold, budget.tokens - 1)
    counter = budget.counter
    pinned: tuple[Message, ...] = ()
    if budget.pinned is not None:
        try:
            pinned = await budget.pinned.fitted(
                ceiling - budget.measure(view), budget.threshold, counter
            )
        except Exception:
            logger.exception("hook=<pinned> | the pinned source failed; nothing re-injected")
    at = lead_end + 1
    before, after = view[:lead_end], view[at:]
    files: tuple[Message, ...] = ()
    if rehydration is not None:
        room = ceiling - budget.measure((*view, *pinned))
        files = await rehydration.attachments(
            originals, room, budget.threshold, counter, file_tools, kept=after
        )
    while True:
        named = name_files(checkpoint, files)
        rebuilt = (*before, named, *pinned, *files, *after)
        if not files or budget.measure(rebuilt) <= ceiling:
            return rebuilt, named
        files = files[:-1]  # the line naming them took the last one's room


async def with_pinned(result: StrategyResult, lead_end: int, budget: Budget) -> StrategyResult:
    """An applied checkpoint ``result`` with the pinned messages right after its checkpoint.

    For checkpoint strategies other than `FullSummary` (a session memory); its
    savings and `SummaryInfo` are adjusted to the larger view.
    """
    checkpoint = result.messages[lead_end]
    if budget.pinned is None or not isinstance(checkpoint, ContextSummary):
        return result
    view, _ = await reattach(result.messages, lead_end, checkpoint, budget, (), None)
    added = budget.measure(view) - budget.measure(result.messages)
    info = result.info
    if info is not None:
        info = attrs.evolve(info, tokens_after=info.tokens_after + added, messages_after=len(view))
    return attrs.evolve(result, messages=view, tokens_saved=result.tokens_saved - added, info=info)
