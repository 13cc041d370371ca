"""Cost-aware clearing: old tool results go whenever that pays, not only to fit.

A provider's prompt cache makes a long prompt cheap to resend (cached tokens
cost about a tenth of new ones) but a rewrite expensive: everything after the
first changed message is written to the cache again. So a rewrite is worth
making when the tokens it saves on the calls still to come outweigh what it
adds to this one (`context_engine.cache_cost.rewrite_cost`, which also prices
the reasoning it drops). With ``cost_aware=True`` every `project` asks the
pipeline's `ToolResultMicrocompact` what clearing every result it may clear
would give, and the pipeline's `LightTrim` what trimming every old message it
may trim would give on top of that (old assistant prose and long tool-call
argument strings, ``LightTrim.assistant_threshold``), prices each against
sending the view as planned, and sends the cheapest:

* below the threshold, the view as planned is the transcript, or the last
  rewritten view plus the new messages (`Session.extension`); the cleared
  view is view-only (nothing to commit: the caller's transcript keeps every
  result), and the engine keeps sending it plus what comes next while it fits;
* above the threshold, the view as planned is the pipeline's, which fits;
  clearing more of it in the same call costs no second cache break, only
  the saved tokens are no longer sent.

What the cache serves of each view is the provider's rule
(`context_engine._cache_marks.served_tokens`): on a prefix cache (OpenAI) all
a view shares with the last one; on Anthropic's only up to the last
request's breakpoint before the first change, so a clearing behind the last
breakpoint is priced as writing everything after the one before it again.
With ``cache_breakpoints=True`` the engine keeps a breakpoint on the clearing
frontier, so a clearing re-writes only what follows the cleared region.
The engine's usage report (`ContextUsage.cache`) and the cost on its rewrite
events (`RewriteEvent.cost`) are priced by the same function.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import attrs

from context_engine._cache_marks import served_tokens
from context_engine.cache_cost import rewrite_cost
from context_engine.call import Call
from context_engine.events import RewriteStep
from context_engine.messages import Message
from context_engine.pipeline import Outcome
from context_engine.rewrite import extended, unbind_reasoning
from context_engine.session import Session
from context_engine.strategies.base import Budget
from context_engine.strategies.light_trim import LightTrim
from context_engine.strategies.microcompact import ToolResultMicrocompact

__all__ = ["economize"]


def economize(call: Call, session: Session, planned: Outcome | None = None) -> Outcome:
    """``planned`` with old tool results cleared (and old messages trimmed) when that pays.

    The cheaper of the two, priced by `rewrite_cost`; ``planned`` when neither pays.

    ``planned`` is the pipeline's outcome of this call; None for a `project`
    that fits, whose plan is the last rewritten view plus the new messages
    (when the caller appended to what it projected last) or the transcript.
    """
    pricing, budget = call.settings.pricing, call.budget()
    base = planned
    if base is None:
        base = extended(call, session, budget) or call.unchanged()
    if pricing is None:
        return base
    best: tuple[float, Outcome] | None = None
    cached = served_tokens(call.settings, call.meter, session, base.view)
    for shorter in _shortened(call, base.view, budget.with_tokens(base.tokens)):
        # Only this call's own rewrites join the clearing; a reused view's came before.
        whole = base.then(shorter) if base.changed and not base.reused else shorter
        reused = served_tokens(call.settings, call.meter, session, shorter.view)
        dropped = unbind_reasoning(call, whole).reasoning_dropped
        already = unbind_reasoning(call, base).reasoning_dropped if not base.reused else 0
        cost = rewrite_cost(
            pricing,
            cached_before=cached,
            reused_tokens=reused,
            saved_tokens=base.tokens - shorter.tokens,
            reasoning_tokens_dropped=max(0, dropped - already),
        )
        if cost.worth_it and (best is None or cost.net > best[0]):
            best = (cost.net, whole)
    return base if best is None else best[1]


def _shortened(call: Call, view: tuple[Message, ...], budget: Budget) -> Iterator[Outcome]:
    """``view`` with every old tool result cleared, then with old messages trimmed too.

    Each is made only when asked for, and only when it differs from what came before.
    """
    cleared = _everything(call, _clearing(call), view, budget)
    if cleared is not None:
        yield cleared
    start = view if cleared is None else cleared.view
    tokens = budget.tokens if cleared is None else cleared.tokens
    trimmed = _everything(call, _trimming(call), start, budget.with_tokens(tokens))
    if trimmed is not None:
        yield trimmed if cleared is None else cleared.then(trimmed)


def _clearing(call: Call) -> ToolResultMicrocompact | None:
    """The pipeline's first tool-result microcompact, which says what may be cleared."""
    return next(
        (s for s in call.settings.strategies if isinstance(s, ToolResultMicrocompact)), None
    )


def _trimming(call: Call) -> LightTrim | None:
    """The pipeline's first light trim, old assistant messages included, or None.

    Its ``assistant_threshold`` applies whether or not it trims them to fit:
    here the trimming is made only when it pays (None turns it off here too).
    """
    found = next((s for s in call.settings.strategies if isinstance(s, LightTrim)), None)
    return None if found is None else found.trimming_assistant()


def _everything(
    call: Call,
    strategy: ToolResultMicrocompact | LightTrim | None,
    view: tuple[Message, ...],
    budget: Budget,
) -> Outcome | None:
    """``view`` with everything ``strategy`` may shorten shortened, or None if nothing may be."""
    if strategy is None:
        return None
    started = time.perf_counter()
    # A threshold of 0 makes the strategy shorten everything it may: the cache breaks
    # at the first shortened message however many follow it.
    result = strategy.rewrite(view, attrs.evolve(budget, threshold=0))
    if not result.applied:
        return None
    messages = tuple(result.messages)
    after = budget.measure(messages)
    step = RewriteStep(
        name=strategy.name,
        applied=True,
        tokens_before=budget.tokens,
        tokens_after=after,
        duration=time.perf_counter() - started,
    )
    return Outcome(
        view=messages,
        tokens=after,
        steps=(step,),
        applied=(strategy.name,),
        removed=tuple(result.removed),
        views=(messages,),
    )
