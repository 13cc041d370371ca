"""What each subcommand does once its arguments are parsed."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from context_engine.archive.base import Archive
from context_engine.assembly.providers import FileProvider
from context_engine.cli._archive import close_archive, open_cli_archive, report_archive
from context_engine.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    CliError,
    build_summarizer,
    load_transcript,
    parse_strategies,
)
from context_engine.cli._html import render_html
from context_engine.cli._inspect import inspect_messages
from context_engine.cli._output import (
    Output,
    emit_json,
    write_messages,
    write_text,
)
from context_engine.cli._pipeline import measure_overhead, pipeline_from_args
from context_engine.cli._present import num, show_inspect, show_replay, show_trace
from context_engine.cli._prices import pricing_from_args
from context_engine.cli._repair import read_checked
from context_engine.cli.replay import ReplayReport, replay
from context_engine.messages import Message
from context_engine.testing import synthetic_session
from context_engine.tokens import resolve_counter

__all__ = ["demo_window", "run_demo", "run_inspect", "run_replay"]


def _version() -> str:
    from context_engine import __version__

    return __version__


# -- inspect -----------------------------------------------------------------------------


def run_inspect(args: argparse.Namespace, out: Output) -> int:
    """``inspect FILE``: exit 0 when the transcript fits under the threshold, else 1."""
    transcript = read_checked(args, out)
    pipeline = pipeline_from_args(args, transcript)
    report = inspect_messages(
        transcript.messages,
        window=args.window,
        encoding=args.encoding,
        source=transcript.source,
        format=transcript.format,
        top=args.top,
        engine=pipeline.engine,
        strategies=pipeline.strategies,
        summarizer=pipeline.summarizer_label,
        overhead=pipeline.overhead,
    )
    show_inspect(report, out)
    if args.json:
        emit_json(report.to_json(), args.json, out)
    return EXIT_OK if report.fits else EXIT_PROBLEM


# -- replay and demo ----------------------------------------------------------------------


def _replay(
    messages: tuple[Message, ...],
    args: argparse.Namespace,
    out: Output,
    *,
    source: str,
    strategies: tuple[str, ...],
    window: int,
    reserve: int | None,
    summarizer_spec: str,
    transcript_format: str,
    archive: Archive | None = None,
    session_id: str | None = None,
    tools: tuple[Mapping[str, Any], ...] = (),
) -> ReplayReport:
    providers = [_context_file(path) for path in getattr(args, "context", [])]
    summarizing = "full_summary" in strategies or "micro_summary" in strategies
    summarizer = build_summarizer(summarizer_spec) if summarizing else None
    overhead = measure_overhead(tools, getattr(args, "overhead", 0), resolve_counter(args.encoding))
    pricing, unpriced = pricing_from_args(args.pricing, args.input_price, transcript_format)
    if unpriced is not None:
        out.warning(unpriced)
    calls = sum(1 for i, m in enumerate(messages) if i and m.role == "assistant")
    with out.progress(calls, "replaying") as bar:
        return replay(
            messages,
            window=window,
            reserve=reserve,
            strategies=strategies,
            summarizer=summarizer,
            summarizer_label=summarizer_spec,
            encoding=args.encoding,
            source=source,
            progress=lambda done, _total: bar.update(done),
            archive=archive,
            session_id=session_id,
            providers=providers,
            overhead_tokens=overhead.tokens,
            keep_recent_tokens=getattr(args, "keep_tail", None),
            pricing=pricing,
        )


def _context_file(path: str) -> FileProvider:
    """``--context PATH``: a stable provider of that one file, named after it."""
    file = Path(path)
    if not file.is_file():
        raise CliError(f"--context {path}: no such file")
    return FileProvider(root=file.parent, paths=[file.name], name=path, max_bytes=256_000)


def _publish(report: ReplayReport, args: argparse.Namespace, out: Output, title: str) -> int:
    show_replay(report, out)
    if args.html:
        html = render_html(report, title=title, version=_version(), call=args.html_call)
        write_text(args.html, html)
        out.line(f"wrote {'standard output' if args.html == '-' else args.html}")
    if args.json:
        emit_json(report.to_json(), args.json, out)
    return EXIT_PROBLEM if report.problems else EXIT_OK


def run_replay(args: argparse.Namespace, out: Output) -> int:
    """``replay FILE``: exit 0 when the replay found no problem, else 1."""
    strategies = parse_strategies(args.strategies)
    transcript = read_checked(args, out)
    if args.session is not None and args.archive is None:
        raise CliError("--session names the archive's session; give --archive URL with it")
    archive = open_cli_archive(args.archive) if args.archive else None
    session = args.session or Path(transcript.source).stem
    try:
        report = _replay(
            transcript.messages,
            args,
            out,
            source=transcript.source,
            strategies=strategies,
            window=args.window,
            reserve=args.reserve,
            summarizer_spec=args.summarizer,
            transcript_format=transcript.format,
            archive=archive,
            session_id=session if archive is not None else None,
            tools=transcript.tools,
        )
        code = _publish(report, args, out, f"Replay of {Path(transcript.source).name}")
        if args.trace:
            show_trace(report, out)
        if archive is not None:
            report_archive(archive, session, args.archive, out)
    finally:
        if archive is not None:
            close_archive(archive)
    return code


def demo_window(steps: int) -> int:
    """A window that forces several checkpoints on a demo session of ``steps`` steps."""
    return min(16_000, max(8_192, 30 * steps))


def run_demo(args: argparse.Namespace, out: Output) -> int:
    """``demo``: write a synthetic session, replay it, write ``report.html``."""
    directory = Path(args.out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"cannot create {directory}: {exc.strerror or exc}") from None
    session = tuple(synthetic_session(args.steps))
    path = directory / "demo-session.jsonl"
    write_messages(path, session, "openai")
    transcript = load_transcript(str(path))
    window = args.window or demo_window(args.steps)
    out.line(
        f"wrote {path}: a synthetic coding-agent session of {args.steps} tool steps "
        f"({len(transcript.messages)} messages); replaying it at a {num(window)}-token window "
        "with the extractive summarizer"
    )
    if args.html is None:
        args.html = str(directory / "report.html")
    report = _replay(
        transcript.messages,
        args,
        out,
        source=str(path),
        strategies=parse_strategies("microcompact,light_trim,summary,hard_truncate"),
        window=window,
        reserve=None,
        summarizer_spec="extractive",
        transcript_format=transcript.format,
    )
    return _publish(report, args, out, "context-engine demo: a long coding-agent session")
