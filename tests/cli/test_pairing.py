"""Tool calls and results that do not pair up: warned with lines, ``--strict``, ``repair``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_engine.cli._pairing import MISSING_RESULT_TEXT
from context_engine.formats.readers import read_transcript
from tests.cli.conftest import Runner

_CALLS = [
    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
    {"id": "c2", "type": "function", "function": {"name": "cat", "arguments": "{}"}},
]
_BROKEN = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": None, "tool_calls": _CALLS},
    {"role": "tool", "tool_call_id": "c1", "content": "a b"},
    {"role": "user", "content": "hurry"},  # c2 was never answered
    {"role": "tool", "tool_call_id": "zz", "content": "stray"},  # answers no call
    {"role": "assistant", "content": "done"},
]


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in _BROKEN), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "command", [["inspect"], ["compact", "--window", "9000"], ["replay", "--window", "9000"]]
)
def test_every_command_warns_with_line_numbers(
    cli: Runner, broken: Path, command: list[str]
) -> None:
    ran = cli(command[0], broken, *command[1:], "--encoding", "cl100k_base")
    assert ran.code != 2, ran.stderr  # a warning, not an error
    assert "line 2: tool call 'c2' has no result before the user message at line 4" in ran.stderr
    assert "line 5: tool result for call 'zz' answers no call before it" in ran.stderr
    assert f"context-engine repair {broken}" in ran.stderr


def test_strict_fails_with_exit_2(cli: Runner, broken: Path) -> None:
    ran = cli("inspect", broken, "--strict")
    assert ran.code == 2
    assert "line 5" in ran.stderr
    assert "(--strict)" in ran.stderr


def test_a_valid_transcript_passes_strict_silently(cli: Runner, small_file: Path) -> None:
    ran = cli("inspect", small_file, "--strict", "--encoding", "cl100k_base")
    assert ran.code == 0
    assert ran.stderr == ""


def test_calls_still_open_at_the_end_are_not_a_problem(cli: Runner, tmp_path: Path) -> None:
    path = tmp_path / "waiting.jsonl"
    waiting = [_BROKEN[0], {"role": "assistant", "content": None, "tool_calls": _CALLS}]
    path.write_text("".join(json.dumps(m) + "\n" for m in waiting), encoding="utf-8")
    assert cli("inspect", path, "--strict").code == 0


def test_repair_writes_a_copy_that_passes_strict(cli: Runner, broken: Path) -> None:
    ran = cli("repair", broken)
    assert ran.code == 0, ran.stderr
    assert "added a placeholder result" in ran.stdout
    assert "removed the result" in ran.stdout
    fixed = broken.with_name("broken.repaired.jsonl")
    messages = read_transcript(fixed).messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert messages[3].tool_call_id == "c2"
    assert messages[3].text == MISSING_RESULT_TEXT
    assert all(m.text != "stray" for m in messages)
    assert cli("inspect", fixed, "--strict").code == 0
    assert json.loads(broken.read_text(encoding="utf-8").splitlines()[4])["content"] == "stray"


def test_repair_to_stdout(cli: Runner, broken: Path) -> None:
    ran = cli("repair", broken, "-o", "-")
    assert ran.code == 0
    assert len(ran.stdout.splitlines()) == 6
    assert "wrote standard output" in ran.stderr


def test_repair_of_a_valid_transcript_writes_nothing(cli: Runner, small_file: Path) -> None:
    ran = cli("repair", small_file)
    assert ran.code == 0
    assert "nothing written" in ran.stdout
    assert not small_file.with_name("small.repaired.jsonl").exists()
