"""open_archive: one URL names a store, in configuration, on the command line, in env variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from context_engine.archive import MemoryArchive, SQLiteArchive, open_archive
from context_engine.archive.redis import RedisArchive
from context_engine.errors import ConfigurationError

NEEDS_REDIS = pytest.mark.extra("redis")


@pytest.mark.parametrize(
    "form",
    ["sqlite:{dir}/a.db", "sqlite://{dir}/a.db", "SQLite:{dir}/a.db", "{dir}/a.db",
     "{dir}/a.sqlite", "{dir}/a.SQLITE3", "  sqlite:{dir}/a.db  "],
    ids=["sqlite-path", "sqlite-slashes", "scheme-case", "db-suffix", "sqlite-suffix",
         "sqlite3-suffix-upper", "surrounding-spaces"],
)  # fmt: skip
async def test_sqlite_urls_and_plain_paths_open_a_file(tmp_path: Path, form: str) -> None:
    archive = open_archive(form.format(dir=tmp_path))
    assert isinstance(archive, SQLiteArchive)
    assert Path(archive.path).parent == tmp_path
    assert Path(archive.path).exists()
    await archive.close()


async def test_memory_url_gives_a_fresh_memory_archive() -> None:
    first, second = open_archive("memory:"), open_archive("memory:")
    assert isinstance(first, MemoryArchive)
    assert first is not second


@pytest.mark.parametrize(
    ("url", "prefix", "ttl", "where"),
    [
        ("redis://127.0.0.1:6390/0", "context_engine", None, "redis://127.0.0.1:6390/0"),
        ("redis://h:1/2?prefix=fleet&ttl=3600", "fleet", 3600, "redis://h:1/2"),
        ("rediss://:pw@h/0?ttl=90.5&prefix=x", "x", 91, "rediss://:***@h/0"),
        (
            "redis://h/0?socket_timeout=3&prefix=p",
            "p",
            None,
            "redis://h/0?socket_timeout=3",
        ),
    ],
    ids=["plain", "prefix-and-ttl", "tls-with-password", "redis-options-kept"],
)
@NEEDS_REDIS
async def test_redis_urls_take_prefix_and_ttl_from_the_query(
    url: str, prefix: str, ttl: int | None, where: str
) -> None:
    archive = open_archive(url)
    assert isinstance(archive, RedisArchive)
    assert (archive.prefix, archive.ttl, archive.where) == (prefix, ttl, where)
    await archive.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must be a non-empty str"),
        ("postgres://db/archive", "unknown archive URL"),
        ("archive.json", "unknown archive URL"),
        ("sqlite:", "has no file path"),
        ("memory:somewhere", "unknown archive URL"),
        ("redis://h/0?ttl=soon", "ttl must be a number of seconds"),
        # RedisArchive loads redis-py before it checks its port and ttl.
        pytest.param("redis://h/0?ttl=-1", "ttl must be None", marks=NEEDS_REDIS),
        pytest.param("redis://h:notaport/0", "cannot use Redis URL", marks=NEEDS_REDIS),
    ],
    ids=["empty", "other-scheme", "other-suffix", "sqlite-without-path", "memory-with-path",
         "ttl-not-a-number", "negative-ttl", "bad-port"],
)  # fmt: skip
def test_anything_else_is_a_configuration_error_that_lists_the_forms(
    url: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        open_archive(url)
    if "unknown" in message:
        assert "sqlite:PATH" in str(caught.value)
        assert "redis://" in str(caught.value)
