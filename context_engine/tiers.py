"""The proactive tier: one summary below the threshold, from a strategy's own trigger.

Seed 001 compacts in tiers: from ``micro_trigger`` of the window a micro
summary folds the oldest rounds, from ``full_trigger`` the full summary takes
the whole prefix, both before the prompt is too long. The engine's threshold
(window - reserve) still decides when the view must be made to fit; the
triggers only add calls where the LLM strategies run early, alone, against a
budget whose threshold is the lowest trigger, and the first that applies ends
the run (one summary per call). An LLM strategy the call may not run (open
breaker, per-request cap, stall) leaves the view as it is: it fits, so there
is nothing to report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from context_engine.call import Call
from context_engine.pipeline import Outcome, run_pipeline
from context_engine.strategies.base import Budget, Strategy

__all__ = ["run_tier"]


async def run_tier(
    call: Call,
    strategies: Sequence[Strategy],
    budget: Budget,
    trigger: int,
    on_strategy: Callable[[str], Any] | None,
) -> Outcome:
    """The LLM strategies in order against ``trigger``, until one applies."""
    outcome = call.unchanged()
    if call.llm_blocked is not None:
        return outcome
    target = attrs.evolve(budget, threshold=trigger)
    for strategy in strategies:
        if not strategy.uses_llm:
            continue
        step = await run_pipeline(call, [strategy], call.transcript, target, on_strategy)
        outcome = outcome.then(step)
        if step.changed:
            break
    return outcome
