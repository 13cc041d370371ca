"""Shared fixtures. Tests never reach the network: tiktoken downloads are switched off."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ["CONTEXT_ENGINE_OFFLINE"] = "1"

from context_engine.testing import FixedTokenCounter
from tests.extras import EXTRAS, installable, missing, needs

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "dev"


def corpus_files() -> list[Path]:
    """The dev corpus transcripts, or an empty list when the corpus is absent."""
    return sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []


def load_corpus_dicts(path: Path) -> list[dict[str, object]]:
    """One corpus transcript as OpenAI chat dicts."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-extras",
        action="store_true",
        help="stop unless every optional extra imports (no test may skip for a missing extra)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "extra(name): the test needs that optional extra and skips without it"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    if not session.config.getoption("--require-extras"):
        return
    broken = [
        f"{name}: {why}"
        for name in EXTRAS
        if installable(name) and (why := missing(name)) is not None
    ]
    if broken:
        pytest.exit("--require-extras, but these extras do not import: " + "; ".join(broken), 3)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("extra"):
        for name in mark.args:
            why = missing(name)
            if why is not None:
                pytest.skip(f"{needs(name)}: {why}")


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

# `make test` draws the same examples on every run (a red suite means a change broke
# something, not that a new corner was found); `make soak` and --hypothesis-profile
# explore afresh. Corners the soak finds become explicit @example cases.
_hypothesis_settings.register_profile("deterministic", derandomize=True, print_blob=True)
_hypothesis_settings.load_profile("deterministic")
