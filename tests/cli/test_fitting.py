"""``compact`` runs replay's pipeline until the result fits; ``inspect`` takes the same pipeline
options and says why a strategy did not apply; tool schemas count in every call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_engine import Message
from context_engine.formats.readers import read_transcript, write_transcript
from context_engine.testing import synthetic_session
from tests.cli.conftest import Runner

EXACT = ("--encoding", "cl100k_base")


def _data(stdout: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(stdout)
    return data


def test_compact_fits_where_the_checkpoint_alone_stays_above_the_threshold(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out.jsonl"
    ran = cli(
        "compact", long_file, "--window", "6000", "--keep-tail", "3000", "-o", target,
        "--json", "-", *EXACT,
    )  # fmt: skip
    assert ran.code == 0, ran.stderr
    data = _data(ran.stdout)
    assert data["event"]["tokens_after"] > data["threshold"]  # /compact alone was not enough
    assert data["fit_event"] is not None
    assert data["fits"] is True
    assert data["tokens_after"] <= data["threshold"]
    assert len(read_transcript(target).messages) == data["messages_after"]


def test_compact_prints_each_pipeline_step_and_the_protected_parts(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    ran = cli(
        "compact", long_file, "--window", "6000", "--keep-tail", "3000",
        "-o", tmp_path / "o.jsonl", *EXACT,
    )  # fmt: skip
    assert "above the threshold; the pipeline" in ran.stdout
    assert "hard_truncate: applied" in ran.stdout
    assert "light_trim: no - " in ran.stdout
    assert "Protected (no strategy removes these)" in ran.stdout
    assert "newest user message" in ran.stdout


def test_compact_that_cannot_fit_names_what_is_protected_and_exits_1(
    cli: Runner, tmp_path: Path
) -> None:
    session = [Message.system("Rules. " + "Always follow rule number seven. " * 900)]
    session += list(synthetic_session(10))[1:]
    path = tmp_path / "huge-system.jsonl"
    write_transcript(path, session)
    ran = cli(
        "compact", path, "--window", "6000", "-o", tmp_path / "o.jsonl", "--json", "-", *EXACT
    )
    assert ran.code == 1
    data = _data(ran.stdout)
    assert data["fits"] is False
    system = next(part for part in data["protected"] if part["part"] == "system")
    assert system["tokens"] > data["threshold"]
    assert system["why"]


def test_keep_tail_sets_what_the_checkpoint_keeps_verbatim(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    def kept(*extra: str) -> int:
        ran = cli(
            "compact", long_file, "--window", "16000", "-o", tmp_path / "o.jsonl",
            "--json", "-", *EXACT, *extra,
        )  # fmt: skip
        assert ran.code == 0, ran.stderr
        count: int = _data(ran.stdout)["kept_count"]
        return count

    assert kept("--keep-tail", "300") < kept("--keep-tail", "3000")


def test_compact_of_a_short_transcript_says_why_there_is_no_checkpoint(
    cli: Runner, small_file: Path, tmp_path: Path
) -> None:
    ran = cli("compact", small_file, "--window", "9000", "-o", tmp_path / "o.jsonl", *EXACT)
    assert ran.code == 0, ran.stderr
    assert "No checkpoint for" in ran.stdout


def test_inspect_takes_the_pipeline_replay_runs(cli: Runner, long_file: Path) -> None:
    ran = cli(
        "inspect", long_file, "--window", "9000", "--strategies", "light_trim,hard_truncate",
        "--json", "-", *EXACT,
    )  # fmt: skip
    data = _data(ran.stdout)
    assert data["strategies"] == ["light_trim", "hard_truncate"]
    assert data["summarizer"] == "none"
    assert [step["name"] for step in data["engine"]["steps"]] == ["light_trim", "hard_truncate"]


def test_inspect_predicts_the_first_call_replay_makes(cli: Runner, long_file: Path) -> None:
    inspect = _data(cli("inspect", long_file, "--window", "9000", "--json", "-", *EXACT).stdout)
    replay = _data(cli("replay", long_file, "--window", "9000", "--json", "-", *EXACT).stdout)
    assert inspect["strategies"] == replay["strategies"]
    assert inspect["summarizer"] == replay["summarizer"]


def test_inspect_rejects_an_unknown_summarizer(cli: Runner, small_file: Path) -> None:
    ran = cli("inspect", small_file, "--summarizer", "gpt-4o")
    assert ran.code == 2
    assert "--summarizer" in ran.stderr


def test_every_strategy_that_did_not_apply_says_why(cli: Runner, long_file: Path) -> None:
    ran = cli("inspect", long_file, "--window", "6000", "--json", "-", *EXACT)
    steps = _data(ran.stdout)["engine"]["steps"]
    assert any(not step["applied"] for step in steps)
    for step in steps:
        assert step["reason"]
        if not step["applied"] and not step["error"]:
            assert not step["reason"].startswith("removed")
    table = cli("inspect", long_file, "--window", "6000", *EXACT).stdout
    assert "why" in table


def _tools(count: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{n}",
                "description": f"Tool number {n}: reads a file and reports what it found there.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "the file to read"},
                        "limit": {"type": "integer", "description": "most lines to return"},
                    },
                    "required": ["path"],
                },
            },
        }
        for n in range(count)
    ]


@pytest.fixture
def body_with_tools(tmp_path: Path) -> Path:
    path = tmp_path / "body.json"
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "tools": _tools(30),
    }
    path.write_text(json.dumps(body), encoding="utf-8")
    return path


def test_tool_schemas_in_a_request_body_are_counted(cli: Runner, body_with_tools: Path) -> None:
    data = _data(cli("inspect", body_with_tools, "--json", "-", *EXACT).stdout)
    overhead = data["overhead"]
    assert overhead["tools"] == 30
    assert overhead["tools_tokens"] > 30 * 40
    assert data["tokens"] >= overhead["tools_tokens"] + data["counted_tokens"]


def test_overhead_adds_to_every_count(cli: Runner, body_with_tools: Path) -> None:
    base = _data(cli("inspect", body_with_tools, "--json", "-", *EXACT).stdout)
    more = _data(
        cli("inspect", body_with_tools, "--overhead", "1_000", "--json", "-", *EXACT).stdout
    )
    assert more["tokens"] == base["tokens"] + 1000
    assert more["overhead"]["extra"] == 1000


def test_replay_counts_the_tool_schemas_in_every_call(
    cli: Runner, body_with_tools: Path, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.json"
    body = json.loads(body_with_tools.read_text(encoding="utf-8"))
    plain.write_text(json.dumps({"messages": body["messages"]}), encoding="utf-8")
    with_tools = _data(
        cli("replay", body_with_tools, "--window", "9000", "--json", "-", *EXACT).stdout
    )
    without = _data(cli("replay", plain, "--window", "9000", "--json", "-", *EXACT).stdout)
    schema_tokens = with_tools["totals"]["tokens"] - without["totals"]["tokens"]
    assert schema_tokens > 30 * 40
