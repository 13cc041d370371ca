"""RedisArchive against a real redis-server: many sessions at once, TTL, crashes, failures."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

import pytest

from context_engine.archive._redis_health import durability_problems
from context_engine.archive.redis import RedisArchive, safe_url
from context_engine.errors import ArchiveError, ConfigurationError
from tests.archive import _workers
from tests.archive.conftest import REDIS_URL, record, rich_messages, tool_record

pytestmark = pytest.mark.extra("redis")

SPAWN = multiprocessing.get_context("spawn")


async def one_session(archive: RedisArchive, number: int) -> list[str]:
    """Write three records of session ``number`` in two puts; return their references."""
    session = f"agent-{number:03d}"
    made = [tool_record(f"c{n}", f"session {number} result {n}") for n in range(3)]
    await archive.put(session, made[:2])
    await asyncio.sleep(0)
    await archive.put(session, made[1:])
    return [r.reference for r in made]


async def test_three_hundred_concurrent_sessions_each_see_only_their_own(
    redis_prefix: str,
) -> None:
    archive = RedisArchive(REDIS_URL, prefix=redis_prefix)
    written = await asyncio.gather(*(one_session(archive, n) for n in range(300)))
    read = await asyncio.gather(*(archive.records(f"agent-{n:03d}") for n in range(300)))
    for number, (references, records) in enumerate(zip(written, read, strict=True)):
        assert [r.reference for r in records] == references
        assert {r.messages[0].text for r in records} == {
            f"session {number} result {n}" for n in range(3)
        }
    # The same tool-call ids in every session, each resolved inside its own session only.
    found = await asyncio.gather(
        *(archive.find_tool_result(f"agent-{n:03d}", "c1") for n in range(300))
    )
    assert [f.messages[0].text for f in found if f] == [f"session {n} result 1" for n in range(300)]
    assert await archive.get("agent-000", written[1][0]) is None
    assert await archive.sessions() == [f"agent-{n:03d}" for n in range(300)]
    await archive.close()


async def test_keys_live_under_the_prefix_and_the_session(
    redis_client: Any, redis_prefix: str
) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix)
    await archive.put("team:alpha", [tool_record("c1", "x"), record("text", *rich_messages())])
    await archive.set_state("breaker", "open")
    keys = sorted(k.decode() for k in await redis_client.keys(f"{redis_prefix}:*"))
    assert keys == [
        f"{redis_prefix}:sessions",
        f"{redis_prefix}:state",
        f"{redis_prefix}:team:alpha:order",
        f"{redis_prefix}:team:alpha:records",
        f"{redis_prefix}:team:alpha:tools",
    ]
    other = RedisArchive(redis_client, prefix=redis_prefix + "-other")
    assert await other.records("team:alpha") == []
    assert await other.get_state("breaker") is None
    await archive.close()
    assert await redis_client.ping()  # a client passed in stays open


async def test_a_ttl_is_set_on_write_and_refreshed_by_the_next_write(
    redis_client: Any, redis_prefix: str
) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix, ttl=600)
    first = tool_record("c1", "x")
    await archive.put("s", [first])
    keys = [f"{redis_prefix}:s:{part}" for part in ("records", "order", "tools")]
    assert all(500 < ttl <= 600 for ttl in [await redis_client.ttl(key) for key in keys])
    for key in keys:
        await redis_client.expire(key, 5)
    await archive.put("s", [first])  # nothing new, but a write: the session lives on
    assert all(500 < ttl <= 600 for ttl in [await redis_client.ttl(key) for key in keys])
    expires = await redis_client.zscore(f"{redis_prefix}:sessions", "s")
    assert time.time() + 500 < expires <= time.time() + 600
    await archive.set_state("k", "v")
    assert await redis_client.ttl(f"{redis_prefix}:state") == -1  # state never expires


async def ttls(client: Any, prefix: str, session: str) -> list[int]:
    return [await client.ttl(f"{prefix}:{session}:{part}") for part in ("records", "tools")]


async def shorten_ttls(client: Any, prefix: str, session: str) -> None:
    for part in ("records", "order", "tools"):
        await client.expire(f"{prefix}:{session}:{part}", 5)


@pytest.mark.parametrize(
    "read",
    ["get", "find_tool_result", "records"],
)
async def test_a_read_by_another_worker_restarts_the_ttl(
    redis_client: Any, redis_prefix: str, read: str
) -> None:
    """The TTL is idle time: a session read but no longer written keeps its records."""
    made = tool_record("c1", "x")
    await RedisArchive(redis_client, prefix=redis_prefix, ttl=600).put("s", [made])
    await shorten_ttls(redis_client, redis_prefix, "s")
    reader = RedisArchive(redis_client, prefix=redis_prefix, ttl=600)
    arguments = {"get": (made.reference,), "find_tool_result": ("c1",), "records": ()}[read]
    assert await getattr(reader, read)("s", *arguments)
    assert all(500 < ttl <= 600 for ttl in await ttls(redis_client, redis_prefix, "s"))
    expires = await redis_client.zscore(f"{redis_prefix}:sessions", "s")
    assert time.time() + 500 < expires <= time.time() + 600


async def test_an_engine_call_that_rewrites_nothing_restarts_the_ttl(
    redis_client: Any, redis_prefix: str
) -> None:
    """An active session that stopped rewriting once lost its archive after the TTL."""
    from context_engine import ContextEngine, Message

    await RedisArchive(redis_client, prefix=redis_prefix, ttl=600).put(
        "s", [tool_record("c1", "x")]
    )
    await shorten_ttls(redis_client, redis_prefix, "s")
    archive = RedisArchive(redis_client, prefix=redis_prefix, ttl=600)
    engine = ContextEngine(100_000, archive=archive, session_id="s")
    result = await engine.project([Message.user("a short question")])
    assert result.event is None  # nothing was rewritten, nothing archived
    assert all(500 < ttl <= 600 for ttl in await ttls(redis_client, redis_prefix, "s"))
    await shorten_ttls(redis_client, redis_prefix, "s")
    await engine.project([Message.user("a short question")])  # within a second, a tenth of TTL
    assert all(ttl <= 5 for ttl in await ttls(redis_client, redis_prefix, "s"))  # no round trip


def test_durability_problems_name_missing_persistence_and_eviction() -> None:
    safe = {
        "save": "3600 1",
        "appendonly": "no",
        "maxmemory": "0",
        "maxmemory-policy": "allkeys-lru",
    }
    assert durability_problems(safe) == []  # snapshots on; no memory limit, so nothing evicts
    assert durability_problems({**safe, "appendonly": "yes", "save": ""}) == []
    (volatile,) = durability_problems({**safe, "save": ""})
    assert "persists nothing" in volatile
    (evicting,) = durability_problems({**safe, "maxmemory": "1073741824"})
    assert "allkeys-lru" in evicting
    assert "noeviction" in evicting
    bounded = {**safe, "maxmemory": "1073741824", "maxmemory-policy": "noeviction"}
    assert durability_problems(bounded) == []


async def test_first_use_warns_once_when_the_server_can_lose_records(
    redis_client: Any, redis_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix)
    problems = await archive.check_durability()
    if not problems:
        pytest.skip("the test server persists and does not evict: nothing to warn about")
    archive = RedisArchive(redis_client, prefix=redis_prefix)
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        await archive.put("s", [tool_record("c1", "x")])
        await archive.records("s")
    warned = [r.getMessage() for r in caplog.records if "may be lost" in r.getMessage()]
    assert len(warned) == len(problems)
    assert all(problem in line for problem, line in zip(problems, warned, strict=True))


async def test_without_a_ttl_nothing_expires(redis_client: Any, redis_prefix: str) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix)
    await archive.put("s", [tool_record("c1", "x")])
    assert await redis_client.ttl(f"{redis_prefix}:s:records") == -1


async def test_an_expired_session_is_gone_everywhere(redis_client: Any, redis_prefix: str) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix, ttl=1)
    kept = RedisArchive(redis_client, prefix=redis_prefix)
    gone = tool_record("c1", "short-lived")
    await archive.put("brief", [gone])
    await kept.put("lasting", [tool_record("c2", "kept")])
    assert await archive.sessions() == ["brief", "lasting"]
    await asyncio.sleep(1.3)
    assert await archive.get("brief", gone.reference) is None
    assert await archive.records("brief") == []
    assert await archive.find_tool_result("brief", "c1") is None
    assert await archive.sessions() == ["lasting"]


async def test_a_client_killed_while_sending_a_put_leaves_none_of_it(
    redis_client: Any, redis_prefix: str
) -> None:
    ready = SPAWN.Event()
    child = SPAWN.Process(
        target=_workers.hang_inside_redis_put, args=(REDIS_URL, redis_prefix, ready)
    )
    child.start()
    try:
        assert ready.wait(timeout=60), "the child never sent half of its put"
        archive = RedisArchive(redis_client, prefix=redis_prefix)
        assert await archive.records("doomed") == []
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    await asyncio.sleep(0.2)  # let the server notice the closed connection
    assert await archive.records("doomed") == []
    assert await archive.find_tool_result("doomed", "doomed-0") is None
    assert await archive.sessions() == ["kept"]
    kept = await archive.records("kept")
    assert [r.messages[0].text for r in kept] == ["stored before the crash"]
    await archive.put("doomed", [tool_record("after", "the server took writes again")])
    assert len(await archive.records("doomed")) == 1


async def test_a_new_process_recalls_what_an_old_one_wrote(redis_prefix: str) -> None:
    texts = ["first output", "second output — 第二"]
    child = SPAWN.Process(
        target=_workers.write_redis_and_exit, args=(REDIS_URL, redis_prefix, "agent-7", texts)
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    archive = RedisArchive(REDIS_URL, prefix=redis_prefix)
    written = [tool_record(f"c{n}", t) for n, t in enumerate(texts)]
    assert await archive.records("agent-7") == written
    assert await archive.find_tool_result("agent-7", "c1") == written[1]
    await archive.close()


async def test_unreadable_data_under_a_reference_is_an_archive_error(
    redis_client: Any, redis_prefix: str
) -> None:
    archive = RedisArchive(redis_client, prefix=redis_prefix)
    await redis_client.hset(f"{redis_prefix}:s:records", "arc-x", "not a record")
    await redis_client.rpush(f"{redis_prefix}:s:order", "arc-x")
    with pytest.raises(ArchiveError, match="'arc-x' is malformed"):
        await archive.get("s", "arc-x")
    with pytest.raises(ArchiveError, match=redis_prefix):
        await archive.records("s")


async def test_a_server_that_does_not_answer_is_an_archive_error_without_the_password() -> None:
    archive = RedisArchive("redis://:hunter2@127.0.0.1:1/0?socket_connect_timeout=2")
    for call in (
        archive.put("s", [tool_record("c1", "x")]),
        archive.get("s", "arc-x"),
        archive.increment_state("k"),
    ):
        with pytest.raises(ArchiveError) as caught:
            await call
        assert "127.0.0.1:1" in str(caught.value)
        assert "hunter2" not in str(caught.value)
    await archive.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:pw@host/2", "rediss://user:***@host/2"),
        ("redis://host:6379/0", "redis://host:6379/0"),
    ],
    ids=["password-only", "user-and-password", "no-password"],
)
def test_urls_are_shown_without_their_password(url: str, shown: str) -> None:
    assert safe_url(url) == shown


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"prefix": ""}, "prefix must be a non-empty str"),
        ({"prefix": "has space"}, "prefix must be a non-empty str"),
        ({"ttl": 0}, "ttl must be None"),
        ({"ttl": -5}, "ttl must be None"),
        ({"ttl": "60"}, "ttl must be None"),
    ],
    ids=["empty-prefix", "prefix-with-space", "zero-ttl", "negative-ttl", "str-ttl"],
)
def test_bad_settings_are_configuration_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisArchive(REDIS_URL, **options)


def test_without_redis_py_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(ImportError, match=r"context-engine\[redis\]"):
        RedisArchive(REDIS_URL)


def test_importing_the_archive_package_does_not_load_redis_py() -> None:
    code = (
        "import sys; import context_engine.archive as a; "
        "assert 'redis' not in sys.modules, 'redis imported'; "
        "assert a.RedisArchive.__name__ == 'RedisArchive'"
    )
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
