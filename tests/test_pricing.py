"""The cache pricing table: dated, overridable, and in step with the installed SDK types."""

from __future__ import annotations

import datetime as dt
import typing

import attrs
import pytest

from context_engine.errors import ConfigurationError
from context_engine.pricing import CACHE_PRICING, PRICING_VERSION, CachePricing, pricing_for


def test_the_table_is_dated_and_covers_both_families() -> None:
    assert dt.date.fromisoformat(PRICING_VERSION)
    assert set(CACHE_PRICING) == {"anthropic", "openai"}
    assert all(p.checked == PRICING_VERSION for p in CACHE_PRICING.values())


@pytest.mark.parametrize(
    ("family", "model", "minimum"),
    [
        ("anthropic", "claude-sonnet-4-5-20250929", 1024),
        ("anthropic", "claude-opus-4-5-20251101", 4096),
        ("anthropic", "claude-3-haiku-20240307", 2048),
        ("anthropic", None, 1024),
        ("openai", "gpt-5", 1024),
    ],
    ids=["sonnet", "opus-4-5", "haiku-3", "unknown-model", "openai"],
)
def test_the_minimum_cacheable_length_depends_on_the_model(
    family: str, model: str | None, minimum: int
) -> None:
    assert CACHE_PRICING[family].minimum_for(model) == minimum


def test_an_entry_is_overridden_with_evolve_and_the_table_stays() -> None:
    """A caller's negotiated price replaces the published one without touching the table."""
    mine = attrs.evolve(pricing_for("openai"), input_per_mtok=1.0, read_multiplier=0.25)
    assert pricing_for(mine) is mine
    assert mine.dollars(1_000_000) == 1.0
    assert CACHE_PRICING["openai"].read_multiplier == 0.1


def test_an_unknown_family_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="anthropic, openai"):
        pricing_for("gemini")


def test_a_negative_multiplier_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="read_multiplier"):
        CachePricing(family="mine", min_cacheable_tokens=0, read_multiplier=-0.1)


def literal_values(hint: object) -> set[str]:
    """The strings of a ``Literal`` (inside ``Optional``/``Required`` wrappers)."""
    found: set[str] = set()
    for arg in typing.get_args(hint) or ():
        if isinstance(arg, str):
            found.add(arg)
        else:
            found |= literal_values(arg)
    return found


def test_anthropic_ttls_match_the_sdk_cache_control_type() -> None:
    """The TTLs are those ``CacheControlEphemeralParam.ttl`` accepts."""
    types = pytest.importorskip("anthropic.types")
    hints = typing.get_type_hints(types.CacheControlEphemeralParam)
    assert literal_values(hints["ttl"]) == set(CACHE_PRICING["anthropic"].ttls)
    usage = types.Usage.model_fields
    assert {"cache_read_input_tokens", "cache_creation_input_tokens"} <= set(usage)


def test_openai_ttls_match_the_sdk_prompt_cache_options_type() -> None:
    """The TTLs are those ``PromptCacheOptions.ttl`` accepts; usage reports cache writes."""
    params = pytest.importorskip("openai.types.responses.response_create_params")
    hints = typing.get_type_hints(params.PromptCacheOptions)
    assert literal_values(hints["ttl"]) == set(CACHE_PRICING["openai"].ttls)
    usage = pytest.importorskip("openai.types.responses.response_usage")
    assert "cache_write_tokens" in usage.InputTokensDetails.model_fields
