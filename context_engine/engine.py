"""`ContextEngine`: decides, before every LLM call, what the model gets to see.

A public call goes down once and comes back once: the engine builds a `Call`
(one call's facts), runs the pipeline against it, keeps the originals the
rewrite removed, and hands the outcome to `call.finish`, the one exit that
remembers, reports and returns. The engine holds configuration and a
`Session` (what lasts between calls); docs/engine.md draws the flow. With a
`BackgroundSummary`, a call past its pre-trigger also leaves the next
checkpoint being written behind it (`context_engine.background`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs

from context_engine._aio import run_blocking
from context_engine._originals import KeepAlive, capped_on_arrival, recall_in
from context_engine._settings import (
    Settings,
    check_hooks,
    checked_breaker,
    checked_counter,
    checked_settings,
    default_reserve,
    non_negative,
    positive_window,
    reserve,
    warn_if_no_room,
)
from context_engine._transcript import as_transcript
from context_engine.archive.base import Archive
from context_engine.assembly.assembler import Assembler, assembler_of
from context_engine.assembly.provider import ContextProvider
from context_engine.assembly.transform import Transform
from context_engine.background import look_ahead
from context_engine.boundary import (
    DEFAULT_MIN_MESSAGES,
    DEFAULT_TRIGGER_TOKENS,
    boundary_due,
    bracketed,
    checked_boundary,
)
from context_engine.breaker import BreakerState, CircuitBreaker
from context_engine.call import Desk, Hooks, Operation, Requester, finish, mark_span, open_call
from context_engine.economy import economize
from context_engine.errors import ConfigurationError
from context_engine.events import ContextUsage, Snapshot
from context_engine.messages import Message
from context_engine.meter import Meter
from context_engine.overflow import warn_unless_overflow
from context_engine.pricing import CachePricing
from context_engine.reasoning import ReasoningPolicy
from context_engine.redact import Redactor
from context_engine.request_cap import DEFAULT_MAX_LLM_REWRITES
from context_engine.results import CompactResult, Projection, RecoveryResult
from context_engine.rewrite import keep, rewrite, settle
from context_engine.session import Session
from context_engine.snapshots import describe_view
from context_engine.strategies.base import Strategy
from context_engine.structure import shared_shapes
from context_engine.summarize.pinned import Pinned, PinnedSource
from context_engine.summarize.rehydrate import Rehydration
from context_engine.telemetry import Telemetry
from context_engine.tokens import DEFAULT_ENCODING, TokenCounter, UsageEstimate, resolve_counter

__all__ = ["CompactResult", "ContextEngine", "Projection", "RecoveryResult", "default_reserve"]

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
        providers: Context providers run on every call (or an `Assembler`
            with rules and a budget profile); their output is budgeted with
            the transcript and never committed, archived or summarized.
        transforms: Functions run in order over the transcript before the
            providers (redaction, normalisation); every part of the call
            works on their output (`context_engine.assembly.Transform`).
        pinned: Messages re-injected right after every checkpoint, within a
            budget (a rules file, a plan): a list of messages or strings, a
            function returning them, or a `Pinned` with its own budget.
        reasoning: ``"drop"`` removes thinking blocks whose prefix a rewrite
            changed (outside the current turn; see `context_engine.reasoning`),
            ``"keep"`` sends them unchanged.
        pricing: A provider family's cache rules and prices (a `CachePricing`
            or a `CACHE_PRICING` name such as ``"anthropic"``): usage then
            carries the call's cache estimate and rewrite events their cost.
        cost_aware: With ``pricing``, a view that fits is still rewritten when
            that pays: old tool results are cleared (by the pipeline's
            `ToolResultMicrocompact`) when the tokens saved over the calls to
            come (``pricing.horizon_calls``) outweigh the cache they break and
            the reasoning they drop (`context_engine.economy`). False (the
            default): below the threshold the view is the transcript.
        cache_breakpoints: Place Anthropic ``cache_control`` breakpoints on the
            views handed out (never on a commit): after the stable prefix (the
            leading system messages and the checkpoint after them) and on the
            last message, within the request's four once the caller's own are
            counted (`context_engine.formats.breakpoints.place_breakpoints`).
            For a caller that sends the views with `to_anthropic`.
        max_llm_rewrites_per_request: LLM rewrites (summaries) allowed between
            two user messages in ``project`` (a ``recover_overflow`` counts but
            is never refused); past it the LLM strategies are skipped with the
            reason on their step and the others make the view fit. None
            removes the cap.
    """

    def __init__(
        self,
        context_window: int,
        strategies: Iterable[Strategy] = (),
        *,
        reserve_tokens: int | None = None,
        commit_strategies: Iterable[str] = ("full_summary", "micro_summary"),
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
        providers: Iterable[ContextProvider] | Assembler = (),
        transforms: Iterable[Transform] = (),
        pinned: Pinned | PinnedSource | None = None,
        reasoning: ReasoningPolicy = "drop",
        pricing: CachePricing | str | None = None,
        max_llm_rewrites_per_request: int | None = DEFAULT_MAX_LLM_REWRITES,
        cost_aware: bool = False,
        cache_breakpoints: bool = False,
    ) -> None:
        self._settings: Settings = checked_settings(
            context_window=context_window,
            strategies=strategies,
            reserve_tokens=reserve_tokens,
            commit_strategies=commit_strategies,
            max_user_share=max_user_share,
            archive=archive,
            session_id=session_id,
            archive_timeout_seconds=archive_timeout_seconds,
            pinned=pinned,
            reasoning=reasoning,
            pricing=pricing,
            max_llm_rewrites_per_request=max_llm_rewrites_per_request,
            cost_aware=cost_aware,
            cache_breakpoints=cache_breakpoints,
        )
        breaker = checked_breaker(
            max_consecutive_failures, breaker_cooldown_calls, breaker_cooldown_seconds
        )
        counter = checked_counter(token_counter or resolve_counter(encoding))
        self._meter = Meter(counter, non_negative("overhead_tokens", overhead_tokens))
        check_hooks(
            on_project=on_project,
            on_recover=on_recover,
            on_compact=on_compact,
            on_strategy=on_strategy,
        )
        self.on_project, self.on_recover, self.on_compact = on_project, on_recover, on_compact
        self.on_strategy = on_strategy
        self._session = Session(breaker)
        self._last_desk: Desk | None = None
        self._telemetry = Telemetry(tracer_provider, meter_provider)
        archive, session_id = self._settings.archive, self._settings.session_id
        # Expiring archives count idle time from the last call, not the last write.
        self._keep_alive = (
            KeepAlive(archive, session_id, self._settings.archive_timeout)
            if archive is not None and session_id is not None
            else None
        )
        self._assembler = assembler_of(providers, transforms)

    @classmethod
    def default(
        cls,
        context_window: int,
        *,
        summarizer: Callable[..., Any] | None = None,
        seed: Callable[[], Any] | None = None,
        redactor: Redactor | None = None,
        tool_result_cap: Strategy | Literal["default"] | None = "default",
        rehydrate: Rehydration | None = None,
        **options: Any,
    ) -> ContextEngine:
        """The recommended pipeline.

        Tool-result cap (``tool_result_cap``: a configured `ToolResultCap`, or
        None to leave it out), tool-result microcompact, light trim, session
        memory (when ``seed`` is given), full summary (when ``summarizer`` is
        given; ``redactor`` removes secrets from what it is sent;
        ``rehydrate`` re-attaches recently used files after its checkpoints),
        hard truncate. ``options`` go to the constructor (``pinned=`` among them).
        """
        from context_engine.strategies._default import default_pipeline

        strategies = default_pipeline(
            summarizer=summarizer,
            seed=seed,
            redactor=redactor,
            tool_result_cap=tool_result_cap,
            rehydrate=rehydrate,
        )
        return cls(context_window, strategies, **options)

    # -- configuration -------------------------------------------------------------

    @property
    def context_window(self) -> int:
        """The model's window in tokens (settable)."""
        return self._settings.window

    @context_window.setter
    def context_window(self, value: int) -> None:
        self._settings = attrs.evolve(self._settings, window=positive_window(value))
        warn_if_no_room(self._settings.window, self._settings.reserve_tokens)

    @property
    def reserve_tokens(self) -> int:
        """Head-room in tokens (settable; None or 0 restores the default)."""
        return self._settings.reserve_tokens

    @reserve_tokens.setter
    def reserve_tokens(self, value: int | None) -> None:
        self._settings = attrs.evolve(self._settings, reserve=reserve(value))
        warn_if_no_room(self._settings.window, self._settings.reserve_tokens)

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
        return self._settings.threshold

    @property
    def strategies(self) -> tuple[Strategy, ...]:
        """The pipeline, in order."""
        return self._settings.strategies

    @property
    def providers(self) -> tuple[ContextProvider, ...]:
        """The context providers, in the order they run."""
        return self._assembler.providers

    def add_provider(self, provider: ContextProvider) -> None:
        """Run ``provider`` on every call from now on (by priority; after equals added before).

        Raises:
            ConfigurationError: ``provider`` does not keep the `ContextProvider` contract.
        """
        self._assembler.add(provider)

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
        return self._settings.archive

    @property
    def session_id(self) -> str | None:
        """The session references are scoped by, or None."""
        return self._settings.session_id

    @property
    def commit_strategies(self) -> frozenset[str]:
        """Names of strategies whose rewrite the caller should commit."""
        return self._settings.commit_strategies

    # -- state ---------------------------------------------------------------------

    def estimate(self, messages: Sequence[Message]) -> UsageEstimate:
        """Estimate how full ``messages`` make the window (provider usage anchors included)."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        return self._meter.estimate(transcript, self._session.seen())

    @property
    def usage(self) -> ContextUsage | None:
        """Usage of the last active view, or None before the first call."""
        last = self._session.last
        return None if last is None else last.usage(self._settings.window, self.threshold)

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
        self._session.restart(transcript, self._meter.estimate(transcript, None))
        self._assembler.forget()

    async def close(self) -> None:
        """Stop the checkpoint being written in the background, if any (`BackgroundSummary`).

        Await it when the agent session ends: the task is cancelled and
        waited for, so nothing of the engine's is left on the event loop.
        The engine stays usable; the next call past the pre-trigger starts
        a new checkpoint.
        """
        await self._session.background.close()

    # -- one call ------------------------------------------------------------------

    def _desk(self) -> Desk:
        """The parts `finish` works with; rebuilt only when a hook was changed."""
        hooks = (self.on_project, self.on_recover, self.on_compact, self.on_strategy)
        desk = self._last_desk
        if desk is None or desk.hooks.as_tuple() != hooks:
            desk = Desk(self._session, self._meter, self._telemetry, Hooks(*hooks))
            self._last_desk = desk
        return desk

    async def _run(self, operation: Operation, messages: Sequence[Message], **extra: Any) -> Any:
        """The body every public call shares: open the call, rewrite, keep, finish."""
        transcript = as_transcript(messages, self._meter.checked_prefix)
        settings, session, telemetry = self._settings, self._session, self._telemetry
        attributes = {
            "context_engine.window": settings.window,
            "context_engine.threshold": settings.threshold,
            "context_engine.breaker.state": session.breaker.state,
        }
        with telemetry.operation(operation, attributes) as span, shared_shapes():
            keeper = self._keep_alive
            if keeper is not None and keeper.due():
                await keeper.refresh()
            assembly = None
            if self._assembler.active:  # context assembly: transforms, then providers
                assembly = await self._assembler.assemble(
                    transcript, self._meter.counter, settings.threshold, operation
                )
                transcript = assembly.transcript
            call = open_call(
                operation,
                transcript,
                settings,
                session,
                self._meter,
                telemetry,
                extra.get("error"),
                assembly,
                extra.get("requested_by", "user"),
            )
            if extra.get("boundary"):  # compact_if_needed: a /compact that reports its own reason
                call = attrs.evolve(call, reason="request_boundary")
            if operation == "project" and call.fits and not call.tier_due:  # nothing to rewrite
                if settings.cost_aware:  # unless a rewrite pays for itself
                    outcome = settle(call, await keep(call, economize(call, session)))
                else:
                    outcome = call.unchanged()
            else:
                changed = await rewrite(call, session, self.on_strategy, extra.get("instructions"))
                if settings.cost_aware and operation == "project" and not changed.reused:
                    changed = economize(call, session, changed)  # clear more in the same break
                outcome = settle(call, await keep(call, changed))
            result = await finish(call, outcome, self._desk())
            if settings.background is not None:  # the next checkpoint, written meanwhile
                look_ahead(call, result.usage.tokens, result.commit is not None, session, telemetry)
            mark_span(span, result, session.breaker)
            return result

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
        self,
        messages: Sequence[Message],
        instructions: str | None = None,
        *,
        requested_by: Requester = "user",
    ) -> CompactResult:
        """Compact on demand (``/compact``): the first force-capable strategy that applies wins.

        The caller should keep ``commit`` (set whenever the view changed).
        ``requested_by="agent"`` is a checkpoint the model asked for (what
        `CompactTool` sends): it is refused past ``max_llm_rewrites_per_request``
        or with the breaker open, counts as one LLM rewrite of the request,
        and its failures count on the breaker, as ``project``'s do. The
        user's ``/compact`` is never refused.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            CompactionRefusedError: ``requested_by="agent"`` and the cap or the
                breaker refused it (nothing was paid for).
            CompactionError: no checkpoint could be written because a strategy
                failed (the breaker counts it only for the agent); ``.view``
                fits whenever the floor does, and ``.commit`` is None.
        """
        if requested_by not in ("user", "agent"):
            raise ConfigurationError(
                f"compact(requested_by={requested_by!r}): use 'user' (a /compact) or 'agent' "
                "(a checkpoint the model asked for with a tool)"
            )
        result: CompactResult = await self._run(
            "compact", messages, instructions=instructions, requested_by=requested_by
        )
        return result

    async def compact_if_needed(
        self,
        messages: Sequence[Message],
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        *,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> CompactResult | None:
        """Compact a stored session at the start of a request, when it is long enough.

        Above ``trigger_tokens`` and with at least ``min_messages`` messages,
        the force-capable strategies write one checkpoint (the summarizer is
        told ``request_boundary``), what it replaced is archived, and
        ``on_compact`` fires with reason ``request_boundary``; ``on_start``
        (with the history's tokens) and ``on_end`` (with the result, or None
        on failure) bracket it so a server can emit its own events. Persist
        ``commit`` of the result. None when below the trigger or under
        ``min_messages`` (no hook fires).

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message`.
            ConfigurationError: ``trigger_tokens`` or ``min_messages`` is not an int >= 0.
            CompactionError: no checkpoint could be written (as `compact`).
        """
        trigger_tokens, min_messages = checked_boundary(trigger_tokens, min_messages)
        transcript = as_transcript(messages, self._meter.checked_prefix)
        tokens = self.estimate(transcript).tokens
        if not boundary_due(tokens, len(transcript), trigger_tokens, min_messages):
            return None
        return await bracketed(
            tokens, lambda: self._run("compact", transcript, boundary=True), on_start, on_end
        )

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
        warn_unless_overflow(error)
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
        return await capped_on_arrival(message, self._settings, self.counter)

    async def recall(self, reference: str) -> tuple[Message, ...]:
        """The originals a placeholder, marker or checkpoint of this session names.

        Raises:
            ConfigurationError: the engine has no archive.
            RecallError: the reference is not in this session's archive (a
                reference shown to another session is refused).
            ArchiveError: the store failed.
        """
        return await recall_in(self._settings, reference)

    # -- blocking twins ----------------------------------------------------------------

    def project_sync(self, messages: Sequence[Message]) -> Projection:
        """Blocking `project`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: Projection = run_blocking(lambda: self.project(messages), "project")
        return result

    def compact_sync(
        self,
        messages: Sequence[Message],
        instructions: str | None = None,
        *,
        requested_by: Requester = "user",
    ) -> CompactResult:
        """Blocking `compact`; raises `BlockingCallInEventLoopError` inside a running loop."""
        result: CompactResult = run_blocking(
            lambda: self.compact(messages, instructions, requested_by=requested_by), "compact"
        )
        return result

    def compact_if_needed_sync(
        self,
        messages: Sequence[Message],
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        *,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> CompactResult | None:
        """Blocking `compact_if_needed`; raises `BlockingCallInEventLoopError` in a running loop."""
        result: CompactResult | None = run_blocking(
            lambda: self.compact_if_needed(
                messages, trigger_tokens, min_messages, on_start=on_start, on_end=on_end
            ),
            "compact_if_needed",
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
