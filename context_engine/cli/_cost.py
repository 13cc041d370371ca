"""What a replayed session's prompts cost under a provider's prompt cache, three ways.

Each call is priced for three contenders: the engine's view, the whole
history (no context management) and trim-last (the naive trimmer of
`_baselines`). A contender's cache holds the last prompt it had accepted; a
prompt reads from the cache the messages it shares with that one from the
start (the fixed overhead included) and pays a cache write for the rest
(`estimate_call`). A prompt that does not start with the whole previous one is
a *cache break*, recorded with where it came from.

A prompt above the window is **rejected**: a provider bills nothing for it
and the cache keeps the last accepted prompt. Whole history goes above the
window in long sessions; from that call on the session could not have gone
on without context management, and the report says from which call.

A provider's cache-miss diagnostic recorded on the call's assistant message
(`cache_miss_of`) is the provider's word on the original session. A reason
outside the messages (the model, system prompt, tools or request options
changed) would have cost every contender its cache, so it counts as a break
for each, with the cache read set to nothing. A reason about the messages
describes the recorded agent's own edits, which each contender's prompts
already show; it is reported on the call but prices nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_engine.cache_cost import estimate_call
from context_engine.messages import Message
from context_engine.pricing import CachePricing
from context_engine.tokens import TokenCounter

__all__ = [
    "CONTENDERS",
    "CallCosts",
    "ContenderCost",
    "CostLedger",
    "PromptCost",
    "ReplayCost",
    "miss_reason",
]

CONTENDERS = ("engine", "without", "trim_last")
"""The contenders every call is priced for, in report order."""

# Diagnostics about the recorded agent's own messages (each contender's prompts show its
# own), and answers that diagnose nothing: neither prices a call.
_ABOUT_MESSAGES = frozenset({"messages_changed", "input_changed", "context_compacted"})
_NO_DIAGNOSIS = frozenset({"unavailable", "previous_message_not_found"})


def miss_reason(diagnostic: Mapping[str, Any] | None) -> str | None:
    """The reason of a provider's cache-miss diagnostic (Anthropic ``type``, OpenAI ``reason``)."""
    if diagnostic is None:
        return None
    reason = diagnostic.get("reason") or diagnostic.get("type")
    return str(reason) if reason else None


def _breaks_every_cache(reason: str | None) -> bool:
    return reason is not None and reason not in _ABOUT_MESSAGES | _NO_DIAGNOSIS


@attrs.frozen(kw_only=True)
class PromptCost:
    """One contender's prompt on one call, priced.

    Attributes:
        tokens: Prompt tokens.
        cached_tokens: Of those, expected cache reads.
        cost: The prompt's cost in input-token units (0 when rejected).
        dollars: ``cost`` in dollars, or None without a price.
        rejected: Above the window: the provider refuses it and bills nothing.
        cache_break: Where the break came from when the prompt does not start with
            the contender's previous accepted prompt (a strategy, ``trim_last``,
            ``provider: REASON``), else None.
    """

    tokens: int
    cached_tokens: int = 0
    cost: float = 0.0
    dollars: float | None = None
    rejected: bool = False
    cache_break: str | None = None


@attrs.frozen(kw_only=True)
class CallCosts:
    """One call priced for every contender.

    Attributes:
        engine: With the engine.
        without: The whole history.
        trim_last: The naive trimmer.
        provider_miss: The reason of the provider's cache-miss diagnostic recorded
            on the call's assistant message, or None.
    """

    engine: PromptCost
    without: PromptCost
    trim_last: PromptCost
    provider_miss: str | None = None


@attrs.frozen(kw_only=True)
class ContenderCost:
    """One contender's sums over the calls of a replay.

    Attributes:
        calls: Calls billed (accepted).
        rejected: Calls above the window, billed nothing.
        first_rejected: The first of those, or None.
        tokens: Prompt tokens of the billed calls.
        cached_tokens: Of those, expected cache reads.
        hit_share: ``cached_tokens / tokens``.
        cost: Input-token units, all billed calls.
        dollars: ``cost`` in dollars, or None without a price.
        cache_breaks: Calls whose prompt broke the contender's cache.
        breaks_by_source: Those breaks by where they came from.
    """

    calls: int
    rejected: int
    first_rejected: int | None
    tokens: int
    cached_tokens: int
    hit_share: float
    cost: float
    dollars: float | None
    cache_breaks: int
    breaks_by_source: dict[str, int]


@attrs.frozen(kw_only=True)
class ReplayCost:
    """The replay's modelled prompt cost under one pricing, for every contender.

    Attributes:
        family: The pricing's provider family.
        model: The model priced, or None.
        input_per_mtok: Dollars per million base input tokens, or None.
        read_multiplier: Price of a cache read over the base input price.
        write_multiplier: Price of a cache write over the base input price.
        min_cacheable_tokens: The shortest prefix the provider caches for that model.
        checked: The date the pricing was checked.
        engine: With the engine.
        without: The whole history every call.
        trim_last: The naive trimmer.
    """

    family: str
    model: str | None
    input_per_mtok: float | None
    read_multiplier: float
    write_multiplier: float
    min_cacheable_tokens: int
    checked: str
    engine: ContenderCost
    without: ContenderCost
    trim_last: ContenderCost

    def contender(self, name: str) -> ContenderCost:
        """The sums of contender ``name`` (one of `CONTENDERS`)."""
        found: ContenderCost = getattr(self, name)
        return found


@attrs.define
class _Cache:
    """One contender's cache: its last accepted prompt and that prompt's running counts."""

    prompt: tuple[Message, ...] | None = None
    counts: list[int] = attrs.Factory(lambda: [0])  # prefix sums of message counts

    def shared(self, prompt: Sequence[Message]) -> int:
        """Leading messages ``prompt`` shares with the cached prompt."""
        previous = self.prompt or ()
        shared = 0
        for before, now in zip(previous, prompt, strict=False):
            if before is not now and before != now:
                break
            shared += 1
        return shared

    def accept(self, prompt: tuple[Message, ...], shared: int, counter: TokenCounter) -> None:
        """``prompt`` was billed: it is what the cache holds now."""
        counts = self.counts[: shared + 1]
        for message in prompt[shared:]:
            counts.append(counts[-1] + counter.count_message(message))
        self.prompt, self.counts = prompt, counts


@attrs.define
class CostLedger:
    """Prices each call for every contender, call by call, and sums them up.

    Args:
        pricing: The provider family's rules and prices.
        counter: The engine's counter (shared prefixes are counted with it).
        window: Above it a prompt is rejected.
        overhead: Tokens every call sends before the messages (always cached
            once a previous prompt was accepted).
    """

    pricing: CachePricing
    counter: TokenCounter
    window: int
    overhead: int
    _caches: dict[str, _Cache] = attrs.Factory(lambda: {name: _Cache() for name in CONTENDERS})
    _rows: list[tuple[int, CallCosts]] = attrs.Factory(list)

    def call(
        self,
        number: int,
        prompts: Mapping[str, tuple[tuple[Message, ...], int]],
        sources: Mapping[str, str],
        diagnostic: Mapping[str, Any] | None,
    ) -> CallCosts:
        """Price call ``number``: ``prompts`` gives each contender's (messages, tokens).

        ``sources`` names what changed each contender's prompt this call (the
        engine's strategies), should that break its cache.
        """
        reason = miss_reason(diagnostic)
        priced = {
            name: self._price(name, *prompts[name], sources.get(name, "prompt changed"), reason)
            for name in CONTENDERS
        }
        costs = CallCosts(
            engine=priced["engine"],
            without=priced["without"],
            trim_last=priced["trim_last"],
            provider_miss=reason,
        )
        self._rows.append((number, costs))
        return costs

    def _price(
        self,
        name: str,
        prompt: tuple[Message, ...],
        tokens: int,
        source: str,
        reason: str | None,
    ) -> PromptCost:
        if tokens > self.window:
            return PromptCost(tokens=tokens, rejected=True)
        cache = self._caches[name]
        shared = cache.shared(prompt)
        reused = 0
        broken: str | None = None
        if cache.prompt is not None:
            reused = cache.counts[shared] + self.overhead
            if shared < len(cache.prompt):
                broken = source
            if _breaks_every_cache(reason):
                reused, broken = 0, f"provider: {reason}"
        cache.accept(prompt, shared, self.counter)
        estimate = estimate_call(self.pricing, tokens, reused)
        return PromptCost(
            tokens=tokens,
            cached_tokens=estimate.cached_tokens,
            cost=estimate.cost,
            dollars=estimate.dollars,
            cache_break=broken,
        )

    def totals(self) -> ReplayCost:
        """The sums over every call priced so far."""
        pricing = self.pricing
        return ReplayCost(
            family=pricing.family,
            model=pricing.model,
            input_per_mtok=pricing.input_per_mtok,
            read_multiplier=pricing.read_multiplier,
            write_multiplier=pricing.write_multiplier,
            min_cacheable_tokens=pricing.minimum_for(pricing.model),
            checked=pricing.checked,
            engine=self._sum("engine"),
            without=self._sum("without"),
            trim_last=self._sum("trim_last"),
        )

    def _sum(self, name: str) -> ContenderCost:
        rows = [(number, getattr(costs, name)) for number, costs in self._rows]
        billed = [cost for _, cost in rows if not cost.rejected]
        rejected = [number for number, cost in rows if cost.rejected]
        tokens = sum(c.tokens for c in billed)
        cached = sum(c.cached_tokens for c in billed)
        cost = sum(c.cost for c in billed)
        sources = Counter(c.cache_break for c in billed if c.cache_break is not None)
        return ContenderCost(
            calls=len(billed),
            rejected=len(rejected),
            first_rejected=rejected[0] if rejected else None,
            tokens=tokens,
            cached_tokens=cached,
            hit_share=cached / tokens if tokens else 0.0,
            cost=cost,
            dollars=self.pricing.dollars(cost),
            cache_breaks=sum(sources.values()),
            breaks_by_source=dict(sources.most_common()),
        )
