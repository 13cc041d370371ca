"""The ``context-engine`` console script, run as a user runs it: exit codes, output, files."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path
from typing import Any

import pytest

from context_engine.formats.readers import read_transcript
from context_engine.summarize.gate import last_failure_line
from tests.cli.conftest import Runner
from tests.conftest import corpus_files
from tests.summarize.provider_server import ProviderServer, Reply, anthropic_ok, openai_ok


def totals_match_rows(data: dict[str, Any]) -> None:
    calls, rewrites, totals = data["calls"], data["rewrites"], data["totals"]
    assert totals["calls"] == len(calls)
    assert totals["tokens"] == sum(c["tokens"] for c in calls)
    assert totals["tokens_without"] == sum(c["tokens_without"] for c in calls)
    assert totals["prefix_reused"] == sum(c["prefix_reused"] for c in calls)
    assert totals["overflows"] == sum(c["overflow"] for c in calls)
    assert totals["rewrites"] == sum(r["changed"] for r in rewrites)
    assert totals["commits"] == sum(r["committed"] for r in rewrites)
    assert totals["breaker_trips"] == sum(r["reason"] == "circuit_breaker" for r in rewrites)


def test_console_script_prints_its_version(cli: Runner) -> None:
    ran = cli("--version")
    assert ran.code == 0
    assert ran.stdout.startswith("context-engine ")


def test_bad_usage_exits_2_without_a_traceback(cli: Runner, small_file: Path) -> None:
    ran = cli("replay", small_file, "--window", "9000", "--strategies", "zip")
    assert ran.code == 2
    assert "unknown strategy 'zip'" in ran.stderr
    assert "Traceback" not in ran.stderr


def test_inspect_shows_where_tokens_go_and_exits_0_when_it_fits(
    cli: Runner, small_file: Path, tmp_path: Path
) -> None:
    ran = cli("inspect", small_file, "--json", tmp_path / "inspect.json")
    assert ran.code == 0, ran.stderr
    for heading in ("Tokens by role", "Tokens by tool", "Largest 7 messages", "usage anchors"):
        assert heading in ran.stdout
    assert "fits" in ran.stdout
    assert "nothing: the transcript is at or below the threshold" in ran.stdout
    data = json.loads((tmp_path / "inspect.json").read_text(encoding="utf-8"))
    assert data["messages"] == 7
    assert sum(row["tokens"] for row in data["by_role"]) == data["counted_tokens"]
    assert sum(row["messages"] for row in data["by_role"]) == 7
    tools = {row["tool"]: row for row in data["by_tool"]}
    assert (tools["bash"]["calls"], tools["bash"]["results"]) == (1, 1)
    assert (tools["read_file"]["calls"], tools["read_file"]["results"]) == (1, 1)
    assert [a["index"] for a in data["anchors"]] == [2]
    assert data["largest"][0]["tool"] == "bash"
    assert data["largest"][0]["index"] == 3
    assert data["fits"] is True
    assert data["engine"]["steps"] == []


def test_inspect_exits_1_when_the_transcript_does_not_fit(cli: Runner, long_file: Path) -> None:
    ran = cli("inspect", long_file, "--window", "16000", "--json")
    assert ran.code == 1
    data = ran.json()
    assert data["fits"] is False
    assert data["tokens"] > data["threshold"]
    applied = [s for s in data["engine"]["steps"] if s["applied"]]
    assert len(applied) >= 1
    assert data["engine"]["fits"] is True


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_compact_writes_the_committed_messages_in_either_format(
    cli: Runner, long_file: Path, tmp_path: Path, fmt: str
) -> None:
    out = tmp_path / f"compacted.{fmt}"
    ran = cli(
        "compact",
        long_file,
        "--window",
        "32000",
        "-o",
        out,
        "--format",
        fmt,
        "--instructions",
        "keep the failing test names",
        "--json",
        tmp_path / "event.json",
    )
    assert ran.code == 0, ran.stderr
    assert "Compacted" in ran.stdout
    assert "Checkpoint" in ran.stdout
    written = read_transcript(out)
    assert written.format == fmt
    data = json.loads((tmp_path / "event.json").read_text(encoding="utf-8"))
    assert data["changed"] is True
    assert data["strategy"] == "full_summary"
    assert len(written.messages) == data["messages_after"] < data["messages_before"]
    assert sum(m.is_summary for m in written.messages) == 1
    assert data["summarizer_calls"] >= 1
    assert data["event"]["reason"] == "manual"
    assert "view" not in data["event"]


def test_compact_quietly_writes_next_to_the_input_by_default(cli: Runner, long_file: Path) -> None:
    ran = cli("compact", long_file, "--window", "32000", "--quiet")
    assert (ran.code, ran.stdout, ran.stderr) == (0, "", "")  # not even the tokenizer warning
    target = long_file.with_name("long.compacted.jsonl")
    assert read_transcript(target).messages[0].role == "system"


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("openai", marks=pytest.mark.extra("openai")),
        pytest.param("anthropic", marks=pytest.mark.extra("anthropic")),
    ],
)
def test_compact_with_a_provider_summarizer_reads_the_environment(
    cli: Runner, long_file: Path, tmp_path: Path, kind: str
) -> None:
    server = ProviderServer()
    body = openai_ok if kind == "openai" else anthropic_ok
    # The answer names every failure, or the quality gate would use the extractive digest.
    messages = read_transcript(long_file).messages
    failures = {last_failure_line(messages[: end + 1]) for end in range(len(messages))}
    named = "\n".join(f"- {line}" for line in sorted(f for f in failures if f))
    answer = f"<summary>The parser bug is fixed.\n{named}</summary>"
    server.queue(*(Reply(body=body(answer)),) * 4)
    env = (
        {"OPENAI_API_KEY": "test", "OPENAI_BASE_URL": "{url}/v1"}
        if kind == "openai"
        else {"ANTHROPIC_API_KEY": "test", "ANTHROPIC_BASE_URL": "{url}"}
    )
    out = tmp_path / "out.jsonl"
    with server.running():
        ran = cli(
            "compact",
            long_file,
            "--window",
            "32000",
            "--summarizer",
            f"{kind}:summary-model",
            "-o",
            out,
            env={k: v.format(url=server.url) for k, v in env.items()},
        )
    assert ran.code == 0, ran.stderr
    assert 1 <= len(server.requests) <= 4
    assert server.requests[0].body["model"] == "summary-model"
    checkpoint = next(m for m in read_transcript(out).messages if m.is_summary)
    assert "The parser bug is fixed." in checkpoint.text


def test_provider_summarizer_without_its_extra_says_what_to_install(
    cli: Runner, long_file: Path
) -> None:
    ran = cli(
        "compact",
        long_file,
        "--window",
        "32000",
        "--summarizer",
        "anthropic:claude-haiku",
        prelude="sys.modules['anthropic'] = None",
        env={"ANTHROPIC_API_KEY": "k"},
    )
    assert ran.code == 2
    assert "pip install 'context-engine[anthropic]'" in ran.stderr


def test_replay_writes_json_and_html_whose_totals_add_up(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    ran = cli(
        "replay",
        long_file,
        "--window",
        "8192",
        "--json",
        tmp_path / "events.json",
        "--html",
        tmp_path / "report.html",
    )
    assert ran.code == 0, ran.stderr
    assert "No problems" in ran.stdout
    assert "full_summary (committed)" in ran.stdout
    data = json.loads((tmp_path / "events.json").read_text(encoding="utf-8"))
    totals_match_rows(data)
    assert data["totals"]["commits"] >= 1
    assert data["totals"]["summarizer_calls"] >= data["totals"]["commits"]
    assert all(call["tokens"] <= 8192 for call in data["calls"])
    assert "<svg" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_replay_exits_1_when_views_stay_above_the_window(cli: Runner, long_file: Path) -> None:
    ran = cli("replay", long_file, "--window", "6000", "--strategies", "light_trim", "--json")
    assert ran.code == 1
    data = ran.json()
    totals_match_rows(data)
    assert data["totals"]["over_window"] >= 1
    assert len(data["problems"]) >= data["totals"]["over_window"]
    assert data["summarizer"] == "none"
    assert data["totals"]["summarizer_calls"] == 0


def test_replay_on_a_corpus_transcript(cli: Runner, tmp_path: Path) -> None:
    files = corpus_files()
    if not files:
        pytest.skip("../shared/corpus/dev is not present")
    largest = max(files, key=lambda p: p.stat().st_size)
    ran = cli("replay", largest, "--window", "16000", "--json", "-")
    assert ran.code == 0, ran.stderr
    data = ran.json()
    totals_match_rows(data)
    assert data["problems"] == []
    assert data["totals"]["commits"] >= 1


def test_demo_writes_a_session_and_a_report(cli: Runner, tmp_path: Path) -> None:
    ran = cli("demo", "--out", tmp_path, "--steps", "60", "--json", tmp_path / "demo.json")
    assert ran.code == 0, ran.stderr
    session = read_transcript(tmp_path / "demo-session.jsonl")
    assert len(session.messages) == 125  # system, user, 60 steps of two, one progress note, answer
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "context-engine demo" in report
    assert "<svg" in report
    data = json.loads((tmp_path / "demo.json").read_text(encoding="utf-8"))
    totals_match_rows(data)
    assert data["totals"]["commits"] >= 2, "the demo window must force several checkpoints"
    assert "full_summary (committed)" in ran.stdout


def test_tables_are_plain_text_without_rich(cli: Runner, long_file: Path) -> None:
    plain = cli("replay", long_file, "--window", "8192", prelude="sys.modules['rich'] = None")
    assert plain.code == 0, plain.stderr
    assert not set("┃┏━│") & set(plain.stdout)
    assert re.search(r"^calls +rewrites +reason +strategy", plain.stdout, re.MULTILINE)
    assert re.search(r"^-+  -+  -+", plain.stdout, re.MULTILINE)
    assert "full_summary (committed)" in plain.stdout


def test_replay_trace_prints_every_rewrites_decisions(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    ran = cli("replay", long_file, "--window", "8192", "--trace", "--json", tmp_path / "r.json")
    assert ran.code == 0, ran.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    decisions = [d for rewrite in data["rewrites"] for d in rewrite["decisions"]]
    assert any(d["action"] == "summary" for d in decisions)
    assert f"Assembly trace ({len(data['rewrites'])} rewrite(s)):" in ran.stdout
    for decision in decisions:
        assert f"{decision['source']}:{decision['item']}" in ran.stdout


def test_replay_with_a_context_file_budgets_it_on_every_call_and_charts_one_call(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    rules = tmp_path / "AGENTS.md"
    rules.write_text("Keep public names stable.\n" * 40, encoding="utf-8")
    ran = cli(
        "replay",
        long_file,
        "--window",
        "8192",
        "--context",
        rules,
        "--json",
        tmp_path / "r.json",
        "--html",
        tmp_path / "r.html",
        "--html-call",
        "3",
    )
    assert ran.code == 0, ran.stderr
    data = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    totals_match_rows(data)
    assert all(
        call["sources"] == {str(rules): data["calls"][0]["sources"][str(rules)]}
        for call in data["calls"]
    )
    assert all(call["tokens"] <= 8192 for call in data["calls"])
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "Budget by source, call 3" in page
    assert escape(str(rules)) in page


def test_replay_refuses_a_context_file_that_does_not_exist(cli: Runner, long_file: Path) -> None:
    ran = cli("replay", long_file, "--window", "8192", "--context", "/no/such/rules.md")
    assert ran.code == 2
    assert "--context /no/such/rules.md: no such file" in ran.stderr
