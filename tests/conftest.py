"""Shared fixtures. Tests never reach the network: tiktoken downloads are switched off."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ["CONTEXT_ENGINE_OFFLINE"] = "1"

from context_engine.testing import FixedTokenCounter

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "dev"


def corpus_files() -> list[Path]:
    """The dev corpus transcripts, or an empty list when the corpus is absent."""
    return sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []


def load_corpus_dicts(path: Path) -> list[dict[str, object]]:
    """One corpus transcript as OpenAI chat dicts."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture
def counter() -> FixedTokenCounter:
    """A predictable counter: one token per four characters plus message framing."""
    return FixedTokenCounter()


@pytest.fixture(params=corpus_files() or [None], ids=lambda p: p.stem if p else "no-corpus")
def corpus_path(request: pytest.FixtureRequest) -> Path:
    """Each dev-corpus transcript in turn; skips when the corpus is absent."""
    if request.param is None:
        pytest.skip("../shared/corpus/dev is not present")
    return request.param  # type: ignore[no-any-return]


# -- hypothesis profiles ---------------------------------------------------------------
# `make soak` runs tests/reliability with --hypothesis-profile=soak: the reliability
# tests scale their example counts by the profile's max_examples / 100.
from hypothesis import HealthCheck  # noqa: E402  (kept next to the profiles it serves)
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile(
    "soak",
    max_examples=2_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
