"""`open_archive`: an archive from one URL, for configuration files, flags and env variables."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

from context_engine.archive.base import Archive
from context_engine.archive.memory import MemoryArchive
from context_engine.archive.sqlite import SQLiteArchive
from context_engine.errors import ConfigurationError

__all__ = ["SQLITE_SUFFIXES", "open_archive"]

SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
"""A plain path with one of these suffixes is read as ``sqlite:PATH``."""

_FORMS = (
    "'memory:', 'sqlite:PATH' (or a path ending in .db, .sqlite or .sqlite3), "
    "'redis://HOST:PORT/DB' or 'rediss://...' (add ?prefix=NAME&ttl=SECONDS to choose the "
    "key prefix and expiry)"
)


def _sqlite_path(rest: str, url: str) -> str:
    """``sqlite:PATH``; ``sqlite:///abs/path`` and ``sqlite://rel/path`` are accepted too."""
    path = rest[2:] if rest.startswith("//") else rest
    if not path:
        raise ConfigurationError(f"archive URL {url!r} has no file path; use 'sqlite:PATH'")
    return path


def _redis(url: str) -> Archive:
    """A `RedisArchive`; ``prefix`` and ``ttl`` are taken out of the query string."""
    from context_engine.archive.redis import RedisArchive, safe_url

    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in query if key in ("prefix", "ttl")}
    rest = urllib.parse.urlencode([(k, v) for k, v in query if k not in ("prefix", "ttl")])
    prefix = ours.get("prefix", "context_engine")
    ttl: float | None = None
    if ours.get("ttl"):
        try:
            ttl = float(ours["ttl"])
        except ValueError:
            raise ConfigurationError(
                f"archive URL {safe_url(url)}: ttl must be a number of seconds, got {ours['ttl']!r}"
            ) from None
    return RedisArchive(urllib.parse.urlunsplit(parts._replace(query=rest)), prefix=prefix, ttl=ttl)


def open_archive(url: str) -> Archive:
    """The archive ``url`` names.

    Forms:

    * ``memory:``: a `MemoryArchive` (this process only).
    * ``sqlite:PATH`` (``sqlite:///abs/path`` too), or a plain path ending in
      ``.db``, ``.sqlite`` or ``.sqlite3``: a `SQLiteArchive` of that file.
    * ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]`` or ``rediss://...`` (TLS):
      a `RedisArchive`; ``?prefix=NAME`` sets its key prefix and
      ``?ttl=SECONDS`` the expiry of a session's keys. Other query options go
      to redis-py.

    Raises:
        ConfigurationError: ``url`` has none of these forms.
        ArchiveError: the SQLite file cannot be opened.
        ImportError: a Redis URL without redis-py installed (the ``redis`` extra).
    """
    if not isinstance(url, str) or not url.strip():
        raise ConfigurationError(f"archive URL must be a non-empty str, got {url!r}; use {_FORMS}")
    text = url.strip()
    scheme, colon, rest = text.partition(":")
    scheme = scheme.lower()
    if colon and scheme == "memory" and rest in ("", "//"):
        return MemoryArchive()
    if colon and scheme == "sqlite":
        return SQLiteArchive(_sqlite_path(rest, text))
    if colon and scheme in ("redis", "rediss"):
        return _redis(text)
    if Path(text).suffix.lower() in SQLITE_SUFFIXES and (not colon or len(scheme) == 1):
        return SQLiteArchive(text)
    raise ConfigurationError(f"unknown archive URL {url!r}; use {_FORMS}")
