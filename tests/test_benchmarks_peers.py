"""The peer benchmark's verdicts, report and pairing checks; its end-to-end run where peers exist.

The peers (LangChain, Strands, AutoGen) are installed only in `.venv-bench`
(`make bench-peers`); in the test environment the end-to-end run skips.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from context_engine import Message, ToolCall

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def load(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("CONTEXT_ENGINE_OFFLINE", "1")  # the adapters default it on import
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module(name)


def timing(
    section: str, scenario: str, steps: int, median_us: float, **info: Any
) -> dict[str, Any]:
    return {
        "section": section,
        "scenario": scenario,
        "steps": steps,
        "median_us": median_us,
        "p90_us": median_us * 2,
        "n": 5,
        "messages": 2 * steps + 4,
        "tokens": 500 * steps,
        **info,
    }


def sweep_result(broken: int) -> dict[str, Any]:
    return {"budgets": 25, "broken_pair_budgets": broken, "orphans": broken, "problem_budgets": {}}


def fake_results(project_at_5000: float) -> dict[str, Any]:
    rows = []
    for steps in (50, 1000, 5000):
        rows.append(timing("steady", "project", steps, 800 if steps < 5000 else project_at_5000))
        rows.append(timing("steady", "floor", steps, 500))
        rows.append(timing("steady", "strands_precall", steps, steps))
        rows.append(timing("steady", "autogen", steps, steps * 900))
    rows.append(timing("over", "microcompact", 1000, 30_000, pairs_intact=True, problems=[]))
    rows.append(timing("over", "light_trim", 1000, 9_000, pairs_intact=True, problems=[]))
    rows.append(
        {
            "section": "over",
            "scenario": "autogen_token_limited",
            "steps": 1000,
            "skipped": "too slow",
            "messages": 2004,
            "tokens": 500_000,
        }
    )
    meta = {
        "command": "peers.py",
        "mode": "full",
        "elapsed_s": 1.0,
        "date": "today",
        "platform": "linux",
        "cpu_count": 2,
        "load_average_start": 0.1,
        "load_average_end": 0.2,
        "python": "3.11",
        "versions": {"langchain": "1"},
        "over_fraction": 0.5,
    }
    return {
        "meta": meta,
        "timings": rows,
        "sweep": {"200": {"ours_default": sweep_result(0), "lc_trim_approx": sweep_result(3)}},
        "memory": {
            "per_session": [
                {
                    "framework": "context-engine",
                    "steps": 1000,
                    "messages": 2004,
                    "transcript_bytes": 2_500_000,
                    "manager_bytes": 500_000,
                }
            ],
            "concurrent": {
                "sessions": 10,
                "steps": 50,
                "messages_each": 107,
                "transcripts_bytes": 1_000_000,
                "engines_bytes": 200_000,
                "engine_bytes_per_session": 20_000,
            },
        },
        "heuristic_error": {
            "corpus": "dev",
            "rows": [
                {
                    "transcript": "a",
                    "tokens": 100,
                    "heuristic": 108,
                    "error": 0.08,
                    "usage_anchors": 0,
                },
            ],
        },
    }


@pytest.mark.parametrize(
    ("project_at_5000", "peers_met", "flat_met"),
    [(900.0, True, True), (6_000.0, False, False)],
    ids=["fast-and-flat", "slower-than-strands-and-growing"],
)
def test_every_target_of_the_issue_gets_a_verdict_and_a_figure(
    monkeypatch: pytest.MonkeyPatch, project_at_5000: float, peers_met: bool, flat_met: bool
) -> None:
    report = load("_peer_report", monkeypatch)
    verdicts = {t["key"]: t for t in report.targets(fake_results(project_at_5000))}
    assert list(verdicts) == [
        "steady_floor",
        "steady_peers",
        "steady_flat",
        "rewrite_10ms",
        "pairs",
        "heuristic",
        "economics",
    ]
    assert verdicts["steady_floor"]["met"] is True  # 800 µs against a 500 µs floor
    assert verdicts["steady_peers"]["met"] is peers_met
    assert verdicts["steady_flat"]["met"] is flat_met
    assert verdicts["rewrite_10ms"]["met"] is False  # microcompact took 30 ms
    assert verdicts["pairs"]["met"] is True
    assert verdicts["heuristic"]["met"] is True
    assert verdicts["economics"]["met"] is None
    assert all(t["figure"] for t in verdicts.values())


def test_the_page_explains_each_missed_target_and_runs_no_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = load("_peer_report", monkeypatch)
    data = fake_results(6_000.0)
    data["targets"] = report.targets(data)
    page = report.render(data)
    missed = [t for t in data["targets"] if t["met"] is False]
    assert len(missed) == 3
    assert page.count("**not met**") == 3
    assert page.count("\n- " + missed[0]["target"] + ":") == 1
    assert "skipped" in page  # the AutoGen rewrite predicted too slow
    assert "```python" not in page  # tests/test_docs.py executes docs code blocks


@pytest.mark.parametrize(
    ("view_slice", "expected"),
    [(slice(None), 0), (slice(3, None), 1), (slice(0, 3), 1), (slice(4, None), 0)],
    ids=["whole-session", "result-without-call", "call-without-result", "cut-between-steps"],
)
def test_orphans_counts_tool_messages_that_lost_their_partner(
    monkeypatch: pytest.MonkeyPatch, view_slice: slice, expected: int
) -> None:
    adapters = load("_peer_adapters", monkeypatch)
    session = [
        Message.system("sys"),
        Message.user("go"),
        Message.assistant("a", tool_calls=[ToolCall("c1", "read_file", "{}")]),
        Message.tool("c1", "body"),
        Message.assistant("b", tool_calls=[ToolCall("c2", "read_file", "{}")]),
        Message.tool("c2", "body"),
    ]
    assert adapters.orphans(session[view_slice]) == expected


def test_sweep_budgets_run_from_20_to_80_percent_in_25_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rewrites = load("_peer_rewrites", monkeypatch)
    fractions = rewrites.sweep_fractions()
    assert len(fractions) == 25
    assert (fractions[0], fractions[-1]) == (0.2, 0.8)


def test_a_quadratic_peer_is_skipped_before_it_takes_minutes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    peers = load("peers", monkeypatch)
    skip = peers.Skipper(limit_s=30.0)
    skip.seen["autogen_token_limited"] = (50, 1.5)
    skip.seen["lc_trim_approx"] = (50, 1.5)
    assert skip("autogen_token_limited", 200) is None  # 1.5 s x 16 = 24 s
    assert "predicted" in (skip("autogen_token_limited", 1000) or "")
    assert skip("lc_trim_approx", 1000) is None  # linear: 30 s at the limit
    assert skip("never_probed", 5000) is None


def test_quick_run_end_to_end_on_tiny_sessions(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("langchain", "langchain_openai", "strands", "autogen_core", "autogen_ext"):
        pytest.importorskip(name)
    import tiktoken

    # The adapters register cl100k_base offline; keep that out of other tests.
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", dict(tiktoken.registry.ENCODINGS))
    peers = load("peers", monkeypatch)
    memory = load("_peer_memory", monkeypatch)
    monkeypatch.setattr(peers, "STEPS", {"quick": (3, 6), "full": (3,)})
    monkeypatch.setattr(peers, "SWEEP_STEPS", {"quick": (6,), "full": (6,)})
    monkeypatch.setattr(peers, "MEMORY_STEPS", {"quick": (3,), "full": (3,)})
    monkeypatch.setattr(peers, "CONCURRENT", {"quick": (3, 3), "full": (3, 3)})
    monkeypatch.setattr(peers, "REPS", {"quick": (3, 4), "full": (3, 4)})
    monkeypatch.setattr(peers, "BUDGET_S", {"quick": 0.001, "full": 0.001})
    monkeypatch.setattr(memory, "CORPUS", tmp_path / "no-corpus")
    monkeypatch.setattr(sys, "argv", ["peers.py"])
    out, docs = tmp_path / "peers.json", tmp_path / "peers.md"
    peers.main(["--quick", "--json", str(out), "--docs", str(docs)])
    data = json.loads(out.read_text(encoding="utf-8"))
    steady = {row["scenario"] for row in data["timings"] if row["section"] == "steady"}
    assert {"project", "floor", "lc_trim_tiktoken", "strands_precall", "autogen"} <= steady
    assert all(3 <= row["n"] <= 4 for row in data["timings"] if "n" in row)
    ours = {k: v for k, v in data["sweep"]["6"].items() if k.startswith("ours")}
    assert all(result["broken_pair_budgets"] == 0 for result in ours.values())
    assert len(data["targets"]) == 7
    assert "## Targets" in docs.read_text(encoding="utf-8")
