"""FullSummary with the ExtractiveSummarizer on real transcripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_engine import CompactionError, ContextEngine, ContextSummary
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate, ToolResultMicrocompact
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.files import track_files
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts


def engine_for(window: int) -> ContextEngine:
    return ContextEngine(
        window,
        [ToolResultMicrocompact(), FullSummary(summarizer=ExtractiveSummarizer()), HardTruncate()],
        reserve_tokens=window // 10,
        token_counter=FixedTokenCounter(),
    )


@pytest.mark.parametrize("fraction", [0.5, 0.25], ids=["window-50pct", "window-25pct"])
def test_forced_compaction_keeps_invariants_fits_and_names_every_modified_file(
    corpus_path: Path, fraction: float
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    total = engine_for(10_000_000).estimate(transcript).tokens
    engine = engine_for(max(4_000, int(total * fraction)))
    failure: CompactionError | None = None
    try:
        result = engine.compact_sync(transcript, instructions="keep the failing test names")
    except CompactionError as error:
        failure = error
    if failure is not None:
        # A /compact whose checkpoint could not be written (here: it would not shrink
        # the view) says so; its view is still valid and nothing is to be committed.
        assert str(failure).startswith("manual compaction wrote no checkpoint: ")
        assert failure.commit is None
        assert check_view(transcript, failure.view) == []
    else:
        assert check_view(transcript, result.messages) == []
        assert result.changed
        assert result.info is not None
        checkpoint = next(m for m in result.messages if isinstance(m, ContextSummary))
        compacted = transcript[: len(transcript) - result.info.kept_count]
        for path in track_files(compacted).modified:
            assert path in checkpoint.modified_files
    recovered = engine.recover_overflow_sync(transcript, "prompt is too long")
    assert check_view(transcript, recovered.messages) == []
    assert recovered.usage.tokens <= engine.threshold or recovered.event is not None


def test_project_with_the_extractive_summarizer_lands_under_the_threshold(
    corpus_path: Path,
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    total = engine_for(10_000_000).estimate(transcript).tokens
    engine = engine_for(max(4_000, total // 3))
    result = engine.project_sync(transcript)
    assert check_view(transcript, result.messages) == []
    assert result.fits or (result.event is not None and result.event.futile)
