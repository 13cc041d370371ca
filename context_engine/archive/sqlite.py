"""`SQLiteArchive`: the archive in one SQLite file, shared by the processes of one machine.

The file is in WAL mode, so readers never wait for a writer and a writer waits
for another one (``busy_timeout``) instead of failing. Every write is one
``BEGIN IMMEDIATE`` transaction: a `put` is stored whole or not at all, also
when the process is killed in the middle of it, and `increment_state` is a
read-modify-write no other process can interleave with.

The schema carries its version in ``PRAGMA user_version``. Opening a file
applies the migrations it lacks, in order, in one transaction; a file written
by a newer release is refused rather than misread.

Threads: the archive holds one connection, guarded by a lock, and runs every
blocking call in a worker thread (`asyncio.to_thread`), so the event loop never
waits on the disk. SQLite serialises writers anyway; one connection keeps the
archive's statements in order and its resources easy to release.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from context_engine._validate import check_number
from context_engine.archive.base import ArchiveRecord, check_session_id, expiry_cutoff
from context_engine.archive.codec import decode_messages, encode_messages
from context_engine.errors import ArchiveCodecError, ArchiveError

__all__ = ["SCHEMA_VERSION", "SQLiteArchive"]

T = TypeVar("T")

_V1 = (
    """CREATE TABLE IF NOT EXISTS records (
        session_id TEXT NOT NULL,
        reference TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (session_id, reference))""",
    "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
"""Version 1: records without a creation time, ordered by the implicit rowid
(which ``VACUUM`` may renumber), and no index of tool-call ids."""

_V2 = (
    """CREATE TABLE records_v2 (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL,
        reference TEXT NOT NULL,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT 0,
        UNIQUE (session_id, reference))""",
    """INSERT INTO records_v2 (session_id, reference, kind, body)
        SELECT session_id, reference, kind, body FROM records ORDER BY rowid""",
    "DROP TABLE records",
    "ALTER TABLE records_v2 RENAME TO records",
    """CREATE TABLE tool_results (
        session_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        PRIMARY KEY (session_id, tool_call_id, seq)) WITHOUT ROWID""",
)
"""Version 2: an explicit ``seq`` keeps the order, ``created_at`` is recorded
(0 for records migrated from version 1, whose time is unknown), and
``tool_results`` indexes the tool-call ids of ``tool_result`` records."""


def _migrate_to_v1(connection: sqlite3.Connection) -> None:
    for statement in _V1:
        connection.execute(statement)


def _migrate_to_v2(connection: sqlite3.Connection) -> None:
    for statement in _V2:
        connection.execute(statement)
    rows = connection.execute(
        "SELECT seq, session_id, body FROM records WHERE kind = 'tool_result' ORDER BY seq"
    ).fetchall()
    for seq, session_id, body in rows:
        for message in decode_messages(body):
            if message.tool_call_id:
                connection.execute(
                    "INSERT OR IGNORE INTO tool_results VALUES (?, ?, ?)",
                    (session_id, message.tool_call_id, seq),
                )


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_migrate_to_v1, _migrate_to_v2)
"""``_MIGRATIONS[n]`` takes a file from schema version ``n`` to ``n + 1``."""

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this release writes (``PRAGMA user_version`` of the file)."""

_SELECT = "SELECT reference, kind, body, created_at FROM records"


def _check_timeout(timeout: object) -> float:
    seconds = check_number(
        timeout,
        "SQLiteArchive",
        "timeout",
        exclusive_minimum=True,
        unit="seconds",
        fix="it is how long a write waits for another process's write (30 is plenty)",
    )
    return float(seconds)


def _row_record(row: tuple[Any, ...]) -> ArchiveRecord:
    reference, kind, body, created_at = row
    return ArchiveRecord(
        reference=reference, kind=kind, messages=decode_messages(body), created_at=created_at
    )


@contextlib.contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: the write lock taken up front, rolled back on any failure."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _open(path: str, timeout: float) -> sqlite3.Connection:
    connection = sqlite3.connect(
        path, timeout=timeout, isolation_level=None, check_same_thread=False
    )
    try:
        connection.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        _set_wal(connection, timeout)
        connection.execute("PRAGMA synchronous = FULL")
        _migrate(connection)
    except BaseException:
        connection.close()
        raise
    return connection


def _set_wal(connection: sqlite3.Connection, timeout: float) -> None:
    """Switch to WAL; the switch needs a moment alone with the file, so retry while busy."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _migrate(connection: sqlite3.Connection) -> None:
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return
    with _transaction(connection):
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ArchiveError(
                f"schema version {version} is newer than this release reads "
                f"({SCHEMA_VERSION}); upgrade context-engine"
            )
        for migration in _MIGRATIONS[version:]:
            migration(connection)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


class SQLiteArchive:
    """Keeps records in one SQLite file; safe for several processes on one machine.

    The file is opened (created, migrated) when the archive is built, so a bad
    path fails at configuration time. Use a local disk: SQLite's locking is
    not reliable on network file systems; many machines want `RedisArchive`.

    Args:
        path: The database file (``~`` is expanded; the directory must exist).
        timeout: Seconds a write waits for another process's write before it
            fails (SQLite's busy timeout).

    Raises:
        ArchiveError: the file cannot be opened, is not a database, or was
            written by a newer release.
        ConfigurationError: ``timeout`` is not a positive number.
    """

    def __init__(self, path: str | Path, *, timeout: float = 30.0) -> None:
        self.path = str(Path(path).expanduser()) if str(path) != ":memory:" else ":memory:"
        self.timeout = _check_timeout(timeout)
        self._lock = threading.Lock()
        self._connection: sqlite3.Connection | None = None
        self._connection = self._guard(_open, self.path, self.timeout)

    def __repr__(self) -> str:
        return f"SQLiteArchive({self.path!r})"

    def _guard(self, call: Callable[..., T], *args: Any) -> T:
        try:
            return call(*args)
        except ArchiveCodecError as exc:  # the codec refused a message: still a refusal
            raise ArchiveCodecError(f"sqlite archive {self.path}: {exc}") from exc
        except ArchiveError as exc:
            raise ArchiveError(f"sqlite archive {self.path}: {exc}") from exc
        except (sqlite3.Error, OSError) as exc:
            raise ArchiveError(f"sqlite archive {self.path}: {exc}") from exc

    def _run_locked(self, call: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            connection = self._connection
            if connection is None:
                raise ArchiveError(f"sqlite archive {self.path}: used after close()")
            return self._guard(call, connection)

    async def _run(self, call: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._run_locked, call)

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Store ``records`` in one transaction; a reference already stored is kept as is.

        Raises:
            ArchiveCodecError: a message cannot be encoded (nothing is written).
            ArchiveError: the file refused the write.
        """
        check_session_id(session_id)
        rows = self._guard(lambda: [(r, encode_messages(r.messages)) for r in records])
        if not rows:
            return
        now = time.time()

        def write(connection: sqlite3.Connection) -> None:
            with _transaction(connection):
                for record, body in rows:
                    _insert(connection, session_id, record, body, now)

        await self._run(write)

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        """The record ``reference`` names in ``session_id``, or None."""

        def read(connection: sqlite3.Connection) -> ArchiveRecord | None:
            row = connection.execute(
                f"{_SELECT} WHERE session_id = ? AND reference = ?", (session_id, reference)
            ).fetchone()
            return _row_record(row) if row else None

        return await self._run(read)

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        """The newest ``tool_result`` record of the call ``tool_call_id``, or None."""

        def read(connection: sqlite3.Connection) -> ArchiveRecord | None:
            row = connection.execute(
                f"{_SELECT} WHERE seq = (SELECT max(seq) FROM tool_results "
                "WHERE session_id = ? AND tool_call_id = ?)",
                (session_id, tool_call_id),
            ).fetchone()
            return _row_record(row) if row else None

        return await self._run(read)

    async def records(self, session_id: str) -> list[ArchiveRecord]:
        """Every record of ``session_id``, oldest first."""

        def read(connection: sqlite3.Connection) -> list[ArchiveRecord]:
            rows = connection.execute(
                f"{_SELECT} WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
            return [_row_record(row) for row in rows]

        return await self._run(read)

    async def sessions(self) -> list[str]:
        """The session ids with at least one record, sorted."""

        def read(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute("SELECT DISTINCT session_id FROM records").fetchall()
            return sorted(row[0] for row in rows)

        return await self._run(read)

    async def refresh(self, session_id: str) -> None:
        """Nothing to refresh: records stay until deleted or expired."""

    async def delete_session(self, session_id: str) -> int:
        """Delete every record of ``session_id`` in one transaction; return how many."""
        return await self._run(
            lambda connection: _forget(connection, "session_id = ?", (session_id,))
        )

    async def expire(self, max_age_seconds: float) -> int:
        """Delete the records stored more than ``max_age_seconds`` ago; return how many."""
        cutoff = expiry_cutoff(max_age_seconds, time.time())
        return await self._run(
            lambda connection: _forget(connection, "created_at > 0 AND created_at < ?", (cutoff,))
        )

    async def get_state(self, key: str) -> str | None:
        """A shared state value, or None."""

        def read(connection: sqlite3.Connection) -> str | None:
            row = connection.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
            return str(row[0]) if row else None

        return await self._run(read)

    async def set_state(self, key: str, value: str) -> None:
        """Set a shared state value."""
        await self._run(
            lambda connection: connection.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        )

    async def increment_state(self, key: str) -> int:
        """Add one to an integer state value (missing counts as 0), atomically; return it.

        Raises:
            ArchiveError: the value stored under ``key`` is not an integer.
        """
        return await self._run(lambda connection: _increment(connection, key))

    async def delete_state(self, key: str) -> None:
        """Remove a shared state value (no error when missing)."""
        await self._run(
            lambda connection: connection.execute("DELETE FROM state WHERE key = ?", (key,))
        )

    async def close(self) -> None:
        """Close the connection; later calls raise `ArchiveError`."""

        def close() -> None:
            with self._lock:
                connection, self._connection = self._connection, None
            if connection is not None:
                connection.close()

        await asyncio.to_thread(close)


def _insert(
    connection: sqlite3.Connection, session_id: str, record: ArchiveRecord, body: str, now: float
) -> None:
    cursor = connection.execute(
        "INSERT OR IGNORE INTO records (session_id, reference, kind, body, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (session_id, record.reference, record.kind, body, now),
    )
    if cursor.rowcount != 1 or record.kind != "tool_result":
        return
    seq = cursor.lastrowid
    connection.executemany(
        "INSERT OR IGNORE INTO tool_results VALUES (?, ?, ?)",
        [(session_id, tool_call_id, seq) for tool_call_id in record.tool_call_ids],
    )


def _forget(connection: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> int:
    """Delete the records ``where`` selects and their tool-call index rows, atomically."""
    with _transaction(connection):
        connection.execute(
            f"DELETE FROM tool_results WHERE seq IN (SELECT seq FROM records WHERE {where})", args
        )
        return connection.execute(f"DELETE FROM records WHERE {where}", args).rowcount


def _increment(connection: sqlite3.Connection, key: str) -> int:
    with _transaction(connection):
        row = connection.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        try:
            value = int(row[0]) + 1 if row else 1
        except ValueError:
            raise ArchiveError(f"state {key!r} holds {row[0]!r}, not an integer") from None
        connection.execute(
            "INSERT INTO state (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, str(value)),
        )
    return value
