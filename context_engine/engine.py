"""`ContextEngine`: decides, before every LLM call, what the model gets to see.

A public call goes down once and comes back once: the engine builds a `Call`
(one call's facts), runs the pipeline against it, keeps the originals the
rewrite removed, and hands the outcome to `call.finish`, the one exit that
remembers, reports and returns. The engine holds configuration and a
`Session` (what lasts between calls); docs/engine.md draws the flow.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from context_engine._aio import run_blocking
from context_engine._originals import KeepAlive, keep_within, recall_originals
from context_engine._settings import (
    archive_settings,
    default_reserve,
    non_negative,
    positive_window,
    reserve,
    seconds,
    strategy_tuple,
    user_share,
    warn_if_no_room,
)
from context_engine._transcript import as_transcript, recovery_target
from context_engine.archive.base import Archive
from context_engine.breaker import BreakerState, CircuitBreaker
from context_engine.call import Call, Desk, Hooks, Operation, finish, mark_span
from context_engine.errors import ConfigurationError
from context_engine.events import ContextUsage, RewriteReason, Snapshot
from context_engine.messages import Message
from context_engine.meter import Meter
from context_engine.overflow import is_context_overflow
from context_engine.pipeline import BREAKER_OPEN, Outcome, run_forced, run_pipeline, run_unarchived
from context_engine.recovery import recovery_strategies
from context_engine.redact import Redactor
from context_engine.results import CompactResult, Projection, RecoveryResult
from context_engine.session import Remembered, Session
from context_engine.snapshots import describe_view
from context_engine.strategies.base import Budget, Strategy
from context_engine.structure import shared_shapes
from context_engine.telemetry import Telemetry
from context_engine.tokens import DEFAULT_ENCODING, TokenCounter, UsageEstimate, resolve_counter

__all__ = ["CompactResult", "ContextEngine", "Projection", "RecoveryResult", "default_reserve"]

logger = logging.getLogger(__name__)

Hook = Callable[..., Any]


class ContextEngine:
    """Keeps each LLM call's prompt under the model's context window.

    One engine per agent session: it remembers the last view it returned (for
    provider usage anchors, snapshots and the circuit breaker).

    Args:
        context_window: The model's window in tokens.
        strategies: Run in order, cheapest first, while the view is above the threshold.
        reserve_tokens: Head-room for the answer; None or 0 uses `default_reserve`.
        commit_strategies: Names of strategies whose rewrite the caller should commit.
        max_consecutive_failures: Calls with a failed LLM strategy that open the breaker.
        breaker_cooldown_calls: Calls whose LLM strategies are skipped while it is open.
        breaker_cooldown_seconds: Seconds that must also pass before the half-open trial.
        overhead_tokens: Tool schemas and other fixed parts sent with every call.
        max_user_share: Share of the threshold the newest user message always
            keeps when it alone is too large and must be trimmed; None never trims it.
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
        archive_timeout_seconds: How long one archive write may take before the
            engine gives up on it for this call (view-only rewrites still go out).
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
        max_user_share: float | None = 0.5,
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
        archive_timeout_seconds: float = 2.0,
    ) -> None:
        self._window = positive_window(context_window)
        self._archive, self._session_id = archive_settings(archive, session_id)
        self._archive_timeout = seconds("archive_timeout_seconds", archive_timeout_seconds)
        self._keep_alive = (
            KeepAlive(self._archive, self._session_id, self._archive_timeout)
            if self._archive is not None and self._session_id is not None
            else None
        )
        self._reserve = reserve(reserve_tokens)
        self._strategies = strategy_tuple(strategies)
        self._max_user_share = user_share(max_user_share)
        if isinstance(commit_strategies, str) or not isinstance(commit_strategies, Iterable):
            raise ConfigurationError(
                "commit_strategies must be a collection of strategy names, "
                f"got {commit_strategies!r}"
            )
        self.commit_strategies: frozenset[str] = frozenset(commit_strategies)
        try:
            breaker = CircuitBreaker(
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
        self._meter = Meter(counter, non_negative("overhead_tokens", overhead_tokens))
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
        self._session = Session(breaker)
        self._last_desk: Desk | None = None
        self._telemetry = Telemetry(tracer_provider, meter_provider)
        warn_if_no_room(self._window, self.reserve_tokens)

    @classmethod
    def default(
        cls,
        context_window: int,
        *,
        summarizer: Callable[..., Any] | None = None,
        seed: Callable[[], Any] | None = None,
        redactor: Redactor | None = None,
        tool_result_cap: Strategy | Literal["default"] | None = "default",
        **options: Any,
    ) -> ContextEngine:
        """The recommended pipeline.

        Tool-result cap (``tool_result_cap``: a configured `ToolResultCap`, or
        None to leave it out), tool-result microcompact, light trim, session
        memory (when ``seed`` is given), full summary (when ``summarizer`` is
        given; ``redactor`` removes secrets from what it is sent), hard
        truncate. ``options`` go to the constructor.
        """
        from context_engine.strategies import (
            FullSummary,
            HardTruncate,
            LightTrim,
            SessionMemory,
            ToolResultCap,
            ToolResultMicrocompact,
        )

        cap = ToolResultCap() if tool_result_cap == "default" else tool_result_cap
        strategies: list[Strategy] = [ToolResultMicrocompact(), LightTrim()]
        if cap is not None:
            strategies.insert(0, cap)
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
        self._window = positive_window(value)
        warn_if_no_room(self._window, self.reserve_tokens)

    @property
    def reserve_tokens(self) -> int:
        """Head-room in tokens (settable; None or 0 restores the default)."""
        return self._reserve if self._reserve is not None else default_reserve(self._window)

    @reserve_tokens.setter
    def reserve_tokens(self, value: int | None) -> None:
        self._reserve = reserve(value)
        warn_if_no_room(self._window, self.reserve_tokens)

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
        self._meter.overhead_tokens = non_negative("overhead_tokens", value)

    @property
    def threshold(self) -> int:
        """``max(0, window - reserve)``: strategies run while the view is above it."""
        return max(0, self._window - self.reserve_tokens)

    @property
    def strategies(self) -> tuple[Strategy, ...]:
        """The pipeline, in order."""
        return self._strategies

    @property
    def breaker(self) -> CircuitBreaker:
        """The circuit breaker guarding the LLM strategies."""
        return self._session.breaker

    @property
    def consecutive_failures(self) -> int:
        """The circuit breaker's failure count."""
        return self.breaker.failures

    @property
    def breaker_state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open``."""
        return self.breaker.state

    @property
    def archive(self) -> Archive | None:
        """The archive originals are kept in, or None."""
        return self._archive

    @property
    def session_id(self) -> str | None:
        """The session references are scoped by, or None."""
        return self._session_id

    # -- state ---------------------------------------------------------------------

    def estimate(self, messages: Sequence[Message]) -> UsageEstimate:
        """Estimate how full ``messages`` make the window (provider usage anchors included)."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        return self._meter.estimate(transcript, self._session.seen())

    @property
    def usage(self) -> ContextUsage | None:
        """Usage of the last active view, or None before the first call."""
        last = self._session.last
        if last is None:
            return None
        return ContextUsage(
            tokens=last.estimate.tokens,
            context_window=self._window,
            threshold=self.threshold,
            usage_tokens=last.estimate.usage_tokens,
            trailing_tokens=last.estimate.trailing_tokens,
            prefix_stable=last.prefix_stable,
            prefix_reused_tokens=last.prefix_reused_tokens,
        )

    def snapshot(self) -> Snapshot | None:
        """A description of the last active view, or None before the first call."""
        last, usage = self._session.last, self.usage
        if last is None or usage is None:
            return None
        return describe_view(last.scope, last.view, usage, last.outcome)

    def reset(self, messages: Sequence[Message]) -> None:
        """Record ``messages`` as the new baseline and forget the remembered view.

        For a caller that replaced its transcript by other means (a reload, an
        edit): the next call then trusts no remembered view or usage anchor.
        The breaker keeps its count.
        """
        transcript = as_transcript(messages, self._meter.checked_prefix)
        self._session.reset()
        estimate = self._meter.estimate(transcript, None)
        self._session.remember(
            Remembered("baseline", transcript, estimate, None, transcript, estimate)
        )

    # -- one call ------------------------------------------------------------------

    def _call(
        self,
        operation: Operation,
        transcript: tuple[Message, ...],
        error: BaseException | str | None = None,
    ) -> Call:
        """The facts of one call, fixed before any strategy runs."""
        meter, session = self._meter, self._session
        estimate = meter.estimate(transcript, session.seen())
        limit = threshold = self.threshold
        reason = _reason(operation)
        if operation == "recover_overflow":
            rejected = estimate.tokens
            last = session.last
            if last is not None and last.input == transcript:  # the prompt it rejected
                rejected = min(rejected, last.estimate.tokens)
            threshold = recovery_target(rejected, self._window, limit, error)
        failures = session.breaker.failures
        blocked: str | None = None
        if operation == "project" and session.breaker.should_skip():
            blocked, reason = BREAKER_OPEN, "circuit_breaker"
            if session.breaker.state != "open":
                self._telemetry.breaker_moved(opened=False)
        elif operation == "project" and not session.grown_since_stall(estimate.tokens, threshold):
            blocked = ""
        share = self._max_user_share
        return Call(
            operation=operation,
            reason=reason,
            transcript=transcript,
            estimate=estimate,
            budget=Budget(
                tokens=estimate.tokens,
                window=self._window,
                threshold=threshold,
                counter=meter.counter,
                measure=meter.measurer(transcript, estimate),
                overhead_tokens=meter.overhead_tokens,
                reason="threshold" if reason == "circuit_breaker" else reason,
                archiving=self._archive is not None,
                max_user_share=self._max_user_share,
            ),
            floor_of=lambda view, tokens: meter.view_floor(view, tokens, threshold, share),
            llm_blocked=blocked,
            failures=failures,
            window=self._window,
            limit=limit,
            commit_strategies=self.commit_strategies,
            archiving=self._archive is not None,
        )

    def _desk(self) -> Desk:
        """The parts `finish` works with; rebuilt only when a hook was changed."""
        hooks = (self.on_project, self.on_recover, self.on_compact, self.on_strategy)
        desk = self._last_desk
        if desk is None or desk.hooks.as_tuple() != hooks:
            desk = Desk(self._session, self._meter, self._telemetry, Hooks(*hooks))
            self._last_desk = desk
        return desk

    async def _run(self, operation: Operation, messages: Sequence[Message], **extra: Any) -> Any:
        """The body every public call shares: build the call, rewrite, keep, finish."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        attributes = {
            "context_engine.window": self._window,
            "context_engine.threshold": self.threshold,
            "context_engine.breaker.state": self.breaker.state,
        }
        with self._telemetry.operation(operation, attributes) as span, shared_shapes():
            keeper = self._keep_alive  # hook (issue 20): expiring records count from this call
            if keeper is not None and keeper.due():
                await keeper.refresh()
            call = self._call(operation, transcript, extra.get("error"))
            if operation == "project" and call.fits:  # the common case: nothing to rewrite
                outcome = call.unchanged()
            else:
                outcome = await self._kept(
                    call, await self._rewrite(call, extra.get("instructions"))
                )
            result = await finish(call, outcome, self._desk())
            mark_span(span, result, self.breaker)
            return result

    async def _rewrite(self, call: Call, instructions: str | None) -> Outcome:
        """Run the strategies the call needs; the view fits whenever the floor does."""
        on_strategy = self.on_strategy
        if call.operation == "project":
            extended = self._extended(call)
            if extended is not None:
                return extended
            return await run_pipeline(
                call, self._strategies, call.transcript, call.budget, on_strategy
            )
        forced = await run_forced(call, self._strategies, on_strategy, instructions)
        if forced.tokens <= call.threshold or (
            call.operation == "compact" and forced.forced_failed is None
        ):
            return forced  # a /compact that wrote its checkpoint (or had nothing to do)
        # Finish the job with the strategies that did not run yet, so the view fits.
        ran = {step.name for step in forced.steps}
        rest = [s for s in self._strategies if not s.uses_llm or s.name not in ran]
        if call.operation == "recover_overflow":
            # Its view is committed: what a truncation drops is folded into the checkpoint.
            rest = recovery_strategies(rest, self._strategies, summary_failed=forced.llm_failed)
        more = await run_pipeline(
            call, rest, forced.view, call.budget.with_tokens(forced.tokens), on_strategy
        )
        return forced.then(more)

    def _extended(self, call: Call) -> Outcome | None:
        """The last projected view plus the new messages, when that still fits."""
        view = self._session.extension(call.transcript)
        if view is None:
            return None
        tokens = call.budget.measure(view)
        if tokens > call.threshold:
            return None
        last = self._session.last
        assert last is not None
        assert last.outcome is not None
        return attrs.evolve(
            last.outcome, view=view, tokens=tokens, steps=(), removed=(), reused=True
        )

    async def _kept(self, call: Call, outcome: Outcome) -> Outcome:
        """Archive what ``outcome`` removed before any view of it leaves the engine.

        When the store fails or is too slow, the call still gets a view that
        fits: view-only rewrites without archiving (`run_unarchived`), the step
        says why, and nothing is committed.
        """
        if self._archive is None or self._session_id is None:
            return outcome
        # Hook (issue 20): a message the codec refuses (metadata that is not JSON) fails
        # every archiving strategy; without archiving they can still make the view fit.
        refused = next((s.error for s in outcome.steps if _codec_refused(s.error)), None)
        if refused is not None and outcome.tokens > call.threshold:
            return await run_unarchived(call, self._strategies, outcome, refused)
        if not outcome.removed:
            return outcome
        problem = await keep_within(
            self._archive, self._session_id, outcome.removed, self._archive_timeout
        )
        if problem is None:
            return outcome
        logger.warning(
            "session=<%s> | archive write failed; view-only rewrites without archiving: %s",
            self._session_id,
            problem,
        )
        return await run_unarchived(call, self._strategies, outcome, f"ArchiveError: {problem}")

    # -- public calls --------------------------------------------------------------

    async def project(self, messages: Sequence[Message]) -> Projection:
        """Build the view for one LLM call without touching the caller's transcript.

        Below the threshold the input comes back unchanged. Above it the
        strategies run in order until the view fits; a strategy, summarizer
        or archive failure is recorded on the event and the next strategy
        runs, so the view fits whenever the floor does. When a strategy listed
        in ``commit_strategies`` applied, ``commit`` is the transcript the
        caller should keep from now on.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
        """
        result: Projection = await self._run("project", messages)
        return result

    async def compact(
        self, messages: Sequence[Message], instructions: str | None = None
    ) -> CompactResult:
        """Compact on demand (``/compact``): the first force-capable strategy that applies wins.

        The caller should keep ``commit`` (set whenever the view changed).

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            CompactionError: no checkpoint could be written because a strategy
                failed (the breaker does not count it); ``.view`` fits whenever
                the floor does, and ``.commit`` is None.
        """
        result: CompactResult = await self._run("compact", messages, instructions=instructions)
        return result

    async def recover_overflow(
        self, messages: Sequence[Message], error: BaseException | str | None = None
    ) -> RecoveryResult:
        """Shrink a view the provider rejected as too long.

        The target is below the threshold by the factor the estimate missed (the
        provider's error is read for the real size and limit when it states
        them). Force-capable strategies run first on the full transcript, then
        the regular pipeline finishes the job. A successful recovery closes the
        breaker; the caller should keep ``commit``.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
        """
        if error is not None and not is_context_overflow(error):
            logger.warning(
                "error=<%s> | recover_overflow was given an error that does not look like a "
                "context-length error; compacting anyway",
                type(error).__name__ if isinstance(error, BaseException) else "str",
            )
        result: RecoveryResult = await self._run("recover_overflow", messages, error=error)
        return result

    async def cap_tool_result(self, message: Message) -> Message:
        """``message`` capped the way `ToolResultCap` caps it, for storing in the transcript.

        Call it when a tool result arrives, so the transcript itself stays small.
        The cap is `ToolResultCap`'s default limit under this engine's threshold.
        With an archive, the original is stored first and the preview names its
        reference; when the store fails, ``message`` comes back unchanged (the
        transcript must keep what could not be archived).

        Raises:
            InvalidMessageError: ``message`` is not a `Message`.
        """
        from context_engine.strategies.tool_result_cap import ToolResultCap, cap_tool_result

        limit = ToolResultCap().limit(self.threshold)
        archiving = self._archive is not None
        capped, removal = cap_tool_result(
            message, max_tokens=limit, counter=self.counter, archiving=archiving
        )
        if removal is None or self._archive is None or self._session_id is None:
            return capped
        problem = await keep_within(
            self._archive, self._session_id, (removal,), self._archive_timeout
        )
        if problem is not None:
            logger.warning(
                "session=<%s> | archive write failed; tool result kept whole: %s",
                self._session_id,
                problem,
            )
            return message
        return capped

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

    def cap_tool_result_sync(self, message: Message) -> Message:
        """Blocking `cap_tool_result`; raises `BlockingCallInEventLoopError` in a running loop."""
        result: Message = run_blocking(lambda: self.cap_tool_result(message), "cap_tool_result")
        return result

    def recall_sync(self, reference: str) -> tuple[Message, ...]:
        """Blocking `recall`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: tuple[Message, ...] = run_blocking(lambda: self.recall(reference), "recall")
        return result


def _codec_refused(error: str | None) -> bool:
    return error is not None and error.startswith("ArchiveError: cannot archive a message")


def _reason(operation: Operation) -> RewriteReason:
    if operation == "project":
        return "threshold"
    return "manual" if operation == "compact" else "overflow"
