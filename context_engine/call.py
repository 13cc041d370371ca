"""One call's facts, built once, and its one exit: an `Outcome` becomes a result.

The engine builds a `Call` from its configuration and the caller's messages,
runs the pipeline against it, and hands the outcome to `finish`, which
remembers the view in the `Session`, settles the breaker, reports the
rewrite (event, hook, log, metrics) and returns the result, or raises when a
manual ``/compact`` could not write a checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import attrs

from context_engine._aio import call_hook
from context_engine._cache_marks import cache_reads, request_view, served_tokens
from context_engine._cache_report import priced
from context_engine._settings import Settings
from context_engine._transcript import recovery_target
from context_engine.assembly.assembler import removal_decisions
from context_engine.assembly.trace import EMPTY_TRACE, AssemblyTrace
from context_engine.breaker import CircuitBreaker
from context_engine.cache_cost import CacheEstimate, estimate_call
from context_engine.errors import CompactionError, CompactionRefusedError
from context_engine.events import ContextUsage, RewriteEvent, RewriteReason, Scope
from context_engine.formats.breakpoints import marked
from context_engine.messages import Message
from context_engine.meter import Meter
from context_engine.native.hook import request_options_for
from context_engine.pipeline import BREAKER_OPEN, Outcome, is_deliberate_skip
from context_engine.request_cap import CAP_REACHED, cap_reached
from context_engine.results import CompactResult, Projection, RecoveryResult
from context_engine.session import Remembered, Session
from context_engine.strategies.base import Budget, Strategy
from context_engine.summarize.originals import whole_for_commit
from context_engine.telemetry import Telemetry, set_attributes
from context_engine.tokens import UsageEstimate

if TYPE_CHECKING:
    from context_engine.assembly.assembler import Assembly

__all__ = ["Call", "Desk", "Hooks", "Operation", "Requester", "finish", "mark_span", "open_call"]

logger = logging.getLogger("context_engine.engine")

Operation = Literal["project", "compact", "recover_overflow"]
Requester = Literal["user", "agent"]
"""Who asked for a ``compact``: the user (``/compact``) or the agent (`CompactTool`)."""
Hook = Callable[[RewriteEvent], Any]


@attrs.frozen
class Hooks:
    """The caller's hooks, read from the engine when the call starts."""

    on_project: Hook | None = None
    on_recover: Hook | None = None
    on_compact: Hook | None = None
    on_strategy: Callable[[str], Any] | None = None

    def as_tuple(self) -> tuple[object, ...]:
        """The hooks in constructor order (to tell whether the engine's changed)."""
        return (self.on_project, self.on_recover, self.on_compact, self.on_strategy)

    def for_operation(self, operation: Operation) -> Hook | None:
        """The hook fired with the event of ``operation``."""
        if operation == "project":
            return self.on_project
        return self.on_compact if operation == "compact" else self.on_recover


@attrs.frozen(kw_only=True)
class Call:
    """Everything one call of `ContextEngine` knows, fixed when it starts.

    Attributes:
        operation: ``project``, ``compact`` or ``recover_overflow``.
        reason: Why strategies run (``circuit_breaker`` when the open breaker
            keeps the LLM strategies out of this `project`).
        transcript: The caller's messages, as a tuple.
        estimate: The transcript's estimate.
        threshold: The tokens the view must end at or under (below the
            engine's threshold in a recovery).
        llm_blocked: Why LLM strategies may not run: None when they may, ``""``
            when they are left out silently (the transcript has not grown since
            they last failed to fit it), or the reason recorded on their steps
            (the breaker is open, or the per-request cap is reached). They are
            also left out when the floor of the view they would get is above
            the threshold (`Outcome.floor`).
        failures: The breaker's count when the call started.
        settings: The engine's settings when the call started.
        meter: The engine's meter (estimates and floors of views).
        assembly: The providers' blocks for this call (counted in ``estimate``
            as overhead; placed into the view at the exit), or None.
        requested_by: Who asked for a ``compact``: an agent's request is
            bounded by the breaker and the per-request cap, and counted by them.
    """

    operation: Operation
    reason: RewriteReason
    transcript: tuple[Message, ...] = attrs.field(repr=False)
    estimate: UsageEstimate
    threshold: int
    llm_blocked: str | None
    failures: int
    settings: Settings = attrs.field(repr=False)
    meter: Meter = attrs.field(repr=False)
    assembly: Assembly | None = attrs.field(default=None, repr=False)
    requested_by: Requester = "user"

    @property
    def fits(self) -> bool:
        """The transcript already fits."""
        return self.estimate.tokens <= self.threshold

    @property
    def window(self) -> int:
        """The model's window."""
        return self.settings.window

    @property
    def limit(self) -> int:
        """The engine's threshold (``threshold`` is lower in a recovery)."""
        return self.settings.threshold

    def budget(self) -> Budget:
        """What the strategies work against (built by a call that rewrites, not one that fits)."""
        settings, meter = self.settings, self.meter
        return Budget(
            tokens=self.estimate.tokens,
            window=settings.window,
            threshold=self.threshold,
            counter=meter.counter,
            measure=meter.measurer(self.transcript, self.estimate),
            overhead_tokens=meter.overhead_tokens + (self.assembly.tokens if self.assembly else 0),
            reason="threshold" if self.reason == "circuit_breaker" else self.reason,
            archiving=settings.archiving,
            max_user_share=settings.max_user_share,
            pinned=settings.pinned,
        )

    def floor_of(self, view: tuple[Message, ...], tokens: int) -> int:
        """The tokens no strategy may remove from ``view`` measured at ``tokens``.

        The leading block, the newest user message and the protected tail as
        they stand in that view, on the estimate's scale.
        """
        return self.meter.view_floor(view, tokens, self.threshold, self.settings.max_user_share)

    @property
    def tier_due(self) -> bool:
        """A `project` at or above a proactive trigger but within the threshold."""
        trigger = self.settings.proactive_at
        return (
            self.operation == "project"
            and trigger is not None
            and trigger <= self.estimate.tokens <= self.threshold
        )

    @property
    def capped(self) -> bool:
        """The per-request cap keeps the LLM strategies out of this call."""
        limit = self.settings.max_llm_rewrites
        return limit is not None and self.llm_blocked == cap_reached(limit)

    def llm_refusal(self, strategy: Strategy) -> str | None:
        """None when ``strategy`` may run; else why not (``""``: without a record)."""
        return self.llm_blocked if strategy.uses_llm else None

    def unchanged(self) -> Outcome:
        """The outcome of a call that rewrote nothing."""
        return Outcome(view=self.transcript, tokens=self.estimate.tokens)


def open_call(
    operation: Operation,
    transcript: tuple[Message, ...],
    settings: Settings,
    session: Session,
    meter: Meter,
    telemetry: Telemetry,
    error: BaseException | str | None = None,
    assembly: Assembly | None = None,
    requested_by: Requester = "user",
) -> Call:
    """The facts of one call, fixed before any strategy runs.

    A recovery aims below the size the provider rejected; a `project` leaves
    the LLM strategies out while the breaker is open, or silently while the
    transcript has not grown since they last failed to fit it, and once the
    current request has had its ``max_llm_rewrites_per_request`` (`RequestCap`).
    A ``compact`` the agent asked for is refused on the same two grounds (an
    open breaker is not moved on by it: the cool-down counts ``project`` calls).
    """
    estimate = meter.estimate(transcript, session.seen())
    if assembly is not None and assembly.tokens:  # the provider blocks are overhead of this call
        estimate = attrs.evolve(
            estimate,
            tokens=estimate.tokens + assembly.tokens,
            trailing_tokens=estimate.trailing_tokens + assembly.tokens,
        )
    threshold = settings.threshold
    failures = session.breaker.failures  # before a skip ends the cool-down
    reason: RewriteReason = "threshold"
    blocked: str | None = None
    if operation == "project":
        if session.breaker.should_skip():
            blocked, reason = BREAKER_OPEN, "circuit_breaker"
            if session.breaker.state != "open":  # this skip ended the cool-down
                telemetry.breaker_moved(opened=False)
        elif not session.grown_since_stall(estimate.tokens, threshold):
            blocked = ""
    elif operation == "compact":
        reason = "manual"
        if requested_by == "agent":
            blocked = agent_refusal(transcript, settings, session)
    else:
        reason = "overflow"
        rejected = estimate.tokens
        last = session.last
        if last is not None and last.input == transcript:  # the prompt it rejected
            rejected = min(rejected, last.estimate.tokens)
        threshold = recovery_target(rejected, settings.window, threshold, error)
    proactive = settings.proactive_at is not None and estimate.tokens >= settings.proactive_at
    if blocked is None and operation == "project" and (estimate.tokens > threshold or proactive):
        # The per-request cap; a recovery is counted but never capped (its view must fit).
        blocked = session.requests.refusal(transcript, settings.max_llm_rewrites)
    return Call(
        operation=operation,
        reason=reason,
        transcript=transcript,
        estimate=estimate,
        threshold=threshold,
        llm_blocked=blocked,
        failures=failures,
        settings=settings,
        meter=meter,
        assembly=assembly,
        requested_by=requested_by,
    )


def agent_refusal(
    transcript: tuple[Message, ...], settings: Settings, session: Session
) -> str | None:
    """Why a compaction the agent asked for may not call the LLM now, or None."""
    if session.breaker.state == "open":
        return BREAKER_OPEN
    return session.requests.refusal(transcript, settings.max_llm_rewrites)


@attrs.frozen
class Desk:
    """What `finish` works with besides the call: the engine's parts, not the engine."""

    session: Session
    meter: Meter
    telemetry: Telemetry
    hooks: Hooks


async def finish(
    call: Call, outcome: Outcome, desk: Desk
) -> Projection | CompactResult | RecoveryResult:
    """Turn ``outcome`` into the call's result: the one way out of every public call.

    Raises:
        CompactionError: a manual ``compact`` wrote no checkpoint because a
            strategy failed; ``.view`` fits whenever the floor does.
    """
    if call.operation == "compact" and (outcome.forced_failed or outcome.unarchived):
        failures = 0
        if call.requested_by == "agent":  # the agent may ask again: its failures open the breaker
            if outcome.llm_failed:
                _count_failure(desk)
            failures = desk.session.breaker.failures
        raise _compact_failed(outcome, failures)
    previous, previous_marks = desk.session.last, desk.session.marks
    if (
        call.reason == "threshold"
        and call.fits
        and call.assembly is None
        and not call.settings.native
        and not outcome.steps
        and not outcome.reused
    ):
        # The common case (a `project` that fits): the input is the new baseline, no report.
        placed = _placed(call, outcome.view, previous, previous_marks)
        served = _served(call, desk.session, outcome.view, placed)
        usage = _remember(call, outcome, call.estimate, None, desk, served)
        if usage.cache is not None:
            _count_cost(call, usage.cache, desk)
        messages = _with_breakpoints(call, outcome.view, desk, previous, previous_marks, placed)
        return Projection(messages=messages, usage=usage, changed=False)
    floor = outcome.floor
    if floor is None and outcome.tokens > call.threshold:
        floor = call.floor_of(outcome.view, outcome.tokens)
    futile = floor is not None and floor > call.threshold
    commit = _commit(call, outcome)
    _settle_breaker(call, outcome, desk, futile)
    view_estimate = desk.meter.estimate_outcome(
        call.transcript, call.estimate, outcome.view, outcome.tokens
    )
    cached_before, served = 0, 0
    if call.settings.pricing is not None:
        cached_before, served = cache_reads(
            call.settings, call.meter, desk.session, call.transcript, outcome.view
        )
    usage = _remember(call, outcome, view_estimate, commit, desk, served)
    if usage.cache is not None:
        _count_cost(call, usage.cache, desk)
    view, trace = _assembled(call, outcome, desk)
    view = _with_breakpoints(call, view, desk, previous, previous_marks)
    for step in outcome.steps:
        if step.applied:
            saved = step.tokens_before - step.tokens_after
            desk.telemetry.rewrite(step.name, _metric_reason(call), saved)
    event = None
    if not outcome.reused and _worth_an_event(call, outcome, usage, futile):
        floor_tokens = (floor or 0) if futile else 0
        event = _event(call, outcome, usage, commit, desk.session, floor_tokens, view, trace)
        event = priced(event, call, cached_before, served)
        _count_break(call, event, desk)
        _log(event)
        label = "on_recover" if call.operation == "recover_overflow" else f"on_{call.operation}"
        await call_hook(label, desk.hooks.for_operation(call.operation), event)
    fields: dict[str, Any] = {
        "messages": view,
        "trace": trace,
        "usage": usage,
        "changed": outcome.changed,
        "strategy": outcome.last_applied
        or ("circuit_breaker" if call.reason == "circuit_breaker" else None),
        "event": event,
        "commit": commit,
        "request_options": request_options_for(call.settings.native, view),
    }
    if call.operation == "project":
        return Projection(**fields)
    if call.operation == "compact":
        return CompactResult(**fields, info=outcome.info)
    return RecoveryResult(**fields, info=outcome.info)


def _assembled(
    call: Call, outcome: Outcome, desk: Desk
) -> tuple[tuple[Message, ...], AssemblyTrace]:
    """The view handed to the model and the call's trace.

    Context assembly's one exit hook: the provider blocks join the view here,
    after the strategies ran on the transcript and after the session
    remembered the transcript's view, so they are never committed, archived
    or summarized.
    """
    if call.assembly is None and not outcome.removed:
        return outcome.view, EMPTY_TRACE
    archived = call.settings.archiving and outcome.unarchived is None  # references exist
    rewrites = removal_decisions(
        outcome.removed, desk.meter.counter, outcome.info is not None, archived
    )
    if call.assembly is None:
        return outcome.view, AssemblyTrace(decisions=rewrites)
    return call.assembly.finish(outcome.view, rewrites)


def _served(
    call: Call, session: Session, view: tuple[Message, ...], placed: tuple[Message, ...] | None
) -> int:
    """Tokens of ``view`` the provider's cache serves (`served_tokens`); 0 without pricing.

    ``placed`` is ``view`` with the engine's breakpoints (`_placed`), or None.
    """
    if call.settings.pricing is None:
        return 0
    return served_tokens(call.settings, call.meter, session, view, placed=placed)


def _count_cost(call: Call, cache: CacheEstimate, desk: Desk) -> None:
    """Count a view's modelled cache reads, writes and cost, when it is sent to a model.

    A compaction's view is not sent itself: the next ``project`` counts it.
    """
    pricing = call.settings.pricing
    if pricing is not None and call.operation != "compact":
        desk.telemetry.prompt_cost(call.operation, pricing.family, cache)


def _count_break(call: Call, event: RewriteEvent, desk: Desk) -> None:
    """Count a rewrite that invalidated cached tokens, when the engine has a pricing."""
    pricing = call.settings.pricing
    if pricing is not None and event.cost is not None:
        reason = _metric_reason(call)
        desk.telemetry.cache_break(event.strategy, reason, pricing.family, event.cost)


def _placed(
    call: Call,
    view: tuple[Message, ...],
    previous: Remembered | None,
    previous_marks: tuple[int, ...] | None,
) -> tuple[Message, ...] | None:
    """``view`` with the engine's Anthropic breakpoints, or None when ``cache_breakpoints`` is off.

    Provider blocks placed into the view (context assembly) shift its indices:
    the last request's breakpoints are not aligned with it then.
    """
    if not call.settings.cache_breakpoints or not view:
        return None
    aligned = previous if call.assembly is None else None
    return request_view(call.settings, call.meter, view, aligned, previous_marks)


def _with_breakpoints(
    call: Call,
    view: tuple[Message, ...],
    desk: Desk,
    previous: Remembered | None,
    previous_marks: tuple[int, ...] | None,
    placed: tuple[Message, ...] | None = None,
) -> tuple[Message, ...]:
    """``view`` with the engine's Anthropic breakpoints, when ``cache_breakpoints`` is on.

    ``placed`` is that view when the call placed them already (`_placed`).
    Where they went is remembered (`Session.marks`) when the session remembered
    this view: the next call keeps the entry they wrote in reach, and the
    cost-aware engine prices its rewrites by it; not for an assembled view.
    """
    if placed is None:
        placed = _placed(call, view, previous, previous_marks)
    if placed is None:
        return view
    if desk.session.last is not previous:
        desk.session.marks = marked(placed) if call.assembly is None else None
    return placed


def _metric_reason(call: Call) -> str:
    return "threshold" if call.reason == "circuit_breaker" else call.reason


def _commit(call: Call, outcome: Outcome) -> tuple[Message, ...] | None:
    """What the caller should keep: never a view whose originals the archive did not take."""
    if outcome.unarchived is not None or outcome.reused or not outcome.changed:
        return None
    if call.operation == "project":
        view = outcome.view_after_last(call.settings.commit_strategies)
    else:
        view = outcome.view
    if view is None:
        return None
    # What a last resort cut for this view only is committed whole (`whole_for_commit`).
    cut = [m for removal in outcome.removed if removal.kind == "text" for m in removal.originals]
    return whole_for_commit(view, call.transcript, cut)


def _settle_breaker(call: Call, outcome: Outcome, desk: Desk, futile: bool) -> None:
    """Count the call once on the breaker and its LLM rewrites on the request; note a stall."""
    session = desk.session
    by_agent = call.requested_by == "agent"
    if (call.operation != "compact" or by_agent) and not outcome.reused:
        session.requests.record(call.transcript, outcome.llm_rewrites)
    if call.operation == "project" or by_agent:
        if outcome.llm_failed:
            _count_failure(desk)
        elif outcome.llm_applied and not outcome.reused:
            _close(desk)
    if call.operation == "project":
        ran = call.llm_blocked is None and not futile and not outcome.llm_failed
        if ran and outcome.tokens > call.threshold:
            session.stalled_at = call.estimate.tokens
    elif call.operation == "recover_overflow" and outcome.changed and not outcome.llm_failed:
        _close(desk)


def _count_failure(desk: Desk) -> None:
    if desk.session.breaker.record_failure():
        desk.telemetry.breaker_moved(opened=True)


def _close(desk: Desk) -> None:
    breaker = desk.session.breaker
    if breaker.state == "open":
        desk.telemetry.breaker_moved(opened=False)
    breaker.record_success()


def _remember(
    call: Call,
    outcome: Outcome,
    view_estimate: UsageEstimate,
    commit: tuple[Message, ...] | None,
    desk: Desk,
    served: int,
) -> ContextUsage:
    """Make the call's view the session's last view (a forced no-op leaves it); return its usage.

    ``served``: tokens of the view the provider's cache serves (`served_tokens`).
    """
    scope: Scope | None
    if outcome.changed:
        if call.operation == "project":
            scope = "committed" if commit is not None else "projected"
        else:
            scope = "committed" if call.operation == "compact" else "recovered"
    elif call.operation == "project":
        scope = "skipped" if call.reason == "circuit_breaker" else "baseline"
    else:
        scope = None
    stable, reused = desk.session.prefix(desk.meter, outcome.view)
    if scope is not None:
        desk.session.remember(
            Remembered(
                scope,
                outcome.view,
                view_estimate,
                outcome if outcome.changed else None,
                call.transcript,
                call.estimate,
                stable,
                reused,
            )
        )
    return usage_of(view_estimate, call, stable, reused, served)


def usage_of(
    estimate: UsageEstimate,
    call: Call,
    stable: bool | None = None,
    reused: int = 0,
    served: int = 0,
) -> ContextUsage:
    """The `ContextUsage` of a view estimated at ``estimate`` in ``call``.

    ``reused`` is what the view shares with the last one; ``served`` what of
    it the provider's cache serves (`served_tokens`), which the cache estimate reads.
    """
    pricing = call.settings.pricing
    return ContextUsage(
        tokens=estimate.tokens,
        context_window=call.window,
        threshold=call.limit,
        usage_tokens=estimate.usage_tokens,
        trailing_tokens=estimate.trailing_tokens,
        prefix_stable=stable,
        prefix_reused_tokens=reused,
        cache=None if pricing is None else estimate_call(pricing, estimate.tokens, served),
    )


def _worth_an_event(call: Call, outcome: Outcome, usage: ContextUsage, futile: bool) -> bool:
    """A rewrite, and also a call the caller must hear about: futile, failed, or open breaker."""
    if outcome.changed or futile or outcome.errors:
        return True
    return call.operation == "project" and (not usage.fits or call.reason == "circuit_breaker")


def _event(
    call: Call,
    outcome: Outcome,
    usage: ContextUsage,
    commit: tuple[Message, ...] | None,
    session: Session,
    floor: int,
    view: tuple[Message, ...],
    trace: AssemblyTrace,
) -> RewriteEvent:
    """The call's report: ``view`` is what the model is sent (provider blocks placed)."""
    breaker_skip = call.reason == "circuit_breaker"
    return RewriteEvent(
        reason=call.reason,
        strategy=outcome.last_applied or ("circuit_breaker" if breaker_skip else "none"),
        changed=outcome.changed,
        committed=commit is not None,
        tokens_before=call.estimate.tokens,
        tokens_after=outcome.tokens,
        info=outcome.info,
        steps=outcome.steps,
        view=view,
        trace=trace,
        failures=call.failures if breaker_skip else session.breaker.failures,
        futile=floor > 0,
        floor_tokens=floor,
        prefix_stable=usage.prefix_stable,
        prefix_reused_tokens=usage.prefix_reused_tokens,
        references=outcome.references
        if call.settings.archiving and outcome.unarchived is None
        else (),
        reasoning_tokens_dropped=outcome.reasoning_dropped,
    )


def _log(event: RewriteEvent) -> None:
    errors = [f"{step.name}: {step.error}" for step in event.steps if step.error]
    # Past the per-request cap every call of a long request skips the summary on purpose:
    # that is the cap working, not something an operator must look at.
    capped = all(s.error.startswith(CAP_REACHED) for s in event.steps if s.error)
    log = logger.warning if errors and not capped else logger.info
    log(
        "strategy=<%s> reason=<%s> tokens_before=<%d> tokens_after=<%d> committed=<%s> "
        "futile=<%s> failures=<%d> errors=<%s> | view rewritten",
        event.strategy,
        event.reason,
        event.tokens_before,
        event.tokens_after,
        event.committed,
        event.futile,
        event.failures,
        "; ".join(errors) or "none",
    )


def _compact_failed(outcome: Outcome, failures: int) -> CompactionError:
    """The error of a ``/compact`` that wrote no checkpoint the caller can keep.

    A compaction the agent asked for past the per-request cap or with the
    breaker open is refused (`CompactionRefusedError`, its reason the one the
    skipped step records); ``failures`` is the breaker's count for it (0 for
    the user's ``/compact``, which the breaker does not count).
    """
    refused = next((s.error for s in outcome.steps if is_deliberate_skip(s.error)), None)
    if refused is not None:
        return CompactionRefusedError(
            f"compaction refused: {refused}; .view is the input (made to fit when it "
            "was above the threshold), and nothing needs committing",
            view=outcome.view,
            strategy=next(s.name for s in outcome.steps if s.error == refused),
            failures=failures,
            reason=refused,
        )
    if outcome.forced_failed is not None:
        step = next(s for s in outcome.steps if s.name == outcome.forced_failed and s.error)
        name, why = step.name, f"{step.name} failed ({step.error})"
    else:
        name, why = "archive", f"the archive did not keep what it replaced ({outcome.unarchived})"
    return CompactionError(
        f"manual compaction wrote no checkpoint: {why}; .view is a view that fits, made "
        "without the summary, and nothing needs committing",
        view=outcome.view,
        strategy=name,
        failures=failures,
    )


def mark_span(span: Any, result: Projection | CompactResult, breaker: CircuitBreaker) -> None:
    """Put a call's result on its operation span (nothing when the span is not recording)."""
    if not span.is_recording():
        return
    event, cache = result.event, result.usage.cache
    set_attributes(
        span,
        {
            "context_engine.tokens_before": event.tokens_before if event else result.usage.tokens,
            "context_engine.tokens_after": result.usage.tokens,
            "context_engine.changed": result.changed,
            "context_engine.committed": result.commit is not None,
            "context_engine.strategy": result.strategy,
            "context_engine.reason": event.reason if event else None,
            "context_engine.futile": bool(event and event.futile),
            "context_engine.breaker.state": breaker.state,
            "context_engine.breaker.failures": breaker.failures,
            "context_engine.prefix_stable": result.usage.prefix_stable,
            "context_engine.prefix_reused_tokens": result.usage.prefix_reused_tokens,
            "context_engine.reasoning_tokens_dropped": event.reasoning_tokens_dropped
            if event
            else 0,
            "context_engine.cache.cached_tokens": cache.cached_tokens if cache else None,
            "context_engine.cache.cost": cache.cost if cache else None,
        },
    )
