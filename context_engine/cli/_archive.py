"""``context-engine archive list|show|export|delete|expire``: the archive, for the operator.

Each command opens the store named by ``--archive URL`` (default: the
``CONTEXT_ENGINE_ARCHIVE`` environment variable), reads, and closes it. Exports
are JSON Lines, one record per line, with the messages in the archive's own
lossless form (``--format archive``, the default: `message_to_dict`, so
checkpoint references, thinking signatures and metadata survive) or as OpenAI
Chat Completions dicts (``--format openai``, for other tools). ``show`` takes a
reference or the id of a tool call whose result was archived. ``delete SESSION``
removes a session's records and ``expire --older-than AGE`` those of every
session stored longer ago than ``AGE`` (a retention job); like ``rm``, neither
asks for confirmation.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO, TypeVar

from context_engine._aio import run_blocking
from context_engine.archive import Archive, ArchiveRecord, open_archive
from context_engine.archive.codec import message_to_dict
from context_engine.archive.open import SQLITE_SUFFIXES
from context_engine.archive.redis import safe_url
from context_engine.archive.reference import REFERENCE_PATTERN
from context_engine.cli._age import parse_age
from context_engine.cli._common import EXIT_OK, EXIT_PROBLEM, CliError
from context_engine.cli._inspect import preview
from context_engine.cli._output import Output, Table, emit_json
from context_engine.errors import ArchiveError, ContextEngineError
from context_engine.formats.openai import to_openai
from context_engine.messages import ContextSummary, ImageBlock, Message, ThinkingBlock, ToolCall

__all__ = [
    "ARCHIVE_ENV",
    "add_archive",
    "archive_url",
    "close_archive",
    "jsonl_line",
    "open_cli_archive",
    "record_json",
    "report_archive",
]

ARCHIVE_ENV = "CONTEXT_ENGINE_ARCHIVE"
"""The environment variable the archive commands read their store URL from."""

_EPILOG = f"""\
exit codes:
  0  ok
  1  the session has no records, or the reference (or tool call) is not in it
  2  bad usage, or the archive cannot be opened or read

URLs: memory:, sqlite:PATH (or a path ending in .db, .sqlite, .sqlite3),
redis://HOST:PORT/DB or rediss://... (?prefix=NAME when the engine used one).
Without --archive the URL is read from {ARCHIVE_ENV}.
"""

T = TypeVar("T")


def archive_url(given: str | None) -> str:
    """``--archive`` when given, else ``$CONTEXT_ENGINE_ARCHIVE``.

    Raises:
        CliError: neither is set.
    """
    url = given or os.environ.get(ARCHIVE_ENV, "").strip()
    if not url:
        raise CliError(
            f"which archive? pass --archive URL (sqlite:PATH, redis://HOST:PORT/DB) "
            f"or set {ARCHIVE_ENV}"
        )
    return url


def open_cli_archive(url: str) -> Archive:
    """`open_archive` with every failure turned into a `CliError` that names the URL."""
    shown = safe_url(url)
    try:
        return open_archive(url)
    except ImportError as exc:
        raise CliError(f"--archive {shown}: {exc}") from None
    except ContextEngineError as exc:
        raise CliError(f"--archive {shown}: {exc}") from None


def report_archive(archive: Archive, session_id: str, url: str, out: Output) -> None:
    """Say how many records a replay left in ``session_id`` and how to read them.

    Runs on the blocking runner's event loop, the one the engine's ``*_sync``
    calls used (a Redis client stays bound to the loop that opened it).

    Raises:
        CliError: the archive cannot be read.
    """
    try:
        count = len(run_blocking(lambda: archive.records(session_id), "records"))
    except ArchiveError as exc:
        raise CliError(str(exc)) from None
    out.line(
        f"archived {count} records of session {session_id} in {safe_url(url)}; "
        f"read them with: context-engine archive list {session_id} --archive {safe_url(url)}"
    )


def close_archive(archive: Archive) -> None:
    """Close an archive the engine used through its ``*_sync`` methods (errors are logged)."""
    try:
        run_blocking(archive.close, "close")
    except ArchiveError as exc:
        logging.getLogger("context_engine").warning("archive close failed: %s", exc)


def _with_archive(url: str, work: Callable[[Archive], Awaitable[T]]) -> T:
    """Open the archive, run ``work`` on it in a fresh event loop, close it."""
    missing = _missing_sqlite_file(url)
    if missing is not None:
        # Opening would create an empty database and then report no records: a typo
        # in the path must say so instead, and leave no file behind.
        raise CliError(f"--archive {safe_url(url)}: no such file {missing}")

    async def main() -> T:
        archive = open_cli_archive(url)
        try:
            return await work(archive)
        finally:
            await archive.close()

    try:
        return asyncio.run(main())
    except ArchiveError as exc:
        raise CliError(str(exc)) from None


def _missing_sqlite_file(url: str) -> str | None:
    """The file a SQLite archive URL names when that file does not exist, else None."""
    text = url.strip()
    scheme, colon, rest = text.partition(":")
    if colon and scheme.lower() == "sqlite":
        path = rest[2:] if rest.startswith("//") else rest
    elif Path(text).suffix.lower() in SQLITE_SUFFIXES and (not colon or len(scheme) == 1):
        path = text
    else:
        return None
    if not path or path == ":memory:" or Path(path).expanduser().exists():
        return None
    return path


def stored_at(seconds: float) -> str:
    """``2025-03-01 12:30:05Z``; ``-`` for 0 (a record whose time was not recorded)."""
    if not seconds:
        return "-"
    stamp = dt.datetime.fromtimestamp(seconds, tz=dt.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%SZ")


def record_json(session_id: str, record: ArchiveRecord, fmt: str = "archive") -> dict[str, Any]:
    """One export line: the record with its messages in ``fmt`` (``archive`` or ``openai``)."""
    messages = (
        to_openai(record.messages)
        if fmt == "openai"
        else [message_to_dict(m) for m in record.messages]
    )
    return {
        "session_id": session_id,
        "reference": record.reference,
        "kind": record.kind,
        "created_at": record.created_at,
        "messages": messages,
    }


_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def jsonl_line(data: Any) -> str:
    """``data`` as one JSON Lines line, UTF-8 kept readable.

    The characters `str.splitlines` (and older JavaScript) take for line breaks
    besides the newline (U+2028, U+2029, U+0085) are escaped, so every reader
    sees one record per line.
    """
    text = json.dumps(data, ensure_ascii=False)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text + "\n"


def _no_records(session: str, url: str, out: Output) -> int:
    """Say that ``session`` has no records in the archive at ``url``; the exit code of that."""
    out.error(f"session {session!r} has no records in {safe_url(url)}")
    return EXIT_PROBLEM


# -- list ------------------------------------------------------------------------------------


def _run_list(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    if args.sessions:
        if args.session is not None:
            raise CliError("give either SESSION or --sessions, not both")
        sessions = _with_archive(url, lambda archive: archive.sessions())
        if args.json:
            emit_json(sessions, args.json, out)
        for session in sessions:
            out.line(session)
        return EXIT_OK if sessions else EXIT_PROBLEM
    if args.session is None:
        raise CliError("give a SESSION to list its records, or --sessions to list the sessions")
    records = _with_archive(url, lambda archive: archive.records(args.session))
    if args.json:
        emit_json([_summary(r) for r in records], args.json, out)
    out.table(_records_table(args.session, records))
    if not records:
        return _no_records(args.session, url, out)
    return EXIT_OK


def _summary(record: ArchiveRecord) -> dict[str, Any]:
    return {
        "reference": record.reference,
        "kind": record.kind,
        "created_at": record.created_at,
        "messages": len(record.messages),
        "tool_call_ids": list(record.tool_call_ids),
        "chars": sum(len(m.text) for m in record.messages),
    }


def _records_table(session: str, records: list[ArchiveRecord]) -> Table:
    rows = tuple(
        (
            str(index),
            record.reference,
            record.kind,
            stored_at(record.created_at),
            str(len(record.messages)),
            f"{sum(len(m.text) for m in record.messages):,}",
            preview(record.messages[0], 48) if record.messages else "",
        )
        for index, record in enumerate(records, 1)
    )
    return Table(
        title=f"Archive of session {session} ({len(records)} records, oldest first)",
        headers=("#", "reference", "kind", "stored (UTC)", "messages", "chars", "first message"),
        rows=rows,
        numeric=frozenset({0, 4, 5}),
    )


# -- show ------------------------------------------------------------------------------------


def _run_show(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    wanted: str = args.reference
    if REFERENCE_PATTERN.fullmatch(wanted):
        record = _with_archive(url, lambda archive: archive.get(args.session, wanted))
    else:  # the id of a tool call: its newest archived result
        record = _with_archive(url, lambda archive: archive.find_tool_result(args.session, wanted))
    if record is None:
        out.error(
            f"reference {args.reference!r} is not in the archive of session {args.session!r} "
            f"({safe_url(url)}); `context-engine archive list {args.session}` shows its records"
        )
        return EXIT_PROBLEM
    if args.json:
        emit_json(record_json(args.session, record, args.format), args.json, out)
        return EXIT_OK
    out.line(
        f"{record.reference} in session {args.session}: {record.kind}, "
        f"{len(record.messages)} message(s), stored {stored_at(record.created_at)}"
    )
    for index, message in enumerate(record.messages, 1):
        out.line("")
        out.line(f"[{index}] {_heading(message)}")
        for line in _body(message):
            out.line(f"    {line}")
    return EXIT_OK


def _heading(message: Message) -> str:
    parts: list[str] = ["checkpoint" if isinstance(message, ContextSummary) else message.role]
    if message.name:
        parts.append(f"name={message.name}")
    if message.tool_call_id:
        parts.append(f"tool_call_id={message.tool_call_id}")
    if message.timestamp:
        parts.append(message.timestamp.isoformat())
    return " ".join(parts)


def _body(message: Message) -> Iterator[str]:
    if isinstance(message, ContextSummary):
        yield from message.summary.splitlines()
        if message.references:
            yield f"(references: {', '.join(message.references)})"
        return
    for block in message.content:
        if isinstance(block, ToolCall):
            yield f"-> {block.name}({block.arguments})  [{block.id}]"
        elif isinstance(block, ThinkingBlock):
            yield "[thinking, redacted]" if block.redacted else f"[thinking] {block.thinking}"
        elif isinstance(block, ImageBlock):
            yield f"[image {block.url or (block.media_type or 'data')}]"
        else:
            yield from block.text.splitlines() or [""]


# -- export ----------------------------------------------------------------------------------


def _run_export(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    records = _with_archive(url, lambda archive: archive.records(args.session))
    if not records:
        return _no_records(args.session, url, out)
    try:
        with _target(args.output, out.stdout) as stream:
            for record in records:
                stream.write(jsonl_line(record_json(args.session, record, args.format)))
            stream.flush()
    except BrokenPipeError:  # `export SESSION | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.stdout.fileno())
        return EXIT_OK
    if args.output:
        out.line(f"wrote {len(records)} records of session {args.session} to {args.output}")
    return EXIT_OK


@contextmanager
def _target(path: str | None, stdout: TextIO) -> Iterator[TextIO]:
    if path is None or path == "-":
        yield stdout
        return
    try:
        with Path(path).open("w", encoding="utf-8") as stream:
            yield stream
    except OSError as exc:
        raise CliError(f"cannot write {path}: {exc.strerror or exc}") from None


# -- delete, expire --------------------------------------------------------------------------


def _run_delete(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    deleted = _with_archive(url, lambda archive: archive.delete_session(args.session))
    if not deleted:
        return _no_records(args.session, url, out)
    out.line(f"deleted {deleted} records of session {args.session} from {safe_url(url)}")
    return EXIT_OK


def _run_expire(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    age = parse_age(args.older_than)
    cutoff = stored_at(time.time() - age)
    deleted = _with_archive(url, lambda archive: archive.expire(age))
    out.line(
        f"deleted {deleted} records stored before {cutoff} (older than {args.older_than}) "
        f"from {safe_url(url)}"
    )
    return EXIT_OK


# -- parser ----------------------------------------------------------------------------------


def _options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing but errors (the exit code tells)"
    )
    common.add_argument(
        "--archive",
        metavar="URL",
        help=f"the store: sqlite:PATH, redis://HOST:PORT/DB, ... (default ${ARCHIVE_ENV})",
    )
    return common


def _json(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help=f"write {what} as JSON to PATH; without PATH (or '-') print it on stdout",
    )


def _format(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=("archive", "openai"),
        default="archive",
        help="form of the messages: 'archive' (lossless, the default) or 'openai' "
        "(Chat Completions dicts)",
    )


def _sub(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str
) -> argparse.ArgumentParser:
    return commands.add_parser(
        name,
        parents=[_options()],
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_archive(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``archive`` and its ``list``, ``show``, ``export``, ``delete``, ``expire``."""
    parser = commands.add_parser(
        "archive",
        help="read what the engine archived (list, show, export) and clean up (delete, expire)",
        description="Read the originals the engine archived (cleared tool results, trimmed "
        "text, ranges replaced by checkpoints) from a SQLite file or a Redis server.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="archive_command", metavar="ACTION", required=True)
    listing = _sub(actions, "list", "list the records of SESSION, or every session")
    listing.add_argument("session", metavar="SESSION", nargs="?", help="the session id")
    listing.add_argument("--sessions", action="store_true", help="list the session ids instead")
    _json(listing, "the list")
    listing.set_defaults(handler=_run_list)
    show = _sub(actions, "show", "show the messages archived under REFERENCE in SESSION")
    show.add_argument("session", metavar="SESSION", help="the session id")
    show.add_argument(
        "reference",
        metavar="REFERENCE",
        help="the reference (arc-...), or a tool-call id for its newest archived result",
    )
    _json(show, "the record")
    _format(show)
    show.set_defaults(handler=_run_show)
    export = _sub(actions, "export", "write every record of SESSION as JSON Lines")
    export.add_argument("session", metavar="SESSION", help="the session id")
    export.add_argument(
        "-o", "--output", metavar="FILE", help="where to write (default: standard output)"
    )
    _format(export)
    export.set_defaults(handler=_run_export)
    delete = _sub(actions, "delete", "delete every record of SESSION")
    delete.add_argument("session", metavar="SESSION", help="the session id")
    delete.set_defaults(handler=_run_delete)
    expire = _sub(actions, "expire", "delete the records of every session older than an age")
    expire.add_argument(
        "--older-than",
        metavar="AGE",
        required=True,
        help="records stored longer ago than this go: 3600, 90s, 15m, 12h, 7d, 2w; "
        "records of unknown time (migrated from an old file) stay",
    )
    expire.set_defaults(handler=_run_expire)
