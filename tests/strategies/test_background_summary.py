"""`BackgroundSummary` as configuration: what it accepts and what it hands to its summary."""

from __future__ import annotations

import pytest

from context_engine import ConfigurationError, ContextEngine
from context_engine.strategies import (
    BackgroundSummary,
    FullSummary,
    HardTruncate,
    LightTrim,
    MicroSummary,
)
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session


def full_summary() -> FullSummary:
    return FullSummary(summarizer=RecordingSummarizer())


@pytest.mark.parametrize(
    ("summary", "problem"),
    [
        pytest.param(LightTrim(), "ForceCompactionStrategy", id="not-force-capable"),
        pytest.param(
            MicroSummary(summarizer=RecordingSummarizer()),
            "ForceCompactionStrategy",
            id="micro-summary",
        ),
        pytest.param(
            BackgroundSummary(summary=full_summary()), "wrap the summary strategy once", id="nested"
        ),
    ],
)
def test_background_summary_refuses_what_it_cannot_write_ahead(
    summary: object, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        BackgroundSummary(summary=summary)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pre_trigger", 0.0),
        ("pre_trigger", 1.0),
        ("pre_trigger", 1.5),
        ("max_growth_share", 0.0),
        ("max_growth_share", 1.5),
    ],
    ids=["trigger-0", "trigger-1", "trigger-above-1", "growth-0", "growth-above-1"],
)
def test_background_summary_shares_are_checked(field: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=f"BackgroundSummary\\({field}="):
        BackgroundSummary(summary=full_summary(), **{field: value})  # type: ignore[arg-type]


def test_one_background_summary_per_pipeline() -> None:
    with pytest.raises(ConfigurationError, match="more than one BackgroundSummary"):
        ContextEngine(
            8_000,
            [
                BackgroundSummary(summary=full_summary()),
                BackgroundSummary(summary=full_summary()),
            ],
        )


def test_background_summary_reads_as_its_summary() -> None:
    """Events, logs and ``commit_strategies`` see the wrapped summary's name."""
    wrapped = BackgroundSummary(summary=full_summary())
    assert (wrapped.name, wrapped.uses_llm) == ("full_summary", True)
    assert wrapped.pre_trigger_tokens(16_000) == 12_800
    assert wrapped.growth_limit(16_000) == 8_000


def test_compact_runs_the_wrapped_summary_itself() -> None:
    """A `/compact` is the user's own request: written now, with its instructions."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        8_000,
        [BackgroundSummary(summary=FullSummary(summarizer=summarizer)), HardTruncate()],
        token_counter=FixedTokenCounter(),
    )
    result = engine.compact_sync(synthetic_session(20), instructions="keep the test names")
    assert result.strategy == "full_summary"
    assert result.commit is not None
    assert result.info is not None
    assert not result.info.background
    assert summarizer.calls >= 1
    assert all(request.instructions == "keep the test names" for request in summarizer.requests)


def test_above_the_threshold_without_a_precompute_the_summary_runs_in_place() -> None:
    """No checkpoint was written ahead (a blocking caller): the pipeline's step writes one."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        8_000,
        [BackgroundSummary(summary=FullSummary(summarizer=summarizer)), HardTruncate()],
        token_counter=FixedTokenCounter(),
    )
    result = engine.project_sync(synthetic_session(40))
    assert result.strategy == "full_summary"
    assert result.commit is not None
    assert summarizer.calls >= 1
