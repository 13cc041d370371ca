"""Stores for the archive tests: memory, a SQLite file, and a real redis-server on loopback.

The Redis tests use ``CONTEXT_ENGINE_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6390/0``, the server ``make redis-server`` starts) and skip
when nothing answers there. Every Redis test gets its own key prefix and
deletes its keys afterwards.
"""

from __future__ import annotations

import datetime as dt
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from context_engine.archive import ArchiveRecord, MemoryArchive, SQLiteArchive, reference_for
from context_engine.archive.base import Archive, RecordKind
from context_engine.messages import (
    ContextSummary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from tests.extras import needs

REDIS_URL = os.environ.get("CONTEXT_ENGINE_TEST_REDIS_URL", "redis://127.0.0.1:6390/0")

StoreFactory = Callable[[], Awaitable[Archive]]


def record(kind: RecordKind, *messages: Message) -> ArchiveRecord:
    """A record of ``messages`` under their own reference."""
    return ArchiveRecord(reference=reference_for(messages), kind=kind, messages=messages)


def tool_record(call_id: str, text: str) -> ArchiveRecord:
    """A cleared tool result."""
    return record("tool_result", Message.tool(call_id, text, name="bash"))


def rich_messages() -> tuple[Message, ...]:
    """Every field the codec writes: checkpoint with references, images, thinking, calls, usage."""
    stamp = dt.datetime(2025, 3, 1, 12, 30, 5, 123456, tzinfo=dt.timezone.utc)
    return (
        ContextSummary(
            summary="Earlier: read src/app.py, fixed the parser.\n<b>&amp;</b> kept",
            tokens_before=12_345,
            read_files=("src/app.py", "docs/读我.md"),
            modified_files=("src/parser.py",),
            references=("arc-0123456789abcdef0123", "arc-fedcba9876543210fedc"),
            timestamp=stamp,
            metadata={"checkpoint": 2},
        ),
        Message(
            "user",
            (
                TextBlock("Look at this screenshot — 日本語も"),
                ImageBlock(url="https://example.invalid/a.png", detail="high"),
                ImageBlock(data="iVBORw0KGgo=", media_type="image/png"),
            ),
            timestamp=dt.datetime(2025, 3, 1, 12, 31),
        ),
        Message(
            "assistant",
            (
                ThinkingBlock("the user wants a diff", signature="sig==", redacted=False),
                ThinkingBlock("opaque", redacted=True),
                TextBlock("Running the tests."),
                ToolCall("call_1", "bash", '{"command": "pytest -q",  "timeout": 60}'),
            ),
            usage=Usage(1_000, 20, cache_read_tokens=800, cache_write_tokens=100),
            stop_reason="tool_use",
            name="coder",
            metadata={"provider": {"id": "resp_1", "scores": [0.5, 1, None, True]}, "n": 1.25},
        ),
        Message.tool("call_1", "3 passed\n\x00 binary-ish \u2028 line sep", name="bash"),
    )


async def delete_prefix(client: Any, prefix: str) -> int:
    """Delete every key under ``prefix:``; return how many."""
    keys = [key async for key in client.scan_iter(match=f"{prefix}:*", count=500)]
    if keys:
        await client.delete(*keys)
    return len(keys)


async def connect_redis() -> Any:
    """A redis.asyncio client of the test server; skips the test when no server answers."""
    redis = pytest.importorskip("redis.asyncio", reason=needs("redis"))
    client = redis.Redis.from_url(REDIS_URL)
    try:
        await client.ping()
    except Exception as exc:  # any failure to reach the server means: no server here
        await client.aclose()
        pytest.skip(f"no redis-server answers at {REDIS_URL} ({exc}); run `make redis-server`")
    return client


def new_prefix() -> str:
    """A key prefix no other test uses."""
    return f"cetest-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis_client() -> AsyncIterator[Any]:
    """A client of the test server (skips without one)."""
    client = await connect_redis()
    yield client
    await client.aclose()


@pytest.fixture
async def redis_prefix(redis_client: Any) -> AsyncIterator[str]:
    """A key prefix of this test alone; its keys are deleted afterwards."""
    prefix = new_prefix()
    yield prefix
    await delete_prefix(redis_client, prefix)


@pytest.fixture(params=["memory", "sqlite", "redis"])
async def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Builds stores of one kind; stores built twice share their data (same file, same prefix)."""
    kind: str = request.param
    opened: list[Archive] = []
    memory = MemoryArchive()
    prefix = new_prefix()
    client = await connect_redis() if kind == "redis" else None

    async def build() -> Archive:
        if kind == "memory":
            return memory
        if kind == "sqlite":
            store: Archive = SQLiteArchive(tmp_path / "archive.db")
        else:
            from context_engine.archive.redis import RedisArchive

            store = RedisArchive(REDIS_URL, prefix=prefix)
        opened.append(store)
        return store

    yield build
    for store in opened:
        await store.close()
    if client is not None:
        await delete_prefix(client, prefix)
        await client.aclose()
