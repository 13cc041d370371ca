"""Which strategies one call runs, and keeping what they removed before the view goes out.

`project` runs the pipeline (or reuses the last view plus what was appended,
or swaps in the checkpoint written in the background);
`compact` and `recover_overflow` run the force-capable strategies first, then
the rest of the pipeline when the view still does not fit. `keep` writes the
originals a rewrite removed to the archive, or falls back to view-only
rewrites when the store fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from context_engine._originals import keep_within
from context_engine.background import swap_in
from context_engine.call import Call
from context_engine.formats.breakpoints import keep_breakpoints
from context_engine.past_cap import past_cap_strategies
from context_engine.pipeline import Outcome, run_forced, run_pipeline, run_unarchived
from context_engine.reasoning import drop_unbound_reasoning
from context_engine.recovery import recovery_strategies
from context_engine.session import Session
from context_engine.strategies.base import Budget, Strategy
from context_engine.tiers import run_tier

__all__ = ["extended", "keep", "rewrite", "settle", "unbind_reasoning"]

logger = logging.getLogger("context_engine.engine")


async def rewrite(
    call: Call,
    session: Session,
    on_strategy: Callable[[str], Any] | None,
    instructions: str | None,
) -> Outcome:
    """Run the strategies ``call`` needs; the view fits whenever the floor does."""
    strategies, budget = call.settings.strategies, call.budget()
    if call.operation == "project":
        if call.tier_due:  # below the threshold, above a proactive trigger: one early summary
            assert call.settings.proactive_at is not None
            return await run_tier(call, strategies, budget, call.settings.proactive_at, on_strategy)
        reused = extended(call, session, budget)
        if reused is not None and reused.tokens <= call.threshold:
            return reused
        swapped = await swap_in(call, session.background, budget)  # written in the background
        if swapped is not None:
            return await _after_swap(call, swapped, strategies, budget, on_strategy)
        if call.capped:  # the request had its LLM rewrites: the checkpoint is extracted
            digested = await run_pipeline(
                call, past_cap_strategies(strategies), call.transcript, budget, on_strategy
            )
            if digested.tokens <= call.threshold:
                return digested
            # The digest's checkpoint left the protected tail no room: the plain cut fits.
        return await run_pipeline(call, strategies, call.transcript, budget, on_strategy)
    forced = await run_forced(call, strategies, budget, on_strategy, instructions)
    if forced.tokens <= call.threshold or (
        call.operation == "compact" and forced.forced_failed is None
    ):
        return forced  # a /compact that wrote its checkpoint (or had nothing to do)
    # Finish the job with the strategies that did not run yet, so the view fits.
    ran = {step.name for step in forced.steps}
    rest = [s for s in strategies if not s.uses_llm or s.name not in ran]
    if call.operation == "recover_overflow":
        # Its view is committed: what a truncation drops is folded into the checkpoint.
        rest = recovery_strategies(rest, strategies, summary_failed=forced.llm_failed)
    more = await run_pipeline(
        call, rest, forced.view, budget.with_tokens(forced.tokens), on_strategy
    )
    return forced.then(more)


async def _after_swap(
    call: Call,
    swapped: Outcome,
    strategies: Sequence[Strategy],
    budget: Budget,
    on_strategy: Callable[[str], Any] | None,
) -> Outcome:
    """The pipeline from the swapped view while it is above the threshold.

    Its summary step then updates the swapped checkpoint incrementally. After
    a precompute that failed, the LLM strategies sit this call out: the
    failure is this call's one summary attempt.
    """
    if swapped.tokens <= call.threshold:
        return swapped
    if swapped.llm_failed:
        call = attrs.evolve(call, llm_blocked="")
    more = await run_pipeline(
        call, strategies, swapped.view, budget.with_tokens(swapped.tokens), on_strategy
    )
    return swapped.then(more)


def extended(call: Call, session: Session, budget: Budget) -> Outcome | None:
    """The last projected view plus the new messages, measured (fitting or not), or None."""
    view = session.extension(call.transcript)
    if view is None:
        return None
    tokens = budget.measure(view)
    last = session.last
    assert last is not None
    assert last.outcome is not None
    return attrs.evolve(last.outcome, view=view, tokens=tokens, steps=(), removed=(), reused=True)


async def keep(call: Call, outcome: Outcome) -> Outcome:
    """Archive what ``outcome`` removed before any view of it leaves the engine.

    When the store fails or is too slow, the call still gets a view that
    fits: view-only rewrites without archiving (`run_unarchived`), the step
    says why, and nothing is committed.
    """
    settings = call.settings
    if settings.archive is None or settings.session_id is None:
        return outcome
    # A message the codec refuses (metadata that is not JSON: `ArchiveCodecError`) fails
    # every archiving strategy; without archiving they can still make the view fit.
    refused = outcome.codec_refused
    if refused is not None and outcome.tokens > call.threshold:
        return await run_unarchived(call, settings.strategies, outcome, refused)
    if not outcome.removed:
        return outcome
    problem = await keep_within(
        settings.archive, settings.session_id, outcome.removed, settings.archive_timeout
    )
    if problem is None:
        return outcome
    logger.warning(
        "session=<%s> | archive write failed; view-only rewrites without archiving: %s",
        settings.session_id,
        problem,
    )
    return await run_unarchived(call, settings.strategies, outcome, f"ArchiveError: {problem}")


def unbind_reasoning(call: Call, outcome: Outcome) -> Outcome:
    """Drop the reasoning a rewrite cut off from its prefix (the ``"drop"`` policy).

    The views a caller may commit lose it too, so what is committed is what
    the provider was sent.
    """
    if call.settings.reasoning != "drop" or outcome.reused or not outcome.changed:
        return outcome
    counter = call.meter.counter
    view, dropped = drop_unbound_reasoning(call.transcript, outcome.view, counter)
    if not dropped:
        return outcome
    views = tuple(drop_unbound_reasoning(call.transcript, v, counter)[0] for v in outcome.views)
    return attrs.evolve(
        outcome,
        view=view,
        views=views,
        tokens=max(0, outcome.tokens - dropped),
        reasoning_dropped=dropped,
    )


def settle(call: Call, outcome: Outcome) -> Outcome:
    """The rewritten view as it may go out: unbound reasoning dropped, breakpoints kept."""
    outcome = unbind_reasoning(call, outcome)
    if outcome.reused or not outcome.changed:
        return outcome
    view, moved = keep_breakpoints(call.transcript, outcome.view)
    if not moved:
        return outcome
    views = tuple(keep_breakpoints(call.transcript, v)[0] for v in outcome.views)
    return attrs.evolve(outcome, view=view, views=views)
