"""What each subcommand does once its arguments are parsed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal

import attrs

from context_engine.archive.base import Archive
from context_engine.assembly.providers import FileProvider
from context_engine.cli._archive import close_archive, open_cli_archive, report_archive
from context_engine.cli._common import (
    EXIT_OK,
    EXIT_PROBLEM,
    CliError,
    CountingSummarizer,
    build_summarizer,
    load_transcript,
    parse_strategies,
)
from context_engine.cli._html import render_html
from context_engine.cli._inspect import inspect_messages
from context_engine.cli._output import Output, emit_json, write_text
from context_engine.cli._present import num, show_inspect, show_replay, show_trace
from context_engine.cli.replay import ReplayReport, replay
from context_engine.engine import ContextEngine
from context_engine.errors import CompactionError, ContextEngineError
from context_engine.events import RewriteEvent
from context_engine.formats.readers import write_transcript
from context_engine.messages import ContextSummary, Message
from context_engine.redact import Redactor
from context_engine.results import CompactResult
from context_engine.testing import synthetic_session

__all__ = ["demo_window", "run_compact", "run_demo", "run_inspect", "run_replay"]

WriteFormat = Literal["openai", "anthropic"]


def _version() -> str:
    from context_engine import __version__

    return __version__


def _write_messages(target: str | Path, messages: tuple[Message, ...], fmt: WriteFormat) -> None:
    try:
        write_transcript(target, messages, format=fmt)
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None
    except ContextEngineError as exc:
        raise CliError(f"cannot write the messages as {fmt}: {exc}") from None


# -- inspect -----------------------------------------------------------------------------


def run_inspect(args: argparse.Namespace, out: Output) -> int:
    """``inspect FILE``: exit 0 when the transcript fits under the threshold, else 1."""
    transcript = load_transcript(args.file)
    report = inspect_messages(
        transcript.messages,
        window=args.window,
        encoding=args.encoding,
        source=transcript.source,
        format=transcript.format,
        top=args.top,
    )
    show_inspect(report, out)
    if args.json:
        emit_json(report.to_json(), args.json, out)
    return EXIT_OK if report.fits else EXIT_PROBLEM


# -- compact -----------------------------------------------------------------------------


def event_json(event: RewriteEvent | None) -> dict[str, Any] | None:
    """A `RewriteEvent` as JSON-ready data, without its view."""
    if event is None:
        return None
    return attrs.asdict(event, filter=lambda attribute, _: attribute.name != "view")


def _output_path(source: str, fmt: WriteFormat) -> Path:
    path = Path(source)
    return path.with_name(f"{path.stem}.compacted{'.jsonl' if fmt == 'openai' else '.json'}")


def run_compact(args: argparse.Namespace, out: Output) -> int:
    """``compact FILE``: exit 0 when the compacted transcript fits, 1 when not or on failure."""
    transcript = load_transcript(args.file)
    summarizer = CountingSummarizer(build_summarizer(args.summarizer))
    engine = ContextEngine.default(
        args.window, summarizer=summarizer, redactor=Redactor(), encoding=args.encoding
    )
    try:
        result = engine.compact_sync(transcript.messages, args.instructions)
    except CompactionError as exc:
        out.error(f"compaction failed: {exc}")
        return EXIT_PROBLEM
    fmt: WriteFormat = args.format or (
        "anthropic" if transcript.format == "anthropic" else "openai"
    )
    target = Path(args.output) if args.output else _output_path(transcript.source, fmt)
    _write_messages(target, result.messages, fmt)
    info = result.info
    data = {
        "source": transcript.source,
        "output": str(target),
        "format": fmt,
        "window": engine.context_window,
        "threshold": engine.threshold,
        "changed": result.changed,
        "strategy": result.strategy,
        "messages_before": len(transcript.messages),
        "messages_after": len(result.messages),
        "tokens_after": result.usage.tokens,
        "fits": result.usage.fits,
        "compacted_count": info.compacted_count if info else 0,
        "kept_count": info.kept_count if info else len(result.messages),
        "split_turn": info.is_split_turn if info else False,
        "summarizer": args.summarizer,
        "summarizer_calls": summarizer.calls,
        "event": event_json(result.event),
    }
    _show_compact(result, data, out)
    if args.json:
        emit_json(data, args.json, out)
    return EXIT_OK if result.usage.fits else EXIT_PROBLEM


def _show_compact(result: CompactResult, data: dict[str, Any], out: Output) -> None:
    event = result.event
    if not result.changed or event is None:
        out.line(f"Nothing to compact in {data['source']}: the transcript is kept as it is.")
    else:
        out.line(
            f"Compacted {data['source']} with {event.strategy}: {num(event.tokens_before)} -> "
            f"{num(event.tokens_after)} tokens, {data['messages_before']} -> "
            f"{data['messages_after']} messages"
        )
        out.line(
            f"  checkpoint replaced {data['compacted_count']} messages, kept "
            f"{data['kept_count']} verbatim; split turn: {'yes' if data['split_turn'] else 'no'}; "
            f"summarizer {data['summarizer']} called {data['summarizer_calls']} time(s)"
        )
        if event.info is not None and (event.info.read_files or event.info.modified_files):
            out.line(
                f"  files read: {', '.join(event.info.read_files) or '-'}; "
                f"modified: {', '.join(event.info.modified_files) or '-'}"
            )
        tried = ", ".join(f"{s.name}{'*' if s.applied else ''}" for s in event.steps)
        out.line(f"  strategies tried (* applied): {tried}")
    out.line(f"wrote {data['output']} ({data['format']}, {data['messages_after']} messages)")
    checkpoint = next((m for m in result.messages if isinstance(m, ContextSummary)), None)
    if checkpoint is not None and result.changed:
        lines = checkpoint.summary.splitlines()
        out.line(f"Checkpoint ({len(lines)} lines, first 15):")
        for line in lines[:15]:
            out.line(f"  | {line if len(line) <= 116 else line[:115] + '…'}")
    if not result.usage.fits:
        out.line(
            f"The result ({num(result.usage.tokens)} tokens) is still above the threshold "
            f"({num(data['threshold'])})."
        )


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
    archive: Archive | None = None,
    session_id: str | None = None,
) -> ReplayReport:
    providers = [_context_file(path) for path in getattr(args, "context", [])]
    summarizing = "full_summary" in strategies or "micro_summary" in strategies
    summarizer = build_summarizer(summarizer_spec) if summarizing else None
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
        out.line(f"wrote {args.html}")
    if args.json:
        emit_json(report.to_json(), args.json, out)
    return EXIT_PROBLEM if report.problems else EXIT_OK


def run_replay(args: argparse.Namespace, out: Output) -> int:
    """``replay FILE``: exit 0 when the replay found no problem, else 1."""
    strategies = parse_strategies(args.strategies)
    transcript = load_transcript(args.file)
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
            archive=archive,
            session_id=session if archive is not None else None,
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
    _write_messages(path, session, "openai")
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
    )
    return _publish(report, args, out, "context-engine demo: a long coding-agent session")
