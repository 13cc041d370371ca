"""`ContextEngine`: decides, before every LLM call, what the model gets to see."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from context_engine._aio import call_hook, run_blocking
from context_engine._meter import Meter, Seen, starts_with
from context_engine._originals import keep_originals, recall_originals
from context_engine._pipeline import PipelineFailure, PipelineOutcome, run_forced, run_pipeline
from context_engine._transcript import as_transcript, chain, recovery_target
from context_engine.archive.base import Archive, check_session_id
from context_engine.breaker import BreakerState, CircuitBreaker
from context_engine.errors import ArchiveError, CompactionError, ConfigurationError
from context_engine.events import ContextUsage, RewriteEvent, RewriteReason, Scope, Snapshot
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.redact import Redactor
from context_engine.results import CompactResult, Projection, RecoveryResult
from context_engine.snapshots import describe_view
from context_engine.strategies.base import Budget, Strategy
from context_engine.structure import shared_shapes
from context_engine.telemetry import Telemetry, set_attributes
from context_engine.tokens import (
    DEFAULT_ENCODING,
    TokenCounter,
    UsageEstimate,
    resolve_counter,
)

__all__ = ["CompactResult", "ContextEngine", "Projection", "RecoveryResult", "default_reserve"]

logger = logging.getLogger(__name__)

Hook = Callable[[RewriteEvent], Any]


def default_reserve(context_window: int) -> int:
    """The default head-room: ``clamp(0.13 * window, 4096, 16384)``."""
    return max(4096, min(16384, int(0.13 * context_window)))


def _positive_window(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigurationError(f"context_window must be a positive int of tokens, got {value!r}")
    return value


def _reserve(value: object) -> int | None:
    if value is None or (value == 0 and not isinstance(value, bool)):
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(
            f"reserve_tokens must be a non-negative int, or None for the default, got {value!r}"
        )
    return value


def _non_negative(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name} must be an int >= 0, got {value!r}")
    return value


def _strategy_tuple(strategies: object) -> tuple[Strategy, ...]:
    if strategies is None or not isinstance(strategies, Iterable) or hasattr(strategies, "apply"):
        raise ConfigurationError(
            f"strategies must be a list of strategies, got {strategies!r}; "
            "wrap a single strategy in a list"
        )
    return tuple(strategies)


def _archive_settings(
    archive: object, session_id: object
) -> tuple[Archive | None, str | None]:
    if archive is None:
        return None, None if session_id is None else check_session_id(session_id)
    if not isinstance(archive, Archive):
        raise ConfigurationError(
            f"archive must implement context_engine.archive.Archive (MemoryArchive, "
            f"SQLiteArchive, RedisArchive or open_archive(url)), got {archive!r}"
        )
    if session_id is None:
        raise ConfigurationError(
            "an archive needs session_id=: references are scoped by session, so pass the "
            "id of the agent session this engine serves"
        )
    return archive, check_session_id(session_id)


def _uses_llm(strategy: Strategy) -> bool:
    return bool(getattr(strategy, "uses_llm", False))


def _warn_if_no_room(window: int, reserve: int) -> None:
    if reserve >= window:
        logger.warning(
            "window=<%d> reserve=<%d> | the reserve leaves no room for the prompt: every call "
            "is above the threshold; set reserve_tokens below the window",
            window,
            reserve,
        )


@attrs.define
class _Remembered:
    """The last active view and what the engine knows about it."""

    scope: Scope
    view: tuple[Message, ...]
    estimate: UsageEstimate
    outcome: PipelineOutcome | None = None
    input: tuple[Message, ...] = ()
    input_estimate: UsageEstimate | None = None
    prefix_stable: bool | None = None
    prefix_reused_tokens: int = 0

    def seen(self) -> Seen:
        return Seen(
            self.input or self.view, self.input_estimate or self.estimate, self.view, self.estimate
        )


class ContextEngine:
    """Keeps each LLM call's prompt under the model's context window.

    One engine per agent session: it remembers the last view it returned (for
    provider usage anchors, snapshots and the circuit breaker).

    Args:
        context_window: The model's window in tokens.
        strategies: Run in order, cheapest first, while the view is above the threshold.
        reserve_tokens: Head-room for the answer; None or 0 uses `default_reserve`.
        commit_strategies: Names of strategies whose rewrite the caller should commit.
        max_consecutive_failures: Failures that open the circuit breaker.
        breaker_cooldown_calls: Calls skipped while the breaker is open.
        breaker_cooldown_seconds: Seconds that must also pass before the half-open trial.
        overhead_tokens: Tool schemas and other fixed parts sent with every call.
        token_counter: Counter to use; default `resolve_counter(encoding)`.
        encoding: tiktoken encoding name for the default counter.
        on_project: Called with the `RewriteEvent` of each ``project`` rewrite.
        on_recover: Called with the event of each ``recover_overflow`` rewrite.
        on_compact: Called with the event of each ``compact`` rewrite.
        on_strategy: Called with a strategy's name before it runs; may return a
            callable (no arguments) called when it ends, on failure too.
        tracer_provider: OpenTelemetry tracer provider; None uses the global one.
        meter_provider: OpenTelemetry meter provider; None uses the global one.
        archive: Where every original a rewrite removes or shortens is stored
            before the view is returned; placeholders, markers and checkpoints
            then name references that `recall` resolves.
        session_id: The session the archive scopes references by (required
            with ``archive``).
    """

    def __init__(
        self,
        context_window: int,
        strategies: Iterable[Strategy] = (),
        *,
        reserve_tokens: int | None = None,
        commit_strategies: Iterable[str] = ("full_summary",),
        max_consecutive_failures: int = 3,
        breaker_cooldown_calls: int = 1,
        breaker_cooldown_seconds: float = 0.0,
        overhead_tokens: int = 0,
        token_counter: TokenCounter | None = None,
        encoding: str = DEFAULT_ENCODING,
        on_project: Hook | None = None,
        on_recover: Hook | None = None,
        on_compact: Hook | None = None,
        on_strategy: Callable[[str], Any] | None = None,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        archive: Archive | None = None,
        session_id: str | None = None,
    ) -> None:
        self._window = _positive_window(context_window)
        self._archive, self._session_id = _archive_settings(archive, session_id)
        self._reserve = _reserve(reserve_tokens)
        self._strategies = _strategy_tuple(strategies)
        for strategy in self._strategies:
            if not isinstance(getattr(strategy, "name", None), str) or not callable(
                getattr(strategy, "apply", None)
            ):
                raise ConfigurationError(
                    f"{strategy!r} is not a strategy: it needs a str `name` and an async `apply`"
                )
        if isinstance(commit_strategies, str) or not isinstance(commit_strategies, Iterable):
            raise ConfigurationError(
                "commit_strategies must be a collection of strategy names, "
                f"got {commit_strategies!r}"
            )
        self.commit_strategies: frozenset[str] = frozenset(commit_strategies)
        try:
            self.breaker = CircuitBreaker(
                max_failures=max_consecutive_failures,
                cooldown_calls=breaker_cooldown_calls,
                cooldown_seconds=breaker_cooldown_seconds,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{exc} (max_consecutive_failures / breaker_cooldown_* settings)"
            ) from None
        counter = token_counter or resolve_counter(encoding)
        if not isinstance(counter, TokenCounter):
            raise ConfigurationError(
                f"token_counter must be a TokenCounter (count_text, count_message, key), "
                f"got {counter!r}; use encoding= to pick a tiktoken encoding by name"
            )
        share = next(
            (s.max_user_share for s in self._strategies if hasattr(s, "max_user_share")), None
        )
        self._meter = Meter(counter, _non_negative("overhead_tokens", overhead_tokens), share)
        for label, hook in (
            ("on_project", on_project),
            ("on_recover", on_recover),
            ("on_compact", on_compact),
            ("on_strategy", on_strategy),
        ):
            if hook is not None and not callable(hook):
                raise ConfigurationError(f"{label} must be callable or None, got {hook!r}")
        self.on_project, self.on_recover, self.on_compact = on_project, on_recover, on_compact
        self.on_strategy = on_strategy
        self._last: _Remembered | None = None
        self._stalled_at: int | None = None
        self._telemetry = Telemetry(tracer_provider, meter_provider)
        _warn_if_no_room(self._window, self.reserve_tokens)

    @classmethod
    def default(
        cls,
        context_window: int,
        *,
        summarizer: Callable[..., Any] | None = None,
        seed: Callable[[], Any] | None = None,
        redactor: Redactor | None = None,
        **options: Any,
    ) -> ContextEngine:
        """The recommended pipeline.

        Tool-result microcompact, light trim, session memory (when ``seed`` is
        given), full summary (when ``summarizer`` is given; ``redactor`` removes
        secrets from what it is sent), hard truncate. ``options`` go to the
        constructor.
        """
        from context_engine.strategies import (
            FullSummary,
            HardTruncate,
            LightTrim,
            SessionMemory,
            ToolResultMicrocompact,
        )

        strategies: list[Strategy] = [ToolResultMicrocompact(), LightTrim()]
        if seed is not None:
            strategies.append(SessionMemory(seed=seed))
        if summarizer is not None:
            strategies.append(FullSummary(summarizer=summarizer, redactor=redactor))
        strategies.append(HardTruncate())
        return cls(context_window, strategies, **options)

    # -- configuration -------------------------------------------------------------

    @property
    def context_window(self) -> int:
        """The model's window in tokens (settable)."""
        return self._window

    @context_window.setter
    def context_window(self, value: int) -> None:
        self._window = _positive_window(value)
        _warn_if_no_room(self._window, self.reserve_tokens)

    @property
    def reserve_tokens(self) -> int:
        """Head-room in tokens (settable; None or 0 restores the default)."""
        return self._reserve if self._reserve is not None else default_reserve(self._window)

    @reserve_tokens.setter
    def reserve_tokens(self, value: int | None) -> None:
        self._reserve = _reserve(value)
        _warn_if_no_room(self._window, self.reserve_tokens)

    @property
    def counter(self) -> TokenCounter:
        """The token counter (read-only: caches are keyed by it)."""
        return self._meter.counter

    @property
    def overhead_tokens(self) -> int:
        """Tokens of tool schemas and other fixed parts sent with every call (settable)."""
        return self._meter.overhead_tokens

    @overhead_tokens.setter
    def overhead_tokens(self, value: int) -> None:
        self._meter.overhead_tokens = _non_negative("overhead_tokens", value)

    @property
    def threshold(self) -> int:
        """``max(0, window - reserve)``: strategies run while the view is above it."""
        return max(0, self._window - self.reserve_tokens)

    @property
    def strategies(self) -> tuple[Strategy, ...]:
        """The pipeline, in order."""
        return self._strategies

    @property
    def consecutive_failures(self) -> int:
        """The circuit breaker's failure count."""
        return self.breaker.failures

    @property
    def breaker_state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open``."""
        return self.breaker.state

    # -- measuring -----------------------------------------------------------------

    def estimate(self, messages: Sequence[Message]) -> UsageEstimate:
        """Estimate how full ``messages`` make the window (provider usage anchors included)."""
        return self._estimate(as_transcript(messages, self._meter.checked_prefix))

    def _estimate(self, view: tuple[Message, ...]) -> UsageEstimate:
        last = self._last
        return self._meter.estimate(view, last.seen() if last else None)

    def _usage(
        self, estimate: UsageEstimate, prefix: tuple[bool | None, int] = (None, 0)
    ) -> ContextUsage:
        return ContextUsage(
            tokens=estimate.tokens,
            context_window=self._window,
            threshold=self.threshold,
            usage_tokens=estimate.usage_tokens,
            trailing_tokens=estimate.trailing_tokens,
            prefix_stable=prefix[0],
            prefix_reused_tokens=prefix[1],
        )

    def _prefix(self, view: tuple[Message, ...]) -> tuple[bool | None, int]:
        """Whether ``view`` keeps the previous view as its prefix, and the tokens it shares."""
        last = self._last
        if last is None:
            return None, 0
        shared, stable = self._meter.shared_prefix(view, last.view)
        return stable, self._meter.prefix_tokens(view, shared)

    def _budget(
        self,
        transcript: tuple[Message, ...],
        estimate: UsageEstimate,
        threshold: int | None = None,
        reason: RewriteReason = "threshold",
    ) -> Budget:
        return Budget(
            tokens=estimate.tokens,
            window=self._window,
            threshold=self.threshold if threshold is None else threshold,
            counter=self.counter,
            measure=self._meter.measurer(transcript, estimate),
            overhead_tokens=self.overhead_tokens,
            reason="threshold" if reason == "circuit_breaker" else reason,
            archiving=self._archive is not None,
        )

    # -- state ---------------------------------------------------------------------

    @property
    def usage(self) -> ContextUsage | None:
        """Usage of the last active view, or None before the first call."""
        last = self._last
        if last is None:
            return None
        return self._usage(last.estimate, (last.prefix_stable, last.prefix_reused_tokens))

    def snapshot(self) -> Snapshot | None:
        """A description of the last active view, or None before the first call."""
        last = self._last
        if last is None:
            return None
        usage = self._usage(last.estimate, (last.prefix_stable, last.prefix_reused_tokens))
        return describe_view(last.scope, last.view, usage, last.outcome)

    def sync(self, messages: Sequence[Message]) -> None:
        """Record ``messages`` as the new baseline and forget the remembered view."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        self._last = None
        self._stalled_at = None
        self._remember("baseline", transcript, self._estimate(transcript))

    def _remember(
        self,
        scope: Scope,
        view: tuple[Message, ...],
        estimate: UsageEstimate,
        outcome: PipelineOutcome | None = None,
        source: tuple[tuple[Message, ...], UsageEstimate] | None = None,
    ) -> ContextUsage:
        """Make ``view`` the last active view; return its usage (prefix facts included)."""
        given, given_estimate = source if source is not None else (view, estimate)
        stable, reused = self._prefix(view)
        self._last = _Remembered(
            scope, view, estimate, outcome, given, given_estimate, stable, reused
        )
        return self._usage(estimate, (stable, reused))

    # -- project ---------------------------------------------------------------------

    async def project(self, messages: Sequence[Message]) -> Projection:
        """Build the view for one LLM call without touching the caller's transcript.

        Below the threshold the input comes back unchanged. Above it the
        strategies run in order until the view fits. When a strategy listed in
        ``commit_strategies`` applied, ``commit`` is the transcript the caller
        should keep from now on.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            CompactionError: a strategy raised; ``.view`` is the best view reached.
        """
        with self._telemetry.operation("project", self._span_start()) as span, shared_shapes():
            result = await self._project(messages)
            self._span_end(span, result)
            return result

    async def _project(self, messages: Sequence[Message]) -> Projection:
        """The body of `project`."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        failures = self.breaker.failures
        if self.breaker.should_skip():
            return await self._skip(transcript, failures)
        estimate = self._estimate(transcript)
        if estimate.tokens <= self.threshold:
            usage = self._remember("baseline", transcript, estimate)
            return Projection(messages=transcript, usage=usage, changed=False)
        extended = self._extend_last_view(transcript, estimate)
        if extended is not None:
            return extended
        floor = self._meter.floor_tokens(transcript, estimate, self.threshold)
        futile = floor > self.threshold
        allow_llm = not futile and self._grown_since_stall(estimate.tokens)
        try:
            outcome = await run_pipeline(
                self._strategies,
                transcript,
                transcript,
                self._budget(transcript, estimate),
                on_strategy=self.on_strategy,
                allow=lambda s: allow_llm or not _uses_llm(s),
            )
        except PipelineFailure as failure:
            raise await self._failed(transcript, estimate, failure) from failure.__cause__
        await self._keep(transcript, outcome, count_failure=True)
        if outcome.changed:
            self._breaker_success()
        if outcome.tokens > self.threshold and allow_llm:
            self._stalled_at = estimate.tokens
        return await self._finish_projection(transcript, estimate, outcome, futile, floor)

    def _extend_last_view(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate
    ) -> Projection | None:
        """The last projected view with the new messages appended, when that still fits.

        An agent loop appends to the transcript the engine just projected. Sending
        the previous view plus the new messages keeps the prompt's prefix unchanged
        (a provider's prompt cache reuses it) and runs no strategy at all; the
        pipeline runs again only once the extended view no longer fits.
        """
        last = self._last
        if last is None or last.scope != "projected" or last.outcome is None:
            return None
        known = len(last.input)
        if len(transcript) <= known or not starts_with(transcript, last.input):
            return None
        view = last.view + transcript[known:]
        tokens = self._meter.measurer(transcript, estimate)(view)
        if tokens > self.threshold:
            return None
        outcome = last.outcome
        view_estimate = UsageEstimate(tokens, 0, tokens, -1)
        usage = self._remember("projected", view, view_estimate, outcome, (transcript, estimate))
        return Projection(
            messages=view,
            usage=usage,
            changed=True,
            strategy=outcome.applied[-1] if outcome.applied else None,
        )

    def _breaker_success(self) -> None:
        if self.breaker.state == "open":
            self._telemetry.breaker_moved(opened=False)
        self.breaker.record_success()

    def _grown_since_stall(self, tokens: int) -> bool:
        """LLM strategies that could not fit the view run again only after real growth."""
        if self._stalled_at is None:
            return True
        return tokens >= self._stalled_at + max(256, self.threshold // 20)

    async def _finish_projection(
        self,
        transcript: tuple[Message, ...],
        estimate: UsageEstimate,
        outcome: PipelineOutcome,
        futile: bool,
        floor: int,
    ) -> Projection:
        commit_view = outcome.view_after_last(self.commit_strategies)
        should_commit = commit_view is not None
        view_estimate = self._meter.estimate_outcome(transcript, estimate, outcome)
        if outcome.changed:
            scope: Scope = "committed" if should_commit else "projected"
            usage = self._remember(
                scope, outcome.view, view_estimate, outcome, (transcript, estimate)
            )
        else:
            usage = self._remember("baseline", transcript, estimate)
        self._record_rewrites("threshold", outcome)
        event = None
        if outcome.changed or futile or not usage.fits or any(s.error for s in outcome.steps):
            event = self._event(
                "threshold",
                outcome,
                estimate.tokens,
                usage,
                committed=should_commit,
                futile=futile,
                floor=floor if futile else 0,
            )
            logger.info(
                "strategy=<%s> reason=<threshold> tokens_before=<%d> tokens_after=<%d> "
                "committed=<%s> futile=<%s> | view rewritten",
                event.strategy,
                event.tokens_before,
                event.tokens_after,
                should_commit,
                futile,
            )
            await call_hook("on_project", self.on_project, event)
        return Projection(
            messages=outcome.view,
            usage=usage,
            changed=outcome.changed,
            strategy=outcome.applied[-1] if outcome.applied else None,
            event=event,
            commit=commit_view,
        )

    async def _skip(self, transcript: tuple[Message, ...], failures: int) -> Projection:
        estimate = self._estimate(transcript)
        usage = self._remember("skipped", transcript, estimate)
        event = RewriteEvent(
            reason="circuit_breaker",
            strategy="circuit_breaker",
            changed=False,
            tokens_before=estimate.tokens,
            tokens_after=estimate.tokens,
            view=transcript,
            failures=failures,
            prefix_stable=usage.prefix_stable,
            prefix_reused_tokens=usage.prefix_reused_tokens,
        )
        logger.warning(
            "failures=<%d> state=<%s> | circuit breaker open: strategies skipped for this call",
            failures,
            self.breaker.state,
        )
        if self.breaker.state != "open":
            self._telemetry.breaker_moved(opened=False)
        await call_hook("on_project", self.on_project, event)
        return Projection(
            messages=transcript,
            usage=usage,
            changed=False,
            strategy="circuit_breaker",
            event=event,
        )

    async def _keep(
        self, transcript: tuple[Message, ...], outcome: PipelineOutcome, *, count_failure: bool
    ) -> None:
        """Archive what ``outcome`` removed before any view of it leaves the engine.

        Raises:
            CompactionError: the store failed; ``.view`` is the untouched input.
        """
        if self._archive is None or not outcome.removed:
            return
        assert self._session_id is not None
        try:
            await keep_originals(self._archive, self._session_id, outcome.removed)
        except ArchiveError as exc:
            if count_failure:
                self._count_failure()
            logger.warning(
                "session=<%s> | archive write failed; view not rewritten: %s",
                self._session_id,
                exc,
            )
            raise CompactionError(
                f"the archive could not store what the rewrite removed ({exc}); the view was "
                "not rewritten, and .view is the input unchanged",
                view=transcript,
                strategy="archive",
                failures=self.breaker.failures,
            ) from exc

    async def _handed_out(
        self, transcript: tuple[Message, ...], outcome: PipelineOutcome
    ) -> PipelineOutcome:
        """``outcome`` when its originals are kept, else no rewrite at all.

        For the best view a failed pipeline reached: it goes out on the error
        only when the archive holds what it removed.
        """
        try:
            await self._keep(transcript, outcome, count_failure=False)
        except CompactionError:
            return attrs.evolve(outcome, view=transcript, applied=(), views=(), removed=())
        return outcome

    def _count_failure(self) -> bool:
        opened = self.breaker.record_failure()
        if opened:
            self._telemetry.breaker_moved(opened=True)
        return opened

    async def _failed(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate, failure: PipelineFailure
    ) -> CompactionError:
        outcome = await self._handed_out(transcript, failure.outcome)
        opened = self._count_failure()
        cause = failure.__cause__
        logger.warning(
            "strategy=<%s> failures=<%d> opened=<%s> | pipeline failed: %s",
            failure.strategy,
            self.breaker.failures,
            opened,
            cause,
        )
        view_estimate = self._meter.estimate_outcome(transcript, estimate, outcome)
        commit_view = outcome.view_after_last(self.commit_strategies)
        self._remember(
            "projected" if outcome.changed else "baseline",
            outcome.view,
            view_estimate,
            outcome,
            (transcript, estimate),
        )
        return CompactionError(
            f"strategy {failure.strategy!r} failed: {cause!r}; "
            f"the best view reached is on .view ({self.breaker.failures} consecutive failures)",
            view=outcome.view,
            strategy=failure.strategy,
            failures=self.breaker.failures,
            commit=commit_view,
        )

    def _event(
        self,
        reason: RewriteReason,
        outcome: PipelineOutcome,
        tokens_before: int,
        usage: ContextUsage,
        *,
        committed: bool,
        futile: bool = False,
        floor: int = 0,
    ) -> RewriteEvent:
        return RewriteEvent(
            reason=reason,
            strategy=outcome.applied[-1] if outcome.applied else "none",
            changed=outcome.changed,
            committed=committed and outcome.changed,
            tokens_before=tokens_before,
            tokens_after=outcome.tokens,
            info=outcome.info,
            steps=outcome.steps,
            view=outcome.view,
            failures=self.breaker.failures,
            futile=futile,
            floor_tokens=floor,
            prefix_stable=usage.prefix_stable,
            prefix_reused_tokens=usage.prefix_reused_tokens,
            references=outcome.references if self._archive is not None else (),
        )

    def _span_start(self) -> dict[str, Any]:
        return {
            "context_engine.window": self._window,
            "context_engine.threshold": self.threshold,
            "context_engine.breaker.state": self.breaker.state,
        }

    def _span_end(self, span: Any, result: Projection | CompactResult) -> None:
        if span is None:
            return
        event = result.event
        set_attributes(
            span,
            {
                "context_engine.tokens_before": event.tokens_before
                if event
                else result.usage.tokens,
                "context_engine.tokens_after": result.usage.tokens,
                "context_engine.changed": result.changed,
                "context_engine.committed": bool(event and event.committed),
                "context_engine.strategy": result.strategy,
                "context_engine.reason": event.reason if event else None,
                "context_engine.futile": bool(event and event.futile),
                "context_engine.breaker.state": self.breaker.state,
                "context_engine.breaker.failures": self.breaker.failures,
                "context_engine.prefix_stable": result.usage.prefix_stable,
                "context_engine.prefix_reused_tokens": result.usage.prefix_reused_tokens,
            },
        )

    def _record_rewrites(self, reason: RewriteReason, outcome: PipelineOutcome) -> None:
        for step in outcome.steps:
            if step.applied:
                self._telemetry.rewrite(step.name, reason, step.tokens_before - step.tokens_after)

    # -- compact and recover ---------------------------------------------------------------

    async def compact(
        self, messages: Sequence[Message], instructions: str | None = None
    ) -> CompactResult:
        """Compact on demand (``/compact``): the first force-capable strategy that applies wins.

        The caller should replace its transcript with ``messages`` when ``changed``.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            CompactionError: the strategy raised (the breaker does not count it).
        """
        with self._telemetry.operation("compact", self._span_start()) as span, shared_shapes():
            result = await self._compact(messages, instructions)
            self._span_end(span, result)
            return result

    async def _compact(
        self, messages: Sequence[Message], instructions: str | None = None
    ) -> CompactResult:
        """The body of `compact`."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        estimate = self._estimate(transcript)
        try:
            outcome = await run_forced(
                self._strategies,
                transcript,
                self._budget(transcript, estimate, reason="manual"),
                on_strategy=self.on_strategy,
                instructions=instructions,
            )
        except PipelineFailure as failure:
            raise CompactionError(
                f"manual compaction failed in {failure.strategy!r}: {failure.__cause__!r}",
                view=transcript,
                strategy=failure.strategy,
                failures=self.breaker.failures,
            ) from failure.__cause__
        await self._keep(transcript, outcome, count_failure=False)
        return CompactResult(**await self._finish_forced("manual", transcript, estimate, outcome))

    async def recover_overflow(
        self, messages: Sequence[Message], error: BaseException | str | None = None
    ) -> RecoveryResult:
        """Shrink a view the provider rejected as too long.

        The target is below the threshold by the factor the estimate missed (the
        provider's error is read for the real size and limit when it states
        them). Force-capable strategies run first on the full transcript, then
        the regular pipeline finishes the job. A successful recovery closes the
        breaker.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            CompactionError: a strategy raised.
        """
        operation = self._telemetry.operation("recover_overflow", self._span_start())
        with operation as span, shared_shapes():
            result = await self._recover_overflow(messages, error)
            self._span_end(span, result)
            return result

    async def _recover_overflow(
        self, messages: Sequence[Message], error: BaseException | str | None = None
    ) -> RecoveryResult:
        """The body of `recover_overflow`."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        if error is not None and not is_context_overflow(error):
            logger.warning(
                "error=<%s> | recover_overflow was given an error that does not look like a "
                "context-length error; compacting anyway",
                type(error).__name__ if isinstance(error, BaseException) else "str",
            )
        estimate = self._estimate(transcript)
        last = self._last
        # The rejected prompt is the last view when the caller passes the input it came from.
        rejected = estimate.tokens
        if last is not None and last.input == transcript:
            rejected = min(rejected, last.estimate.tokens)
        target = recovery_target(rejected, self._window, self.threshold, error)
        budget = self._budget(transcript, estimate, target, "overflow")
        floor = self._meter.floor_tokens(transcript, estimate, target)
        futile = floor > target
        forced: PipelineOutcome | None = None
        try:
            outcome = forced = await run_forced(
                [s for s in self._strategies if not (futile and _uses_llm(s))],
                transcript,
                budget,
                on_strategy=self.on_strategy,
                instructions=None,
            )
            if outcome.tokens > target:
                rest = await run_pipeline(
                    self._strategies,
                    transcript,
                    outcome.view,
                    budget.with_tokens(outcome.tokens),
                    on_strategy=self.on_strategy,
                    allow=lambda s: not _uses_llm(s) or not (futile or s.name in outcome.applied),
                )
                outcome = chain(outcome, rest)
        except PipelineFailure as failure:
            reached = failure.outcome if forced is None else chain(forced, failure.outcome)
            raise CompactionError(
                f"overflow recovery failed in {failure.strategy!r}: {failure.__cause__!r}",
                view=(await self._handed_out(transcript, reached)).view,
                strategy=failure.strategy,
                failures=self.breaker.failures,
            ) from failure.__cause__
        await self._keep(transcript, outcome, count_failure=False)
        if outcome.changed:
            self._breaker_success()
        fields = await self._finish_forced(
            "overflow", transcript, estimate, outcome, futile=futile, floor=floor
        )
        return RecoveryResult(**fields)

    async def _finish_forced(
        self,
        reason: RewriteReason,
        transcript: tuple[Message, ...],
        estimate: UsageEstimate,
        outcome: PipelineOutcome,
        *,
        futile: bool = False,
        floor: int = 0,
    ) -> dict[str, Any]:
        """Remember, log and report a forced rewrite; return the result's common fields.

        An event is reported when the view changed, and also when it did not
        but the caller must know why (a futile floor, a strategy's error).
        """
        view_estimate = self._meter.estimate_outcome(transcript, estimate, outcome)
        event = None
        if outcome.changed:
            usage = self._remember(
                "committed" if reason == "manual" else "recovered",
                outcome.view,
                view_estimate,
                outcome,
                (transcript, estimate),
            )
        else:
            usage = self._usage(view_estimate, self._prefix(outcome.view))
        self._record_rewrites(reason, outcome)
        if outcome.changed or futile or any(step.error for step in outcome.steps):
            event = self._event(
                reason,
                outcome,
                estimate.tokens,
                usage,
                committed=True,
                futile=futile,
                floor=floor if futile else 0,
            )
            logger.info(
                "strategy=<%s> reason=<%s> tokens_before=<%d> tokens_after=<%d> changed=<%s> "
                "| forced rewrite",
                event.strategy,
                reason,
                event.tokens_before,
                event.tokens_after,
                outcome.changed,
            )
            if reason == "manual":
                await call_hook("on_compact", self.on_compact, event)
            else:
                await call_hook("on_recover", self.on_recover, event)
        return {
            "messages": outcome.view,
            "usage": usage,
            "changed": outcome.changed,
            "strategy": outcome.applied[-1] if outcome.applied else None,
            "event": event,
            "commit": outcome.view if outcome.changed else None,
            "info": outcome.info,
        }

    # -- archive -------------------------------------------------------------------------

    @property
    def archive(self) -> Archive | None:
        """The archive originals are kept in, or None."""
        return self._archive

    @property
    def session_id(self) -> str | None:
        """The session references are scoped by, or None."""
        return self._session_id

    async def recall(self, reference: str) -> tuple[Message, ...]:
        """The originals a placeholder, marker or checkpoint of this session names.

        Raises:
            ConfigurationError: the engine has no archive.
            RecallError: the reference is not in this session's archive (a
                reference shown to another session is refused).
            ArchiveError: the store failed.
        """
        if self._archive is None or self._session_id is None:
            raise ConfigurationError(
                "this engine keeps no archive; build it with archive= and session_id= to "
                "recall what rewrites removed"
            )
        return await recall_originals(self._archive, self._session_id, reference)

    # -- blocking twins ----------------------------------------------------------------

    def project_sync(self, messages: Sequence[Message]) -> Projection:
        """Blocking `project`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: Projection = run_blocking(lambda: self.project(messages), "project")
        return result

    def compact_sync(
        self, messages: Sequence[Message], instructions: str | None = None
    ) -> CompactResult:
        """Blocking `compact`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: CompactResult = run_blocking(
            lambda: self.compact(messages, instructions), "compact"
        )
        return result

    def recover_overflow_sync(
        self, messages: Sequence[Message], error: BaseException | str | None = None
    ) -> RecoveryResult:
        """Blocking `recover_overflow`; raises `BlockingCallInEventLoopError` in a running loop."""
        result: RecoveryResult = run_blocking(
            lambda: self.recover_overflow(messages, error), "recover_overflow"
        )
        return result

    def recall_sync(self, reference: str) -> tuple[Message, ...]:
        """Blocking `recall`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: tuple[Message, ...] = run_blocking(lambda: self.recall(reference), "recall")
        return result
