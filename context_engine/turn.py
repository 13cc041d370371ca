"""The loop around one model call, written once: compact, project, call, recover, retry.

Every adapter needs the same policy around a model call, so it lives here as a
small state machine with no I/O of its own, in the shape of httpx's
``Auth.auth_flow``. `turn_flow` is a generator: it yields the step it needs
done and receives the answer (or the step's exception, thrown in), and its
return value is the `TurnResult`. `run_turn` and `run_turn_sync` drive it
against a `ContextEngine` and a model-call function; an adapter whose runtime
owns the model call (a streaming call, a retry the runtime performs itself)
resumes it with `advance_turn` from the runtime's hooks.

The policy:

1. A last user message that is a ``/compact [instructions]`` command
   (`parse_compact_command`) compacts the history before it (`CompactStep`)
   and the model is not called.
2. Otherwise the engine projects the transcript (`ProjectStep`); a
   `CompactionError` still gives its best view and its commit.
3. The model is called with the view (`ModelCallStep`).
4. On a context-length error the engine recovers (`RecoverStep`) from the
   transcript as committed so far: a checkpoint the projection of this very
   call wrote is the start of the recovery, never thrown away. The model is
   retried once with the recovered view.
5. A second context-length error, a recovery that could not shrink the
   history or that failed, surface as the runtime's own error; any other
   error of the model call passes through unchanged.

Commits are handed back: `TurnResult.commit` is the transcript the runtime
should keep from now on (None: keep its own), and every `ModelCallStep`
carries the commit made so far for runtimes that persist before the call.

Every rewrite the engine made for the turn (the projection's, the
recovery's, the ``/compact``'s) is handed to the drivers' ``on_event`` as
soon as the engine step returns, before the model is sent its view: the
adapters surface it through the runtime's own callbacks, hooks or tracing.

Public names: `turn_flow`, `run_turn`, `run_turn_sync`, `advance_turn`, the steps
`CompactStep`, `ProjectStep`, `ModelCallStep`, `RecoverStep` (`TurnStep` is
their union), `TurnResult` and `EventHook` (the type of ``on_event``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Generic, TypeAlias, TypeVar

import attrs

from context_engine.commands import CompactCommand, parse_compact_command
from context_engine.engine import ContextEngine
from context_engine.errors import CompactionError, ConfigurationError
from context_engine.events import RewriteEvent
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.results import CompactResult, Projection, RecoveryResult

__all__ = [
    "CompactStep",
    "EventHook",
    "ModelCallStep",
    "ProjectStep",
    "RecoverStep",
    "TurnResult",
    "TurnStep",
    "advance_turn",
    "run_turn",
    "run_turn_sync",
    "turn_flow",
]

logger = logging.getLogger(__name__)

R = TypeVar("R")
_Transcript: TypeAlias = tuple[Message, ...]
EventHook: TypeAlias = Callable[[RewriteEvent], Any]
"""Called with each `RewriteEvent` of a turn; the async drivers await what it returns."""


@attrs.frozen
class CompactStep:
    """Run ``engine.compact(messages, instructions)``; answer with its `CompactResult`.

    Attributes:
        messages: The history before the ``/compact`` message.
        instructions: What the checkpoint should focus on, or None.
    """

    messages: _Transcript = attrs.field(repr=False)
    instructions: str | None


@attrs.frozen
class ProjectStep:
    """Run ``engine.project(messages)``; answer with its `Projection`.

    Attributes:
        messages: The transcript of the call.
    """

    messages: _Transcript = attrs.field(repr=False)


@attrs.frozen
class ModelCallStep:
    """Call the model with ``messages``; answer with its response, or throw its error in.

    Attributes:
        messages: The view to send.
        changed: Whether the view differs from the transcript (a runtime may
            then send its own request as it is).
        commit: The transcript to keep from now on as far as this turn has
            decided (None: the runtime's own), for runtimes that persist before
            the call; the `TurnResult` carries the same.
        retry: Whether this is the one retry after an overflow recovery.
    """

    messages: _Transcript = attrs.field(repr=False)
    changed: bool
    commit: _Transcript | None = attrs.field(repr=False)
    retry: bool = False


@attrs.frozen
class RecoverStep:
    """Run ``engine.recover_overflow(messages, error)``; answer with its `RecoveryResult`.

    Attributes:
        messages: The transcript as committed so far (the projection's commit
            when this call wrote one, else the call's transcript).
        error: The provider's error, or None when it does not state an overflow
            in a form `is_context_overflow` reads (a runtime's own error type).
    """

    messages: _Transcript = attrs.field(repr=False)
    error: BaseException | None


TurnStep: TypeAlias = "CompactStep | ProjectStep | ModelCallStep | RecoverStep"


@attrs.frozen(kw_only=True)
class TurnResult(Generic[R]):
    """How one model call ended.

    Attributes:
        response: The model's answer, or None when a ``/compact`` command ran
            instead of the model.
        view: The messages the answered call was sent (the compacted history
            after ``/compact``).
        commit: The transcript the runtime should keep from now on, or None
            when it keeps its own. After ``/compact`` it is the compacted
            history without the command message.
        command: The ``/compact`` command that ran, or None.
        compacted: The engine's `CompactResult` of that command, or None (also
            when there was nothing before the command to compact).
        recovery: The `RecoveryResult` the retry was sent, or None without an overflow.
    """

    response: R | None = None
    view: _Transcript = attrs.field(repr=False)
    commit: _Transcript | None = attrs.field(default=None, repr=False)
    command: CompactCommand | None = None
    compacted: CompactResult | None = None
    recovery: RecoveryResult | None = None


def _command(transcript: _Transcript) -> CompactCommand | None:
    """The ``/compact`` command the transcript ends with, or None."""
    last = transcript[-1] if transcript else None
    if last is None or last.role != "user" or last.is_summary:
        return None
    return parse_compact_command(last.text)


def turn_flow(
    messages: Sequence[Message],
    *,
    compact_command: bool = True,
    is_overflow: Callable[[BaseException], bool] = is_context_overflow,
) -> Generator[TurnStep, Any, TurnResult[Any]]:
    """The policy around one model call, as a generator of the steps it needs done.

    Send None to start it, then the answer of each step it yields (or throw the
    step's exception in); its return value (``StopIteration.value``) is the
    `TurnResult`.

    Args:
        messages: The call's transcript, system messages first.
        compact_command: Treat a last user message ``/compact [instructions]``
            as a manual compaction instead of a question to the model.
        is_overflow: Whether a model-call error is a context-length error; the
            default reads provider errors, adapters add their runtime's types.

    Raises:
        ConfigurationError: ``messages`` is not a sequence.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ConfigurationError(f"messages must be a sequence of Message, got {messages!r}")
    transcript = tuple(messages)
    command = _command(transcript) if compact_command else None
    if command is not None:
        return (yield from _compact(transcript[:-1], command))
    try:
        projection: Projection = yield ProjectStep(transcript)
        view, commit = projection.messages, projection.commit
        # Provider blocks (context assembly) make the view differ even when nothing was rewritten.
        changed = projection.changed or bool(projection.trace.placements)
    except CompactionError as exc:
        logger.warning(
            "strategy=<%s> failures=<%d> | projection failed; sending the best view reached",
            exc.strategy,
            exc.failures,
        )
        view, commit, changed = exc.view, exc.commit, exc.view != transcript
    overflow: Exception
    try:
        response = yield ModelCallStep(view, changed, commit)
    except Exception as exc:
        if not is_overflow(exc):
            raise
        overflow = exc
    else:
        return TurnResult(response=response, view=view, commit=commit)
    recovery = yield from _recover(commit if commit is not None else transcript, overflow)
    response = yield ModelCallStep(recovery.messages, True, recovery.commit, retry=True)
    return TurnResult(
        response=response, view=recovery.messages, commit=recovery.commit, recovery=recovery
    )


def _compact(
    history: _Transcript, command: CompactCommand
) -> Generator[TurnStep, Any, TurnResult[Any]]:
    if not history:
        return TurnResult(view=history, command=command)
    result: CompactResult = yield CompactStep(history, command.instructions)
    return TurnResult(view=result.messages, commit=result.commit, command=command, compacted=result)


def _recover(
    transcript: _Transcript, overflow: Exception
) -> Generator[TurnStep, Any, RecoveryResult]:
    """The recovery to retry with; raises ``overflow`` when there is none."""
    stated = overflow if is_context_overflow(overflow) else None
    recovery: RecoveryResult | None = None
    try:
        recovery = yield RecoverStep(transcript, stated)
    except CompactionError as exc:
        # Raised below, outside this handler, so the runtime's error keeps its own context.
        logger.warning("strategy=<%s> | overflow recovery failed: %s", exc.strategy, exc)
    if recovery is None or not recovery.changed:
        logger.warning("the history could not be shrunk after a context overflow; raising")
        raise overflow
    logger.info(
        "strategy=<%s> tokens_after=<%d> | context overflow recovered; retrying the call once",
        recovery.strategy,
        recovery.usage.tokens,
    )
    return recovery


class _Stepper:
    """Feeds a flow the outcome of each step; the drivers only perform the steps."""

    def __init__(self, flow: Generator[TurnStep, Any, TurnResult[Any]]) -> None:
        self._flow = flow
        self._answer: Any = None
        self._error: Exception | None = None
        self.result: TurnResult[Any] | None = None

    def next(self) -> TurnStep | None:
        """The next step, or None once the flow returned (then read ``result``)."""
        answer, error = self._answer, self._error
        self._answer, self._error = None, None
        try:
            return self._flow.throw(error) if error is not None else self._flow.send(answer)
        except StopIteration as done:
            self.result = done.value
            return None

    def answer(self, value: Any) -> None:
        self._answer = value

    def fail(self, error: Exception) -> None:
        self._error = error


async def advance_turn(
    engine: ContextEngine,
    flow: Generator[TurnStep, Any, TurnResult[Any]],
    error: Exception | None = None,
    *,
    on_event: EventHook | None = None,
) -> ModelCallStep | TurnResult[Any]:
    """Resume ``flow`` and answer its engine steps until it waits for the model.

    For runtimes that own the model call (they call it, and retry it, between
    their own hooks): start a flow with ``advance_turn(engine, flow)``, send
    the returned step's view, and on the model's error resume it with
    ``advance_turn(engine, flow, error)``.

    Args:
        engine: The engine of the conversation.
        flow: A `turn_flow`, new or waiting at a `ModelCallStep`.
        error: The model call's error to throw in, or None to start the flow.
        on_event: Called (and awaited when it returns an awaitable) with
            each `RewriteEvent` an engine step made; what it raises is logged.

    Returns:
        The `ModelCallStep` the flow waits at, or its `TurnResult` when it
        returned (a ``/compact`` command ran).

    Raises:
        Exception: ``error`` when the flow does not recover from it.
    """
    answer: Any = None
    while True:
        try:
            step = flow.throw(error) if error is not None else flow.send(answer)
        except StopIteration as done:
            result: TurnResult[Any] = done.value
            return result
        if isinstance(step, ModelCallStep):
            return step
        answer, error = None, None
        try:
            answer = await _engine_step(engine, step)
        except CompactionError as exc:
            error = exc
        else:
            await _areport(on_event, answer)


def _event_of(answer: object) -> RewriteEvent | None:
    event = getattr(answer, "event", None)  # Projection, RecoveryResult, CompactResult
    return event if isinstance(event, RewriteEvent) else None


async def _areport(on_event: EventHook | None, answer: object) -> None:
    """Hand the engine step's rewrite to ``on_event``; an observer never breaks the turn."""
    event = _event_of(answer)
    if on_event is None or event is None:
        return
    try:
        returned = on_event(event)
        if inspect.isawaitable(returned):
            await returned
    except Exception:
        logger.warning("strategy=<%s> | on_event failed; ignored", event.strategy, exc_info=True)


def _report(on_event: EventHook | None, answer: object) -> None:
    """`_areport` for the blocking driver: ``on_event`` must be a plain function."""
    event = _event_of(answer)
    if on_event is None or event is None:
        return
    try:
        returned = on_event(event)
    except Exception:
        logger.warning("strategy=<%s> | on_event failed; ignored", event.strategy, exc_info=True)
        return
    if inspect.iscoroutine(returned):
        returned.close()
        raise ConfigurationError(
            "run_turn_sync's on_event returned a coroutine: pass a plain function, "
            "or drive the turn with `await run_turn(...)`"
        )


async def _engine_step(engine: ContextEngine, step: CompactStep | ProjectStep | RecoverStep) -> Any:
    if isinstance(step, ProjectStep):
        return await engine.project(step.messages)
    if isinstance(step, RecoverStep):
        return await engine.recover_overflow(step.messages, step.error)
    return await engine.compact(step.messages, step.instructions)


async def run_turn(
    engine: ContextEngine,
    messages: Sequence[Message],
    call_model: Callable[[_Transcript], Awaitable[R]],
    *,
    compact_command: bool = True,
    is_overflow: Callable[[BaseException], bool] = is_context_overflow,
    on_event: EventHook | None = None,
) -> TurnResult[R]:
    """Run `turn_flow` against ``engine`` and ``call_model``.

    Args:
        engine: The engine of the conversation.
        messages: The call's transcript, system messages first.
        call_model: Sends a view to the model and returns its answer; its
            exceptions are the model's errors.
        compact_command: As `turn_flow`.
        is_overflow: As `turn_flow`.
        on_event: Called (and awaited when it returns an awaitable) with each
            `RewriteEvent` of the turn, before the model is sent the view it
            made; what it raises is logged, never raised.

    Returns:
        The `TurnResult`; persist its ``commit`` when it is not None.

    Raises:
        Exception: the model's error when it is not a context-length error, or
            when it is and recovery could not help or the retry overflowed too;
            `CompactionError` from a ``/compact`` command.
    """
    stepper = _Stepper(
        turn_flow(messages, compact_command=compact_command, is_overflow=is_overflow)
    )
    while (step := stepper.next()) is not None:
        try:
            if isinstance(step, ModelCallStep):
                stepper.answer(await call_model(step.messages))
                continue
            answer = await _engine_step(engine, step)
        except Exception as exc:
            stepper.fail(exc)
        else:
            await _areport(on_event, answer)
            stepper.answer(answer)
    assert stepper.result is not None
    return stepper.result


def run_turn_sync(
    engine: ContextEngine,
    messages: Sequence[Message],
    call_model: Callable[[_Transcript], R],
    *,
    compact_command: bool = True,
    is_overflow: Callable[[BaseException], bool] = is_context_overflow,
    on_event: Callable[[RewriteEvent], None] | None = None,
) -> TurnResult[R]:
    """Blocking `run_turn`: the engine's ``_sync`` methods and a blocking ``call_model``.

    ``on_event`` is as in `run_turn`, a plain function.

    Raises:
        BlockingCallInEventLoopError: called inside a running event loop (use `run_turn`).
        Exception: as `run_turn`.
    """
    stepper = _Stepper(
        turn_flow(messages, compact_command=compact_command, is_overflow=is_overflow)
    )
    while (step := stepper.next()) is not None:
        try:
            if isinstance(step, ModelCallStep):
                stepper.answer(call_model(step.messages))
                continue
            answer = _engine_step_sync(engine, step)
        except Exception as exc:
            stepper.fail(exc)
        else:
            _report(on_event, answer)
            stepper.answer(answer)
    assert stepper.result is not None
    return stepper.result


def _engine_step_sync(engine: ContextEngine, step: CompactStep | ProjectStep | RecoverStep) -> Any:
    if isinstance(step, ProjectStep):
        return engine.project_sync(step.messages)
    if isinstance(step, RecoverStep):
        return engine.recover_overflow_sync(step.messages, step.error)
    return engine.compact_sync(step.messages, step.instructions)
