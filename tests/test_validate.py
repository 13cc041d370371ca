"""The shared setting checks, and every float setting refusing nan and infinities."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest

import context_engine
from context_engine import ConfigurationError, ContextEngine
from context_engine._validate import (
    check_int,
    check_number,
    is_int,
    non_negative_seconds,
    positive_int,
    share,
)
from context_engine.archive import MemoryArchive
from context_engine.archive.redis import RedisArchive
from context_engine.archive.shared import SharedSummarizerBreaker
from context_engine.archive.sqlite import SQLiteArchive
from context_engine.assembly import BudgetProfile, Item
from context_engine.breaker import CircuitBreaker
from context_engine.pricing import CACHE_PRICING
from context_engine.strategies import (
    BackgroundSummary,
    FullSummary,
    LightTrim,
    MicroSummary,
    ToolResultCap,
    ToolResultMicrocompact,
)
from context_engine.summarize import Rehydration
from context_engine.summarize.pinned import Pinned
from context_engine.summarize.retry import RetryPolicy
from context_engine.testing import RecordingSummarizer
from tests.extras import needs

NAN, INF = float("nan"), float("inf")


def _pricing(field: str, value: float) -> object:
    return attrs.evolve(CACHE_PRICING["anthropic"], **{field: value})


def _profile(share: str, value: float) -> object:
    return BudgetProfile(name="custom", **{share: value})


def _redis_archive(**options: Any) -> object:
    """A `RedisArchive`, or a skip where the redis extra is not installed."""
    pytest.importorskip("redis", reason=needs("redis"))
    return RedisArchive("redis://127.0.0.1:6390/0", **options)


def _openai_summarizer(**options: Any) -> object:
    """An `OpenAISummarizer`, or a skip where the openai extra is not installed."""
    openai = pytest.importorskip("openai", reason=needs("openai"))
    from context_engine.summarize.openai import OpenAISummarizer

    return OpenAISummarizer(openai.AsyncOpenAI(api_key="k"), "m", **options)


@attrs.frozen(kw_only=True)
class Settings:
    count: int = attrs.field(default=1, validator=positive_int(fix="use 1 for one"))
    ratio: float = attrs.field(default=0.5, validator=share(exclusive_maximum=True))
    wait: float | None = attrs.field(default=None, validator=non_negative_seconds(optional=True))


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, True), (-3, True), (True, False), (1.0, False), ("1", False), (None, False)],
    ids=["zero", "negative", "bool", "float", "str", "none"],
)
def test_is_int_refuses_bools_and_floats(value: object, expected: bool) -> None:
    """``True`` is an int to Python but never a count to us."""
    assert is_int(value) is expected


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ({"count": 0}, ["Settings(count=0)", "count must be an int >= 1", "use 1 for one"]),
        ({"count": True}, ["Settings(count=True)", "an int >= 1"]),
        ({"count": 2.0}, ["Settings(count=2.0)", "an int >= 1"]),
        ({"ratio": 1.0}, ["Settings(ratio=1.0)", "a number in [0, 1)"]),
        ({"ratio": -0.1}, ["ratio=-0.1", "a number in [0, 1)"]),
        ({"ratio": NAN}, ["ratio=nan", "nan and infinities are not allowed"]),
        ({"wait": -1}, ["wait=-1", "None or a number of seconds >= 0"]),
        ({"wait": INF}, ["wait=inf", "nan and infinities are not allowed"]),
        ({"wait": "5"}, ["wait='5'", "None or a number of seconds >= 0"]),
    ],
    ids=[
        "zero-count",
        "bool-count",
        "float-count",
        "whole-share",
        "negative-share",
        "nan-share",
        "negative-seconds",
        "infinite-seconds",
        "str-seconds",
    ],
)
def test_a_bad_value_names_owner_setting_rule_and_fix(
    options: dict[str, Any], fragments: list[str]
) -> None:
    """The message shows what the user wrote, what it must be, and the owner's hint."""
    with pytest.raises(ConfigurationError) as caught:
        Settings(**options)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_good_values_pass_through_unchanged() -> None:
    """The hand-written form returns the value, so a check and an assignment are one step."""
    assert check_int(7, "Owner", "count") == 7
    assert check_int(None, "Owner", "count", optional=True) is None
    assert check_number(2, "Owner", "seconds", exclusive_minimum=True) == 2
    assert Settings(count=3, ratio=0, wait=0).count == 3


def test_configuration_errors_stay_value_errors() -> None:
    """Existing ``except ValueError`` handlers keep catching bad settings."""
    with pytest.raises(ValueError, match="must be a number in"):
        check_number(5, "Owner", "share", maximum=1)


# -- issue 20: every float setting is finite ----------------------------------------------


def _micro_summary(field: str, value: float) -> MicroSummary:
    return MicroSummary(summarizer=RecordingSummarizer(), **{field: value})


FLOAT_SETTINGS: list[tuple[str, Callable[[float], object]]] = [
    ("engine-breaker-cooldown", lambda v: ContextEngine(10_000, breaker_cooldown_seconds=v)),
    ("breaker-cooldown", lambda v: CircuitBreaker(cooldown_seconds=v)),
    ("retry-max-delay", lambda v: RetryPolicy(max_delay=v)),
    ("retry-initial-wait", lambda v: RetryPolicy(initial_wait=v)),
    ("retry-max-wait", lambda v: RetryPolicy(max_wait=v)),
    ("retry-jitter", lambda v: RetryPolicy(jitter=v)),
    ("retry-drop-fraction", lambda v: RetryPolicy(overflow_drop_fraction=v)),
    ("engine-max-user-share", lambda v: ContextEngine(1000, max_user_share=v)),
    ("light-trim-step", lambda v: LightTrim(trimming_step=v)),
    ("microcompact-step", lambda v: ToolResultMicrocompact(clearing_step=v)),
    (
        "summary-timeout",
        lambda v: FullSummary(summarizer=RecordingSummarizer(), timeout_seconds=v),
    ),
    (
        "shared-breaker-cooldown",
        lambda v: SharedSummarizerBreaker(
            summarizer=RecordingSummarizer(),
            archive=MemoryArchive(),
            endpoint="e",
            cooldown_seconds=v,
        ),
    ),
    ("engine-archive-timeout", lambda v: ContextEngine(1000, archive_timeout_seconds=v)),
    (
        "summary-total-timeout",
        lambda v: FullSummary(summarizer=RecordingSummarizer(), summary_timeout_seconds=v),
    ),
    (
        "summary-checkpoint-share",
        lambda v: FullSummary(summarizer=RecordingSummarizer(), max_checkpoint_share=v),
    ),
    ("tool-result-cap-share", lambda v: ToolResultCap(max_share=v)),
    ("tool-result-cap-round-share", lambda v: ToolResultCap(max_round_share=v)),
    ("redis-ttl", lambda v: _redis_archive(ttl=v)),
    (
        "openai-temperature",
        lambda v: _openai_summarizer(temperature=v),
    ),
    (
        "summary-ledger-share",
        lambda v: FullSummary(summarizer=RecordingSummarizer(), ledger_share=v),
    ),
    *(
        (f"micro-summary-{field}", partial(_micro_summary, field))
        for field in ("micro_trigger", "full_trigger", "min_removed_share", "max_checkpoint_share")
    ),
    (
        "background-pre-trigger",
        lambda v: BackgroundSummary(
            summary=FullSummary(summarizer=RecordingSummarizer()), pre_trigger=v
        ),
    ),
    (
        "background-growth-share",
        lambda v: BackgroundSummary(
            summary=FullSummary(summarizer=RecordingSummarizer()), max_growth_share=v
        ),
    ),
    ("pinned-share", lambda v: Pinned(source=["AGENTS.md: run make lint"], max_share=v)),
    ("rehydration-share", lambda v: Rehydration(max_share=v)),
    ("item-relevance", lambda v: Item(id="a", text="b", relevance=v)),
    *(
        (f"cache-pricing-{field}", partial(_pricing, field))
        for field in (
            "read_multiplier",
            "write_multiplier",
            "long_write_multiplier",
            "output_multiplier",
            "input_per_mtok",
        )
    ),
    *(
        (f"budget-profile-{share}", partial(_profile, share))
        for share in (
            "preferences",
            "history",
            "history_without_retrieval",
            "long_term",
            "retrieval",
        )
    ),
]


@pytest.mark.parametrize("value", [NAN, INF, -INF], ids=["nan", "inf", "minus-inf"])
@pytest.mark.parametrize(
    "build", [build for _, build in FLOAT_SETTINGS], ids=[name for name, _ in FLOAT_SETTINGS]
)
def test_no_float_setting_accepts_nan_or_infinity(
    build: Callable[[float], object], value: float
) -> None:
    """A nan cool-down once kept a breaker open for ever; now it fails at construction."""
    with pytest.raises(ConfigurationError, match="nan and infinities are not allowed"):
        build(value)


@pytest.mark.parametrize("value", [NAN, INF], ids=["nan", "inf"])
def test_sqlite_timeout_must_be_finite(tmp_path: Path, value: float) -> None:
    """The file is never opened with a timeout that could wait for ever."""
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        SQLiteArchive(tmp_path / "a.db", timeout=value)
    assert not (tmp_path / "a.db").exists()


# The validated float fields of the package's settings classes, each built with nan above.
COVERED_FIELDS = {
    ("CircuitBreaker", "cooldown_seconds"),
    ("SharedSummarizerBreaker", "cooldown_seconds"),
    ("RetryPolicy", "max_delay"),
    ("RetryPolicy", "initial_wait"),
    ("RetryPolicy", "max_wait"),
    ("RetryPolicy", "jitter"),
    ("RetryPolicy", "overflow_drop_fraction"),
    ("LightTrim", "trimming_step"),
    ("ToolResultMicrocompact", "clearing_step"),
    ("FullSummary", "timeout_seconds"),
    ("FullSummary", "summary_timeout_seconds"),
    ("FullSummary", "max_checkpoint_share"),
    ("ToolResultCap", "max_share"),
    ("ToolResultCap", "max_round_share"),
    ("FullSummary", "ledger_share"),
    ("MicroSummary", "micro_trigger"),
    ("MicroSummary", "full_trigger"),
    ("MicroSummary", "min_removed_share"),
    ("MicroSummary", "max_checkpoint_share"),
    ("BackgroundSummary", "pre_trigger"),
    ("BackgroundSummary", "max_growth_share"),
    ("Pinned", "max_share"),
    ("Rehydration", "max_share"),
    ("Item", "relevance"),
    ("BudgetProfile", "preferences"),
    ("BudgetProfile", "history"),
    ("BudgetProfile", "history_without_retrieval"),
    ("BudgetProfile", "long_term"),
    ("BudgetProfile", "retrieval"),
    ("CachePricing", "read_multiplier"),
    ("CachePricing", "write_multiplier"),
    ("CachePricing", "long_write_multiplier"),
    ("CachePricing", "output_multiplier"),
    ("CachePricing", "input_per_mtok"),
}


def _validated_float_fields() -> set[tuple[str, str]]:
    found = set()
    for module_info in pkgutil.walk_packages(context_engine.__path__, "context_engine."):
        if module_info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(module_info.name)
        except ImportError:
            continue  # a module of an extra that is not installed here
        for name, value in vars(module).items():
            if not (inspect.isclass(value) and attrs.has(value)) or name.startswith("_"):
                continue
            for field in attrs.fields(value):
                if field.init and field.validator is not None and "float" in str(field.type):
                    found.add((value.__name__, field.name))
    return found


def test_every_validated_float_field_is_in_the_nan_table() -> None:
    """A new float setting cannot slip in without the nan and infinity check above."""
    assert _validated_float_fields() == COVERED_FIELDS
