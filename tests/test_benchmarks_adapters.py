"""The adapters benchmark runs each installed runtime's loop and reports its request maxima."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def adapters(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("CONTEXT_ENGINE_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(BENCH))
    module = importlib.import_module("adapters")
    monkeypatch.setattr(module, "WINDOWS", {"quick": (8_000,), "full": (8_000,)})
    monkeypatch.setattr(module, "STEPS", {"quick": 24, "full": 24})
    return module


def test_quick_run_reports_every_installed_runtime_under_its_threshold(
    adapters: ModuleType, tmp_path: Path
) -> None:
    out = tmp_path / "adapters.json"
    assert adapters.main(["--quick", "--json", str(out)]) == 0

    rows = json.loads(out.read_text(encoding="utf-8"))["results"]
    expected = [
        name for name, (module, _) in adapters.RUNTIMES.items() if adapters.installed(module)
    ]
    assert [row["runtime"] for row in rows] == expected
    for row in rows:
        assert row["requests"] == 25  # 24 searches and the answer
        assert row["finished"]
        assert row["checkpoint"]  # the loop crossed the threshold and committed a checkpoint
        assert row["over_counted"] == 0
        assert row["max_counted"] <= row["threshold"] == 6_400
        assert row["max_measured"] <= row["max_counted"]
        assert row["beside_tokens"] > 150  # the tool schemas (and instructions) were counted
