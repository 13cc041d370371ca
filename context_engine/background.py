"""Background checkpoints: written while the agent works, swapped in at the threshold.

With a `BackgroundSummary` in the pipeline, a `project` whose view passed the
pre-trigger leaves one task behind (`look_ahead`): the summary's
``force_apply`` on the call's transcript, held in the engine's `Session` as a
`Precompute`. The next `project` that is above the threshold (and is not
served by the last view plus the new messages) asks `swap_in` before any
strategy runs. The precomputed checkpoint goes in only while it is valid for
that call's transcript:

* the transcript still starts with the messages it was written from (a
  commit, an edited or removed message, a reset: discarded);
* the transcript grew by at most ``max_growth_share`` of the threshold since
  it started (past that: discarded, and the pipeline runs as without it);
* the threshold and the event loop are the ones it started under.

The view is then the precomputed view plus the messages appended since, one
step of the summary's name. A checkpoint still being written is waited for:
writing a new one would take longer. When the view is still above the
threshold, the pipeline goes on from it (`rewrite`), and its summary step
updates the swapped checkpoint incrementally.

Nothing here raises into a call. A precompute that raised is reported at the
call that would have used it, as a failed step of the summary that counts once
on the breaker, like a summary failing there. Blocking calls start none: the
private loop of a blocking twin runs only while a call does.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import TYPE_CHECKING

import attrs

from context_engine._aio import in_blocking_call
from context_engine.events import RewriteStep
from context_engine.messages import Message
from context_engine.meter import starts_with
from context_engine.pipeline import Outcome
from context_engine.strategies.background import BackgroundSummary
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.telemetry import Telemetry

if TYPE_CHECKING:
    from context_engine.call import Call
    from context_engine.session import Session

__all__ = ["Background", "Precompute", "look_ahead", "swap_in"]

logger = logging.getLogger("context_engine.engine")

# Tasks still running: the event loop keeps weak references only, and an engine
# dropped without `close` must not have its task collected half-way.
_RUNNING: set[asyncio.Task[StrategyResult]] = set()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


@attrs.define(eq=False)
class Precompute:
    """One checkpoint being written, or written, in the background.

    Attributes:
        task: Runs the summary's ``force_apply``; its result is a `StrategyResult`.
        transcript: The transcript it is written from.
        tokens: That transcript's estimate.
        threshold: The engine's threshold when it started.
    """

    task: asyncio.Task[StrategyResult]
    transcript: tuple[Message, ...] = attrs.field(repr=False)
    tokens: int
    threshold: int

    def stale(self, call: Call, limit: int) -> str | None:
        """Why this checkpoint may not go into ``call``'s view (None: it may).

        ``limit``: the tokens the transcript may have grown by since it started.
        """
        if self.task.get_loop() is not _running_loop():
            return "it runs on another event loop"
        if self.threshold != call.limit:
            return "the threshold changed"
        if not starts_with(call.transcript, self.transcript):
            return "the transcript no longer starts with the messages it was written from"
        grown = call.estimate.tokens - self.tokens
        if grown > limit:
            return f"the transcript grew by {grown} tokens since it started (at most {limit})"
        return None

    def cancel(self) -> None:
        """Cancel the task unless it is done (from any thread; a closed loop has none running)."""
        loop = self.task.get_loop()
        if self.task.done() or loop.is_closed():
            return
        if loop is _running_loop():
            self.task.cancel()
        else:
            loop.call_soon_threadsafe(self.task.cancel)


@attrs.define
class Background:
    """The checkpoint one engine writes ahead of time: at most one, held between calls."""

    held: Precompute | None = None

    def start(self, strategy: BackgroundSummary, call: Call, telemetry: Telemetry) -> None:
        """Start writing ``strategy``'s checkpoint of ``call``'s transcript; return at once."""
        # The call's measurer shares prefix sums the next call extends in place.
        measure = call.meter.measurer(call.transcript, call.estimate, detached=True)
        budget = attrs.evolve(call.budget(), measure=measure)
        work = _write(strategy, call.transcript, budget, telemetry)
        loop = asyncio.get_running_loop()
        # A context of its own: the call's span, telemetry and shape memo end with the call.
        task: asyncio.Task[StrategyResult] = contextvars.Context().run(loop.create_task, work)
        _RUNNING.add(task)
        task.add_done_callback(_finished)
        self.held = Precompute(task, call.transcript, call.estimate.tokens, call.limit)
        logger.info(
            "strategy=<%s> tokens=<%d> | background checkpoint started",
            strategy.name,
            call.estimate.tokens,
        )

    def discard(self, why: str) -> None:
        """Drop the checkpoint held (cancelled when still being written)."""
        held, self.held = self.held, None
        if held is None:
            return
        logger.info("reason=<%s> | background checkpoint discarded", why)
        held.cancel()

    async def close(self) -> None:
        """Cancel the checkpoint being written, if any, and wait until its task has ended."""
        held, self.held = self.held, None
        if held is None or held.task.done():
            return
        held.cancel()
        if held.task.get_loop() is _running_loop():
            await asyncio.wait((held.task,))


async def _write(
    strategy: BackgroundSummary,
    transcript: tuple[Message, ...],
    budget: Budget,
    telemetry: Telemetry,
) -> StrategyResult:
    summary = strategy.summary
    with telemetry.background(summary.name, budget.tokens):
        result = await summary.force_apply(transcript, budget)
    if not isinstance(result, StrategyResult):
        raise TypeError(
            f"strategy {summary.name!r} returned {type(result).__name__}, expected StrategyResult"
        )
    return result


def _finished(task: asyncio.Task[StrategyResult]) -> None:
    """Forget a task that ended; log its failure once (also when nobody asks for it)."""
    _RUNNING.discard(task)
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.warning("error=<%s: %s> | background checkpoint failed", type(error).__name__, error)


def _may_start(call: Call, session: Session) -> bool:
    """Whether the summary may run for ``call``'s transcript: breaker, cap, stall.

    A call that has just counted a failure starts none: it had its attempt.
    """
    breaker = session.breaker
    if call.llm_blocked is not None or breaker.state == "open" or breaker.failures > call.failures:
        return False
    if session.requests.refusal(call.transcript, call.settings.max_llm_rewrites) is not None:
        return False
    return session.grown_since_stall(call.estimate.tokens, call.threshold)


def look_ahead(
    call: Call, tokens: int, committed: bool, session: Session, telemetry: Telemetry
) -> None:
    """After a call whose view is ``tokens``: start the next checkpoint past the pre-trigger.

    A commit discards the checkpoint held (the caller's transcript will not
    start with what it was written from); one still valid for this
    transcript is kept, a stale one replaced.
    """
    strategy = call.settings.background
    assert strategy is not None
    background = session.background
    if committed:
        background.discard("a commit replaced the transcript")
        return
    if call.operation != "project" or not call.settings.background_at <= tokens <= call.threshold:
        return
    held = background.held
    if held is not None:
        why = held.stale(call, strategy.growth_limit(call.limit))
        if why is None:
            return  # written, or being written, for this transcript
        background.discard(why)
    if not _may_start(call, session) or in_blocking_call():
        return
    try:
        background.start(strategy, call, telemetry)
    except Exception:  # the call already has its view: a checkpoint not started is no failure
        logger.exception("strategy=<%s> | background checkpoint not started", strategy.name)


async def swap_in(call: Call, background: Background, budget: Budget) -> Outcome | None:
    """``call``'s view with the precomputed checkpoint, when one is held and still valid.

    Waits for one still being written. None when there is nothing to swap in
    (the pipeline runs as without it); an outcome with a failed step when the
    precompute raised.
    """
    held = background.held
    strategy = call.settings.background
    if held is None or strategy is None or call.llm_blocked is not None:
        return None
    why = held.stale(call, strategy.growth_limit(call.limit))
    if why is not None:
        background.discard(why)
        return None
    started = time.perf_counter()
    if not held.task.done():
        await asyncio.wait((held.task,))  # a cancelled call leaves it running, still held
    waited = time.perf_counter() - started
    if background.held is held:
        background.held = None  # used once, whatever it holds
    if held.task.cancelled():
        return None
    error = held.task.exception()
    if error is not None:
        return _failed(call, strategy, error, waited)
    result = held.task.result()
    if not result.applied:
        return None
    return _swapped(call, strategy, held, result, budget, waited)


def _swapped(
    call: Call,
    strategy: BackgroundSummary,
    held: Precompute,
    result: StrategyResult,
    budget: Budget,
    waited: float,
) -> Outcome | None:
    """The precomputed view plus what was appended since, as one step of the summary."""
    appended = call.transcript[len(held.transcript) :]
    view = result.messages + appended
    tokens = budget.measure(view)
    if tokens >= call.estimate.tokens:
        return None  # nothing gained: the pipeline decides
    info = result.info
    if info is not None:
        info = attrs.evolve(
            info,
            tokens_before=call.estimate.tokens,
            tokens_after=tokens,
            messages_before=len(call.transcript),
            messages_after=len(view),
            kept_count=info.kept_count + len(appended),
            background=True,
        )
    step = RewriteStep(
        name=strategy.name,
        applied=True,
        tokens_before=call.estimate.tokens,
        tokens_after=tokens,
        duration=waited,
        rejected=info.rejected if info is not None else None,
    )
    logger.info(
        "strategy=<%s> tokens_before=<%d> tokens_after=<%d> waited=<%.3f> | "
        "background checkpoint swapped in",
        strategy.name,
        call.estimate.tokens,
        tokens,
        waited,
    )
    return Outcome(
        view=view,
        tokens=tokens,
        steps=(step,),
        applied=(strategy.name,),
        info=info,
        removed=result.removed,
        views=(view,),
        llm_applied=strategy.uses_llm,
        llm_rewrites=int(strategy.uses_llm),
    )


def _failed(
    call: Call, strategy: BackgroundSummary, error: BaseException, waited: float
) -> Outcome:
    """The summary's failed step: the precompute raised (the breaker counts it once)."""
    tokens = call.estimate.tokens
    step = RewriteStep(
        name=strategy.name,
        applied=False,
        tokens_before=tokens,
        tokens_after=tokens,
        duration=waited,
        error=f"background checkpoint failed: {type(error).__name__}: {error}",
    )
    return Outcome(view=call.transcript, tokens=tokens, steps=(step,), llm_failed=strategy.uses_llm)
