"""`BackgroundSummary`: the next checkpoint is written while the agent works.

A checkpoint strategy wrapped in `BackgroundSummary` keeps its place and its
name in the pipeline, and the engine also runs it ahead of time: once a
`project` hands out a view past ``pre_trigger`` of the threshold, the engine
starts the summary in an asyncio task and returns at once; at the threshold
it swaps the finished checkpoint in instead of waiting for a new one
(`context_engine.background` holds the engine's side). This module is the
configuration; the wrapper runs its summary like the summary itself whenever
the pipeline reaches it (no precomputed checkpoint was valid).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from context_engine._validate import share
from context_engine.errors import ConfigurationError
from context_engine.messages import Message
from context_engine.strategies.base import Budget, ForceCompactionStrategy, StrategyResult

__all__ = ["BackgroundSummary"]


def _force_capable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, ForceCompactionStrategy):
        raise ConfigurationError(
            f"BackgroundSummary(summary={value!r}): summary must be a checkpoint strategy "
            "with force_apply (a ForceCompactionStrategy such as FullSummary); the engine "
            "writes the checkpoint ahead of time, before the view is above the threshold"
        )
    if isinstance(value, BackgroundSummary):
        raise ConfigurationError(
            "BackgroundSummary(summary=BackgroundSummary(...)): wrap the summary strategy once"
        )


@attrs.frozen(kw_only=True)
class BackgroundSummary:
    """Writes ``summary``'s next checkpoint in the background and swaps it in at the threshold.

    Put it where the summary would go (``BackgroundSummary(summary=FullSummary(...))``);
    it takes the summary's ``name``, so ``commit_strategies`` and events read
    as before. What the engine does with it (docs/strategies/background_summary.md):

    * After a `project` whose view is at or above ``pre_trigger`` x the
      threshold (and fits), the engine starts ``summary.force_apply`` on the
      transcript in an asyncio task and returns; the breaker, the per-request
      cap and a stalled pipeline keep it from starting, as they keep the
      summary from running. Blocking calls (``project_sync``) start none.
    * At the threshold, before any other strategy, the finished checkpoint
      goes in: the view it made plus the messages appended since, when the
      transcript still starts with the messages it was written from and grew
      by at most ``max_growth_share`` x the threshold. A checkpoint still
      being written is waited for (never longer than writing one then would
      take). When the result is still above the threshold the pipeline goes
      on from it, and this strategy updates the checkpoint incrementally.
    * Otherwise (an edited or removed message, a commit, more growth) it is
      discarded, cancelled when still running, never swapped in. One that
      raised counts once on the breaker at the call that would have used it.

    Awaiting `ContextEngine.close` cancels a checkpoint still being written;
    `ContextEngine.reset` discards it.
    """

    summary: ForceCompactionStrategy = attrs.field(validator=_force_capable)
    """The checkpoint strategy written ahead of time (`FullSummary`, say)."""
    pre_trigger: float = attrs.field(
        default=0.8,
        validator=share(
            exclusive_minimum=True,
            exclusive_maximum=True,
            fix="0.8 starts the checkpoint when the view reaches 80 % of the threshold",
        ),
    )
    """Share of the threshold from which the next checkpoint is written in the background."""
    max_growth_share: float = attrs.field(
        default=0.5,
        validator=share(
            exclusive_minimum=True,
            fix="0.5 swaps a checkpoint in while the transcript grew by at most half the "
            "threshold since it was started",
        ),
    )
    """Most the transcript may grow (share of the threshold) after the checkpoint was
    started for it to be swapped in; past it the checkpoint is discarded."""

    @property
    def name(self) -> str:
        """The wrapped summary's name (events, ``commit_strategies``)."""
        return self.summary.name

    @property
    def uses_llm(self) -> bool:
        """Whether the wrapped summary calls a model (the breaker guards it)."""
        return self.summary.uses_llm

    def pre_trigger_tokens(self, threshold: int) -> int:
        """Tokens of the view from which the next checkpoint is written in the background."""
        return int(self.pre_trigger * threshold)

    def growth_limit(self, threshold: int) -> int:
        """Tokens the transcript may grow by before a precomputed checkpoint is stale."""
        return int(self.max_growth_share * threshold)

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Run the summary now: no precomputed checkpoint was valid for this call."""
        return await self.summary.apply(transcript, view, budget)

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """``compact`` and ``recover_overflow`` run the summary itself."""
        return await self.summary.force_apply(transcript, budget, instructions=instructions)
