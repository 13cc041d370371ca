"""The pipeline ``inspect``, ``compact`` and ``replay`` share.

Its options, the engine, the fixed request overhead (tool schemas), and why a
strategy left the view alone.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from context_engine.cli._common import (
    DEFAULT_STRATEGIES,
    CountingSummarizer,
    build_strategies,
    build_summarizer,
    parse_strategies,
)
from context_engine.engine import ContextEngine
from context_engine.events import RewriteEvent, RewriteStep
from context_engine.formats.readers import Transcript
from context_engine.tokens import TokenCounter, resolve_counter

__all__ = [
    "Overhead",
    "Pipeline",
    "add_pipeline_options",
    "measure_overhead",
    "pipeline_from_args",
    "step_reason",
]

SUMMARIZER_HELP = (
    "who writes checkpoints: 'extractive' (offline, no model; the default), "
    "'openai:MODEL' (OPENAI_API_KEY, OPENAI_BASE_URL) or 'anthropic:MODEL' (ANTHROPIC_API_KEY)"
)


def add_pipeline_options(parser: argparse.ArgumentParser, positive: Any) -> None:
    """``--reserve``, ``--strategies``, ``--summarizer``, ``--keep-tail`` and ``--overhead``."""
    parser.add_argument(
        "--reserve",
        type=positive,
        metavar="N",
        help="head-room for the answer in tokens (default clamp(0.13 x window, 4096, 16384))",
    )
    parser.add_argument(
        "--strategies",
        default=DEFAULT_STRATEGIES,
        metavar="LIST",
        help=f"comma-separated pipeline, in order (default {DEFAULT_STRATEGIES})",
    )
    parser.add_argument("--summarizer", default="extractive", metavar="SPEC", help=SUMMARIZER_HELP)
    parser.add_argument(
        "--keep-tail",
        type=positive,
        metavar="N",
        help="tokens the summary keeps verbatim at the end (default clamp(threshold / 4, 2000, "
        "20000), at most a quarter of the transcript for compact)",
    )
    parser.add_argument(
        "--overhead",
        type=_tokens_or_zero,
        default=0,
        metavar="N",
        help="tokens sent with every call besides the messages and the file's tool schemas "
        "(a system prompt or tools the file does not hold; default 0)",
    )


def _tokens_or_zero(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


@attrs.frozen(kw_only=True)
class Overhead:
    """Tokens every call sends besides the messages.

    Attributes:
        tools: Tool definitions the file carries (a request body's ``tools``).
        tools_tokens: Their tokens, counted on their JSON text.
        extra: Tokens given with ``--overhead``.
    """

    tools: int
    tools_tokens: int
    extra: int

    @property
    def tokens(self) -> int:
        """All of it: what the engine is told with ``overhead_tokens``."""
        return self.tools_tokens + self.extra


def measure_overhead(
    tools: Sequence[Mapping[str, Any]], extra: int, counter: TokenCounter
) -> Overhead:
    """The tool schemas' tokens plus ``extra``.

    Providers render schemas in their own framing; their JSON text is close to
    what a model is sent for them and far closer than leaving them out.
    """
    text = json.dumps(list(tools), ensure_ascii=False, separators=(",", ":")) if tools else ""
    return Overhead(tools=len(tools), tools_tokens=counter.count_text(text), extra=extra)


@attrs.frozen(kw_only=True)
class Pipeline:
    """The engine a command runs, and what it was built from."""

    engine: ContextEngine
    strategies: tuple[str, ...]
    summarizer: CountingSummarizer | None
    summarizer_label: str
    overhead: Overhead


def pipeline_from_args(args: argparse.Namespace, transcript: Transcript) -> Pipeline:
    """The engine the pipeline options describe, told the transcript's tool schemas.

    Reads ``--window``, ``--reserve``, ``--strategies``, ``--summarizer``,
    ``--keep-tail``, ``--overhead`` and ``--encoding``.

    Raises:
        CliError: a strategy or summarizer name is unknown, or a provider's key
            or extra is missing.
    """
    names = parse_strategies(args.strategies)
    counting = (
        CountingSummarizer(build_summarizer(args.summarizer)) if "full_summary" in names else None
    )
    overhead = measure_overhead(transcript.tools, args.overhead, resolve_counter(args.encoding))
    engine = ContextEngine(
        args.window,
        build_strategies(names, counting, keep_recent_tokens=args.keep_tail),
        reserve_tokens=args.reserve,
        overhead_tokens=overhead.tokens,
        encoding=args.encoding,
    )
    label = args.summarizer if counting is not None else "none"
    return Pipeline(
        engine=engine,
        strategies=names,
        summarizer=counting,
        summarizer_label=label,
        overhead=overhead,
    )


# Why a strategy that ran without error changed nothing: it found nothing it may shorten.
_NOTHING_TO_DO: Mapping[str, str] = {
    "tool_result_cap": "no tool result above the cap",
    "tool_result_microcompact": "no tool result old enough to clear (the newest ones are kept)",
    "light_trim": "no long text outside the protected messages to trim",
    "full_summary": "no history before the kept tail to summarize (see --keep-tail)",
    "session_memory": "no session memory to seed from",
    "hard_truncate": "nothing but protected messages left to drop",
}


def step_reason(step: RewriteStep, event: RewriteEvent | None) -> str:
    """Why ``step`` applied or not, in a few words."""
    if step.error:
        return f"failed: {step.error}"
    if step.applied:
        return f"removed {step.tokens_before - step.tokens_after:,} tokens"
    if event is not None and event.futile and step.name == "hard_truncate":
        return (
            f"the protected messages alone ({event.floor_tokens:,} tokens) are above the "
            "threshold, so cutting the rest would not make the view fit"
        )
    return _NOTHING_TO_DO.get(step.name, "found nothing it may shorten")
