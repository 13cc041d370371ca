"""Code run in child processes (multiprocessing, spawn) by the multi-process archive tests."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from typing import Any

from context_engine.archive import SQLiteArchive, encode_messages
from tests.archive.conftest import tool_record


def write_many(path: str, worker: int, count: int) -> None:
    """Put ``count`` records (one or two per put) into a session shared with other workers."""

    async def main() -> None:
        archive = SQLiteArchive(path)
        n = 0
        while n < count:
            batch = [
                tool_record(f"w{worker}-c{n + k}", f"worker {worker} result {n + k}")
                for k in range(min(1 + n % 2, count - n))
            ]
            await archive.put(f"shared-{worker % 2}", batch)
            n += len(batch)
        await archive.close()

    asyncio.run(main())


def increment_many(path: str, count: int) -> None:
    """Increment one shared counter ``count`` times."""

    async def main() -> None:
        archive = SQLiteArchive(path)
        for _ in range(count):
            await archive.increment_state("counter")
        await archive.close()

    asyncio.run(main())


def open_only(path: str) -> None:
    """Open (and so migrate) the file, read one session, close."""

    async def main() -> None:
        archive = SQLiteArchive(path)
        await archive.records("s")
        await archive.close()

    asyncio.run(main())


def hang_inside_put(path: str, ready: Any, rows_before_hanging: int, count: int) -> None:
    """Start a put of ``count`` records and stop for good after ``rows_before_hanging`` rows.

    A SQLite progress handler watches the connection: once the open transaction
    has written that many rows, it sets ``ready`` and sleeps, so the parent can
    kill this process at a known point inside the transaction.
    """

    async def main() -> None:
        archive = SQLiteArchive(path)
        connection: sqlite3.Connection = archive._connection  # type: ignore[assignment]
        base = connection.total_changes

        def progress() -> int:
            if connection.in_transaction and connection.total_changes - base >= rows_before_hanging:
                ready.set()
                time.sleep(120)
            return 0

        connection.set_progress_handler(progress, 50)
        batch = [tool_record(f"doomed-{n}", f"doomed result {n} " * 20) for n in range(count)]
        await archive.put("doomed", batch)

    asyncio.run(main())


def recall(path: str, session_id: str, reference: str, answers: Any) -> None:
    """Look ``reference`` up in a fresh process and send back its canonical encoding."""

    async def main() -> None:
        archive = SQLiteArchive(path)
        found = await archive.get(session_id, reference)
        answers.put(None if found is None else (found.kind, encode_messages(found.messages)))
        await archive.close()

    asyncio.run(main())


def write_and_exit(path: str, session_id: str, texts: list[str]) -> None:
    """Put one tool-result record per text, then end the process."""

    async def main() -> None:
        archive = SQLiteArchive(path)
        await archive.put(session_id, [tool_record(f"c{n}", t) for n, t in enumerate(texts)])
        await archive.set_state("written-by", "old process")
        await archive.close()

    asyncio.run(main())


def hang_inside_redis_put(url: str, prefix: str, ready: Any) -> None:
    """Send half of a put's script call to Redis, then stop for good (the parent kills us).

    The connection's send is wrapped: the command that carries the put script
    is written only up to its middle, ``ready`` is set, and the process sleeps.
    """
    from redis.asyncio.connection import AbstractConnection

    from context_engine.archive.redis import RedisArchive

    original = AbstractConnection.send_packed_command

    async def send_half(self: Any, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, bytes) else list(command)
        packed = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
        if b"EVAL" not in packed[:64]:
            await original(self, command, check_health)
            return
        self._writer.write(packed[: len(packed) // 2])
        await self._writer.drain()
        ready.set()
        time.sleep(120)

    async def main() -> None:
        archive = RedisArchive(url, prefix=prefix)
        await archive.put("kept", [tool_record("k1", "stored before the crash")])
        AbstractConnection.send_packed_command = send_half  # type: ignore[method-assign]
        batch = [tool_record(f"doomed-{n}", f"doomed result {n} " * 50) for n in range(200)]
        await archive.put("doomed", batch)

    asyncio.run(main())


def write_redis_and_exit(url: str, prefix: str, session_id: str, texts: list[str]) -> None:
    """Put one tool-result record per text into Redis, then end the process."""
    from context_engine.archive.redis import RedisArchive

    async def main() -> None:
        archive = RedisArchive(url, prefix=prefix)
        await archive.put(session_id, [tool_record(f"c{n}", t) for n, t in enumerate(texts)])
        await archive.close()

    asyncio.run(main())
