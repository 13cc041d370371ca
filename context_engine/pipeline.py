"""Runs strategies in order against one `Call` and records each step.

A strategy that raises does not stop the run: its step records the error and
the next strategy runs, so a summarizer outage still ends in a view that fits
(the deterministic strategies come after it). Whether a failure counts on the
circuit breaker is the caller's decision, made once per call from
`Outcome.llm_failed`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs

from context_engine._aio import call_hook
from context_engine.errors import ArchiveCodecError
from context_engine.events import RewriteStep, SummaryInfo
from context_engine.messages import Message
from context_engine.request_cap import CAP_REACHED
from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    Removal,
    Strategy,
    StrategyResult,
)
from context_engine.telemetry import current_telemetry, set_attributes

if TYPE_CHECKING:
    from context_engine.call import Call

__all__ = [
    "BREAKER_OPEN",
    "Outcome",
    "is_deliberate_skip",
    "run_forced",
    "run_pipeline",
    "run_unarchived",
]

BREAKER_OPEN = "circuit breaker open"
"""The error recorded on the step of an LLM strategy the open breaker skipped."""


def is_deliberate_skip(error: str | None) -> bool:
    """Whether a step's error says the engine chose not to run it (not a failure).

    The open breaker and the per-request cap record why an LLM strategy was
    left out; a report counting failures leaves those out.
    """
    return error is not None and (error == BREAKER_OPEN or error.startswith(CAP_REACHED))


@attrs.frozen
class Outcome:
    """What a pipeline run produced."""

    view: tuple[Message, ...]
    tokens: int
    steps: tuple[RewriteStep, ...] = ()
    applied: tuple[str, ...] = ()
    info: SummaryInfo | None = None
    removed: tuple[Removal, ...] = ()
    """What the applied strategies removed, one `Removal` per reference, in run order."""
    views: tuple[tuple[Message, ...], ...] = ()
    """The view after each applied strategy, in the order of ``applied``."""
    llm_failed: bool = False
    """An LLM strategy raised during the run (the breaker counts it once)."""
    llm_applied: bool = False
    """An LLM strategy rewrote the view (a success for the breaker)."""
    llm_rewrites: int = 0
    """How many LLM strategies rewrote the view (what the per-request cap counts)."""
    forced_failed: str | None = None
    """`run_forced` found no strategy that applied and this one raised."""
    unarchived: str | None = None
    """Why the archive did not take the originals this view removed (nothing to commit)."""
    codec_refused: str | None = None
    """The step error of the first strategy the archive codec refused (`ArchiveCodecError`)."""
    reused: bool = False
    """The last view plus new messages: no strategy ran, nothing to commit or report."""
    floor: int | None = None
    """The floor of the view the first LLM strategy would have got, when one was due."""
    reasoning_dropped: int = 0
    """Tokens of the thinking blocks dropped because the rewrite changed their prefix."""

    @property
    def changed(self) -> bool:
        """Whether any strategy rewrote the view."""
        return bool(self.applied)

    @property
    def last_applied(self) -> str | None:
        """The last strategy that applied, or None."""
        return self.applied[-1] if self.applied else None

    @property
    def references(self) -> tuple[str, ...]:
        """The references of ``removed``, each once."""
        return tuple(dict.fromkeys(removal.reference for removal in self.removed))

    @property
    def errors(self) -> bool:
        """Whether a step recorded an error."""
        return any(step.error for step in self.steps)

    def view_after_last(self, names: frozenset[str]) -> tuple[Message, ...] | None:
        """The view right after the last applied strategy named in ``names``, if any.

        That is what a caller may commit: strategies that ran after it (a last
        resort truncation) shaped this call's view only, and committing their
        cuts would lose messages no checkpoint covers.
        """
        for name, view in zip(reversed(self.applied), reversed(self.views), strict=True):
            if name in names:
                return view
        return None

    def then(self, other: Outcome) -> Outcome:
        """This run followed by ``other`` (which started from this run's view), as one."""
        return Outcome(
            view=other.view,
            tokens=other.tokens,
            steps=self.steps + other.steps,
            applied=self.applied + other.applied,
            info=other.info or self.info,
            removed=self.removed + other.removed,
            views=self.views + other.views,
            llm_failed=self.llm_failed or other.llm_failed,
            llm_applied=self.llm_applied or other.llm_applied,
            llm_rewrites=self.llm_rewrites + other.llm_rewrites,
            forced_failed=self.forced_failed or other.forced_failed,
            unarchived=self.unarchived or other.unarchived,
            codec_refused=self.codec_refused or other.codec_refused,
            floor=other.floor if other.floor is not None else self.floor,
        )


@attrs.define
class _Run:
    view: tuple[Message, ...]
    budget: Budget
    on_strategy: Callable[[str], Any] | None
    steps: list[RewriteStep] = attrs.field(factory=list)
    applied: list[str] = attrs.field(factory=list)
    info: SummaryInfo | None = None
    removed: list[Removal] = attrs.field(factory=list)
    views: list[tuple[Message, ...]] = attrs.field(factory=list)
    llm_failed: bool = False
    llm_applied: bool = False
    llm_rewrites: int = 0
    floor: int | None = None
    codec_refused: str | None = None

    def outcome(self) -> Outcome:
        return Outcome(
            view=self.view,
            tokens=self.budget.tokens,
            steps=tuple(self.steps),
            applied=tuple(self.applied),
            info=self.info,
            removed=tuple(self.removed),
            views=tuple(self.views),
            llm_failed=self.llm_failed,
            llm_applied=self.llm_applied,
            llm_rewrites=self.llm_rewrites,
            floor=self.floor,
            codec_refused=self.codec_refused,
        )

    def futile(self, call: Call, strategy: Strategy) -> bool:
        """Whether ``strategy`` costs a model call that cannot make this view fit.

        Measured once per run, on the view as the strategies before it left it
        (a capped tool result in the protected tail counts capped).
        """
        if not strategy.uses_llm:
            return False
        if self.floor is None:
            self.floor = call.floor_of(self.view, self.budget.tokens)
        return self.floor > self.budget.threshold

    def skip(self, strategy: Strategy, error: str) -> None:
        """Record a strategy that was not run, and why."""
        tokens = self.budget.tokens
        self.steps.append(
            RewriteStep(
                name=strategy.name,
                applied=False,
                tokens_before=tokens,
                tokens_after=tokens,
                duration=0.0,
                error=error,
            )
        )

    async def step(self, strategy: Strategy, call: Callable[[], Awaitable[StrategyResult]]) -> bool:
        """Run one strategy; fold its result into the run; return whether it applied."""
        name = strategy.name
        finish = await call_hook("on_strategy", self.on_strategy, name)
        before = self.budget.tokens
        started = time.perf_counter()
        try:
            with current_telemetry().strategy(name, before) as span:
                result = await call()
                after = _checked(name, result, self.budget)
                set_attributes(
                    span,
                    {
                        "context_engine.strategy.applied": result.applied,
                        "context_engine.tokens_after": after,
                        "context_engine.strategy.error": result.error,
                    },
                )
        except Exception as exc:
            self.llm_failed = self.llm_failed or strategy.uses_llm
            error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, ArchiveCodecError) and self.codec_refused is None:
                self.codec_refused = error
            self.steps.append(
                RewriteStep(
                    name=name,
                    applied=False,
                    tokens_before=before,
                    tokens_after=before,
                    duration=time.perf_counter() - started,
                    error=error,
                )
            )
            return False
        finally:
            if callable(finish):
                await call_hook("on_strategy finish", finish)
        if result.applied:
            self.view = result.messages
            self.budget = self.budget.with_tokens(after)
            self.applied.append(name)
            self.llm_applied = self.llm_applied or strategy.uses_llm
            self.llm_rewrites += strategy.uses_llm
            self.views.append(self.view)
            self.removed.extend(result.removed)
            if result.info is not None:
                self.info = result.info
        duration = time.perf_counter() - started
        self.steps.append(
            RewriteStep(
                name=name,
                applied=result.applied,
                tokens_before=before,
                tokens_after=after,
                duration=duration,
                error=result.error,
                rejected=result.info.rejected if result.info is not None else None,
            )
        )
        return result.applied


def _checked(name: str, result: object, budget: Budget) -> int:
    """Validate a strategy's result; return the measured tokens of its view."""
    if not isinstance(result, StrategyResult):
        raise TypeError(
            f"strategy {name!r} returned {type(result).__name__}, expected StrategyResult"
        )
    if not result.applied:
        return budget.tokens
    # One C-speed pass over the types; the per-item loop only runs to name a culprit.
    if not all(issubclass(kind, Message) for kind in set(map(type, result.messages))):
        for index, message in enumerate(result.messages):
            if not isinstance(message, Message):
                raise TypeError(
                    f"strategy {name!r} returned a view whose item {index} is a "
                    f"{type(message).__name__}, not a Message"
                )
    return budget.measure(result.messages)


async def run_pipeline(
    call: Call,
    strategies: Sequence[Strategy],
    view: tuple[Message, ...],
    budget: Budget,
    on_strategy: Callable[[str], Any] | None,
) -> Outcome:
    """Run ``strategies`` in order from ``view`` while it is above the budget's threshold.

    An LLM strategy the call does not allow (`Call.llm_refusal`) is recorded
    as a skipped step with the reason; the others always run.
    """
    run = _Run(view=view, budget=budget, on_strategy=on_strategy)
    for strategy in strategies:
        if run.budget.tokens <= run.budget.threshold:
            break
        refusal = call.llm_refusal(strategy)
        if refusal is not None:
            if refusal:
                run.skip(strategy, refusal)
            continue
        if run.futile(call, strategy):
            continue  # no summary is paid for when it cannot help
        await run.step(strategy, partial(strategy.apply, call.transcript, run.view, run.budget))
    return run.outcome()


async def run_forced(
    call: Call,
    strategies: Sequence[Strategy],
    budget: Budget,
    on_strategy: Callable[[str], Any] | None,
    instructions: str | None,
) -> Outcome:
    """Run the force-capable strategies on the full transcript; the first that applies wins."""
    run = _Run(view=call.transcript, budget=budget, on_strategy=on_strategy)
    for strategy in strategies:
        if not isinstance(strategy, ForceCompactionStrategy):
            continue
        refusal = call.llm_refusal(strategy)
        if refusal is not None:
            if refusal:
                run.skip(strategy, refusal)
            continue
        if call.operation == "recover_overflow" and run.futile(call, strategy):
            continue
        force = partial(strategy.force_apply, call.transcript, budget, instructions=instructions)
        if await run.step(strategy, force):
            return run.outcome()
    failed = next((step.name for step in run.steps if step.error), None)
    return attrs.evolve(run.outcome(), forced_failed=failed)


async def run_unarchived(
    call: Call, strategies: Sequence[Strategy], first: Outcome, error: str
) -> Outcome:
    """The deterministic strategies again, without archiving, after the store failed.

    Their placeholders name no reference the store lacks; ``first``'s failed
    steps stay on record (an LLM failure in it still counts once), what it
    applied is discarded with its view, and the outcome says why nothing may
    be committed (`Outcome.unarchived`).
    """
    budget = attrs.evolve(call.budget(), archiving=False, archive_down=True)
    offline = attrs.evolve(call, llm_blocked="")
    kept = [s for s in strategies if not s.uses_llm]
    outcome = await run_pipeline(offline, kept, call.transcript, budget, None)
    step = RewriteStep(
        name="archive",
        applied=False,
        tokens_before=call.estimate.tokens,
        tokens_after=outcome.tokens,
        duration=0.0,
        error=error,
    )
    return attrs.evolve(
        outcome,
        steps=(*(s for s in first.steps if s.error), step, *outcome.steps),
        unarchived=error,
        llm_failed=first.llm_failed,
        forced_failed=first.forced_failed,
    )
