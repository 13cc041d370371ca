"""Prompt-cache economics as data: each provider family's caching rules and prices.

`CACHE_PRICING` is a dated, versioned table (`PRICING_VERSION`); callers
override any entry with `attrs.evolve` or build their own `CachePricing`.
Multipliers are relative to the model's base input price, so the table holds
for every model of a family; dollar figures need ``input_per_mtok``.

Where each fact comes from is stated beside it: rules visible in the SDK types
(``anthropic`` 2.14.0, ``openai`` 3.57.0: TTL values, breakpoint limits, usage
fields, cache-miss diagnostics) were read there; prices are the providers'
published ones on `PRICING_VERSION` and change without a new SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs

from context_engine._validate import non_negative_int, number_in
from context_engine.errors import ConfigurationError

__all__ = [
    "CACHE_PRICING",
    "PRICING_VERSION",
    "CachePricing",
    "pricing_for",
]

PRICING_VERSION: Final = "2026-11-25"
"""The date the table below was last checked against the providers."""


def _frozen_minimums(value: Mapping[str, int]) -> Mapping[str, int]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class CachePricing:
    """How one provider family caches prompts and what it charges for it.

    Attributes:
        family: ``anthropic``, ``openai`` or a name of the caller's.
        min_cacheable_tokens: A prefix shorter than this is never cached.
        model_minimums: Larger minimums of particular models, by model-name prefix.
        ttls: The cache lifetimes a request may ask for, the default first.
        read_multiplier: Price of a cached input token over the base input price.
        write_multiplier: Price of writing a token to the cache (default TTL)
            over the base input price; 1.0 where writes cost like plain input.
        long_write_multiplier: The same for the longest TTL.
        max_breakpoints: Explicit cache breakpoints one request may carry.
        automatic: The provider caches the longest known prefix without breakpoints.
        breakpoint_lookback_blocks: Where the cache is written only at breakpoints:
            how many content blocks back from one of its breakpoints a request
            looks for an entry an earlier request wrote (its breakpoint's own
            block included). After a rewrite only the prefix up to the earlier
            request's last breakpoint before the first change is read, and only
            when this request has a breakpoint that many blocks after it.
            None for a prefix cache (OpenAI's): the whole shared prefix is read.
        output_multiplier: Price of an output token over the base input price
            (what redoing dropped reasoning costs).
        input_per_mtok: Dollars per million base input tokens of the priced
            model, or None to report costs in input-token units only.
        model: The model ``input_per_mtok`` belongs to (also picks ``model_minimums``).
        horizon_calls: Calls a rewrite's saving is counted over (the caller's
            estimate of the session ahead, not a provider fact).
        checked: The date these figures were checked.
    """

    family: str
    min_cacheable_tokens: int = attrs.field(validator=non_negative_int())
    model_minimums: Mapping[str, int] = attrs.field(factory=dict, converter=_frozen_minimums)
    ttls: tuple[str, ...] = ()
    read_multiplier: float = attrs.field(validator=number_in())
    write_multiplier: float = attrs.field(default=1.0, validator=number_in())
    long_write_multiplier: float = attrs.field(default=1.0, validator=number_in())
    max_breakpoints: int | None = attrs.field(
        default=None, validator=non_negative_int(optional=True)
    )
    automatic: bool = False
    breakpoint_lookback_blocks: int | None = attrs.field(
        default=None, validator=non_negative_int(optional=True)
    )
    output_multiplier: float = attrs.field(default=5.0, validator=number_in())
    input_per_mtok: float | None = attrs.field(default=None, validator=number_in(optional=True))
    model: str | None = None
    horizon_calls: int = attrs.field(default=10, validator=non_negative_int())
    checked: str = PRICING_VERSION

    def minimum_for(self, model: str | None) -> int:
        """The minimum cacheable prefix of ``model`` (the family's when unknown)."""
        if model:
            for prefix, minimum in self.model_minimums.items():
                if model.startswith(prefix):
                    return minimum
        return self.min_cacheable_tokens

    def dollars(self, input_token_units: float) -> float | None:
        """``input_token_units`` (tokens at the base input price) in dollars, if priced."""
        if self.input_per_mtok is None:
            return None
        return input_token_units * self.input_per_mtok / 1_000_000


CACHE_PRICING: Final[Mapping[str, CachePricing]] = MappingProxyType(
    {
        # Rules in anthropic 2.14.0 types: CacheControlEphemeralParam.ttl is "5m" | "1h"
        # (5m default); Usage.cache_creation splits writes by TTL; Message.diagnostics
        # carries cache_miss_reason. Published: reads 0.1x, writes 1.25x (5m) / 2x (1h),
        # at most 4 breakpoints, minimum 1024 tokens (4096 for Opus 4.5 and Haiku 4.5,
        # 2048 for the Haiku 3 models); a hit is looked for at most about 20 blocks
        # back from a breakpoint (the prompt-caching guide). Price: Claude Sonnet 4.5,
        # $3 in / $15 out.
        "anthropic": CachePricing(
            family="anthropic",
            min_cacheable_tokens=1024,
            model_minimums={
                "claude-opus-4-5": 4096,
                "claude-haiku-4-5": 4096,
                "claude-3-5-haiku": 2048,
                "claude-3-haiku": 2048,
            },
            ttls=("5m", "1h"),
            read_multiplier=0.1,
            write_multiplier=1.25,
            long_write_multiplier=2.0,
            max_breakpoints=4,
            breakpoint_lookback_blocks=20,
            output_multiplier=5.0,
            input_per_mtok=3.0,
            model="claude-sonnet-4-5",
        ),
        # Rules in openai 3.57.0 types: PromptCacheOptions.ttl is "30m" | "12h" (30m
        # default), a request writes at most 4 explicit breakpoints (mode "implicit" adds
        # one of its own), usage has cache_write_tokens with ttl_30m / ttl_12h details,
        # Response.prompt_cache_diagnostics reports a cache_miss with its reason.
        # Published: automatic caching from 1024 tokens; cached input 0.1x on the GPT-5
        # family; writes billed like plain input. Price: gpt-5, $1.25 in / $10 out.
        "openai": CachePricing(
            family="openai",
            min_cacheable_tokens=1024,
            ttls=("30m", "12h"),
            read_multiplier=0.1,
            write_multiplier=1.0,
            long_write_multiplier=1.0,
            max_breakpoints=4,
            automatic=True,
            output_multiplier=8.0,
            input_per_mtok=1.25,
            model="gpt-5",
        ),
    }
)
"""The built-in table, by family; see `PRICING_VERSION`."""


def pricing_for(family: object) -> CachePricing:
    """The table's entry for ``family``, or ``family`` itself when it is a `CachePricing`.

    Raises:
        ConfigurationError: ``family`` names no entry; the message lists them.
    """
    if isinstance(family, CachePricing):
        return family
    try:
        return CACHE_PRICING[family]  # type: ignore[index]
    except (KeyError, TypeError):
        known = ", ".join(sorted(CACHE_PRICING))
        raise ConfigurationError(
            f"no cache pricing for {family!r}; use one of {known} or pass a CachePricing"
        ) from None
