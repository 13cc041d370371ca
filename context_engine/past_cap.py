"""What a `project` runs once its request has had all its LLM rewrites.

Past ``max_llm_rewrites_per_request`` the summary strategy is skipped (its
step records the cap) and, right after it, `CappedDigest` writes the same
checkpoint with the `ExtractiveSummarizer`: no model, no cost, and the file
lists and failed commands a checkpoint carries are kept, where a bare
truncation would drop them. Its view is not committed by default (the name
``summary_digest`` is not in ``commit_strategies``): the caller's transcript
keeps the originals, so the next request's model summary is written from them.
When the digest's checkpoint leaves the protected tail too little room for
the view to fit, the call runs the pipeline without it (a bare truncation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs

from context_engine.messages import Message
from context_engine.strategies.base import Budget, Strategy, StrategyResult
from context_engine.strategies.summary import FullSummary
from context_engine.summarize.extractive import ExtractiveSummarizer

__all__ = ["DIGEST_NAME", "CappedDigest", "past_cap_strategies"]

DIGEST_NAME = "summary_digest"
"""The step writing the capped summary's checkpoint without a model."""

# The extractive summarizer has no window: one request holds the whole range.
_DIGEST_WINDOW = 1_000_000


@attrs.frozen
class CappedDigest:
    """A `FullSummary`'s checkpoint written by the `ExtractiveSummarizer` (no model)."""

    name: ClassVar[str] = DIGEST_NAME
    uses_llm: ClassVar[bool] = False

    writer: FullSummary

    @classmethod
    def of(cls, summary: FullSummary) -> CappedDigest:
        """The digest twin of ``summary`` (same cut, checkpoint size and hooks)."""
        return cls(
            attrs.evolve(
                summary, summarizer=ExtractiveSummarizer(), summarizer_window=_DIGEST_WINDOW
            )
        )

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """The writer's checkpoint of ``view``, without a model."""
        return await self.writer.apply(transcript, view, budget)


def past_cap_strategies(strategies: Sequence[Strategy]) -> list[Strategy]:
    """``strategies`` with a `CappedDigest` right after each `FullSummary`."""
    out: list[Strategy] = []
    for strategy in strategies:
        out.append(strategy)
        if isinstance(strategy, FullSummary):
            out.append(CappedDigest.of(strategy))
    return out
