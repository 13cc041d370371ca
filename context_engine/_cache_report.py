"""The cache facts a rewrite event carries: its cost under the pricing, the provider's diagnosis."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from context_engine.cache_cost import rewrite_cost
from context_engine.events import RewriteEvent
from context_engine.formats.diagnostics import newest_cache_miss

if TYPE_CHECKING:
    from context_engine.call import Call

__all__ = ["priced"]


def priced(event: RewriteEvent, call: Call, cached_before: int, served: int) -> RewriteEvent:
    """``event`` with its `RewriteCost` (under the engine's pricing) and the last cache miss.

    ``cached_before`` is what the provider's cache would serve of the call's
    input sent unrewritten, ``served`` what it serves of the view
    (`context_engine._cache_marks.cache_reads`: on a prefix cache the last
    view's size and the shared prefix; on a breakpoint cache only up to an
    entry a breakpoint reaches).
    """
    pricing = call.settings.pricing
    cost = None
    if pricing is not None and event.changed:
        cost = rewrite_cost(
            pricing,
            cached_before=cached_before,
            reused_tokens=served,
            saved_tokens=event.tokens_before - event.tokens_after,
            reasoning_tokens_dropped=event.reasoning_tokens_dropped,
        )
    miss = newest_cache_miss(call.transcript)
    if cost is None and miss is None:
        return event
    return attrs.evolve(event, cost=cost, cache_miss=miss)
