"""``context-engine archive delete|expire``: housekeeping of a store, for the operator.

``delete SESSION`` removes every record of one session (a finished or
abandoned agent run); ``expire --older-than AGE`` removes the records of every
session stored longer ago than ``AGE`` (a cron job's retention policy). Both
print how many records went; neither asks for confirmation, like ``rm``.
"""

from __future__ import annotations

import argparse
import time

import regex

from context_engine.archive.redis import safe_url
from context_engine.cli._archive import _sub, _with_archive, archive_url, stored_at
from context_engine.cli._common import EXIT_OK, EXIT_PROBLEM, CliError
from context_engine.cli._output import Output

__all__ = ["add_housekeeping", "parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
_AGE = regex.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_age(text: str) -> float:
    """Seconds in ``text``: a number with an optional unit s, m, h, d or w (``7d``, ``90s``).

    Raises:
        CliError: ``text`` is not such an age.
    """
    match = _AGE.fullmatch(text.strip().lower())
    if match is None:
        raise CliError(
            f"--older-than {text!r}: give an age like 3600, 90s, 15m, 12h, 7d or 2w "
            "(seconds without a unit)"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _run_delete(args: argparse.Namespace, out: Output) -> int:
    url = archive_url(args.archive)
    deleted = _with_archive(url, lambda archive: archive.delete_session(args.session))
    if not deleted:
        out.error(f"session {args.session!r} has no records in {safe_url(url)}")
        return EXIT_PROBLEM
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


def add_housekeeping(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``archive delete`` and ``archive expire``."""
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
