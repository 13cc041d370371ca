"""Replay a transcript through the engine the way an agent loop would, and measure it.

Before each assistant message (each LLM call the session made) the messages
so far are projected. The running transcript is what the agent would hold:
the view committed after a checkpoint or an overflow recovery, plus the
messages that came after. A view above the *window* (not the threshold) is
what a provider would reject: it is recovered with ``recover_overflow`` and
the result committed, as an agent would after a "prompt too long" error.

Given a pricing, every call is also priced with the engine, with the whole
history and with trim-last under the provider's prompt cache (`_cost`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import attrs

from context_engine.archive.base import Archive
from context_engine.assembly.placement import strip_provided
from context_engine.assembly.provider import ContextProvider
from context_engine.cli._baselines import Baselines
from context_engine.cli._common import CountingSummarizer, build_strategies
from context_engine.cli._cost import CallCosts, CostLedger
from context_engine.cli._excerpt import replacement_excerpt
from context_engine.cli._records import CallRecord, ReplayReport, ReplayTotals, RewriteRecord
from context_engine.engine import ContextEngine
from context_engine.events import RewriteEvent
from context_engine.formats.breakpoints import unmarked
from context_engine.formats.diagnostics import cache_miss_of
from context_engine.invariants import check_view
from context_engine.messages import Message
from context_engine.pipeline import is_deliberate_skip
from context_engine.pricing import CachePricing, pricing_for
from context_engine.summarize.request import Summarizer
from context_engine.tokens import DEFAULT_ENCODING, TokenCounter, estimate_from_counts

__all__ = ["CallRecord", "ReplayReport", "ReplayTotals", "RewriteRecord", "replay"]

ProgressFn = Callable[[int, int], None]
ViewCheck = Callable[[Sequence[Message], Sequence[Message]], None]


def _is_prefix(previous: Sequence[Message] | None, view: Sequence[Message]) -> bool:
    return (
        previous is not None
        and len(previous) <= len(view)
        and tuple(view[: len(previous)]) == tuple(previous)
    )


def _overflow_error(tokens: int, window: int) -> str:
    return (
        f"simulated provider error: this model's maximum context length is {window} tokens, "
        f"but the prompt has {tokens} tokens"
    )


def _record(event: RewriteEvent, call: int, step: int) -> RewriteRecord:
    return RewriteRecord(
        call=call,
        step=step,
        reason=event.reason,
        strategy=event.strategy,
        changed=event.changed,
        committed=event.committed,
        tokens_before=event.tokens_before,
        tokens_after=event.tokens_after,
        strategies_tried=tuple(f"{s.name}{'*' if s.applied else ''}" for s in event.steps),
        futile=event.futile,
        decisions=tuple(decision.as_dict() for decision in event.trace.decisions),
        excerpt=replacement_excerpt(event.view) if event.changed else "",
        cost=attrs.asdict(event.cost) if event.cost is not None else None,
    )


def _break_source(rewritten: Sequence[RewriteRecord], overflow: bool) -> str:
    """What changed the engine's prompt this call: the strategies that applied, in order."""
    applied = dict.fromkeys(
        name[:-1] for r in rewritten if r.changed for name in r.strategies_tried if name[-1] == "*"
    )
    names = "+".join(applied) or "view changed without a rewrite"
    return f"overflow recovery: {names}" if overflow else names


@attrs.define
class _Run:
    """The mutable state of one replay."""

    engine: ContextEngine
    original: tuple[Message, ...]
    check: ViewCheck | None
    running: list[Message] = attrs.Factory(list)
    events: list[RewriteEvent] = attrs.Factory(list)
    calls: list[CallRecord] = attrs.Factory(list)
    rewrites: list[RewriteRecord] = attrs.Factory(list)
    problems: list[str] = attrs.Factory(list)
    previous: tuple[Message, ...] | None = None
    failures: int = 0
    sources: dict[str, int] = attrs.Factory(dict)
    baselines: Baselines | None = None
    ledger: CostLedger | None = None

    def call(self, step: int, tokens_without: int) -> None:
        """Project the running transcript for the call that produced message ``step``."""
        number = len(self.calls) + 1
        where = f"call {number} (message {step})"
        view, tokens = self._project(where)
        overflow = tokens > self.engine.context_window
        if overflow:
            view, tokens = self._recover(where, tokens)
            if tokens > self.engine.context_window:
                self.problems.append(
                    f"{where}: {tokens} tokens sent, above the {self.engine.context_window} window"
                )
        rewritten = [_record(e, number, step) for e in self.events]
        self.events.clear()
        self.rewrites.extend(rewritten)
        changed = [r.strategy for r in rewritten if r.changed]
        trimmed = self.baselines.trimmed(tokens_without) if self.baselines else 0
        source = _break_source(rewritten, overflow)
        cost = self._price(number, step, (view, tokens), (tokens_without, trimmed), source)
        self.calls.append(
            CallRecord(
                call=number,
                step=step,
                messages=len(view),
                tokens=tokens,
                tokens_without=tokens_without,
                prefix_reused=_is_prefix(self.previous, view),
                strategy=changed[-1] if changed else None,
                overflow=overflow,
                sources=self.sources,
                tokens_trimmed=trimmed,
                tokens_masked=self.baselines.masked(tokens_without) if self.baselines else 0,
                cost=cost,
            )
        )
        self.previous = view

    def _price(
        self,
        number: int,
        step: int,
        sent: tuple[tuple[Message, ...], int],
        baselines: tuple[int, int],
        source: str,
    ) -> CallCosts | None:
        """The call priced for every contender, when the replay has a pricing.

        ``source`` is what changed the engine's prompt this call, should it break the cache.
        """
        if self.ledger is None or self.baselines is None:
            return None
        without, trimmed = baselines
        return self.ledger.call(
            number,
            {
                "engine": sent,
                "without": (self.original[:step], without),
                "trim_last": (self.baselines.trimmed_prompt(), trimmed),
            },
            {"engine": source, "trim_last": "oldest messages dropped"},
            cache_miss_of(self.original[step]),
        )

    def _project(self, where: str) -> tuple[tuple[Message, ...], int]:
        given = tuple(self.running)
        projection = self.engine.project_sync(given)
        self._note_failures(where, projection.event)
        self._verify(where, given, projection.messages)
        self.sources = projection.trace.source_tokens()
        if projection.commit is not None:
            self.running = list(projection.commit)
        return projection.messages, projection.usage.tokens

    def _recover(self, where: str, tokens: int) -> tuple[tuple[Message, ...], int]:
        given = tuple(self.running)
        error = _overflow_error(tokens, self.engine.context_window)
        recovery = self.engine.recover_overflow_sync(given, error)
        self._note_failures(f"{where}: overflow recovery", recovery.event)
        self._verify(where, given, recovery.messages)
        self.sources = recovery.trace.source_tokens()
        if recovery.commit is not None:
            self.running = list(recovery.commit)
        return recovery.messages, recovery.usage.tokens

    def _note_failures(self, where: str, event: RewriteEvent | None) -> None:
        """Count a call whose strategies failed (the view still fits: the engine went on)."""
        failed = [step for step in event.steps if step.error] if event is not None else []
        if not all(is_deliberate_skip(step.error) for step in failed):
            self.failures += 1
            for step in failed:
                if not is_deliberate_skip(step.error):
                    self.problems.append(f"{where}: strategy {step.name!r} failed: {step.error}")

    def _verify(self, where: str, given: tuple[Message, ...], view: Sequence[Message]) -> None:
        sent = tuple(unmarked(message) for message in view)  # breakpoints are not content
        for problem in check_view(given, strip_provided(sent)):
            self.problems.append(f"{where}: {problem}")
        if self.check is not None:
            self.check(given, view)


def replay(
    messages: Sequence[Message],
    *,
    window: int,
    reserve: int | None = None,
    strategies: Sequence[str] = ("tool_result_microcompact", "light_trim", "hard_truncate"),
    summarizer: Summarizer | None = None,
    summarizer_label: str = "none",
    encoding: str = DEFAULT_ENCODING,
    token_counter: TokenCounter | None = None,
    source: str = "<memory>",
    progress: ProgressFn | None = None,
    check: ViewCheck | None = None,
    archive: Archive | None = None,
    session_id: str | None = None,
    providers: Sequence[ContextProvider] = (),
    overhead_tokens: int = 0,
    keep_recent_tokens: int | None = None,
    pricing: CachePricing | str | None = None,
    cache_breakpoints: bool = False,
) -> ReplayReport:
    """Replay ``messages`` through a fresh engine, one LLM call per assistant message.

    Args:
        messages: The recorded session.
        window: The context window to simulate.
        reserve: Reserve in tokens; None for the engine's default.
        strategies: Strategy names (as `parse_strategies` returns them), in order.
        summarizer: Writes checkpoints for ``full_summary``; its calls are counted.
        summarizer_label: How to name the summarizer in the report.
        encoding: tiktoken encoding of the engine's counter.
        token_counter: A counter to use instead of ``encoding``'s.
        source: Where the transcript came from, for the report.
        progress: Called with ``(calls done, calls in all)`` after each call.
        check: Called with ``(engine input, view)`` for every view, for extra checks.
        archive: Where the engine stores every original a rewrite removes.
        session_id: The session the archive files them under (needed with ``archive``).
        providers: Context providers the engine runs on every call.
        overhead_tokens: Tokens every call sends besides the messages (tool
            schemas); counted with and without the engine.
        keep_recent_tokens: What ``full_summary`` keeps verbatim; None for its default.
        pricing: Prices every call with the engine, with the whole history and
            with trim-last under this provider's prompt cache (`ReplayReport.cost`):
            a `CachePricing` or a family of `CACHE_PRICING`. The engine gets it
            too, so rewrite events carry their cost.
        cache_breakpoints: The engine places its Anthropic cache breakpoints on
            the views (``ContextEngine(cache_breakpoints=True)``).

    Raises:
        CliError: ``full_summary`` is listed without a summarizer.
        ConfigurationError: the window or reserve cannot work.
    """
    started = time.perf_counter()
    pricing = pricing_for(pricing) if pricing is not None else None
    counting = CountingSummarizer(summarizer) if summarizer is not None else None
    events: list[RewriteEvent] = []
    engine = ContextEngine(
        window,
        build_strategies(strategies, counting, keep_recent_tokens=keep_recent_tokens),
        reserve_tokens=reserve,
        overhead_tokens=overhead_tokens,
        encoding=encoding,
        token_counter=token_counter,
        on_project=events.append,
        on_recover=events.append,
        archive=archive,
        session_id=session_id,
        providers=providers,
        pricing=pricing,
        cache_breakpoints=cache_breakpoints,
    )
    run = _Run(engine=engine, original=tuple(messages), check=check, events=events)
    run.baselines = Baselines(engine.counter, engine.threshold, engine.overhead_tokens)
    if pricing is not None:
        window, overhead = engine.context_window, engine.overhead_tokens
        run.ledger = CostLedger(pricing, engine.counter, window, overhead)
    _drive(run, progress)
    return _report(
        run,
        source=source,
        strategies=tuple(strategies),
        summarizer=summarizer_label if counting is not None else "none",
        summarizer_calls=counting.calls if counting is not None else 0,
        duration=time.perf_counter() - started,
    )


def _drive(run: _Run, progress: ProgressFn | None) -> None:
    original = run.original
    counter = run.engine.counter
    total = sum(1 for i, m in enumerate(original) if i and m.role == "assistant")
    cumulative = [0]
    anchor = -1
    for index, message in enumerate(original):
        if index and message.role == "assistant":
            without = estimate_from_counts(
                original[:index],
                cumulative,
                anchor,
                overhead_tokens=run.engine.overhead_tokens,
            ).tokens
            run.call(index, without)
            if progress is not None:
                progress(len(run.calls), total)
        run.running.append(message)
        if run.baselines is not None:
            run.baselines.add(message)
        cumulative.append(cumulative[-1] + counter.count_message(message))
        if message.role == "assistant" and message.usage is not None:
            anchor = index


def _report(
    run: _Run,
    *,
    source: str,
    strategies: tuple[str, ...],
    summarizer: str,
    summarizer_calls: int,
    duration: float,
) -> ReplayReport:
    calls, rewrites = tuple(run.calls), tuple(run.rewrites)
    reused = sum(c.prefix_reused for c in calls)
    window = run.engine.context_window
    totals = ReplayTotals(
        calls=len(calls),
        tokens=sum(c.tokens for c in calls),
        tokens_without=sum(c.tokens_without for c in calls),
        max_tokens=max((c.tokens for c in calls), default=0),
        rewrites=sum(r.changed for r in rewrites),
        commits=sum(r.committed for r in rewrites),
        overflows=sum(c.overflow for c in calls),
        over_window=sum(c.tokens > window for c in calls),
        prefix_reused=reused,
        prefix_reuse_share=reused / (len(calls) - 1) if len(calls) > 1 else 0.0,
        breaker_trips=sum(r.reason == "circuit_breaker" for r in rewrites),
        failures=run.failures,
        summarizer_calls=summarizer_calls,
        tokens_trimmed=sum(c.tokens_trimmed for c in calls),
        tokens_masked=sum(c.tokens_masked for c in calls),
        without_over_window=sum(c.tokens_without > window for c in calls),
        masked_over_window=sum(c.tokens_masked > window for c in calls),
    )
    return ReplayReport(
        source=source,
        window=window,
        reserve=run.engine.reserve_tokens,
        threshold=run.engine.threshold,
        strategies=strategies,
        summarizer=summarizer,
        messages=len(run.original),
        duration=duration,
        calls=calls,
        rewrites=rewrites,
        totals=totals,
        problems=tuple(run.problems),
        cost=run.ledger.totals() if run.ledger is not None else None,
    )
