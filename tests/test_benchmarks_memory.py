"""The memory-release benchmark runs end to end (on a tiny session, in seconds)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_tiny_run_reports_what_a_dropped_session_leaves_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record names the session, the rewrites made and the memory held after the drop."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports run_facts from steady_state
    spec = importlib.util.spec_from_file_location(
        "memory_release_under_test", BENCHMARKS / "memory_release.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    out = tmp_path / "memory.json"
    assert (
        module.main(["--steps", "12", "--result-kb", "4", "--window", "4096", "--json", str(out)])
        == 0
    )
    figures = json.loads(out.read_text(encoding="utf-8"))["figures"]
    assert figures["steps"] == figures["calls"] == figures["tool_results"] == 12
    assert figures["rewritten"] > 0
    assert figures["session_mb"] > 0
    assert 0 <= figures["held_after_drop_mb"] < figures["session_mb"]
