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
once it has all of it. With a TTL, the session's keys expire that many seconds
after the session was last used: every write, every read and every engine call
(`refresh`, at most once per tenth of the TTL) restarts it. Redis keeps data in
memory: the archive checks at first use that the server persists it and does
not evict it (`check_durability`) and logs a warning otherwise. The scripts
touch keys of several sessions' namespaces, so the archive needs one Redis
server (replicas are fine), not a Redis Cluster.

``redis`` (redis-py, the ``context-engine[redis]`` extra) is imported when the
archive is built, never by importing this package.
"""

from __future__ import annotations

import logging
import math
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from context_engine._validate import check_number
from context_engine.archive._redis_health import durability_problems, read_durability_config
from context_engine.archive._redis_scripts import FORGET, PUT, REFRESH
from context_engine.archive.base import ArchiveRecord, check_session_id, expiry_cutoff
from context_engine.archive.codec import decode_messages, encode_messages
from context_engine.errors import ArchiveCodecError, ArchiveError, ConfigurationError

__all__ = ["RedisArchive", "safe_url"]

logger = logging.getLogger(__name__)

_MAX_CONNECTIONS = 50
"""Connections a URL-built archive opens at most; more concurrent calls wait for one."""
_POOL_TIMEOUT = 20.0
"""Seconds a call waits for a free connection before it fails."""
_REFRESH_SHARE = 0.1
"""A session's TTL is refreshed at most once per this share of it (per archive object)."""
_REFRESHED_MAX = 10_000
"""Sessions whose last refresh is remembered; past it the memory starts over."""


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


def _created_at(envelope: bytes | str) -> float:
    """The time in a record's ``KIND CREATED_AT`` line (0.0, kept, when unreadable)."""
    header = _text(envelope).partition("\n")[0]
    try:
        return float(header.split(" ")[1])
    except (IndexError, ValueError):
        return 0.0


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
        ttl: Seconds the keys of a session live after the session was last
            used: a write, a read, or an engine call (`refresh`); None keeps them
            for ever. Shared state never expires.

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
        self._put_script = self._client.register_script(PUT)
        self._refresh_script = self._client.register_script(REFRESH)
        self._forget_script = self._client.register_script(FORGET)
        self._refreshed: dict[str, float] = {}
        self._checked = False

    def __repr__(self) -> str:
        return f"RedisArchive({self.where!r}, prefix={self.prefix!r})"

    def _key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}:{session_id}:{part}"

    def _fail(self, exc: BaseException) -> ArchiveError:
        # A codec refusal stays one: the server was never asked, and retrying cannot help.
        kind = ArchiveCodecError if isinstance(exc, ArchiveCodecError) else ArchiveError
        return kind(f"redis archive {self.where} (prefix {self.prefix!r}): {exc}")

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Store ``records`` with one atomic script; a reference already stored is kept as is.

        Raises:
            ArchiveCodecError: a message cannot be encoded (nothing is written).
            ArchiveError: the server failed.
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
        await self._call(self._put_script(keys=self._keys(session_id), args=args))
        self._refreshed[session_id] = time.monotonic()

    def _keys(self, session_id: str) -> list[str]:
        """The ``KEYS`` of every script (see `context_engine.archive._redis_scripts`)."""
        keys = [self._key(session_id, part) for part in ("records", "order", "tools")]
        return [*keys, f"{self.prefix}:sessions"]

    async def _call(self, awaitable: Any) -> Any:
        if not self._checked:
            self._checked = True
            await self._warn_if_not_durable()
        try:
            return await awaitable
        except self._errors as exc:
            raise self._fail(exc) from exc

    async def check_durability(self) -> list[str]:
        """What in the server's settings can lose records without an error; empty when none.

        No persistence (a restart loses everything) and an evicting
        ``maxmemory-policy`` with a memory limit (a full server deletes records)
        are reported. Checked, with a warning logged per problem, when the
        archive is first used. A server refusing ``CONFIG GET`` (managed
        services) reports nothing.
        """
        from redis.exceptions import ResponseError

        try:
            config = await read_durability_config(self._client)
        except ResponseError:
            return []
        except self._errors as exc:
            raise self._fail(exc) from exc
        return durability_problems(config) if config is not None else []

    async def _warn_if_not_durable(self) -> None:
        try:
            problems = await self.check_durability()
        except ArchiveError as exc:
            logger.debug("redis=<%s> | durability check skipped: %s", self.where, exc)
            return
        for problem in problems:
            logger.warning("redis=<%s> | archive records may be lost: %s", self.where, problem)

    async def refresh(self, session_id: str) -> None:
        """Restart the session's time to live (no-op without one).

        The engine calls it on every call and every read calls it, so the TTL
        is the session's idle time. A refresh within a tenth of the TTL of the
        last one this object made is skipped: no round trip per call.
        """
        if self.ttl is None:
            return
        now = time.monotonic()
        last = self._refreshed.get(session_id)
        if last is not None and now - last < self.ttl * _REFRESH_SHARE:
            return
        if len(self._refreshed) >= _REFRESHED_MAX:
            self._refreshed.clear()
        args = [self.ttl, session_id, repr(time.time() + self.ttl)]
        await self._call(self._refresh_script(keys=self._keys(session_id), args=args))
        self._refreshed[session_id] = now

    async def delete_session(self, session_id: str) -> int:
        """Delete every record of ``session_id`` in one script; return how many there were."""
        self._refreshed.pop(session_id, None)
        deleted = await self._call(
            self._forget_script(keys=self._keys(session_id), args=[session_id])
        )
        return int(deleted)

    async def expire(self, max_age_seconds: float) -> int:
        """Delete the records stored more than ``max_age_seconds`` ago; return how many.

        Each session's old records go in one script; the sessions one by one.
        """
        cutoff = expiry_cutoff(max_age_seconds, time.time())
        deleted = 0
        for session_id in await self.sessions():
            raw = await self._call(self._client.hgetall(self._key(session_id, "records")))
            old = [
                _text(reference)
                for reference, envelope in raw.items()
                if 0 < _created_at(envelope) < cutoff
            ]
            if old:
                script = self._forget_script(keys=self._keys(session_id), args=[session_id, *old])
                deleted += int(await self._call(script))
        return deleted

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        """The record ``reference`` names in ``session_id``, or None; refreshes the TTL."""
        raw = await self._call(self._client.hget(self._key(session_id, "records"), reference))
        if raw is None:
            return None
        await self.refresh(session_id)
        return self._decode(reference, raw)

    def _decode(self, reference: str, raw: bytes | str) -> ArchiveRecord:
        try:
            return _record(reference, raw)
        except ArchiveError as exc:
            raise self._fail(exc) from exc

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        """The newest ``tool_result`` record of ``tool_call_id``, or None; refreshes the TTL."""
        reference = await self._call(
            self._client.hget(self._key(session_id, "tools"), tool_call_id)
        )
        return await self.get(session_id, _text(reference)) if reference is not None else None

    async def records(self, session_id: str) -> list[ArchiveRecord]:
        """Every record of ``session_id``, oldest first; refreshes the TTL."""
        order = [
            _text(r)
            for r in await self._call(self._client.lrange(self._key(session_id, "order"), 0, -1))
        ]
        if not order:
            return []
        bodies = await self._call(self._client.hmget(self._key(session_id, "records"), order))
        await self.refresh(session_id)
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
