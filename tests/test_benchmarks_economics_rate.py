"""Summarizer calls per 100 steps in the economics benchmark, and its before/after table."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from context_engine.formats.openai import to_openai
from context_engine.testing import synthetic_session

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def rate(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("_economics_rate")


def row(contender: str, window: int, calls: int, summaries: int, **more: Any) -> dict[str, Any]:
    tokens = more.get("tokens", 1_000 * calls)
    return {
        "contender": contender,
        "window": window,
        "transcript": more.get("transcript", "t1"),
        "calls": calls,
        "summarizer_calls": summaries,
        "tokens": tokens,
        "reused": more.get("reused", tokens // 2),
    }


def test_calls_per_100_steps_sum_every_transcript_before_dividing(rate: ModuleType) -> None:
    """Two transcripts of 150 and 50 steps with 3 and 7 summaries: 10 per 200 steps is 5."""
    rows = [
        row("context_engine", 8_000, 150, 3, transcript="a", tokens=300, reused=150),
        row("context_engine", 8_000, 50, 7, transcript="b", tokens=100, reused=90),
        row("context_engine", 32_000, 200, 0),
    ]
    small = rate.totals(rows, 8_000, "context_engine")
    assert small["steps"] == 200
    assert small["summarizer_calls"] == 10
    assert small["per_100_steps"] == pytest.approx(5.0)
    assert small["cache_share"] == pytest.approx(240 / 400)
    assert rate.totals(rows, 32_000, "context_engine")["per_100_steps"] == 0.0
    assert rate.totals(rows, 128_000, "context_engine") is None


def test_the_table_has_a_row_per_window_and_contender_in_a_fixed_order(rate: ModuleType) -> None:
    rows = [
        row("observation_masking", 8_000, 100, 0),
        row("context_engine", 8_000, 100, 6),
        row("langchain_summarization", 8_000, 100, 25),
        row("context_engine", 32_000, 100, 1),
    ]
    lines = rate.rate_lines(rows)
    body = [line.split(" | ") for line in lines[2:]]
    assert [(cells[0].lstrip("| "), cells[1]) for cells in body] == [
        ("8k", "context-engine"),
        ("8k", "LangChain summarization"),
        ("8k", "observation masking"),
        ("32k", "context-engine"),
    ]
    assert [cells[4] for cells in body] == ["6.00", "25.00", "0.00", "1.00"]


def test_before_and_after_sit_side_by_side(rate: ModuleType) -> None:
    before = [row("context_engine", 8_000, 200, 80, tokens=4_000, reused=2_000)]
    after = [
        row("context_engine", 8_000, 200, 12, tokens=3_000, reused=2_400),
        row("context_engine", 32_000, 200, 1),  # no earlier figure: left out
    ]
    (line,) = rate.before_after_lines(before, after)[2:]
    assert line == (
        "| 8k | context-engine | 80 → 12 | 40.00 → 6.00 | 4,000 → 3,000 | 50.0 % → 80.0 % |"
    )


def test_a_quick_run_prints_the_rate_and_compares_with_an_earlier_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CONTEXT_ENGINE_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(BENCH))
    econ = importlib.import_module("economics")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [json.dumps(d) for d in to_openai(synthetic_session(40))]
    (corpus / "one.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    monkeypatch.setattr(econ, "CORPUS", corpus)
    monkeypatch.setattr(econ, "WINDOWS", {"quick": (8_192,), "full": (8_192,)})
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert econ.main(["--quick", "--json", str(first)]) == 0
    capsys.readouterr()

    assert econ.main(["--quick", "--json", str(second), "--before", str(first)]) == 0

    printed = capsys.readouterr().out
    assert "## Summarizer calls per 100 steps" in printed
    assert "Before → after" in printed
    ours = json.loads(second.read_text("utf-8"))["outcomes"]
    (engine,) = [r for r in ours if r["contender"] == "context_engine"]
    same = f"{engine['summarizer_calls']} → {engine['summarizer_calls']}"
    assert f"| 8k | context-engine | {same} |" in printed  # the same engine twice
    assert "| 8k | context-engine + `MicroSummary` | " in printed  # the micro tier, beside it


def test_a_window_where_nobody_summarized_says_why(rate: ModuleType) -> None:
    rows = [
        {**row("context_engine", 128_000, 100, 0), "max_tokens": 92_361},
        {**row("no_management", 128_000, 100, 0), "max_tokens": 92_361},
        {**row("context_engine", 8_000, 100, 4), "max_tokens": 6_000},
    ]
    section = rate.render_markdown(rows, None, "")
    assert "At 128k no contender called a summarizer: the longest prompt" in section
    assert "92,361 tokens" in section
    assert "At 8k no contender" not in section
