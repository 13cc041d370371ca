"""The driver that runs strategies in order against a budget and records each step."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

import attrs

from context_engine._aio import call_hook
from context_engine.events import RewriteStep, SummaryInfo
from context_engine.messages import Message
from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    Removal,
    Strategy,
    StrategyResult,
)
from context_engine.telemetry import current_telemetry, set_attributes

__all__ = ["PipelineFailure", "PipelineOutcome", "run_forced", "run_pipeline"]


@attrs.frozen
class PipelineOutcome:
    """What a pipeline run produced."""

    view: tuple[Message, ...]
    tokens: int
    steps: tuple[RewriteStep, ...]
    applied: tuple[str, ...]
    info: SummaryInfo | None
    removed: tuple[Removal, ...]
    """What the applied strategies removed, one `Removal` per reference, in run order."""
    views: tuple[tuple[Message, ...], ...] = ()
    """The view after each applied strategy, in the order of ``applied``."""

    @property
    def changed(self) -> bool:
        """Whether any strategy rewrote the view."""
        return bool(self.applied)

    @property
    def references(self) -> tuple[str, ...]:
        """The references of ``removed``, each once."""
        return tuple(dict.fromkeys(removal.reference for removal in self.removed))

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


class PipelineFailure(Exception):
    """A strategy raised; carries the best view reached before it."""

    def __init__(self, outcome: PipelineOutcome, strategy: str) -> None:
        super().__init__(strategy)
        self.outcome = outcome
        self.strategy = strategy


@attrs.define
class _Run:
    view: tuple[Message, ...]
    budget: Budget
    steps: list[RewriteStep] = attrs.field(factory=list)
    applied: list[str] = attrs.field(factory=list)
    info: SummaryInfo | None = None
    removed: list[Removal] = attrs.field(factory=list)
    views: list[tuple[Message, ...]] = attrs.field(factory=list)

    def outcome(self) -> PipelineOutcome:
        return PipelineOutcome(
            view=self.view,
            tokens=self.budget.tokens,
            steps=tuple(self.steps),
            applied=tuple(self.applied),
            info=self.info,
            removed=tuple(self.removed),
            views=tuple(self.views),
        )

    async def step(
        self,
        strategy: Strategy,
        on_strategy: Callable[[str], Any] | None,
        call: Callable[[], Awaitable[StrategyResult]],
    ) -> bool:
        """Run one strategy; fold its result into the run; return whether it applied."""
        name = strategy.name
        finish = await call_hook("on_strategy", on_strategy, name)
        before = self.budget.tokens
        started = time.perf_counter()
        telemetry = current_telemetry()
        span_scope = telemetry.strategy(name, before) if telemetry else contextlib.nullcontext()
        try:
            with span_scope as span:
                result = await call()
                after = _checked(name, result, self.budget)
                if span is not None:
                    set_attributes(
                        span,
                        {
                            "context_engine.strategy.applied": result.applied,
                            "context_engine.tokens_after": after,
                            "context_engine.strategy.error": result.error,
                        },
                    )
        except Exception as exc:
            self.steps.append(
                RewriteStep(
                    name=name,
                    applied=False,
                    tokens_before=before,
                    tokens_after=before,
                    duration=time.perf_counter() - started,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            raise PipelineFailure(self.outcome(), name) from exc
        finally:
            if callable(finish):
                await call_hook("on_strategy finish", finish)
        if result.applied:
            self.view = result.messages
            self.budget = self.budget.with_tokens(after)
            self.applied.append(name)
            self.views.append(self.view)
            self.removed.extend(result.removed)
            if result.info is not None:
                self.info = result.info
        self.steps.append(
            RewriteStep(
                name=name,
                applied=result.applied,
                tokens_before=before,
                tokens_after=after,
                duration=time.perf_counter() - started,
                error=result.error,
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
    strategies: Sequence[Strategy],
    transcript: tuple[Message, ...],
    view: tuple[Message, ...],
    budget: Budget,
    *,
    on_strategy: Callable[[str], Any] | None,
    allow: Callable[[Strategy], bool],
) -> PipelineOutcome:
    """Run ``strategies`` in order while the view is above the threshold.

    Raises:
        PipelineFailure: a strategy raised; chained to its exception.
    """
    run = _Run(view=view, budget=budget)
    for strategy in strategies:
        if run.budget.tokens <= run.budget.threshold:
            break
        if not allow(strategy):
            continue
        await run.step(
            strategy, on_strategy, partial(strategy.apply, transcript, run.view, run.budget)
        )
    return run.outcome()


async def run_forced(
    strategies: Sequence[Strategy],
    transcript: tuple[Message, ...],
    budget: Budget,
    *,
    on_strategy: Callable[[str], Any] | None,
    instructions: str | None,
) -> PipelineOutcome:
    """Run the force-capable strategies on the full transcript; the first that applies wins.

    Raises:
        PipelineFailure: a strategy raised; chained to its exception.
    """
    run = _Run(view=transcript, budget=budget)
    for strategy in strategies:
        if not isinstance(strategy, ForceCompactionStrategy):
            continue
        call = partial(
            strategy.force_apply, transcript, transcript, budget, instructions=instructions
        )
        applied = await run.step(strategy, on_strategy, call)
        if applied:
            break
    return run.outcome()
