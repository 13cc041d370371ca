"""`MicroSummary`: the micro tier, folding only the oldest few API rounds into the checkpoint.

A full summary takes the whole compactable prefix; in a long agent loop that
is a large, paid request each time the window fills, and it rewrites the
whole prompt (the provider's cache is lost). The micro tier (seed 001)
summarizes only the oldest ``batch_groups`` rounds, folding them into the
existing checkpoint, and keeps the last ``preserve_recent_rounds`` rounds and
the current request verbatim. It runs from ``micro_trigger`` of the window
and leaves the view to the full summary from ``full_trigger`` on
(docs/strategies/micro_summary.md works both through at 128k and 16k).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any, ClassVar

import attrs

from context_engine._validate import non_negative_int, positive_int, share
from context_engine.errors import ConfigurationError
from context_engine.messages import Message
from context_engine.redact import Redactor
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.strategies.summary import FullSummary
from context_engine.structure import analyze
from context_engine.summarize.cut import leading_checkpoint, rebuild_view, replaced_messages
from context_engine.summarize.micro_cut import micro_cut
from context_engine.summarize.reattach import reattach
from context_engine.summarize.request import Summarizer, SummaryRequest

__all__ = ["MicroSummary"]


@attrs.frozen
class _AsMicro:
    """Tells the summarizer a reactive summary is the micro tier's (``reactive_micro``)."""

    summarizer: Summarizer

    def __call__(self, request: SummaryRequest) -> str | Awaitable[str]:
        if request.reason == "reactive_full":
            request = attrs.evolve(request, reason="reactive_micro")
        return self.summarizer(request)


def _triggers(instance: MicroSummary, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < instance.micro_trigger:
        raise ConfigurationError(
            f"MicroSummary(full_trigger={value!r}): full_trigger must be at least "
            f"micro_trigger ({instance.micro_trigger!r}); the full summary takes over above it"
        )


@attrs.frozen(kw_only=True)
class MicroSummary:
    """Folds the oldest ``batch_groups`` API rounds into the checkpoint (uses the LLM).

    Place it before `FullSummary`. Above the threshold it runs like any
    strategy; between ``micro_trigger`` x window and the threshold the engine
    runs it on its own (a proactive tier, `ProactiveStrategy`). From
    ``full_trigger`` x window it leaves the view to the full summary. A batch
    removes at least ``min_removed_share`` of the threshold (more rounds are
    taken until it does), so a checkpoint is not rewritten for a few tokens.
    The summarizer sees ``reason="reactive_micro"``.
    """

    name: ClassVar[str] = "micro_summary"
    uses_llm: ClassVar[bool] = True

    summarizer: Summarizer
    """Writes the checkpoint text; plain or coroutine function taking a `SummaryRequest`."""
    batch_groups: int = attrs.field(default=2, validator=positive_int())
    """The oldest API rounds folded per run (at least)."""
    preserve_recent_rounds: int = attrs.field(default=2, validator=non_negative_int())
    """The newest API rounds always kept verbatim."""
    micro_trigger: float = attrs.field(default=0.85, validator=share(exclusive_minimum=True))
    """Share of the window from which the micro tier runs, even below the threshold."""
    full_trigger: float = attrs.field(
        default=0.92, validator=[share(exclusive_minimum=True), _triggers]
    )
    """Share of the window from which the micro tier leaves the view to the full summary."""
    min_removed_share: float = attrs.field(default=0.1, validator=share())
    """Least share of the threshold one batch removes."""
    max_checkpoint_share: float = attrs.field(default=0.2, validator=share(exclusive_minimum=True))
    """Largest share of the threshold the checkpoint may take (as `FullSummary`)."""
    redactor: Redactor | None = None
    """Removes secrets from everything sent to the summarizer."""
    _writer: FullSummary = attrs.field(init=False, eq=False, repr=False)

    @_writer.default
    def _make_writer(self) -> FullSummary:
        return FullSummary(
            summarizer=_AsMicro(self.summarizer),
            redactor=self.redactor,
            max_checkpoint_share=self.max_checkpoint_share,
        )

    def proactive_tokens(self, window: int) -> int:
        """Tokens from which the engine runs this tier below the threshold."""
        return int(self.micro_trigger * window)

    def full_tokens(self, window: int) -> int:
        """Tokens from which the full summary takes over."""
        return int(self.full_trigger * window)

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Fold the oldest rounds of ``view`` into its checkpoint.

        Raises:
            SummarizerError: the summarizer failed.
        """
        view = tuple(view)
        if budget.tokens <= budget.threshold or budget.tokens >= self.full_tokens(budget.window):
            return StrategyResult.unchanged(view)
        started = time.perf_counter()
        shape = analyze(view)
        cut = micro_cut(
            view,
            shape,
            budget.counter,
            batch_groups=self.batch_groups,
            preserve_recent_rounds=self.preserve_recent_rounds,
            min_tokens=int(self.min_removed_share * budget.threshold),
        )
        if cut is None:
            return StrategyResult.unchanged(view)
        previous_index = leading_checkpoint(view, shape)
        previous = view[previous_index] if previous_index >= 0 else None
        history = tuple(view[i] for i in cut.history)
        prefix = tuple(view[i] for i in cut.turn_prefix)
        removal = Removal("messages", replaced_messages(view, cut))
        writer = self._writer
        checkpoint = await writer.write_checkpoint(
            history,
            prefix,
            previous,
            budget,
            removal,
            limit=writer.checkpoint_limit(budget.threshold),
        )
        compacted = rebuild_view(view, cut, checkpoint)
        compacted, checkpoint = await reattach(
            compacted, cut.lead_end, checkpoint, budget, history + prefix, None, writer.file_tools
        )
        after = budget.measure(compacted)
        if after >= budget.tokens:
            return StrategyResult.unchanged(
                view, error=f"checkpoint would not shrink the view ({budget.tokens} -> {after})"
            )
        return StrategyResult(
            messages=compacted,
            applied=True,
            tokens_saved=budget.tokens - after,
            info=writer._info(view, compacted, cut, budget.tokens, after, checkpoint, started),
            removed=(removal,),
        )
