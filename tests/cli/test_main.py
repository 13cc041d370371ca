"""``context_engine.cli.main`` in-process: help, every bad-usage path, and inspect on the corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_engine.cli import main
from context_engine.formats.readers import read_transcript


def exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse: --help, --version and usage errors
        return int(exc.code or 0)


@pytest.mark.parametrize(
    "command",
    [[], ["inspect"], ["compact"], ["replay"], ["repair"], ["demo"]],
    ids=["top", "inspect", "compact", "replay", "repair", "demo"],
)
def test_every_command_has_help_with_exit_codes(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    assert exit_code([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: context-engine")
    assert "exit codes:" in out
    assert "2  bad usage or unreadable input" in out


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert exit_code([]) == 2
    assert "usage: context-engine" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect"], "required: FILE"),
        (["replay", "{small}"], "--window"),
        (["replay", "{small}", "--window", "0"], "must be positive"),
        (["replay", "{small}", "--window", "lots"], "expected a number of tokens"),
        (["replay", "{small}", "--window", "9000", "--reserve", "-5"], "must be positive"),
        (["replay", "{small}", "--window", "9000", "--strategies", ","], "at least one"),
        (["replay", "{small}", "--window", "9000", "--strategies", "summary,summary"], "twice"),
        (["compact", "{small}", "--window", "9000", "--summarizer", "gpt-4o"], "--summarizer"),
        (["compact", "{small}", "--window", "9000", "--summarizer", "openai:"], "--summarizer"),
        (["compact", "{small}", "--window", "9000", "--format", "xml"], "invalid choice"),
        (["compact", "{small}", "--window", "9000", "-o", "{nodir}"], "cannot write"),
        (["inspect", "{missing}"], "no such file"),
        (["inspect", "{empty}"], "cannot read"),
        (["replay", "{garbage}", "--window", "9000"], "cannot read"),
        (["replay", "{small}", "--window", "9000", "--html", "{nodir}"], "cannot write"),
        (["demo", "--out", "{file_as_dir}"], "cannot create"),
    ],
    ids=[
        "no-file",
        "no-window",
        "zero-window",
        "word-window",
        "negative-reserve",
        "empty-strategies",
        "repeated-strategy",
        "unknown-summarizer",
        "summarizer-without-model",
        "unknown-format",
        "output-in-missing-dir",
        "missing-file",
        "empty-file",
        "not-json",
        "html-in-missing-dir",
        "demo-out-is-a-file",
    ],
)
def test_bad_usage_and_unreadable_input_exit_2(
    capsys: pytest.CaptureFixture[str],
    small_file: Path,
    tmp_path: Path,
    args: list[str],
    message: str,
) -> None:
    (tmp_path / "garbage.jsonl").write_text("this is not json\n", encoding="utf-8")
    (tmp_path / "empty.jsonl").write_text("", encoding="utf-8")
    paths = {
        "small": small_file,
        "missing": tmp_path / "nope.jsonl",
        "garbage": tmp_path / "garbage.jsonl",
        "empty": tmp_path / "empty.jsonl",
        "nodir": tmp_path / "no" / "such" / "dir" / "out.jsonl",
        "file_as_dir": small_file,
    }
    assert exit_code([a.format(**paths) for a in args]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.extra("cli")
def test_rich_draws_the_tables_when_installed(
    capsys: pytest.CaptureFixture[str], long_file: Path
) -> None:
    assert main(["replay", str(long_file), "--window", "8192"]) == 0
    out = capsys.readouterr().out
    assert "┃ calls" in out
    assert "full_summary (committed)" in out


def test_inspect_every_corpus_transcript(
    capsys: pytest.CaptureFixture[str], corpus_path: Path, tmp_path: Path
) -> None:
    target = tmp_path / "inspect.json"
    code = main(["inspect", str(corpus_path), "--window", "32000", "--json", str(target)])
    data = json.loads(target.read_text(encoding="utf-8"))
    assert code == (0 if data["fits"] else 1)
    assert data["messages"] == len(read_transcript(corpus_path).messages)
    assert sum(row["tokens"] for row in data["by_role"]) == data["counted_tokens"]
    tool_results = sum(row["results"] for row in data["by_tool"])
    assert tool_results == next((r["messages"] for r in data["by_role"] if r["role"] == "tool"), 0)
    if not data["fits"]:
        assert data["engine"]["steps"], "a transcript over the threshold must run strategies"
    assert "Tokens by role" in capsys.readouterr().out
