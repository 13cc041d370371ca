"""`RedisArchive`: the archive in Redis, shared by agent workers on many machines.

Key layout, with ``P`` the prefix and ``S`` the session id::

    P:S:records   hash        reference -> "KIND CREATED_AT" line, then the codec JSON
    P:S:order     list        references, oldest first
    P:S:tools     hash        tool-call id -> reference of its newest tool_result record
    P:sessions    sorted set  session id, scored by when its keys expire (+inf without TTL)
    P:state       hash        shared state: key -> value

A `put` is one Lua script, which Redis runs atomically: every record is added
with ``HSETNX`` (a reference already stored keeps its first body and time),
and only a new one is appended to the order and the tool index. A client that
dies while sending the script leaves nothing behind: Redis runs a command only
once it has all of it. With a TTL, each write sets the session's keys to expire
that many seconds after it. The script touches keys of several sessions'
namespaces, so the archive needs one Redis server (replicas are fine), not a
Redis Cluster.

``redis`` (redis-py, the ``context-engine[redis]`` extra) is imported when the
archive is built, never by importing this package.
"""

from __future__ import annotations

import math
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from context_engine._validate import check_number
from context_engine.archive.base import ArchiveRecord, check_session_id
from context_engine.archive.codec import decode_messages, encode_messages
from context_engine.errors import ArchiveError, ConfigurationError

__all__ = ["RedisArchive", "safe_url"]

_MAX_CONNECTIONS = 50
"""Connections a URL-built archive opens at most; more concurrent calls wait for one."""
_POOL_TIMEOUT = 20.0
"""Seconds a call waits for a free connection before it fails."""

_PUT = """
local ttl = tonumber(ARGV[1])
local count = tonumber(ARGV[4])
local i = 5
for _ = 1, count do
    local reference, envelope, tools = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
    if redis.call('HSETNX', KEYS[1], reference, envelope) == 1 then
        redis.call('RPUSH', KEYS[2], reference)
        for t = 1, tools do
            redis.call('HSET', KEYS[3], ARGV[i + 2 + t], reference)
        end
    end
    i = i + 3 + tools
end
if ttl > 0 then
    for k = 1, 3 do
        if redis.call('EXISTS', KEYS[k]) == 1 then
            redis.call('EXPIRE', KEYS[k], ttl)
        end
    end
end
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
return count
"""


def _import_redis() -> Any:
    try:
        import redis.asyncio
    except ImportError as exc:
        raise ImportError(
            "RedisArchive needs redis-py; install it with: pip install 'context-engine[redis]'"
        ) from exc
    return redis.asyncio


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or any(c in prefix for c in " \n\r\t\0"):
        raise ConfigurationError(
            f"RedisArchive prefix must be a non-empty str without spaces, got {prefix!r}; "
            "every key of the archive starts with it (default 'context_engine')"
        )
    return prefix


def _check_ttl(ttl: object) -> int | None:
    seconds = check_number(
        ttl,
        "RedisArchive",
        "ttl",
        minimum=1,
        optional=True,
        unit="seconds",
        fix="None keeps records for ever",
    )
    return None if seconds is None else math.ceil(seconds)


def safe_url(url: str) -> str:
    """``url`` with its password replaced by ``***``, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))


def _envelope(record: ArchiveRecord, body: str, now: float) -> str:
    """One line ``KIND CREATED_AT``, then the codec JSON (kept as is, not escaped again)."""
    return f"{record.kind} {now!r}\n{body}"


def _record(reference: str, raw: bytes | str) -> ArchiveRecord:
    header, _, body = _text(raw).partition("\n")
    try:
        kind, created_at = header.split(" ")
        return ArchiveRecord(
            reference=reference,
            kind=kind,  # type: ignore[arg-type]  # checked by ArchiveRecord's validator
            messages=decode_messages(body),
            created_at=float(created_at),
        )
    except (ValueError, ConfigurationError) as exc:
        raise ArchiveError(f"record {reference!r} is malformed: {exc}") from exc


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisArchive:
    """Keeps records in Redis, namespaced per session; for workers on many machines.

    Args:
        client_or_url: A ``redis.asyncio.Redis`` client, or a ``redis://`` /
            ``rediss://`` URL to build one from. A client passed in stays the
            caller's (`close` leaves it open). One built from a URL is closed by
            `close`; its pool holds at most 50 connections (``?max_connections=N``
            in the URL to change) and a call beyond that waits up to 20 seconds
            for a free one instead of failing.
        prefix: The first part of every key, so several applications can
            share one server.
        ttl: Seconds the keys of a session live after its last write (None:
            forever). Shared state never expires.

    Raises:
        ImportError: redis-py is not installed (the ``redis`` extra).
        ConfigurationError: ``prefix`` or ``ttl`` cannot work.
    """

    def __init__(
        self, client_or_url: Any, *, prefix: str = "context_engine", ttl: float | None = None
    ) -> None:
        module = _import_redis()
        self.prefix = _check_prefix(prefix)
        self.ttl = _check_ttl(ttl)
        if isinstance(client_or_url, str):
            self.where = safe_url(client_or_url)
            try:
                pool = module.BlockingConnectionPool.from_url(
                    client_or_url, max_connections=_MAX_CONNECTIONS, timeout=_POOL_TIMEOUT
                )
            except ValueError as exc:
                raise ConfigurationError(f"cannot use Redis URL {self.where}: {exc}") from None
            self._client = module.Redis.from_pool(pool)
            self._owns_client = True
        else:
            self.where = repr(client_or_url)
            self._client = client_or_url
            self._owns_client = False
        from redis.exceptions import RedisError

        self._errors: tuple[type[BaseException], ...] = (RedisError, OSError)
        self._put_script = self._client.register_script(_PUT)

    def __repr__(self) -> str:
        return f"RedisArchive({self.where!r}, prefix={self.prefix!r})"

    def _key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}:{session_id}:{part}"

    def _fail(self, exc: BaseException) -> ArchiveError:
        return ArchiveError(f"redis archive {self.where} (prefix {self.prefix!r}): {exc}")

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Store ``records`` with one atomic script; a reference already stored is kept as is.

        Raises:
            ArchiveError: a message cannot be encoded (nothing is written) or the
                server failed.
        """
        check_session_id(session_id)
        now = time.time()
        try:
            bodies = [encode_messages(record.messages) for record in records]
        except ArchiveError as exc:
            raise self._fail(exc) from exc
        if not bodies:
            return
        args: list[Any] = [
            self.ttl or 0,
            session_id,
            "+inf" if self.ttl is None else repr(now + self.ttl),
            len(bodies),
        ]
        for record, body in zip(records, bodies, strict=True):
            tools = record.tool_call_ids if record.kind == "tool_result" else ()
            args.extend((record.reference, _envelope(record, body, now), len(tools), *tools))
        keys = [self._key(session_id, part) for part in ("records", "order", "tools")]
        keys.append(f"{self.prefix}:sessions")
        await self._call(self._put_script(keys=keys, args=args))

    async def _call(self, awaitable: Any) -> Any:
        try:
            return await awaitable
        except self._errors as exc:
            raise self._fail(exc) from exc

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        """The record ``reference`` names in ``session_id``, or None."""
        raw = await self._call(self._client.hget(self._key(session_id, "records"), reference))
        return self._decode(reference, raw) if raw is not None else None

    def _decode(self, reference: str, raw: bytes | str) -> ArchiveRecord:
        try:
            return _record(reference, raw)
        except ArchiveError as exc:
            raise self._fail(exc) from exc

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        """The newest ``tool_result`` record of the call ``tool_call_id``, or None."""
        reference = await self._call(
            self._client.hget(self._key(session_id, "tools"), tool_call_id)
        )
        return await self.get(session_id, _text(reference)) if reference is not None else None

    async def records(self, session_id: str) -> list[ArchiveRecord]:
        """Every record of ``session_id``, oldest first."""
        order = [
            _text(r)
            for r in await self._call(self._client.lrange(self._key(session_id, "order"), 0, -1))
        ]
        if not order:
            return []
        bodies = await self._call(self._client.hmget(self._key(session_id, "records"), order))
        return [
            self._decode(reference, raw)
            for reference, raw in zip(order, bodies, strict=True)
            if raw is not None
        ]

    async def sessions(self) -> list[str]:
        """The session ids with at least one record (and unexpired keys), sorted."""
        key = f"{self.prefix}:sessions"
        now = repr(time.time())
        await self._call(self._client.zremrangebyscore(key, "-inf", f"({now}"))
        found = await self._call(self._client.zrangebyscore(key, now, "+inf"))
        return sorted(_text(session) for session in found)

    async def get_state(self, key: str) -> str | None:
        """A shared state value, or None."""
        value = await self._call(self._client.hget(f"{self.prefix}:state", key))
        return _text(value) if value is not None else None

    async def set_state(self, key: str, value: str) -> None:
        """Set a shared state value."""
        await self._call(self._client.hset(f"{self.prefix}:state", key, value))

    async def increment_state(self, key: str) -> int:
        """Add one to an integer state value (missing counts as 0), atomically; return it.

        It is ``HINCRBY``, the hash form of ``INCR``.

        Raises:
            ArchiveError: the value stored under ``key`` is not an integer.
        """
        return int(await self._call(self._client.hincrby(f"{self.prefix}:state", key, 1)))

    async def delete_state(self, key: str) -> None:
        """Remove a shared state value (no error when missing)."""
        await self._call(self._client.hdel(f"{self.prefix}:state", key))

    async def close(self) -> None:
        """Close the client when the archive built it from a URL."""
        if self._owns_client:
            await self._call(self._client.aclose())
