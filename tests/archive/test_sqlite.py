"""SQLiteArchive: migrations, several processes on one file, processes killed mid-write."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_engine.archive import SQLiteArchive, encode_messages
from context_engine.archive.sqlite import SCHEMA_VERSION
from context_engine.errors import ArchiveError, ConfigurationError
from context_engine.messages import Message
from tests.archive import _workers
from tests.archive.conftest import record, rich_messages, tool_record

SPAWN = multiprocessing.get_context("spawn")

V1_SCHEMA = """
CREATE TABLE records (
    session_id TEXT NOT NULL,
    reference TEXT NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, reference));
CREATE TABLE state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
PRAGMA user_version = 1;
"""


def run_processes(target: Callable[..., None], arguments: list[tuple[Any, ...]]) -> None:
    """Start one spawned process per argument tuple at once and wait; each must exit 0."""
    processes = [SPAWN.Process(target=target, args=args) for args in arguments]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=120)
    assert [p.exitcode for p in processes] == [0] * len(processes)


def make_v1_file(path: Path, rows: list[tuple[str, str, str, str]], state: dict[str, str]) -> None:
    """A file as release 1 wrote it: no created_at, no seq, no tool-call index."""
    connection = sqlite3.connect(path)
    connection.executescript(V1_SCHEMA)
    connection.executemany("INSERT INTO records VALUES (?, ?, ?, ?)", rows)
    connection.executemany("INSERT INTO state VALUES (?, ?)", state.items())
    connection.commit()
    connection.close()


def v1_rows(*records: tuple[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(session, r.reference, r.kind, encode_messages(r.messages)) for session, r in records]


def columns(path: Path, table: str) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        return [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
    finally:
        connection.close()


def user_version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


def integrity(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return str(connection.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        connection.close()


# -- schema -----------------------------------------------------------------------------


async def test_a_new_file_gets_the_current_schema_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    archive = SQLiteArchive(path)
    await archive.close()
    assert user_version(path) == SCHEMA_VERSION == 2
    assert columns(path, "records") == [
        "seq", "session_id", "reference", "kind", "body", "created_at",
    ]  # fmt: skip
    assert columns(path, "tool_results") == ["session_id", "tool_call_id", "seq"]
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()


async def test_a_version_1_file_is_migrated_and_its_records_stay_readable(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v1.db"
    rich = record("messages", *rich_messages())
    first, second = tool_record("c1", "first result"), tool_record("c2", "second result")
    other = tool_record("c1", "another session")
    # Inserted in an order unlike the references' sort order: the migration keeps it.
    make_v1_file(
        path,
        v1_rows(("s", second), ("t", other), ("s", rich), ("s", first)),
        {"failures": "2", "seed": "memory text"},
    )
    assert columns(path, "records") == ["session_id", "reference", "kind", "body"]

    archive = SQLiteArchive(path)
    assert user_version(path) == 2
    assert "created_at" in columns(path, "records")
    got = await archive.records("s")
    assert [r.reference for r in got] == [second.reference, rich.reference, first.reference]
    assert got == [second, rich, first]
    assert encode_messages(got[1].messages) == encode_messages(rich.messages)
    assert {r.created_at for r in got} == {0.0}  # release 1 did not record the time
    assert await archive.find_tool_result("s", "c1") == first
    assert await archive.find_tool_result("t", "c1") == other
    assert await archive.get_state("failures") == "2"
    assert await archive.increment_state("failures") == 3
    third = tool_record("c3", "written after the migration")
    await archive.put("s", [third, first])
    after = await archive.records("s")
    assert [r.reference for r in after] == [r.reference for r in (second, rich, first, third)]
    assert after[-1].created_at > 0
    assert await archive.sessions() == ["s", "t"]
    await archive.close()
    reopened = SQLiteArchive(path)  # already current: opening again changes nothing
    assert await reopened.records("s") == after
    await reopened.close()


async def test_a_migration_that_fails_leaves_the_file_at_its_old_version(tmp_path: Path) -> None:
    path = tmp_path / "broken.db"
    good = tool_record("c1", "fine")
    make_v1_file(path, [*v1_rows(("s", good)), ("s", "arc-bad", "tool_result", "{not json")], {})
    with pytest.raises(ArchiveError, match=str(path)):
        SQLiteArchive(path)
    assert user_version(path) == 1
    assert columns(path, "records") == ["session_id", "reference", "kind", "body"]
    assert integrity(path) == "ok"


def test_several_processes_opening_a_version_1_file_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    rows = [tool_record(f"c{n}", f"result {n}") for n in range(50)]
    make_v1_file(path, v1_rows(*(("s", r) for r in rows)), {})
    run_processes(_workers.open_only, [(str(path),)] * 4)
    assert user_version(path) == 2
    connection = sqlite3.connect(path)
    assert connection.execute("SELECT count(*) FROM records").fetchone()[0] == 50
    assert connection.execute("SELECT count(*) FROM tool_results").fetchone()[0] == 50
    connection.close()


def test_a_file_from_a_newer_release_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    connection = sqlite3.connect(path)
    connection.execute("CREATE TABLE records (anything TEXT)")
    connection.execute("PRAGMA user_version = 99")
    connection.commit()
    connection.close()
    with pytest.raises(ArchiveError, match=r"schema version 99 .*upgrade context-engine"):
        SQLiteArchive(path)
    assert user_version(path) == 99
    assert columns(path, "records") == ["anything"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b"this is not a database, just text " * 200), "not a database"),
        (lambda p: None, "unable to open"),
    ],
    ids=["not-a-database", "missing-directory"],
)
def test_a_file_that_cannot_be_used_is_an_archive_error_naming_it(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "data.db" if message != "unable to open" else tmp_path / "no" / "data.db"
    make(path)
    with pytest.raises(ArchiveError, match=message) as caught:
        SQLiteArchive(path)
    assert str(path) in str(caught.value)


@pytest.mark.parametrize("timeout", [0, -1, "5", True], ids=["zero", "negative", "str", "bool"])
def test_a_bad_timeout_is_a_configuration_error(tmp_path: Path, timeout: Any) -> None:
    with pytest.raises(ConfigurationError, match="positive number of seconds"):
        SQLiteArchive(tmp_path / "a.db", timeout=timeout)


async def test_an_archive_used_after_close_says_so(tmp_path: Path) -> None:
    archive = SQLiteArchive(tmp_path / "a.db")
    await archive.close()
    await archive.close()
    with pytest.raises(ArchiveError, match="used after close"):
        await archive.records("s")


# -- several processes ----------------------------------------------------------------------


async def test_four_processes_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    """800 records from 4 processes racing for one file: all stored, indexed and in order."""
    path = tmp_path / "shared.db"
    await SQLiteArchive(path).close()  # the file exists before the workers race for it
    run_processes(_workers.write_many, [(str(path), worker, 200) for worker in range(4)])
    assert integrity(path) == "ok"
    archive = SQLiteArchive(path)
    assert await archive.sessions() == ["shared-0", "shared-1"]
    for session, workers in (("shared-0", (0, 2)), ("shared-1", (1, 3))):
        got = await archive.records(session)
        assert len(got) == 400
        for worker in workers:
            ids = [i for r in got for i in r.tool_call_ids if i.startswith(f"w{worker}-")]
            assert ids == [f"w{worker}-c{n}" for n in range(200)]
            found = await archive.find_tool_result(session, f"w{worker}-c199")
            assert found is not None
            assert found.messages[0].text == f"worker {worker} result 199"
    await archive.close()


def test_increments_from_four_processes_add_up_exactly(tmp_path: Path) -> None:
    """The workers also race to create the file, switch it to WAL and lay out the schema."""
    path = tmp_path / "counter.db"
    run_processes(_workers.increment_many, [(str(path), 150)] * 4)
    connection = sqlite3.connect(path)
    value = connection.execute("SELECT value FROM state WHERE key = 'counter'").fetchone()[0]
    connection.close()
    assert value == "600"


async def test_a_process_killed_inside_a_put_leaves_none_of_it_and_a_sound_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "killed.db"
    archive = SQLiteArchive(path)
    kept = [tool_record(f"kept-{n}", f"kept {n}") for n in range(5)]
    await archive.put("doomed", kept)
    ready = SPAWN.Event()
    child = SPAWN.Process(target=_workers.hang_inside_put, args=(str(path), ready, 100, 400))
    child.start()
    try:
        assert ready.wait(timeout=60), "the child never reached the middle of its put"
        # The child holds the write lock with 100 uncommitted rows; readers still see the old state.
        assert len(await archive.records("doomed")) == 5
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    await archive.close()

    assert integrity(path) == "ok"
    after = SQLiteArchive(path, timeout=5)
    got = await after.records("doomed")
    assert got == kept
    assert await after.find_tool_result("doomed", "doomed-0") is None
    await after.put("doomed", [tool_record("later", "the lock was released")])  # not stuck
    assert len(await after.records("doomed")) == 6
    await after.close()


async def test_a_new_process_recalls_what_an_old_one_wrote(tmp_path: Path) -> None:
    path = tmp_path / "handover.db"
    texts = ["first output", "second output — 第二"]
    run_processes(_workers.write_and_exit, [(str(path), "agent-7", texts)])
    archive = SQLiteArchive(path)
    written = [tool_record(f"c{n}", t) for n, t in enumerate(texts)]
    assert await archive.records("agent-7") == written
    assert await archive.get_state("written-by") == "old process"
    mine = record("messages", *rich_messages(), Message.user("and this"))
    await archive.put("agent-7", [mine])
    await archive.close()

    answers = SPAWN.Queue()
    run_processes(_workers.recall, [(str(path), "agent-7", mine.reference, answers)])
    assert answers.get(timeout=10) == ("messages", encode_messages(mine.messages))
    run_processes(_workers.recall, [(str(path), "other-session", mine.reference, answers)])
    assert answers.get(timeout=10) is None
