"""What the engine reports: rewrite events, their steps, summaries, snapshots and usage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

from context_engine.assembly.trace import EMPTY_TRACE, AssemblyTrace
from context_engine.cache_cost import CacheEstimate, RewriteCost
from context_engine.messages import Message

__all__ = [
    "ContextUsage",
    "RewriteEvent",
    "RewriteReason",
    "RewriteStep",
    "Scope",
    "Snapshot",
    "SummaryInfo",
]

RewriteReason: TypeAlias = Literal[
    "threshold", "manual", "overflow", "circuit_breaker", "request_boundary"
]
Scope: TypeAlias = Literal["baseline", "projected", "committed", "recovered", "skipped"]


@attrs.frozen(kw_only=True)
class SummaryInfo:
    """Details of one checkpoint a strategy wrote.

    Attributes:
        tokens_before: Tokens of the view before the checkpoint.
        tokens_after: Tokens of the view after it.
        messages_before: Messages in the view before.
        messages_after: Messages in the view after.
        compacted_count: Messages the checkpoint replaced.
        kept_count: Messages kept verbatim after the checkpoint.
        is_split_turn: The cut fell inside a turn; its user message stayed verbatim.
        is_incremental: An existing checkpoint was updated rather than written anew.
        summary_chars: Length of the checkpoint text in characters.
        duration: Wall time in seconds, LLM calls included.
        read_files: Files read in the compacted history.
        modified_files: Files modified in the compacted history.
        references: The archive reference of the range this checkpoint replaced
            (empty without an archive).
        rejected: Why the quality gate rejected the summarizer's checkpoint
            (the extractive digest was used instead), or None.
        cache_read_tokens: Input tokens the summary requests read from the
            provider's prompt cache, as their usage reported (0 when the
            summarizer reports no usage).
        cache_write_tokens: Input tokens the summary requests wrote to the cache.
        background: The checkpoint was written in the background from an
            earlier transcript and swapped in at the threshold
            (`BackgroundSummary`); ``duration`` is the time it took there.
    """

    tokens_before: int
    tokens_after: int
    messages_before: int
    messages_after: int
    compacted_count: int
    kept_count: int
    is_split_turn: bool = False
    is_incremental: bool = False
    summary_chars: int = 0
    duration: float = 0.0
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    references: tuple[str, ...] = ()
    rejected: str | None = None
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    background: bool = False


@attrs.frozen(kw_only=True)
class RewriteStep:
    """One strategy run inside a pipeline.

    Attributes:
        name: The strategy's name.
        applied: Whether it rewrote the view.
        tokens_before: View tokens before it ran.
        tokens_after: View tokens after it ran.
        duration: Seconds it took.
        error: A recoverable problem behind a no-op, or the exception that failed the run.
        rejected: The quality gate rejected the checkpoint the strategy's
            summarizer wrote, and why (the extractive digest was used), or None.
    """

    name: str
    applied: bool
    tokens_before: int
    tokens_after: int
    duration: float
    error: str | None = None
    rejected: str | None = None


@attrs.frozen(kw_only=True)
class RewriteEvent:
    """A rewrite of the view, or a decision not to rewrite that callers must see.

    Attributes:
        reason: ``threshold``, ``manual``, ``overflow``, ``circuit_breaker`` or
            ``request_boundary`` (`ContextEngine.compact_if_needed`).
        strategy: The last strategy that applied (or ``circuit_breaker``).
        changed: Whether the view differs from the input.
        committed: Whether the caller should replace its transcript with the view.
        tokens_before: Estimated tokens of the input.
        tokens_after: Estimated tokens of the view.
        info: The checkpoint details when a checkpoint was written.
        steps: Every strategy tried, in order.
        view: The resulting view.
        failures: Consecutive pipeline failures (set for ``circuit_breaker``).
        futile: The untouchable part alone is above the threshold.
        floor_tokens: Tokens of that untouchable part.
        prefix_stable: The view starts with the previous view unchanged (what a
            provider's prompt cache can reuse); None on an engine's first call.
        prefix_reused_tokens: Tokens of the messages the view shares with the
            previous view from the start (fixed overhead included).
        references: Archive references this rewrite created, in the order the
            strategies wrote them (empty without an archive).
        trace: The call's `AssemblyTrace` (the same as the result's).
        reasoning_tokens_dropped: Tokens of thinking blocks the engine dropped
            because the rewrite changed the prompt before them (the provider
            would have discarded or rejected them; the model redoes that reasoning).
        cost: What the rewrite costs under the engine's ``pricing`` (cache
            invalidated, reasoning dropped) against what it saves, or None
            without pricing. The cache invalidated is what the provider's cache
            would serve of the prompt sent unrewritten less what it serves of
            the view, by the pricing's rule (on Anthropic's breakpoint cache only
            up to an entry a breakpoint reaches; on a prefix cache the prefix
            shared with the previous view).
        cache_miss: The provider's cache-miss diagnostic found on the newest
            assistant message (a ``{"type"/"reason", ...}`` dict as sent), or None.
    """

    reason: RewriteReason
    strategy: str
    changed: bool
    committed: bool = False
    tokens_before: int = 0
    tokens_after: int = 0
    info: SummaryInfo | None = None
    steps: tuple[RewriteStep, ...] = ()
    view: tuple[Message, ...] = attrs.field(default=(), repr=False)
    failures: int = 0
    futile: bool = False
    floor_tokens: int = 0
    prefix_stable: bool | None = None
    prefix_reused_tokens: int = 0
    references: tuple[str, ...] = ()
    trace: AssemblyTrace = attrs.field(default=EMPTY_TRACE, repr=False)
    reasoning_tokens_dropped: int = 0
    cost: RewriteCost | None = None
    cache_miss: Mapping[str, Any] | None = attrs.field(default=None, repr=False)


@attrs.frozen(kw_only=True)
class ContextUsage:
    """How full the last view makes the context window.

    Attributes:
        tokens: Estimated prompt tokens (fixed overhead included).
        context_window: The model's window.
        threshold: ``window - reserve``; above it strategies run.
        usage_tokens: Part of ``tokens`` taken from provider-reported usage.
        trailing_tokens: Part of ``tokens`` counted with the tokenizer.
        prefix_stable: The view starts with the previous view unchanged (what a
            provider's prompt cache can reuse); None before a previous view.
        prefix_reused_tokens: Tokens of the leading messages shared with the
            previous view (fixed overhead included).
        cache: The prompt's expected cache reads, writes and cost under the
            engine's ``pricing``, or None without pricing. The reads are what the
            provider's cache serves: on a prefix cache (OpenAI) the prefix shared
            with the previous view; on Anthropic's (``breakpoint_lookback_blocks``)
            only up to the previous request's deepest breakpoint that one of this
            request's reaches, so it can be less than ``prefix_reused_tokens``.
    """

    tokens: int
    context_window: int
    threshold: int
    usage_tokens: int = 0
    trailing_tokens: int = 0
    prefix_stable: bool | None = None
    prefix_reused_tokens: int = 0
    cache: CacheEstimate | None = None

    @property
    def percent(self) -> float:
        """``tokens`` as a percentage of the window."""
        return 100.0 * self.tokens / self.context_window if self.context_window else 0.0

    @property
    def fits(self) -> bool:
        """Whether ``tokens`` is at or below the threshold."""
        return self.tokens <= self.threshold


@attrs.frozen(kw_only=True)
class Snapshot:
    """The last active view, described.

    Attributes:
        scope: ``baseline`` (as passed or synced), ``projected``, ``committed``,
            ``recovered`` or ``skipped`` (circuit breaker).
        messages: The view itself.
        usage: Its usage.
        message_count: Messages in the view.
        summary_messages: `ContextSummary` checkpoints in the view.
        tool_messages: Tool results in the view.
        cleared_tool_results: Tool results replaced by a placeholder.
        trimmed_text_blocks: Text blocks shortened by a trim marker.
        last_strategy: The last strategy that applied, if any.
        last_compacted_count: Messages the last checkpoint replaced.
        last_kept_count: Messages kept after the last checkpoint.
        split_turn: Whether the last checkpoint split a turn.
    """

    scope: Scope
    messages: tuple[Message, ...] = attrs.field(repr=False)
    usage: ContextUsage
    message_count: int
    summary_messages: int
    tool_messages: int
    cleared_tool_results: int
    trimmed_text_blocks: int
    last_strategy: str | None = None
    last_compacted_count: int = 0
    last_kept_count: int = 0
    split_turn: bool = False
