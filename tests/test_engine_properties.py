"""Property tests: every engine result keeps the invariants, on generated and real transcripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine, Message
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.structure import TRUNCATION_KEY, analyze
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts
from tests.fakes import Checkpointer
from tests.transcripts import transcripts

PROPERTY_SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def default_engine(window: int, **options: Any) -> ContextEngine:
    return ContextEngine.default(window, token_counter=FixedTokenCounter(), **options)


def frozen_copy(messages: list[Message]) -> list[tuple[Any, ...]]:
    return [
        (m.role, m.content, m.tool_call_id, m.name, m.usage, dict(m.metadata)) for m in messages
    ]


def assert_lands_or_says_why(engine: ContextEngine, result: Any) -> None:
    """Under the threshold, or flagged: futile, or nothing removable left."""
    if result.usage.tokens <= engine.threshold:
        assert result.fits
        return
    assert not result.fits
    if result.event is not None and result.event.futile:
        assert result.event.floor_tokens > engine.threshold
        return
    view = tuple(result.messages)
    shape = analyze(view)
    count = engine.counter.count_message
    removable = [
        m
        for i, m in enumerate(view)
        if not shape.is_protected(i) and not m.is_summary and TRUNCATION_KEY not in m.metadata
    ]
    # Only what no strategy may drop is left (give or take tool-result placeholders).
    assert sum(count(m) for m in removable) <= max(64, result.usage.tokens - engine.threshold)


@PROPERTY_SETTINGS
@given(transcript=transcripts(max_turns=5, max_steps=4), window=st.integers(600, 40_000))
def test_project_keeps_every_invariant_and_lands_under_the_threshold_or_says_why(
    transcript: list[Message], window: int
) -> None:
    engine = default_engine(window, reserve_tokens=window // 8)
    before = frozen_copy(transcript)
    identities = [id(m) for m in transcript]
    result = engine.project_sync(transcript)
    assert check_view(transcript, result.messages) == []
    assert frozen_copy(transcript) == before
    assert [id(m) for m in transcript] == identities
    assert_lands_or_says_why(engine, result)


@PROPERTY_SETTINGS
@given(transcript=transcripts(max_turns=4, max_steps=4), window=st.integers(600, 20_000))
def test_same_input_and_configuration_give_the_same_view(
    transcript: list[Message], window: int
) -> None:
    first = default_engine(window).project_sync(transcript)
    second = default_engine(window).project_sync(list(transcript))
    assert first.messages == second.messages


@PROPERTY_SETTINGS
@given(transcript=transcripts(max_turns=4, max_steps=4), window=st.integers(600, 20_000))
def test_projecting_a_projected_view_again_changes_nothing_more(
    transcript: list[Message], window: int
) -> None:
    engine = default_engine(window)
    first = engine.project_sync(transcript)
    again = default_engine(window).project_sync(first.messages)
    if first.fits:
        assert again.messages == first.messages


@PROPERTY_SETTINGS
@given(transcript=transcripts(max_turns=4, max_steps=4), window=st.integers(600, 20_000))
def test_compact_and_recover_overflow_keep_every_invariant(
    transcript: list[Message], window: int
) -> None:
    strategies = [*default_engine(window).strategies]
    strategies.insert(2, Checkpointer())
    engine = ContextEngine(window, strategies, token_counter=FixedTokenCounter())
    before = frozen_copy(transcript)
    compacted = engine.compact_sync(transcript, instructions="keep file names")
    assert check_view(transcript, compacted.messages) == []
    recovered = engine.recover_overflow_sync(transcript, "prompt is too long")
    assert check_view(transcript, recovered.messages) == []
    assert (recovered.commit is not None) == recovered.changed
    assert frozen_copy(transcript) == before


# -- the dev corpus ------------------------------------------------------------------


@pytest.mark.parametrize(
    "fraction", [0.9, 0.5, 0.2], ids=["window-90pct", "window-50pct", "window-20pct"]
)
def test_project_on_real_transcripts_keeps_invariants_and_fits_or_says_why(
    corpus_path: Path, fraction: float
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    total = default_engine(10_000_000).estimate(transcript).tokens
    window = max(2_000, int(total * fraction))
    engine = default_engine(window, reserve_tokens=max(1, window // 10))
    result = engine.project_sync(transcript)
    assert check_view(transcript, result.messages) == []
    assert result.changed == (total > engine.threshold)
    assert_lands_or_says_why(engine, result)


def test_agent_loop_over_a_real_transcript_keeps_invariants_at_every_step(
    corpus_path: Path,
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    total = default_engine(10_000_000).estimate(transcript).tokens
    engine = default_engine(max(4_000, total // 3))
    rewrites = 0
    for end in range(2, len(transcript) + 1, 7):
        prefix = transcript[:end]
        result = engine.project_sync(prefix)
        rewrites += result.changed
        assert check_view(prefix, result.messages) == []
    assert rewrites > 0 or total <= engine.threshold
