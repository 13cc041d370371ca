"""The steady-state benchmark script runs end to end (on tiny workloads, in seconds)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "steady_state.py"
SCENARIOS = {"project", "project_sync", "floor", "full_tokenize", "rebuilt_project", "from_openai"}


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("steady_state_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "STEPS", {"quick": (3, 8), "full": (3,)})
    monkeypatch.setattr(module, "REPS", {"quick": (4, 6), "full": (4, 6)})
    monkeypatch.setattr(module, "BUDGET_S", {"quick": 0.001, "full": 0.001})
    monkeypatch.setattr(sys, "argv", ["steady_state.py"])
    return module


def test_quick_run_writes_every_scenario_for_every_workload(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "CORPUS", tmp_path / "no-corpus")
    out, docs = tmp_path / "out.json", tmp_path / "benchmarks.md"
    bench.main(["--quick", "--json", str(out), "--docs", str(docs)])
    data = json.loads(out.read_text(encoding="utf-8"))
    names = [row["workload"] for row in data["workloads"]]
    assert names == ["synthetic_session(3)", "synthetic_session(8)"]
    for row in data["workloads"]:
        assert set(row["scenarios"]) == SCENARIOS
        assert all(4 <= stat["n"] <= 6 for stat in row["scenarios"].values())
        assert all(len(row["samples_ns"][key]) == row["scenarios"][key]["n"] for key in SCENARIOS)
        assert row["ratio_project_floor"] > 0
    page = docs.read_text(encoding="utf-8")
    assert page.count("| synthetic_session(") == 3 * 2  # main, spread and rebuilt tables
    assert "(LangChain, Strands, AutoGen)" in page
    assert "```python" not in page  # docs code blocks are executed by tests/test_docs.py


def test_missing_corpus_is_skipped_with_a_note(
    bench: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(bench, "CORPUS", tmp_path / "absent")
    workloads = bench.load_workloads("full")
    assert [name for name, _, _ in workloads] == ["synthetic_session(3)"]
    assert "corpus workload skipped" in capsys.readouterr().err


def test_quick_run_leaves_the_published_page_alone(bench: ModuleType) -> None:
    args = bench.parse_args(["--quick"])
    assert args.docs is None
    assert args.json.name == "steady_state_quick.json"
    assert bench.parse_args([]).docs == bench.DOCS
