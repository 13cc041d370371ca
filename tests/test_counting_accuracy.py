"""Counting accuracy on the dev corpus: the heuristic within 10 %, the calibrated hybrid within 2 %.

The anchors and the error points are built by ``benchmarks/counting_accuracy.py``
(imported here), so the test checks exactly what the benchmark reports.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from context_engine import ContextEngine, Message
from context_engine.formats.openai import from_openai
from context_engine.tokens import HeuristicCounter, TiktokenCounter, estimate_usage
from tests.conftest import corpus_files, load_corpus_dicts

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
HEURISTIC_BOUND = 0.10
HYBRID_BOUND = 0.02
# Conservative: the heuristic may over-count; it may under-count only this much.
HEURISTIC_UNDER_BOUND = -0.02


@pytest.fixture(scope="module")
def bench() -> Iterator[ModuleType]:
    """The benchmark script as a module (its report helper sits beside it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location(
            "counting_accuracy_under_test", BENCHMARKS / "counting_accuracy.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        patch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        yield module


@pytest.fixture(scope="module")
def exact(bench: ModuleType) -> TiktokenCounter:
    return TiktokenCounter(bench.cl100k())


@pytest.fixture
def transcript(corpus_path: Path) -> list[Message]:
    return from_openai(load_corpus_dicts(corpus_path))


@pytest.fixture
def rows(
    bench: ModuleType, exact: TiktokenCounter, transcript: list[Message]
) -> list[dict[str, Any]]:
    """The errors at every 10th message and at the end, anchors on every call."""
    found: list[dict[str, Any]] = bench.session_errors(transcript, exact, HeuristicCounter(), 10)
    return found


def test_heuristic_is_within_10_percent_of_cl100k_on_every_transcript(
    rows: list[dict[str, Any]],
) -> None:
    """The whole transcript, and the transcript so far at every 10th message."""
    errors = [row["heuristic_error"] for row in rows]
    assert len(errors) >= 2
    assert all(abs(error) < HEURISTIC_BOUND for error in errors), errors
    assert all(error > HEURISTIC_UNDER_BOUND for error in errors), errors


def test_calibrated_hybrid_is_within_2_percent_of_cl100k_where_anchors_exist(
    rows: list[dict[str, Any]],
) -> None:
    whole = rows[-1]
    assert whole["anchors"] > 0
    assert abs(whole["calibrated_error"]) < HYBRID_BOUND
    assert abs(whole["hybrid_error"]) < HYBRID_BOUND


def test_calibrated_hybrid_is_never_worse_than_the_heuristic_bound_along_the_way(
    rows: list[dict[str, Any]],
) -> None:
    """Early points, where one big tool result is most of the prompt, still stay in bounds."""
    anchored = [row for row in rows if row["anchors"]]
    assert anchored
    assert all(abs(row["calibrated_error"]) < HEURISTIC_BOUND for row in anchored)
    assert all(row["calibrated_error"] > HEURISTIC_UNDER_BOUND for row in anchored)


def test_the_engine_reports_the_calibrated_estimate_with_the_heuristic(
    bench: ModuleType, exact: TiktokenCounter, transcript: list[Message]
) -> None:
    """`ContextEngine.estimate` with the heuristic counter: nothing to configure."""
    anchored = bench.with_usage_anchors(transcript, exact)
    counter = HeuristicCounter()
    engine = ContextEngine(context_window=10_000_000, token_counter=counter)
    assert engine.estimate(anchored) == estimate_usage(anchored, counter, calibrate=True)


def test_benchmark_quick_run_writes_its_json_and_page(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the smallest corpus transcript (or none), in a second or two."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    files = corpus_files()
    if files:
        smallest = min(files, key=lambda path: path.stat().st_size)
        shutil.copy(smallest, corpus / smallest.name)
    monkeypatch.setattr(bench, "CORPUS", corpus)
    monkeypatch.setattr(sys, "argv", ["counting_accuracy.py", "--quick"])
    out, page = tmp_path / "out.json", tmp_path / "page.md"
    bench.main(["--quick", "--json", str(out), "--docs", str(page)])
    data = json.loads(out.read_text(encoding="utf-8"))
    assert len(data["sessions"]) == len(list(corpus.iterdir()))
    assert {row["sample"] for row in data["samples"]} >= {"chinese", "japanese", "korean"}
    text = page.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks: token counting accuracy")
    assert "## Targets" in text
