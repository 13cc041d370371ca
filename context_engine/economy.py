"""Cost-aware clearing: old tool results go whenever that pays, not only to fit.

A provider's prompt cache makes a long prompt cheap to resend (cached tokens
cost about a tenth of new ones) but a rewrite expensive: everything after the
first changed message is written to the cache again. So a rewrite is worth
making when the tokens it saves on the calls still to come outweigh what it
adds to this one (`context_engine.cache_cost.rewrite_cost`, which also prices
the reasoning it drops). With ``cost_aware=True`` every `project` asks the
pipeline's `ToolResultMicrocompact` what clearing every result it may clear
would give, prices that against sending the view as planned, and sends the
cheaper one:

* below the threshold, the view as planned is the transcript, or the last
  rewritten view plus the new messages (`Session.extension`); the cleared
  view is view-only (nothing to commit: the caller's transcript keeps every
  result), and the engine keeps sending it plus what comes next while it fits;
* above the threshold, the view as planned is the pipeline's, which fits;
  clearing more of it in the same call costs no second cache break, only
  the saved tokens are no longer sent.

A rewrite above the threshold should also last: one that leaves room for
only a few calls breaks the cache again a few calls later, and again after
that, each time writing the whole view anew. A cache break costs about
``(write - read) / read`` calls of reading the view (`payback_calls`: 11.5
at Anthropic's prices, 9 at OpenAI's), so with ``cost_aware=True`` a rewrite
made by the deterministic strategies must leave room for that many calls of
the session's growth (`escalate`); when it does not, the LLM strategies (the
summary) run on its view against that lower target, so one checkpoint
replaces a run of small rewrites.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import attrs

from context_engine.cache_cost import rewrite_cost
from context_engine.call import Call
from context_engine.events import RewriteStep
from context_engine.messages import Message
from context_engine.pipeline import Outcome, run_pipeline
from context_engine.pricing import CachePricing
from context_engine.rewrite import extended, unbind_reasoning
from context_engine.session import Session
from context_engine.strategies.base import Budget
from context_engine.strategies.microcompact import ToolResultMicrocompact

__all__ = ["economize", "escalate", "payback_calls"]

MAX_HEADROOM_SHARE = 0.5
"""The most of the threshold `escalate` asks a rewrite to leave free."""


def economize(call: Call, session: Session, planned: Outcome | None = None) -> Outcome:
    """``planned`` with every clearable tool result cleared when that pays, else ``planned``.

    ``planned`` is the pipeline's outcome of this call; None for a `project`
    that fits, whose plan is the last rewritten view plus the new messages
    (when the caller appended to what it projected last) or the transcript.
    """
    pricing, budget = call.settings.pricing, call.budget()
    base = planned
    if base is None:
        base = extended(call, session, budget) or call.unchanged()
    cleared = _cleared(call, base.view, budget.with_tokens(base.tokens))
    if pricing is None or cleared is None:
        return base
    # Only this call's own rewrites join the clearing; a reused view's came before.
    whole = base.then(cleared) if base.changed and not base.reused else cleared
    _, cached = session.prefix(call.meter, base.view)
    _, reused = session.prefix(call.meter, cleared.view)
    dropped = unbind_reasoning(call, whole).reasoning_dropped
    already = unbind_reasoning(call, base).reasoning_dropped if not base.reused else 0
    cost = rewrite_cost(
        pricing,
        cached_before=cached,
        reused_tokens=reused,
        saved_tokens=base.tokens - cleared.tokens,
        reasoning_tokens_dropped=max(0, dropped - already),
    )
    return whole if cost.worth_it else base


def _clearing(call: Call) -> ToolResultMicrocompact | None:
    """The pipeline's first tool-result microcompact, which says what may be cleared."""
    return next(
        (s for s in call.settings.strategies if isinstance(s, ToolResultMicrocompact)), None
    )


def _cleared(call: Call, view: tuple[Message, ...], budget: Budget) -> Outcome | None:
    """``view`` with every result the microcompact may clear cleared, or None if none may be."""
    strategy = _clearing(call)
    if strategy is None:
        return None
    started = time.perf_counter()
    # A threshold of 0 makes the strategy clear every result it may: the cache breaks
    # at the first cleared result however many follow it.
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


def payback_calls(pricing: CachePricing) -> float:
    """Calls of reading a prompt from the cache that cost as much as writing it again."""
    read = pricing.read_multiplier
    premium = max(0.0, pricing.write_multiplier - read)
    return premium / read if read > 0 else math.inf


def growth_per_call(call: Call) -> int:
    """Tokens the session adds per call: its history after the lead, per assistant message."""
    transcript = call.transcript
    lead = 0
    while lead < len(transcript) and transcript[lead].role in ("system", "developer"):
        lead += 1
    rounds = sum(1 for message in transcript[lead:] if message.role == "assistant")
    if not rounds:
        return 0
    count = call.meter.counter.count_message
    return sum(count(message) for message in transcript[lead:]) // rounds


async def escalate(
    call: Call, planned: Outcome, on_strategy: Callable[[str], Any] | None
) -> Outcome:
    """``planned``, or its view summarized when it leaves too little room to last.

    Only for a `project` above the threshold whose view the deterministic
    strategies made fit, when the LLM strategies may run: they run on it
    against ``threshold - payback_calls x growth_per_call`` (at least half the
    threshold), and their view replaces it when one applied.
    """
    pricing = call.settings.pricing
    if pricing is None or call.llm_blocked is not None or planned.llm_applied:
        return planned
    if planned.tokens > call.threshold or not planned.changed or planned.reused:
        return planned
    headroom = min(
        payback_calls(pricing) * growth_per_call(call), MAX_HEADROOM_SHARE * call.threshold
    )
    target = call.threshold - int(headroom)
    if planned.tokens <= target:
        return planned
    budget = attrs.evolve(call.budget(), tokens=planned.tokens, threshold=target)
    llm = [s for s in call.settings.strategies if s.uses_llm]
    summarized = await run_pipeline(call, llm, planned.view, budget, on_strategy)
    if not summarized.changed or summarized.tokens >= planned.tokens:
        return planned
    return planned.then(summarized)
