"""``--pricing`` and ``--input-price``: the provider cache prices a replay is costed under."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping

import attrs

from context_engine.cli._common import CliError
from context_engine.pricing import CACHE_PRICING, PRICING_VERSION, CachePricing

__all__ = ["add_pricing_options", "pricing_from_args"]

# Model names by the prefix that tells their provider family.
_MODEL_FAMILIES = (
    ("claude", "anthropic"),
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("codex", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
)
# The provider a transcript format comes from: its family is the default pricing.
_FORMAT_FAMILIES: Mapping[str, str] = {
    "anthropic": "anthropic",
    "claude-code": "anthropic",
    "openai": "openai",
    "codex": "openai",
}


def _dollars_per_mtok(text: str) -> float:
    try:
        value = float(text.replace(",", "").removeprefix("$"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected dollars per million tokens, got {text!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive price, got {text!r}")
    return value


def add_pricing_options(parser: argparse.ArgumentParser) -> None:
    """``--pricing`` and ``--input-price``."""
    families = "|".join(CACHE_PRICING)
    parser.add_argument(
        "--pricing",
        metavar="SPEC",
        help=f"price every call under a provider's prompt cache: {families} or a model name "
        "(claude-..., gpt-..., o3...); default: the transcript's provider (anthropic for "
        f"Anthropic and Claude Code files, openai for OpenAI and Codex ones); prices of "
        f"{PRICING_VERSION}",
    )
    parser.add_argument(
        "--input-price",
        type=_dollars_per_mtok,
        metavar="USD",
        help="dollars per million input tokens of the priced model (default: the table's "
        "price for its reference model)",
    )


def _family_of(spec: str) -> str:
    if spec in CACHE_PRICING:
        return spec
    lowered = spec.lower()
    for prefix, family in _MODEL_FAMILIES:
        if lowered.startswith(prefix) and family in CACHE_PRICING:
            return family
    known = ", ".join(CACHE_PRICING)
    raise CliError(
        f"--pricing {spec}: not a provider family ({known}) nor a model name starting with "
        f"{', '.join(prefix for prefix, _ in _MODEL_FAMILIES)}"
    )


def pricing_from_args(
    spec: str | None, input_price: float | None, transcript_format: str
) -> tuple[CachePricing, str | None]:
    """The pricing ``--pricing`` and ``--input-price`` name, and a warning when it has no price.

    A model name takes its family's caching rules and that model's minimum
    cacheable length; the table's price belongs to the family's reference
    model, so another model is priced only with ``--input-price`` (without
    it, costs are in input-token units).

    Raises:
        CliError: ``spec`` is neither a family nor a model name of a known family.
    """
    chosen = spec or _FORMAT_FAMILIES.get(transcript_format, "anthropic")
    family = _family_of(chosen)
    pricing = CACHE_PRICING[family]
    if chosen != family:
        priced = pricing.model is not None and chosen.startswith(pricing.model)
        pricing = attrs.evolve(
            pricing, model=chosen, input_per_mtok=pricing.input_per_mtok if priced else None
        )
    if input_price is not None:
        return attrs.evolve(pricing, input_per_mtok=input_price), None
    if pricing.input_per_mtok is None:
        return pricing, (
            f"--pricing {chosen}: the pricing table has no price for this model (only for "
            f"{CACHE_PRICING[family].model}); costs are shown in input-token units. Give "
            "--input-price USD (dollars per million input tokens) to see dollars"
        )
    return pricing, None
