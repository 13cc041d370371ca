"""What a recovery runs after its force-capable strategies: truncation folded into the checkpoint.

A recovery's view is committed: the caller replaces its transcript with it. A
bare `HardTruncate` cut there would lose the dropped messages for good, so in
a recovery each `HardTruncate` becomes two `TruncationFold` steps, which make
the same cut and fold the dropped range (with any earlier checkpoint and
truncation marker) into one `ContextSummary`:

1. ``truncation_summary``: written by the pipeline's `FullSummary`, when there
   is one and it did not fail earlier in this call. An LLM step: a summarizer
   failure is recorded on it and the next step runs.
2. ``truncation_digest``: written by a `FullSummary` over the
   `ExtractiveSummarizer`, with no model; it runs when the first did not fit
   the view.

Both leave the checkpoint room under the target, so the folded view fits
where the truncated one would have; neither writes a checkpoint much smaller
than the one it replaces (under `_LEAST_KEPT` of it, the plain cut keeps that
one and drops the tail instead). When the floor itself is above the
target (no view fits), the dropped range is folded all the same and the
truncation's last resorts cut the view sent now, the new checkpoint included;
the commit keeps the checkpoint and the newest user message whole
(`context_engine.summarize.originals.whole_for_commit`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from context_engine.events import SummaryInfo
from context_engine.messages import ContextSummary, Message
from context_engine.strategies.base import Budget, Removal, Strategy, StrategyResult
from context_engine.strategies.hard_truncate import HardTruncate, is_truncation_marker
from context_engine.strategies.summary import FullSummary
from context_engine.structure import analyze
from context_engine.summarize.extractive import ExtractiveSummarizer

__all__ = ["DIGEST", "SUMMARY", "TruncationFold", "recovery_strategies"]

SUMMARY = "truncation_summary"
"""The step folding a recovery's cut with the pipeline's summarizer."""
DIGEST = "truncation_digest"
"""The step folding a recovery's cut into an extractive digest (no model)."""

# Measures spent bringing a folded view under the threshold (counts are nearly additive).
_ATTEMPTS = 3
# A checkpoint squeezed below this many tokens says nothing; a bare cut is left instead.
_MIN_CHECKPOINT_TOKENS = 48
# The least share of the checkpoint it replaces that a fold may be written into.
_LEAST_KEPT = 0.75
# The digest has no window: one request holds the whole dropped range.
_DIGEST_WINDOW = 1_000_000


def recovery_strategies(
    strategies: Sequence[Strategy], pipeline: Sequence[Strategy], *, summary_failed: bool
) -> list[Strategy]:
    """``strategies`` with each `HardTruncate` replaced by the folds that commit safely.

    Args:
        strategies: What the recovery still runs, in order.
        pipeline: The engine's whole pipeline; its first `FullSummary` writes
            the summary fold.
        summary_failed: The summarizer already failed in this call: the
            summary fold is left out and only the digest writes.
    """
    writer = next((s for s in pipeline if isinstance(s, FullSummary)), None)
    digest = FullSummary(summarizer=ExtractiveSummarizer(), summarizer_window=_DIGEST_WINDOW)
    if writer is not None:
        # The pipeline's own checkpoint size, so the folds agree with it.
        digest = attrs.evolve(digest, max_checkpoint_share=writer.max_checkpoint_share)
    out: list[Strategy] = []
    for strategy in strategies:
        if not isinstance(strategy, HardTruncate):
            out.append(strategy)
            continue
        if writer is not None and not summary_failed:
            out.append(
                TruncationFold(name=SUMMARY, uses_llm=True, truncate=strategy, writer=writer)
            )
        out.append(TruncationFold(name=DIGEST, uses_llm=False, truncate=strategy, writer=digest))
        # Only when the folds left no room: the plain cut and its last resorts (capping
        # the newest results, trimming the checkpoint) so the view still fits.
        out.append(strategy)
    return out


@attrs.frozen(kw_only=True)
class TruncationFold:
    """`HardTruncate`'s cut, with the dropped range folded into the leading checkpoint.

    The view becomes: the leading system/developer block, one `ContextSummary`
    covering the earlier checkpoint, the earlier marker and every dropped
    message, then what the truncation kept. With an archive the checkpoint
    names the reference of all it replaced, so the originals stay recallable.
    Only a trimmed newest user message, with nothing dropped, is left as the
    truncation made it.
    """

    name: str
    uses_llm: bool
    truncate: HardTruncate
    writer: FullSummary

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Cut ``view`` under the threshold with room for the checkpoint, then fold the cut.

        Raises:
            SummarizerError: the writer's summarizer failed.
        """
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        started = time.perf_counter()
        view = tuple(view)
        head = _Head.of(view)
        # A checkpoint that grew into a small window's free room may keep that size.
        old = head.checkpoint_tokens(view, budget)
        grown = min(old, self.writer.grown_limit(budget.threshold))
        limit = max(self.writer.checkpoint_limit(budget.threshold), grown)
        # A fold never writes a checkpoint much smaller than the one it replaces (paid for,
        # the agent's memory): below that the plain cut keeps it and drops the tail instead.
        # A little smaller is better than that cut: the work log and the condensed prose
        # stay whole in the new checkpoint's metadata, while the cut's calls are lost.
        least = max(_MIN_CHECKPOINT_TOKENS, int(old * _LEAST_KEPT))
        if limit < least:
            return StrategyResult.unchanged(view)
        # The checkpoint takes at most ``limit``; it replaces the old checkpoint and marker.
        held = sum(budget.counter.count_message(m) for m in view[head.lead : head.start])
        target = budget.threshold - limit + held
        for _ in range(_ATTEMPTS):
            cut = await self.truncate.apply(
                transcript, view, attrs.evolve(budget, threshold=max(0, target))
            )
            dropped = _dropped(cut, view[head.lead : head.start])
            if not cut.applied or not dropped:
                return cut  # nothing dropped: only the newest user message was trimmed
            if limit < least:
                break
            folded, removed, checkpoint = await self._fold(
                transcript, view, head, cut, dropped, budget, limit
            )
            tokens = budget.measure(folded)
            if tokens <= budget.threshold:
                info = _info(view, folded, head, dropped, budget.tokens, tokens, checkpoint)
                return StrategyResult(
                    messages=folded,
                    applied=True,
                    tokens_saved=max(0, budget.tokens - tokens),
                    info=attrs.evolve(info, duration=time.perf_counter() - started),
                    removed=removed,
                )
            excess = tokens - budget.threshold
            if budget.measure(cut.messages) > target:
                limit -= excess  # nothing left to drop: the checkpoint must shrink
            else:
                target -= excess
        # The floor leaves no room for a checkpoint: the plain cut, so the view fits.
        cut = await self.truncate.apply(transcript, view, budget)
        dropped = _dropped(cut, view[head.lead : head.start])
        full = self.writer.checkpoint_limit(budget.threshold)
        if not cut.applied or not dropped or full < _MIN_CHECKPOINT_TOKENS:
            error = "no room left for a checkpoint next to the floor; the dropped range is marked"
            return attrs.evolve(cut, error=error) if cut.applied else cut
        fold = self._fold_past_the_floor
        return await fold(transcript, view, head, cut, dropped, budget, started)

    async def _fold_past_the_floor(
        self,
        transcript: Sequence[Message],
        view: tuple[Message, ...],
        head: _Head,
        cut: StrategyResult,
        dropped: tuple[Message, ...],
        budget: Budget,
        started: float,
    ) -> StrategyResult:
        """The plain cut with its dropped range folded into a checkpoint all the same.

        The floor is above the threshold: no view fits, and this one is cut as
        far as the truncation's last resorts go, the new checkpoint included.
        The commit keeps the checkpoint whole (`whole_for_commit`), so what the
        cut dropped is summarized, not lost, once later views have room again.
        """
        limit = self.writer.checkpoint_limit(budget.threshold)
        folded, removed, checkpoint = await self._fold(
            transcript, view, head, cut, dropped, budget, limit
        )
        tokens = budget.measure(folded)
        last = await self.truncate.apply(transcript, folded, attrs.evolve(budget, tokens=tokens))
        if last.applied:
            folded, removed = last.messages, (*removed, *last.removed)
            tokens = budget.measure(folded)
        info = _info(view, folded, head, dropped, budget.tokens, tokens, checkpoint)
        return StrategyResult(
            messages=folded,
            applied=True,
            tokens_saved=max(0, budget.tokens - tokens),
            info=attrs.evolve(info, duration=time.perf_counter() - started),
            removed=removed,
            error="no room left for a checkpoint next to the floor: this view has it cut, "
            "the commit keeps it whole",
        )

    async def _fold(
        self,
        transcript: Sequence[Message],
        view: tuple[Message, ...],
        head: _Head,
        cut: StrategyResult,
        dropped: tuple[Message, ...],
        budget: Budget,
        limit: int,
    ) -> tuple[tuple[Message, ...], tuple[Removal, ...], ContextSummary]:
        """The cut view with its marker (and the old checkpoint) replaced by one checkpoint.

        The checkpoint is written from the originals in ``transcript`` of what
        earlier strategies of the call shortened, as a summary's is.
        """
        history, prefix = head.split(view, dropped)
        previous = view[head.lead] if head.slot > head.lead else None
        removal = Removal("messages", (*view[head.lead : head.start], *dropped))
        # After the marker the truncation left (its last resort may have dropped the head).
        kept = cut.messages[_Head.of(cut.messages).start :]
        checkpoint = await self.writer.write_checkpoint(
            history,
            prefix,
            previous,
            budget,
            removal,
            limit=limit,
            transcript=transcript,
            kept=kept,
        )
        others = tuple(r for r in cut.removed if r.kind != "messages")
        return (*view[: head.lead], checkpoint, *kept), (removal, *others), checkpoint


@attrs.frozen
class _Head:
    """Where a view's leading block, checkpoint and truncation marker end."""

    lead: int
    slot: int  # after the checkpoint: where the truncation puts its marker
    start: int  # after the marker: the first message the truncation may drop
    newest_user: int

    def checkpoint_tokens(self, view: tuple[Message, ...], budget: Budget) -> int:
        """Tokens of the view's checkpoint (0 without one)."""
        return budget.counter.count_message(view[self.lead]) if self.slot > self.lead else 0

    @classmethod
    def of(cls, view: tuple[Message, ...]) -> _Head:
        shape = analyze(view)
        slot = shape.lead_end
        if slot < len(view) and view[slot].is_summary:
            slot += 1
        start = slot + 1 if slot < len(view) and is_truncation_marker(view[slot]) else slot
        return cls(shape.lead_end, slot, start, shape.last_user)

    def split(
        self, view: tuple[Message, ...], dropped: tuple[Message, ...]
    ) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
        """``dropped`` as whole turns before the newest user message and its request's steps."""
        history: list[Message] = []
        prefix: list[Message] = []
        position = 0
        for index in range(self.start, len(view)):
            if position < len(dropped) and view[index] is dropped[position]:
                whole_turn = index < self.newest_user or self.newest_user < self.start
                (history if whole_turn else prefix).append(view[index])
                position += 1
        return tuple(history), tuple(prefix)


def _dropped(cut: StrategyResult, head: Sequence[Message] = ()) -> tuple[Message, ...]:
    """The messages a truncation dropped, in view order, but for the ``head`` it replaces.

    The head (checkpoint and marker) is folded in its own right; a truncation
    drops it only as its very last resort.
    """
    return tuple(
        m
        for r in cut.removed
        if r.kind == "messages"
        for m in r.originals
        if not any(m is h for h in head)
    )


def _info(
    before: tuple[Message, ...],
    after: tuple[Message, ...],
    head: _Head,
    dropped: tuple[Message, ...],
    tokens_before: int,
    tokens_after: int,
    checkpoint: ContextSummary,
) -> SummaryInfo:
    return SummaryInfo(
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        messages_before=len(before),
        messages_after=len(after),
        compacted_count=len(dropped),
        kept_count=len(after) - head.lead - 1,
        is_split_turn=bool(head.split(before, dropped)[1]),
        is_incremental=head.slot > head.lead,
        summary_chars=len(checkpoint.summary),
        read_files=checkpoint.read_files,
        modified_files=checkpoint.modified_files,
        references=checkpoint.references[-1:],
    )
