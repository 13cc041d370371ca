"""The loop around one model call: the state machine alone, then its two drivers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

import pytest

from context_engine import (
    CompactionError,
    CompactStep,
    ConfigurationError,
    ContextEngine,
    ContextSummary,
    Message,
    ModelCallStep,
    ProjectStep,
    RecoverStep,
    RewriteEvent,
    TurnResult,
    TurnStep,
    advance_turn,
    run_turn,
    run_turn_sync,
    turn_flow,
)
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session

OVERFLOW = "prompt is too long: 250000 tokens > 200000 maximum"
Flow = Generator[TurnStep, Any, TurnResult[Any]]


class Overflow(Exception):
    """A provider's context-length error."""

    def __init__(self) -> None:
        super().__init__(OVERFLOW)


def make_engine(
    summarizer: RecordingSummarizer, *extra: Any, window: int = 20_000, keep: int = 3000
) -> ContextEngine:
    """Checkpoints are committed; a recovery of a committed view needs no summary."""
    return ContextEngine(
        window,
        reserve_tokens=4096,
        strategies=[FullSummary(summarizer=summarizer, keep_recent_tokens=keep), *extra],
        commit_strategies=("full_summary",),
        token_counter=FixedTokenCounter(),
    )


def perform(engine: ContextEngine, step: TurnStep) -> Any:
    """What a driver does for an engine step."""
    if isinstance(step, ProjectStep):
        return engine.project_sync(step.messages)
    if isinstance(step, RecoverStep):
        return engine.recover_overflow_sync(step.messages, step.error)
    assert isinstance(step, CompactStep)
    return engine.compact_sync(step.messages, step.instructions)


def finish(flow: Flow, answer: Any) -> TurnResult[Any]:
    with pytest.raises(StopIteration) as done:
        flow.send(answer)
    result: TurnResult[Any] = done.value.value
    return result


# ------------------------------------------------------------------ the state machine


def test_a_short_transcript_is_sent_as_it_is_and_nothing_is_committed() -> None:
    """Below the threshold: one projection, one model call, no commit."""
    engine = make_engine(RecordingSummarizer())
    transcript = [Message.system("s"), Message.user("hello")]
    flow = turn_flow(transcript)
    step = flow.send(None)
    assert step == ProjectStep(tuple(transcript))
    call = flow.send(perform(engine, step))
    assert isinstance(call, ModelCallStep)
    assert (call.messages, call.changed, call.commit, call.retry) == (
        tuple(transcript),
        False,
        None,
        False,
    )
    result = finish(flow, "hi")
    assert (result.response, result.view, result.commit) == ("hi", tuple(transcript), None)
    assert result.recovery is None
    assert result.command is None


def test_a_checkpoint_written_by_the_projection_is_sent_and_committed() -> None:
    summarizer = RecordingSummarizer()
    engine = make_engine(summarizer)
    flow = turn_flow(synthetic_session(60))
    projection = perform(engine, flow.send(None))
    call = flow.send(projection)
    assert call.changed
    assert call.commit is not None
    assert call.commit == projection.commit
    assert call.messages[1].is_summary
    result = finish(flow, "answer")
    assert result.commit == projection.commit
    assert result.view == projection.messages
    assert summarizer.calls >= 1  # the checkpoint was paid for once, by the projection


def test_an_overflow_recovers_from_the_checkpoint_this_call_committed() -> None:
    """The recovery starts from the projection's commit, so no second summary is paid for."""
    summarizer = RecordingSummarizer()
    engine = make_engine(summarizer, HardTruncate())
    flow = turn_flow(synthetic_session(60))
    projection = perform(engine, flow.send(None))
    flow.send(projection)
    summaries = summarizer.calls
    recover = flow.throw(Overflow())
    assert isinstance(recover, RecoverStep)
    assert recover.messages == projection.commit
    assert isinstance(recover.error, Overflow)
    recovery = perform(engine, recover)
    retry = flow.send(recovery)
    assert isinstance(retry, ModelCallStep)
    assert retry.retry
    assert retry.messages == recovery.messages
    assert retry.commit == recovery.commit
    assert _same_checkpoint(retry.messages[1], projection.commit[1])
    result = finish(flow, "fits now")
    assert result.response == "fits now"
    assert result.recovery is recovery
    assert result.commit == recovery.commit
    assert summarizer.calls == summaries


def test_without_a_commit_the_recovery_starts_from_the_transcript() -> None:
    engine = ContextEngine(
        200_000, reserve_tokens=4096, strategies=[HardTruncate()], token_counter=FixedTokenCounter()
    )
    transcript = tuple(synthetic_session(40))
    flow = turn_flow(transcript)
    flow.send(None)
    flow.send(engine.project_sync(transcript))  # fits: sent as it is
    recover = flow.throw(Overflow())
    assert recover.messages == transcript


def test_a_second_overflow_surfaces_as_the_runtimes_own_error() -> None:
    engine = make_engine(RecordingSummarizer(), HardTruncate())
    flow = turn_flow(synthetic_session(60))
    flow.send(perform(engine, flow.send(None)))
    flow.send(perform(engine, flow.throw(Overflow())))
    second = Overflow()
    with pytest.raises(Overflow) as raised:
        flow.throw(second)
    assert raised.value is second


def test_an_error_that_is_not_an_overflow_passes_through_without_recovery() -> None:
    engine = make_engine(RecordingSummarizer())
    flow = turn_flow(synthetic_session(60))
    flow.send(perform(engine, flow.send(None)))
    with pytest.raises(RuntimeError, match="rate limited"):
        flow.throw(RuntimeError("rate limited"))


@pytest.mark.parametrize(
    "answer",
    [
        lambda step: CompactionError("boom", view=step.messages, strategy="x", failures=1),
        lambda step: "unchanged",
    ],
    ids=["recovery-failed", "recovery-could-not-shrink"],
)
def test_an_overflow_recovery_cannot_help_surfaces_at_once(
    answer: Callable[[RecoverStep], Any],
) -> None:
    engine = ContextEngine(
        200_000, reserve_tokens=4096, strategies=[HardTruncate()], token_counter=FixedTokenCounter()
    )
    transcript = [Message.system("s"), Message.user("hello")]
    flow = turn_flow(transcript)
    flow.send(None)
    flow.send(engine.project_sync(transcript))
    overflow = Overflow()
    step = flow.throw(overflow)
    reply = answer(step)
    finish_step = (
        (lambda: flow.throw(reply))
        if isinstance(reply, Exception)
        else (lambda: flow.send(engine.recover_overflow_sync(step.messages, step.error)))
    )
    with pytest.raises(Overflow) as raised:
        finish_step()
    assert raised.value is overflow


def test_a_failed_projection_still_sends_its_best_view_and_commit() -> None:
    transcript = tuple(synthetic_session(10))
    flow = turn_flow(transcript)
    flow.send(None)
    best, commit = transcript[:1] + transcript[-3:], transcript[-3:]
    call = flow.throw(
        CompactionError("boom", view=best, strategy="full_summary", failures=1, commit=commit)
    )
    assert (call.messages, call.changed, call.commit) == (best, True, commit)


@pytest.mark.parametrize(
    ("line", "instructions"),
    [("/compact", None), ("/compact keep the paths", "keep the paths")],
    ids=["bare", "with-instructions"],
)
def test_a_compact_command_compacts_without_a_model_call(
    line: str, instructions: str | None
) -> None:
    summarizer = RecordingSummarizer()
    engine = make_engine(summarizer, window=200_000)
    history = tuple(synthetic_session(20))
    flow = turn_flow([*history, Message.user(line)])
    step = flow.send(None)
    assert step == CompactStep(history, instructions)
    compacted = perform(engine, step)
    result = finish(flow, compacted)
    assert result.response is None
    assert result.compacted is compacted
    assert result.command is not None
    assert result.command.instructions == instructions
    assert result.commit == compacted.commit
    assert result.commit is not None
    assert summarizer.calls >= 1


def test_a_compact_command_alone_has_nothing_to_compact() -> None:
    flow = turn_flow([Message.user("/compact")])
    result = finish(flow, None)
    assert result.command is not None
    assert result.compacted is None
    assert result.commit is None


def test_the_compact_command_can_be_switched_off() -> None:
    flow = turn_flow([Message.user("/compact")], compact_command=False)
    assert isinstance(flow.send(None), ProjectStep)


def test_messages_must_be_a_sequence() -> None:
    with pytest.raises(ValueError, match="sequence of Message"):
        turn_flow("hello").send(None)


# ------------------------------------------------------------------------- the drivers


def drive(
    mode: str,
    engine: ContextEngine,
    messages: Any,
    model: Callable[[Any], Any],
    on_event: Callable[[RewriteEvent], Any] | None = None,
) -> Any:
    if mode == "sync":
        return run_turn_sync(engine, messages, model, on_event=on_event)

    async def call(view: Any) -> Any:
        return model(view)

    return asyncio.run(run_turn(engine, messages, call, on_event=on_event))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_drivers_recover_from_the_checkpoint_and_retry_once(mode: str) -> None:
    summarizer = RecordingSummarizer()
    engine = make_engine(summarizer, HardTruncate())
    sent: list[tuple[Message, ...]] = []
    summaries: list[int] = []

    def model(view: tuple[Message, ...]) -> str:
        sent.append(view)
        summaries.append(summarizer.calls)
        if len(sent) == 1:
            raise Overflow()
        return "fits now"

    result = drive(mode, engine, synthetic_session(60), model)
    assert result.response == "fits now"
    assert len(sent) == 2
    assert sent[0][1].is_summary
    assert _same_checkpoint(sent[1][1], sent[0][1])
    assert summaries[0] >= 1
    assert summarizer.calls == summaries[0]
    # The retry's view, with the checkpoint whole: it was cut for that view only.
    assert result.commit[2:] == sent[1][2:]
    assert result.commit[1] == sent[0][1]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_drivers_surface_a_second_overflow(mode: str) -> None:
    engine = make_engine(RecordingSummarizer(), HardTruncate())
    sent: list[int] = []

    def model(view: tuple[Message, ...]) -> str:
        sent.append(len(view))
        raise Overflow()

    with pytest.raises(Overflow):
        drive(mode, engine, synthetic_session(60), model)
    assert len(sent) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_drivers_run_a_compact_command(mode: str) -> None:
    engine = make_engine(RecordingSummarizer(), window=200_000)

    def model(view: tuple[Message, ...]) -> str:
        raise AssertionError("the model is not called for /compact")

    result = drive(mode, engine, [*synthetic_session(20), Message.user("/compact")], model)
    assert result.compacted is not None
    assert result.compacted.changed


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_event_gets_each_rewrite_before_the_model_is_sent_its_view(mode: str) -> None:
    """The projection's event, then the recovery's, each before the call that sends its view."""
    engine = make_engine(RecordingSummarizer(), HardTruncate())
    timeline: list[str] = []

    def model(view: tuple[Message, ...]) -> str:
        timeline.append("model")
        if timeline.count("model") == 1:
            raise Overflow()
        return "fits now"

    result = drive(
        mode,
        engine,
        synthetic_session(60),
        model,
        on_event=lambda event: timeline.append(event.reason),
    )

    assert result.response == "fits now"
    assert timeline == ["threshold", "model", "overflow", "model"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_on_event_gets_the_compact_commands_rewrite(mode: str) -> None:
    engine = make_engine(RecordingSummarizer(), window=200_000)
    events: list[RewriteEvent] = []

    drive(
        mode,
        engine,
        [*synthetic_session(20), Message.user("/compact")],
        lambda view: "unused",
        on_event=events.append,
    )

    assert [(e.reason, e.committed) for e in events] == [("manual", True)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_on_event_is_logged_and_the_turn_goes_on(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = make_engine(RecordingSummarizer(), HardTruncate())

    def broken(event: RewriteEvent) -> None:
        raise RuntimeError("observer bug")

    result = drive(mode, engine, synthetic_session(60), lambda view: "answered", broken)

    assert result.response == "answered"
    assert result.commit is not None  # the checkpoint the failing observer saw is still kept
    assert "on_event failed" in caplog.text


def test_nothing_is_reported_when_nothing_was_rewritten() -> None:
    engine = make_engine(RecordingSummarizer())
    events: list[RewriteEvent] = []

    run_turn_sync(engine, [Message.user("hi")], lambda view: "hello", on_event=events.append)

    assert events == []


async def test_advance_turn_awaits_an_async_on_event() -> None:
    engine = make_engine(RecordingSummarizer(), HardTruncate())
    events: list[RewriteEvent] = []

    async def record(event: RewriteEvent) -> None:
        await asyncio.sleep(0)
        events.append(event)

    flow = turn_flow(synthetic_session(60))
    step = await advance_turn(engine, flow, on_event=record)

    assert isinstance(step, ModelCallStep)
    assert [e.strategy for e in events] == ["full_summary"]
    assert events[0].view == step.messages


def test_the_blocking_driver_refuses_a_coroutine_on_event() -> None:
    engine = make_engine(RecordingSummarizer(), HardTruncate())

    async def record(event: RewriteEvent) -> None:
        return None

    with pytest.raises(ConfigurationError, match="plain function"):
        run_turn_sync(engine, synthetic_session(60), lambda view: "x", on_event=record)


async def test_the_blocking_driver_refuses_a_running_loop() -> None:
    engine = make_engine(RecordingSummarizer())
    with pytest.raises(RuntimeError, match="project"):
        run_turn_sync(engine, [Message.user("hi")], lambda view: "x")


def _same_checkpoint(kept: Message, written: Message) -> bool:
    """``kept`` is the checkpoint ``written`` (its text may be cut to fit a lower target)."""
    return (
        isinstance(kept, ContextSummary)
        and isinstance(written, ContextSummary)
        and kept.tokens_before == written.tokens_before
    )
