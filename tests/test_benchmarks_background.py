"""The background-latency benchmark runs end to end (with sleeps of milliseconds)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "background_latency.py"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("background_latency_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_both_pipelines_run_and_the_plain_one_waits_for_its_summary(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    """A smoke run: no timing claim here (those are the script's to print), only its shape."""
    rows = bench.main(
        [
            "--summary-seconds",
            "0.06",
            "--model-seconds",
            "0.02",
            "--steps",
            "60",
            "--waited-ms",
            "40",
        ]
    )
    plain, background = rows
    assert (plain["pipeline"], background["pipeline"]) == ("FullSummary", "BackgroundSummary")
    assert plain["waited"] >= 1  # its 60 ms summary runs inside a call
    assert background["summaries"] >= 1
    assert background["calls"] == plain["calls"]
    assert "| BackgroundSummary |" in capsys.readouterr().out
