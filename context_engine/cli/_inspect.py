"""``context-engine inspect``: where a transcript's tokens go, and what the engine would do."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import attrs

from context_engine.cli._pipeline import Overhead, step_reason
from context_engine.engine import ContextEngine
from context_engine.messages import ImageBlock, Message
from context_engine.redact import Redactor
from context_engine.tokens import TOOL_CALL_OVERHEAD_TOKENS, TokenCounter

__all__ = ["InspectReport", "inspect_messages", "preview"]


@attrs.frozen(kw_only=True)
class RoleRow:
    """Tokens of one role (``checkpoint`` for `ContextSummary` messages)."""

    role: str
    messages: int
    tokens: int


@attrs.frozen(kw_only=True)
class ToolRow:
    """Tokens of one tool's calls (arguments) and results."""

    tool: str
    calls: int
    call_tokens: int
    results: int
    result_tokens: int


@attrs.frozen(kw_only=True)
class MessageRow:
    """One of the largest messages."""

    index: int
    role: str
    tool: str | None
    tokens: int
    preview: str


@attrs.frozen(kw_only=True)
class AnchorRow:
    """A provider usage report found on an assistant message."""

    index: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@attrs.frozen(kw_only=True)
class StepRow:
    """One strategy the pipeline ran, and why it applied or not."""

    name: str
    applied: bool
    tokens_before: int
    tokens_after: int
    duration_ms: float
    error: str | None
    reason: str


@attrs.frozen(kw_only=True)
class EngineOutcome:
    """What one ``project_sync`` of the pipeline did with the transcript."""

    changed: bool
    strategy: str | None
    tokens_after: int
    messages_after: int
    fits: bool
    futile: bool
    floor_tokens: int
    steps: tuple[StepRow, ...]


@attrs.frozen(kw_only=True)
class InspectReport:
    """Everything ``inspect`` found.

    Attributes:
        source: The file read.
        format: Its format.
        messages: Number of messages.
        window: The context window.
        reserve: The reserve (``--reserve``, else the default for that window).
        threshold: ``window - reserve``.
        tokens: The engine's estimate of the transcript (usage anchors included).
        counted_tokens: The sum of the per-message counts (what the role rows add up to).
        usage_tokens: Part of ``tokens`` taken from a provider usage anchor.
        fits: ``tokens <= threshold``.
        overhead: Tool schemas and ``--overhead``: tokens every call sends besides
            the messages, included in ``tokens``.
        strategies: The pipeline tried, in order.
        summarizer: Who writes its checkpoints (``none`` without ``full_summary``).
        by_role: Tokens per role.
        by_tool: Tokens per tool.
        largest: The largest messages, largest first.
        anchors: Provider usage reports found.
        engine: What the pipeline would do.
    """

    source: str
    format: str
    messages: int
    window: int
    reserve: int
    threshold: int
    tokens: int
    counted_tokens: int
    usage_tokens: int
    fits: bool
    overhead: Overhead
    strategies: tuple[str, ...]
    summarizer: str
    by_role: tuple[RoleRow, ...]
    by_tool: tuple[ToolRow, ...]
    largest: tuple[MessageRow, ...]
    anchors: tuple[AnchorRow, ...]
    engine: EngineOutcome

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return attrs.asdict(self)


_REDACTOR = Redactor()


def preview(message: Message, width: int = 60) -> str:
    """A one-line preview of ``message``: its text, else its tool calls; secrets redacted."""
    text = " ".join(message.text.split())
    if not text and message.tool_calls:
        text = ", ".join(
            f"{call.name}({' '.join(call.arguments.split())})" for call in message.tool_calls
        )
    images = [block for block in message.content if isinstance(block, ImageBlock)]
    if not text and images:  # a screenshot tool's result is an image and nothing else
        text = ", ".join(f"[image {image.media_type or 'url'}]" for image in images)
    text = _REDACTOR.redact(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def _tool_names(messages: Sequence[Message]) -> list[str | None]:
    """The tool name of each message: called tools for assistants, answered tool for results."""
    called: dict[str, str] = {}
    names: list[str | None] = []
    for message in messages:
        calls = message.tool_calls
        for call in calls:
            called[call.id] = call.name
        if message.role == "tool":
            names.append(message.name or called.get(message.tool_call_id or "", "?"))
        else:
            names.append(", ".join(dict.fromkeys(c.name for c in calls)) or None)
    return names


def _by_role(messages: Sequence[Message], counts: Sequence[int]) -> tuple[RoleRow, ...]:
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for message, tokens in zip(messages, counts, strict=True):
        row = totals["checkpoint" if message.is_summary else message.role]
        row[0] += 1
        row[1] += tokens
    rows = (RoleRow(role=r, messages=n, tokens=t) for r, (n, t) in totals.items())
    return tuple(sorted(rows, key=lambda row: -row.tokens))


def _by_tool(
    messages: Sequence[Message], counts: Sequence[int], counter: TokenCounter
) -> tuple[ToolRow, ...]:
    stats: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for message, name, tokens in zip(messages, _tool_names(messages), counts, strict=True):
        if message.role == "tool":
            stats[name or "?"][2] += 1
            stats[name or "?"][3] += tokens
        for call in message.tool_calls:
            row = stats[call.name]
            row[0] += 1
            row[1] += (
                TOOL_CALL_OVERHEAD_TOKENS
                + counter.count_text(call.name)
                + counter.count_text(call.arguments)
            )
    rows = (
        ToolRow(tool=tool, calls=c, call_tokens=ct, results=r, result_tokens=rt)
        for tool, (c, ct, r, rt) in stats.items()
    )
    return tuple(sorted(rows, key=lambda row: -(row.call_tokens + row.result_tokens)))


def _largest(
    messages: Sequence[Message], counts: Sequence[int], top: int
) -> tuple[MessageRow, ...]:
    names = _tool_names(messages)
    order = sorted(range(len(messages)), key=lambda i: (-counts[i], i))[:top]
    return tuple(
        MessageRow(
            index=i,
            role="checkpoint" if messages[i].is_summary else messages[i].role,
            tool=names[i],
            tokens=counts[i],
            preview=preview(messages[i]),
        )
        for i in order
    )


def _anchors(messages: Sequence[Message]) -> tuple[AnchorRow, ...]:
    return tuple(
        AnchorRow(
            index=i,
            input_tokens=m.usage.input_tokens,
            output_tokens=m.usage.output_tokens,
            cache_read_tokens=m.usage.cache_read_tokens,
            cache_write_tokens=m.usage.cache_write_tokens,
        )
        for i, m in enumerate(messages)
        if m.role == "assistant" and m.usage is not None
    )


def _engine_outcome(engine: ContextEngine, messages: Sequence[Message]) -> EngineOutcome:
    projection = engine.project_sync(messages)
    event = projection.event
    steps = tuple(
        StepRow(
            name=s.name,
            applied=s.applied,
            tokens_before=s.tokens_before,
            tokens_after=s.tokens_after,
            duration_ms=round(s.duration * 1000, 2),
            error=s.error,
            reason=step_reason(s, event),
        )
        for s in (event.steps if event else ())
    )
    return EngineOutcome(
        changed=projection.changed,
        strategy=projection.strategy,
        tokens_after=projection.usage.tokens,
        messages_after=len(projection.messages),
        fits=projection.fits,
        futile=event.futile if event else False,
        floor_tokens=event.floor_tokens if event else 0,
        steps=steps,
    )


def inspect_messages(
    messages: Sequence[Message],
    *,
    window: int,
    encoding: str,
    source: str = "<memory>",
    format: str = "openai",
    top: int = 10,
    engine: ContextEngine | None = None,
    strategies: Sequence[str] = (),
    summarizer: str = "none",
    overhead: Overhead | None = None,
) -> InspectReport:
    """Measure ``messages`` and run ``engine`` (default ``ContextEngine.default(window)``) once.

    Args:
        messages: The transcript.
        window: The context window.
        encoding: tiktoken encoding of the default engine's counter.
        source: Where the transcript came from.
        format: The format it was read as.
        top: How many of the largest messages to list.
        engine: The pipeline to try, named by ``strategies`` and ``summarizer`` in
            the report; its ``overhead_tokens`` should be ``overhead.tokens``.
        strategies: The pipeline's strategy names, in order.
        summarizer: Who writes its checkpoints.
        overhead: Tool schemas and other tokens every call sends besides the messages.

    Raises:
        ConfigurationError: ``window`` is not a positive number of tokens.
    """
    if engine is None:
        engine = ContextEngine.default(window, encoding=encoding)
        strategies = tuple(strategy.name for strategy in engine.strategies)
    counts = [engine.counter.count_message(m) for m in messages]
    estimate = engine.estimate(messages)
    return InspectReport(
        source=source,
        format=format,
        messages=len(messages),
        window=window,
        reserve=engine.reserve_tokens,
        threshold=engine.threshold,
        tokens=estimate.tokens,
        counted_tokens=sum(counts),
        usage_tokens=estimate.usage_tokens,
        fits=estimate.tokens <= engine.threshold,
        overhead=overhead or Overhead(tools=0, tools_tokens=0, extra=0),
        strategies=tuple(strategies),
        summarizer=summarizer,
        by_role=_by_role(messages, counts),
        by_tool=_by_tool(messages, counts, engine.counter),
        largest=_largest(messages, counts, top),
        anchors=_anchors(messages),
        engine=_engine_outcome(engine, messages),
    )
