"""The ``context-engine`` argument parser and entry point."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence

from context_engine.cli._archive import add_archive
from context_engine.cli._commands import run_demo, run_inspect, run_replay
from context_engine.cli._common import EXIT_OK, EXIT_USAGE, CliError
from context_engine.cli._compact import run_compact
from context_engine.cli._output import Output
from context_engine.cli._pipeline import add_pipeline_options
from context_engine.cli._prices import add_pricing_options
from context_engine.cli._repair import run_repair
from context_engine.cli._warnings import CliWarnings
from context_engine.errors import ConfigurationError
from context_engine.tokens import DEFAULT_ENCODING

__all__ = ["build_parser", "main"]

_EPILOG = """\
exit codes:
  0  ok
  1  the transcript does not fit, or the replay found problems
  2  bad usage or unreadable input

Transcripts are read with context_engine.formats.readers.read_transcript:
OpenAI Chat Completions messages (JSON or JSONL), Anthropic Messages API
bodies, Claude Code sessions and Codex rollouts.
"""


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing but errors (the exit code tells)"
    )
    common.add_argument(
        "--encoding",
        default=DEFAULT_ENCODING,
        metavar="E",
        help=f"tiktoken encoding used to count tokens (default {DEFAULT_ENCODING})",
    )
    return common


def _file_argument(parser: argparse.ArgumentParser, *, strict: bool = True) -> None:
    # Optional to argparse so that `inspect --json FILE` (where --json's optional PATH
    # takes FILE) can be read as the user meant; `_settle_file` requires it afterwards.
    parser.add_argument("file", metavar="FILE", nargs="?", help="the transcript")
    parser.set_defaults(subparser=parser, json=None)
    if strict:
        parser.add_argument(
            "--strict",
            action="store_true",
            help="fail (exit 2) when a tool result answers no call or a call has no result "
            "before the next message; without it these are warnings",
        )


def _settle_file(args: argparse.Namespace) -> None:
    """Give ``FILE`` back when ``--json`` took it as its PATH; fail when there is none."""
    if not hasattr(args, "subparser") or args.file is not None:
        return
    if args.json not in (None, "-"):
        args.file, args.json = args.json, "-"
        return
    args.subparser.error("the following arguments are required: FILE")


def _check_encoding(name: str) -> None:
    import tiktoken

    known = tiktoken.list_encoding_names()
    if name not in known:
        raise CliError(f"--encoding: unknown encoding {name!r}; choose from {', '.join(known)}")


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help=f"write {what} as JSON to PATH; without PATH (or '-') print it on stdout "
        "instead of the tables",
    )


def _add_inspect(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "inspect",
        parents=[_common()],
        help="where a transcript's tokens go, and what the engine would do",
        description="Show where a transcript's tokens go (by role, by tool, largest messages, "
        "provider usage anchors, tool schemas), whether it fits the window, and what the "
        "pipeline replay runs (--strategies, --summarizer) would do with it and why each "
        "strategy applied or not. Exit 1 when it does not fit.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_argument(parser)
    parser.add_argument(
        "--window",
        type=_positive_int,
        default=128_000,
        metavar="N",
        help="context window in tokens (default 128000)",
    )
    parser.add_argument(
        "--top",
        type=_positive_int,
        default=10,
        metavar="N",
        help="how many of the largest messages to list (default 10)",
    )
    add_pipeline_options(parser, _positive_int)
    _json_option(parser, "the report")
    parser.set_defaults(handler=run_inspect)


def _add_compact(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "compact",
        parents=[_common()],
        help="compact a transcript once, as /compact does",
        description="Run one forced compaction (ContextEngine.compact); when the checkpoint "
        "alone leaves the transcript above the threshold, run the replay pipeline "
        "(--strategies) on it as the next call would. Write the result and say what was "
        "protected and why. Exit 1 when the result is still above the threshold or the "
        "summarizer failed.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_argument(parser)
    parser.add_argument(
        "--window",
        type=_positive_int,
        required=True,
        metavar="N",
        help="context window in tokens",
    )
    add_pipeline_options(parser, _positive_int)
    parser.add_argument(
        "--instructions", metavar="TEXT", help="what the checkpoint should focus on"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="where to write the compacted transcript ('-' for standard output; default FILE's "
        "name + .compacted.jsonl, or .compacted.json for anthropic)",
    )
    parser.add_argument(
        "--format",
        choices=("openai", "anthropic"),
        help="format of OUT (default: the input's format when it is one of these, else openai)",
    )
    _json_option(parser, "the result and its rewrite event")
    parser.set_defaults(handler=run_compact)


def _add_replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--html", metavar="PATH", help="write a self-contained HTML report (chart and tables)"
    )
    parser.add_argument(
        "--html-call",
        type=_positive_int,
        metavar="N",
        help="the call whose budget by source the HTML report shows (default: the largest)",
    )
    add_pricing_options(parser)
    _json_option(parser, "every call, rewrite, total and problem")


def _add_replay(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "replay",
        parents=[_common()],
        help="replay a transcript through the engine call by call",
        description="Feed the transcript to the engine as an agent loop would: project before "
        "each assistant message, commit checkpoints, recover views above the window. Report "
        "tokens per call with and without the engine, every rewrite, summarizer calls, prompt "
        "prefix reuse, breaker trips, and the modelled prompt cost under a provider's cache "
        "(--pricing) with the engine, with the whole history and with trim-last. Exit 1 when "
        "a view broke an invariant, stayed above the window, or a pipeline failed.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_argument(parser)
    parser.add_argument(
        "--window",
        type=_positive_int,
        required=True,
        metavar="N",
        help="context window in tokens",
    )
    add_pipeline_options(parser, _positive_int)
    parser.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="PATH",
        help="a file (a rules file, design notes) every call gets after the system prompt, "
        "as a context provider named after it; repeatable",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="print every rewrite's assembly trace: each clear, trim, summary and truncation "
        "with its tokens, reason and archive reference",
    )
    parser.add_argument(
        "--archive",
        metavar="URL",
        help="store every original a rewrite removes in this archive (sqlite:PATH, "
        "redis://HOST:PORT/DB, memory:); see `context-engine archive`",
    )
    parser.add_argument(
        "--session",
        metavar="ID",
        help="the session id the archive files the originals under (default: FILE's stem)",
    )
    _add_replay_options(parser)
    parser.set_defaults(handler=run_replay)


def _add_demo(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "demo",
        parents=[_common()],
        help="replay a generated long coding-agent session and write report.html",
        description="Write a deterministic synthetic coding-agent session (large tool outputs, "
        "repeated reads, a failing then passing test run, CJK text) as DIR/demo-session.jsonl, "
        "replay it with the extractive summarizer at a window that forces several checkpoints, "
        "print the session table and write DIR/report.html.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out", default=".", metavar="DIR", help="directory for the files (default: .)"
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=400,
        metavar="N",
        help="tool steps in the session (default 400)",
    )
    parser.add_argument(
        "--window",
        type=_positive_int,
        metavar="N",
        help="context window (default clamp(30 x steps, 8192, 16000))",
    )
    _add_replay_options(parser)
    parser.set_defaults(handler=run_demo)


def _add_repair(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "repair",
        parents=[_common()],
        help="fix tool calls and results that do not pair up",
        description="Write a copy of the transcript a provider accepts: tool results that "
        "answer no earlier call are removed, and a call followed by another message before "
        "its result gets a placeholder result. Calls still open at the end stay open.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _file_argument(parser, strict=False)
    parser.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="where to write ('-' for standard output; default FILE's name + .repaired.jsonl, "
        "or .repaired.json for anthropic)",
    )
    parser.add_argument(
        "--format",
        choices=("openai", "anthropic"),
        help="format of OUT (default: the input's format when it is one of these, else openai)",
    )
    parser.set_defaults(handler=run_repair)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``context-engine``."""
    parser = argparse.ArgumentParser(
        prog="context-engine",
        description="Inspect, compact and replay agent transcripts with context-engine.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from context_engine import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (_add_inspect, _add_compact, _add_replay, _add_repair, _add_demo, add_archive):
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``context-engine`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace, Output], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    _settle_file(args)
    try:
        out = _output(args)
    except CliError as exc:
        Output(quiet=args.quiet).error(str(exc))
        return EXIT_USAGE
    logger = logging.getLogger("context_engine")
    level = logger.level
    log_handler = logging.StreamHandler(out.stderr)
    log_handler.setFormatter(logging.Formatter("context-engine: %(levelname)s: %(message)s"))
    log_handler.setLevel(logging.ERROR if args.quiet else logging.WARNING)
    log_handler.addFilter(CliWarnings())
    logger.addHandler(log_handler)
    logger.setLevel(logging.WARNING)
    try:
        if hasattr(args, "encoding"):
            _check_encoding(args.encoding)
        code = handler(args, out)
        out.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except (CliError, ConfigurationError) as exc:
        out.error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:
        return _pipe_closed()
    finally:
        logger.removeHandler(log_handler)
        logger.setLevel(level)


def _output(args: argparse.Namespace) -> Output:
    """Where the tables go: stdout, unless stdout carries the JSON, transcript or report."""
    json_out = getattr(args, "json", None) == "-"
    data_out = "-" in (getattr(args, "output", None), getattr(args, "html", None))
    if json_out and data_out:
        raise CliError("--json - and -o - (or --html -) all want standard output; give them a PATH")
    if data_out:
        return Output(quiet=args.quiet, stdout=sys.stderr)
    return Output(quiet=args.quiet or json_out)


def _pipe_closed() -> int:
    """The reader went away (``| head``): nothing more to say, and nothing went wrong."""
    # Python flushes stdout again at exit; point it at /dev/null so that flush is silent.
    # An in-process caller's stdout may not be a real file: then there is nothing to redirect.
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK
