"""Checking a transcript's tool pairing before a command uses it, and ``repair``."""

from __future__ import annotations

import argparse
from pathlib import Path

from context_engine.cli._common import EXIT_OK, CliError, load_transcript
from context_engine.cli._output import Output, WriteFormat, write_messages
from context_engine.cli._pairing import pairing_problems, repair
from context_engine.formats.readers import Transcript

__all__ = ["read_checked", "run_repair"]

# Enough to see the pattern; a transcript broken everywhere would bury the output.
_SHOWN = 10


def read_checked(args: argparse.Namespace, out: Output) -> Transcript:
    """Read ``args.file`` and warn about tool calls and results a provider would reject.

    Raises:
        CliError: the file cannot be read, or it has such problems and
            ``--strict`` was given.
    """
    transcript = load_transcript(args.file)
    problems = pairing_problems(transcript.messages)
    if not problems:
        return transcript
    lines = [problem.describe(transcript) for problem in problems]
    if getattr(args, "strict", False):
        shown = "; ".join(lines[:_SHOWN])
        more = f"; and {len(lines) - _SHOWN} more" if len(lines) > _SHOWN else ""
        raise CliError(
            f"{transcript.source}: {shown}{more} (--strict); fix it with: "
            f"context-engine repair {transcript.source}"
        )
    for line in lines[:_SHOWN]:
        out.warning(f"{transcript.source}: {line}")
    if len(lines) > _SHOWN:
        out.warning(f"{transcript.source}: {len(lines) - _SHOWN} more tool pairing problems")
    out.warning(
        f"{transcript.source}: the figures below use the transcript as it is; "
        f"context-engine repair {transcript.source} writes a fixed copy"
    )
    return transcript


def _repaired_path(source: str, fmt: str) -> Path:
    path = Path(source)
    return path.with_name(f"{path.stem}.repaired{'.json' if fmt == 'anthropic' else '.jsonl'}")


def run_repair(args: argparse.Namespace, out: Output) -> int:
    """``repair FILE``: write a copy whose tool calls and results pair up."""
    transcript = load_transcript(args.file)
    problems = pairing_problems(transcript.messages)
    if not problems:
        out.line(f"{transcript.source}: every tool call and result pair up; nothing written")
        return EXIT_OK
    fmt: WriteFormat = args.format or (
        "anthropic" if transcript.format == "anthropic" else "openai"
    )
    target = args.output or str(_repaired_path(transcript.source, fmt))
    fixed = repair(transcript.messages)
    write_messages(target, fixed, fmt)
    for problem in problems:
        action = (
            "removed the result"
            if problem.kind == "orphan_result"
            else "added a placeholder result"
        )
        out.line(f"{problem.describe(transcript)}: {action}")
    where = "standard output" if target == "-" else target
    out.line(f"wrote {where} ({fmt}, {len(fixed)} messages; {len(transcript.messages)} before)")
    return EXIT_OK
