"""``context-engine archive list|show|export`` and ``replay --archive``, as operators run them."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from context_engine.archive import SQLiteArchive, reference_for
from context_engine.archive.codec import message_from_dict
from context_engine.cli import main
from context_engine.cli._age import parse_age
from context_engine.formats.openai import from_openai
from context_engine.formats.readers import write_transcript
from context_engine.testing import synthetic_session
from tests.archive.conftest import (
    REDIS_URL,
    connect_redis,
    delete_prefix,
    new_prefix,
    rich_messages,
    tool_record,
)
from tests.archive.conftest import record as make_record
from tests.cli.conftest import Runner


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def session_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("archive-cli") / "agent-run.jsonl"
    write_transcript(path, synthetic_session(60))
    return path


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A SQLite archive with two sessions: a checkpointed range and two cleared results."""
    path = tmp_path / "filled.db"

    async def fill() -> None:
        archive = SQLiteArchive(path)
        await archive.put("s1", [make_record("messages", *rich_messages())])
        await archive.put("s1", [tool_record("c1", "first output"), tool_record("c2", "second")])
        await archive.put("s2", [tool_record("c1", "other session")])
        await archive.close()

    asyncio.run(fill())
    return path


def lines_of(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_replay_with_an_archive_keeps_every_original_the_operator_can_export(
    session_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "replay.db"
    code, out, err = run(
        ["replay", str(session_file), "--window", "8000", "--archive", f"sqlite:{db}"], capsys
    )
    assert code == 0, err
    assert "archived " in out
    assert "of session agent-run in sqlite:" in out  # the session defaults to the file's stem
    code, out, _ = run(["archive", "list", "agent-run", "--archive", str(db), "--json"], capsys)
    assert code == 0
    listed = json.loads(out)
    assert len(listed) >= 10
    assert {row["kind"] for row in listed} >= {"tool_result"}
    code, out, _ = run(["archive", "export", "agent-run", "--archive", str(db)], capsys)
    assert code == 0
    exported = lines_of(out)
    assert [line["reference"] for line in exported] == [row["reference"] for row in listed]
    for line in exported:  # lossless: the messages hash back to their own reference
        messages = [message_from_dict(m) for m in line["messages"]]
        assert reference_for(messages) == line["reference"]
        assert line["session_id"] == "agent-run"
        assert line["created_at"] > 0


def test_list_shows_each_record_and_the_sessions(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["archive", "list", "s1", "--archive", f"sqlite:{filled}"], capsys)
    assert code == 0
    assert "Archive of session s1 (3 records, oldest first)" in out
    assert out.count("arc-") == 3
    assert "messages" in out
    assert "tool_result" in out
    code, out, _ = run(["archive", "list", "--sessions", "--archive", str(filled)], capsys)
    assert (code, out.split()) == (0, ["s1", "s2"])


def test_the_archive_url_comes_from_the_environment_when_not_given(
    filled: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTEXT_ENGINE_ARCHIVE", f"sqlite:{filled}")
    code, out, _ = run(["archive", "list", "--sessions"], capsys)
    assert (code, out.split()) == (0, ["s1", "s2"])


def test_show_prints_the_originals_and_json_matches_the_export(
    filled: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = make_record("messages", *rich_messages()).reference
    code, out, _ = run(["archive", "show", "s1", reference, "--archive", str(filled)], capsys)
    assert code == 0
    assert out.startswith(f"{reference} in session s1: messages, 4 message(s), stored ")
    for expected in (
        "[1] checkpoint",
        "(references: arc-0123456789abcdef0123, arc-fedcba9876543210fedc)",
        "[image https://example.invalid/a.png]",
        "[thinking] the user wants a diff",
        '-> bash({"command": "pytest -q",  "timeout": 60})  [call_1]',
        "[4] tool name=bash tool_call_id=call_1",
    ):
        assert expected in out
    code, shown, _ = run(
        ["archive", "show", "s1", reference, "--archive", str(filled), "--json"], capsys
    )
    assert code == 0
    code, exported, _ = run(["archive", "export", "s1", "--archive", str(filled)], capsys)
    assert json.loads(shown) == lines_of(exported)[0]


def test_export_writes_a_file_in_either_form(
    filled: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "s1.jsonl"
    argv = ["archive", "export", "s1", "--archive", str(filled), "-o", str(target)]
    code, out, _ = run([*argv, "--format", "openai"], capsys)
    assert code == 0
    assert f"wrote 3 records of session s1 to {target}" in out
    lines = lines_of(target.read_text(encoding="utf-8"))
    assert [line["kind"] for line in lines] == ["messages", "tool_result", "tool_result"]
    messages = from_openai(lines[0]["messages"])
    assert [m.role for m in messages] == ["user", "user", "assistant", "tool"]
    assert messages[0].is_summary  # the OpenAI form keeps the checkpoint and its references
    assert "arc-0123456789abcdef0123" in messages[0].text
    assert lines[2]["messages"] == [
        {"role": "tool", "tool_call_id": "c2", "name": "bash", "content": "second"}
    ]


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["archive", "list", "nobody"], 1, "session 'nobody' has no records"),
        (["archive", "export", "nobody"], 1, "session 'nobody' has no records"),
        (["archive", "show", "s1", "arc-00000000000000000000"], 1, "archive list s1"),
        (["archive", "show", "s2", "REF-OF-S1"], 1, "is not in the archive of session 's2'"),
        (["archive", "list"], 2, "give a SESSION"),
        (["archive", "list", "s1", "--sessions"], 2, "not both"),
    ],
    ids=[
        "unknown-session",
        "export-unknown-session",
        "unknown-reference",
        "reference-of-another-session",
        "no-session",
        "session-and-sessions",
    ],
)
def test_what_is_not_there_exits_1_and_bad_usage_exits_2(
    filled: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    code: int,
    message: str,
) -> None:
    reference = make_record("messages", *rich_messages()).reference
    argv = [a.replace("REF-OF-S1", reference) for a in argv]
    got, _, err = run([*argv, "--archive", str(filled)], capsys)
    assert got == code
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (None, "pass --archive URL"),
        ("ftp://example.invalid/x", "unknown archive URL"),
        ("sqlite:NO_DIR/x.db", "no such file"),
        ("redis://:secret@127.0.0.1:1/0?socket_connect_timeout=1", "redis://:***@127.0.0.1:1/0"),
    ],
    ids=["none-given", "unknown-scheme", "unopenable-file", "unreachable-redis"],
)
def test_an_archive_that_cannot_be_used_exits_2_naming_it(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    archive: str | None,
    message: str,
) -> None:
    monkeypatch.delenv("CONTEXT_ENGINE_ARCHIVE", raising=False)
    argv = ["archive", "list", "--sessions"]
    if archive is not None:
        argv += ["--archive", archive.replace("NO_DIR", str(tmp_path / "missing"))]
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert "secret" not in err
    assert "Traceback" not in err


def test_replay_session_without_archive_is_bad_usage(
    session_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(["replay", str(session_file), "--window", "8000", "--session", "x"], capsys)
    assert code == 2
    assert "give --archive URL" in err


def test_a_record_migrated_from_version_1_shows_no_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"
    record = tool_record("c1", "from the first release")
    connection = sqlite3.connect(path)
    connection.executescript(
        "CREATE TABLE records (session_id TEXT NOT NULL, reference TEXT NOT NULL, kind TEXT "
        "NOT NULL, body TEXT NOT NULL, PRIMARY KEY (session_id, reference));"
        "CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL); PRAGMA user_version = 1;"
    )
    from context_engine.archive import encode_messages

    connection.execute(
        "INSERT INTO records VALUES ('old', ?, 'tool_result', ?)",
        (record.reference, encode_messages(record.messages)),
    )
    connection.commit()
    connection.close()
    code, out, _ = run(["archive", "show", "old", record.reference, "--archive", str(path)], capsys)
    assert code == 0
    assert "stored -" in out
    assert "from the first release" in out


def test_replay_into_redis_then_read_back_with_the_console_script(
    cli: Runner, session_file: Path
) -> None:
    prefix = new_prefix()
    url = f"{REDIS_URL}?prefix={prefix}"

    async def probe() -> None:
        client = await connect_redis()  # skips without a server
        await client.aclose()

    asyncio.run(probe())
    try:
        ran = cli("replay", session_file, "--window", "8000", "--archive", url, "--session", "w1")
        assert ran.code == 0, ran.stderr
        assert f"of session w1 in {url}" in ran.stdout
        ran = cli("archive", "list", "w1", "--json", env={"CONTEXT_ENGINE_ARCHIVE": url})
        assert ran.code == 0, ran.stderr
        listed = json.loads(ran.stdout)
        assert len(listed) >= 10
        ran = cli("archive", "show", "w1", listed[0]["reference"], "--archive", url)
        assert ran.code == 0, ran.stderr
        assert listed[0]["reference"] in ran.stdout
    finally:

        async def cleanup() -> None:
            client = await connect_redis()
            await delete_prefix(client, prefix)
            await client.aclose()

        asyncio.run(cleanup())


@pytest.mark.parametrize(
    "command",
    [
        ["archive"],
        ["archive", "list"],
        ["archive", "show"],
        ["archive", "export"],
        ["archive", "delete"],
        ["archive", "expire"],
    ],
    ids=["archive", "list", "show", "export", "delete", "expire"],
)
def test_every_archive_command_has_help_with_exit_codes(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    code, out, _ = run([*command, "--help"], capsys)
    assert code == 0
    assert out.startswith("usage: context-engine archive")
    assert "1  the session has no records, or the reference (or tool call) is not in it" in out
    assert "CONTEXT_ENGINE_ARCHIVE" in out


def test_archive_without_an_action_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["archive"], capsys)
    assert code == 2
    assert "ACTION" in err


# -- housekeeping and tool-call lookup (issue 20) ----------------------------------------------


def test_show_finds_a_cleared_result_by_its_tool_call_id(cli: Runner, filled: Path) -> None:
    ran = cli("archive", "show", "s1", "c2", "--archive", filled)
    assert ran.code == 0, ran.stderr
    assert "tool_call_id=c2" in ran.stdout
    assert "second" in ran.stdout
    ran = cli("archive", "show", "s1", "c404", "--archive", filled)
    assert ran.code == 1
    assert "'c404' is not in the archive of session 's1'" in ran.stderr


def test_delete_removes_one_session_and_says_how_many_records(cli: Runner, filled: Path) -> None:
    ran = cli("archive", "delete", "s1", "--archive", filled)
    assert ran.code == 0, ran.stderr
    assert "deleted 3 records of session s1" in ran.stdout
    ran = cli("archive", "list", "--sessions", "--archive", filled)
    assert ran.stdout.split() == ["s2"]
    ran = cli("archive", "delete", "s1", "--archive", filled)
    assert ran.code == 1
    assert "has no records" in ran.stderr


def test_expire_removes_what_is_older_than_the_age(cli: Runner, filled: Path) -> None:
    # s1's checkpointed range was stored 8 days ago (the connection's `with` only commits).
    with closing(sqlite3.connect(filled)) as connection, connection:
        connection.execute(
            "UPDATE records SET created_at = created_at - 8 * 86400 "
            "WHERE session_id = 's1' AND kind = 'messages'"
        )
    ran = cli("archive", "expire", "--older-than", "7d", "--archive", filled)
    assert ran.code == 0, ran.stderr
    assert "deleted 1 records stored before" in ran.stdout
    ran = cli("archive", "list", "s1", "--json", "--archive", filled)
    assert [r["kind"] for r in json.loads(ran.stdout)] == ["tool_result", "tool_result"]
    ran = cli("archive", "expire", "--older-than", "7d", "--archive", filled)
    assert "deleted 0 records" in ran.stdout


@pytest.mark.parametrize("age", ["soon", "-5", "7y", ""], ids=["word", "negative", "unit", "empty"])
def test_expire_with_an_age_it_cannot_read_is_bad_usage(
    capsys: pytest.CaptureFixture[str], filled: Path, age: str
) -> None:
    code, _, err = run(["archive", "expire", "--older-than", age, "--archive", str(filled)], capsys)
    assert code == 2
    assert "give an age like" in err
    code, out, _ = run(["archive", "list", "--sessions", "--archive", str(filled)], capsys)
    assert out.split() == ["s1", "s2"]  # nothing was deleted


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3600", 3600),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43_200),
        ("7d", 604_800),
        ("2w", 1_209_600),
        ("1.5h", 5_400),
    ],
)
def test_ages_read_as_seconds(text: str, seconds: float) -> None:
    assert parse_age(text) == seconds
