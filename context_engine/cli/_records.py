"""The rows and sums a replay reports: one per call, one per rewrite event, the totals."""

from __future__ import annotations

from typing import Any

import attrs

from context_engine.cli._cost import CallCosts, ReplayCost

__all__ = ["CallRecord", "ReplayReport", "ReplayTotals", "RewriteRecord"]


@attrs.frozen(kw_only=True)
class CallRecord:
    """One LLM call of the replayed session.

    Attributes:
        call: Call number, from 1.
        step: Index in the original transcript of the assistant message the call produced.
        messages: Messages in the view sent.
        tokens: Prompt tokens sent with the engine.
        tokens_without: Prompt tokens the whole history up to this call would have taken
            (above the window a provider rejects it: context, not a baseline).
        tokens_trimmed: The call's tokens with hard trimming to the window instead
            (trim-last: the leading system messages and the first user message
            kept, the oldest others dropped until the rest fits under the threshold).
        tokens_masked: The call's tokens with observation masking instead (tool results
            but the newest ten replaced by a placeholder).
        prefix_reused: The previous call's prompt is a prefix of this one (a
            provider's prompt cache can reuse it).
        strategy: The last strategy that rewrote this call's view, or None.
        overflow: The view was above the window and went through ``recover_overflow``.
        sources: Tokens of each context provider's items in the view sent.
        cost: The call priced with the engine, with the whole history and with
            trim-last under the replay's pricing, or None without one.
    """

    call: int
    step: int
    messages: int
    tokens: int
    tokens_without: int
    prefix_reused: bool
    strategy: str | None = None
    overflow: bool = False
    sources: dict[str, int] = attrs.field(factory=dict)
    tokens_trimmed: int = 0
    tokens_masked: int = 0
    cost: CallCosts | None = None


@attrs.frozen(kw_only=True)
class RewriteRecord:
    """One `RewriteEvent` the engine reported during the replay.

    Attributes:
        call: The call it happened before.
        step: That call's index in the original transcript.
        reason: ``threshold``, ``overflow`` or ``circuit_breaker``.
        strategy: The last strategy that applied.
        changed: Whether the view changed.
        committed: Whether the running transcript was replaced by the view.
        tokens_before: Tokens of the engine's input.
        tokens_after: Tokens of the view.
        strategies_tried: ``name`` for each strategy run, ``name*`` when it applied.
        futile: The untouchable part alone was above the target.
        decisions: The rewrite's `AssemblyTrace` decisions, as JSON-ready data
            (what was cleared, trimmed, summarized or truncated, with references).
        excerpt: What replaced the content: the start of the checkpoint, placeholder or
            marker the rewrite left in the view ("" when it left none).
        cost: The event's `RewriteCost` under the replay's pricing, as JSON-ready
            data (cache invalidated and reasoning dropped against the tokens
            saved), or None.
    """

    call: int
    step: int
    reason: str
    strategy: str
    changed: bool
    committed: bool
    tokens_before: int
    tokens_after: int
    strategies_tried: tuple[str, ...] = ()
    futile: bool = False
    decisions: tuple[dict[str, Any], ...] = ()
    excerpt: str = ""
    cost: dict[str, Any] | None = None


@attrs.frozen(kw_only=True)
class ReplayTotals:
    """Sums over the rows of a `ReplayReport` (and the summarizer's call count).

    Attributes:
        calls: LLM calls replayed.
        tokens: Prompt tokens sent with the engine, all calls.
        tokens_without: Prompt tokens without the engine, all calls (context only).
        tokens_trimmed: Prompt tokens with hard trimming to the window, all calls.
        tokens_masked: Prompt tokens with observation masking, all calls.
        without_over_window: Calls whose whole history was above the window: a
            provider would have rejected them without the engine.
        masked_over_window: Calls still above the window with observation masking.
        max_tokens: The largest prompt sent with the engine.
        rewrites: Rewrite events that changed the view.
        commits: Of those, the ones committed to the running transcript.
        overflows: Calls whose view was above the window.
        over_window: Calls still above the window after recovery.
        prefix_reused: Calls whose prompt extends the previous call's prompt.
        prefix_reuse_share: ``prefix_reused / (calls - 1)`` (the first call has no previous).
        breaker_trips: ``on_project`` events with reason ``circuit_breaker``.
        failures: Calls in which a strategy failed (recorded on its step).
        summarizer_calls: Calls made to the summarizer.
    """

    calls: int
    tokens: int
    tokens_without: int
    max_tokens: int
    rewrites: int
    commits: int
    overflows: int
    over_window: int
    prefix_reused: int
    prefix_reuse_share: float
    breaker_trips: int
    failures: int
    summarizer_calls: int
    tokens_trimmed: int = 0
    tokens_masked: int = 0
    without_over_window: int = 0
    masked_over_window: int = 0


@attrs.frozen(kw_only=True)
class ReplayReport:
    """Everything a replay measured.

    Attributes:
        source: Where the transcript came from.
        window: The context window.
        reserve: The reserve in tokens.
        threshold: ``window - reserve``.
        strategies: The pipeline, by name.
        summarizer: How checkpoints were written (``none`` without a summary strategy).
        messages: Messages in the original transcript.
        duration: Wall time of the replay in seconds.
        calls: One row per LLM call.
        rewrites: One row per rewrite event.
        totals: Sums over the rows.
        problems: Invariant violations, calls above the window, pipeline failures.
        cost: The modelled prompt cost of every contender under the replay's
            pricing, or None without one.
    """

    source: str
    window: int
    reserve: int
    threshold: int
    strategies: tuple[str, ...]
    summarizer: str
    messages: int
    duration: float
    calls: tuple[CallRecord, ...]
    rewrites: tuple[RewriteRecord, ...]
    totals: ReplayTotals
    problems: tuple[str, ...]
    cost: ReplayCost | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        data: dict[str, Any] = attrs.asdict(self)
        data["duration"] = round(self.duration, 3)
        return data
