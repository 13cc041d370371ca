"""What a call's prompt and a rewrite cost under a provider's prompt cache.

Pure arithmetic on token counts and a `CachePricing`; the engine puts the
results on `ContextUsage.cache` and `RewriteEvent.cost`. Costs are in
*input-token units* (one token at the model's base input price) so they hold
for any model of the family, with dollars beside them when the pricing has a
price.
"""

from __future__ import annotations

import attrs

from context_engine.pricing import CachePricing

__all__ = ["CacheEstimate", "RewriteCost", "estimate_call", "rewrite_cost"]


@attrs.frozen(kw_only=True)
class CacheEstimate:
    """One call's prompt split into what the cache should serve and what it must take.

    Attributes:
        cached_tokens: Prompt tokens expected to be read from the cache (the
            prefix the provider's cache serves after the previous call, when long
            enough to be cached).
        uncached_tokens: The rest, billed as cache writes (or plain input).
        cost: The prompt's cost in input-token units.
        dollars: ``cost`` in dollars, or None without a price.
    """

    cached_tokens: int
    uncached_tokens: int
    cost: float
    dollars: float | None = None

    @property
    def hit_share(self) -> float:
        """Cached tokens as a share of the prompt (0 for an empty prompt)."""
        total = self.cached_tokens + self.uncached_tokens
        return self.cached_tokens / total if total else 0.0


@attrs.frozen(kw_only=True)
class RewriteCost:
    """Whether a rewrite pays: the cache it breaks and reasoning it drops against what it saves.

    Attributes:
        invalidated_tokens: Tokens the cache held that the rewritten prompt no
            longer starts with (what is still sent of them is written again
            instead of read).
        saved_tokens: Tokens the rewrite removed from the prompt (dropped reasoning
            included: later calls no longer send it, though the model redoes it).
        reasoning_tokens_dropped: Reasoning the model has to redo.
        remaining_calls: Calls the savings are counted over.
        cost: What the rewrite adds to this call against sending the prompt
            unrewritten, ``(invalidated - saved) * write - invalidated * read``,
            plus ``reasoning * output``; input-token units, negative when the
            rewrite makes even this call cheaper.
        savings: ``saved * read * remaining_calls``, input-token units.
        dollars: ``savings - cost`` in dollars, or None without a price.
    """

    invalidated_tokens: int
    saved_tokens: int
    reasoning_tokens_dropped: int
    remaining_calls: int
    cost: float
    savings: float
    dollars: float | None = None

    @property
    def net(self) -> float:
        """``savings - cost``: positive when the rewrite pays for itself."""
        return self.savings - self.cost

    @property
    def worth_it(self) -> bool:
        """Whether the rewrite saves more than it costs."""
        return self.net > 0


def estimate_call(
    pricing: CachePricing, tokens: int, reused_tokens: int, model: str | None = None
) -> CacheEstimate:
    """The cache split and cost of a ``tokens`` prompt the cache serves ``reused_tokens`` of.

    A shared prefix below the model's minimum cacheable length (``model``, or
    the pricing's own model) is not cached.
    The uncached part is priced as a cache write (the agent's next call reuses
    it); on a provider that bills writes like plain input that is the input price.
    """
    reused = min(max(0, reused_tokens), max(0, tokens))
    cached = reused if reused >= pricing.minimum_for(model or pricing.model) else 0
    uncached = max(0, tokens) - cached
    cost = cached * pricing.read_multiplier + uncached * pricing.write_multiplier
    return CacheEstimate(
        cached_tokens=cached, uncached_tokens=uncached, cost=cost, dollars=pricing.dollars(cost)
    )


def rewrite_cost(
    pricing: CachePricing,
    *,
    cached_before: int,
    reused_tokens: int,
    saved_tokens: int,
    reasoning_tokens_dropped: int = 0,
    remaining_calls: int | None = None,
) -> RewriteCost:
    """What a rewrite costs now against what it saves on the calls still to come.

    Without the rewrite this call would read the ``invalidated`` tokens from
    the cache; with it, the part of them still sent is written again, and
    the ``saved`` tokens are not sent at all (a saved token beyond the
    invalidated part would have been written as new input). So the call
    costs ``(invalidated - saved) * write - invalidated * read`` more, and
    each later call reads ``saved`` tokens less.

    Args:
        pricing: The provider family's rules and prices.
        cached_before: Tokens the cache would serve of this prompt without the
            rewrite (on a prefix cache: the previous call's prompt).
        reused_tokens: Tokens the cache serves of the rewritten prompt (the engine
            prices both by the provider's rule, `context_engine._cache_marks`).
        saved_tokens: Tokens the rewrite removed.
        reasoning_tokens_dropped: Reasoning dropped because its prefix changed.
        remaining_calls: Calls left to profit from the saving; None uses the
            pricing's ``horizon_calls``.
    """
    calls = pricing.horizon_calls if remaining_calls is None else max(0, remaining_calls)
    invalidated = max(0, cached_before - max(0, reused_tokens))
    saved = max(0, saved_tokens)
    now = (invalidated - saved) * pricing.write_multiplier - invalidated * pricing.read_multiplier
    cost = now + max(0, reasoning_tokens_dropped) * pricing.output_multiplier
    savings = saved * pricing.read_multiplier * calls
    return RewriteCost(
        invalidated_tokens=invalidated,
        saved_tokens=saved,
        reasoning_tokens_dropped=max(0, reasoning_tokens_dropped),
        remaining_calls=calls,
        cost=cost,
        savings=savings,
        dollars=pricing.dollars(savings - cost),
    )
