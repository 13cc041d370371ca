"""Background checkpoints (issue 19 item 5): written from the pre-trigger, swapped in after.

The summarizer here stands for a slow model (the issue's 2 s): it answers only
once the test sets its ``release`` event, so "no call waits for the summary"
is shown by calls that return while the summary is still being written, with
no real sleep.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from context_engine import (
    ContextEngine,
    ContextSummary,
    Message,
    Projection,
    SummaryInfo,
    SummaryRequest,
    ToolCall,
)
from context_engine.archive import MemoryArchive
from context_engine.background import Background
from context_engine.strategies import (
    BackgroundSummary,
    Budget,
    FullSummary,
    HardTruncate,
    StrategyResult,
)
from context_engine.summarize.gate import Review
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

WINDOW, RESERVE = 20_000, 4_000  # threshold 16,000; pre-trigger 12,800; growth bound 8,000
TASK = "Fix the parser so nested groups parse. Never change the public API."


@pytest.fixture(autouse=True)
async def no_task_left_behind() -> AsyncIterator[None]:
    """Every test ends with no task of the engine's still pending on the loop."""
    yield
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]
    assert pending == []


class HeldSummarizer:
    """A slow model: the first ``held`` requests answer only once ``release`` is set."""

    def __init__(self, held: int = 1, *, fail: Exception | None = None) -> None:
        self.held = held
        self.fail = fail
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.requests: list[SummaryRequest] = []
        self.answered = 0
        self.cancelled = 0

    async def __call__(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        self.started.set()
        if len(self.requests) <= self.held:
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if self.fail is not None:
            raise self.fail
        self.answered += 1
        return f"## Goal\n- fix the parser (summary {len(self.requests)})"

    @property
    def calls(self) -> int:
        return len(self.requests)


@attrs.frozen
class Signalling:
    """`FullSummary` that sets ``written`` when a checkpoint it wrote on demand is ready."""

    summary: FullSummary
    written: asyncio.Event

    @property
    def name(self) -> str:
        return self.summary.name

    @property
    def uses_llm(self) -> bool:
        return True

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        return await self.summary.apply(transcript, view, budget)

    async def force_apply(
        self, transcript: Sequence[Message], budget: Budget, *, instructions: str | None = None
    ) -> StrategyResult:
        result = await self.summary.force_apply(transcript, budget, instructions=instructions)
        self.written.set()
        return result


def file_round(index: int, chars: int = 2_000) -> list[Message]:
    """One model call reading a file, and its result (about 520 tokens)."""
    call_id = f"call_{index}"
    arguments = json.dumps({"path": f"src/m{index}.py"})
    call = ToolCall(call_id, "read_file", arguments)
    return [
        Message.assistant(f"Reading m{index}.", tool_calls=[call]),
        Message.tool(call_id, f"m{index} " + "x" * chars, name="read_file"),
    ]


class Agent:
    """An agent loop: append a round, project, keep the commit."""

    def __init__(self, engine: ContextEngine, messages: Sequence[Message] = ()) -> None:
        self.engine = engine
        self.transcript = list(messages) or [Message.system("You are a coder."), Message.user(TASK)]
        self.rounds = 0

    def next_round(self) -> list[Message]:
        return file_round(self.rounds)

    def tokens_after(self, rounds: int = 1) -> int:
        """The transcript's estimate after ``rounds`` more rounds."""
        extra = [m for i in range(rounds) for m in file_round(self.rounds + i)]
        return self.engine.estimate([*self.transcript, *extra]).tokens

    async def step(self, rounds: int = 1) -> Projection:
        """Append ``rounds`` rounds and project; a call that waited 5 s fails the test."""
        for _ in range(rounds):
            self.transcript += self.next_round()
            self.rounds += 1
        result = await asyncio.wait_for(self.engine.project(self.transcript), timeout=5)
        if result.commit is not None:
            self.transcript = list(result.commit)
        return result

    async def until_pre_trigger(self) -> Projection:
        """Step until a view reaches the pre-trigger; nothing is written before it."""
        summarizers = _summarizers(self.engine)
        before = [s.calls for s in summarizers]
        pre_trigger = int(0.8 * self.engine.threshold)
        while True:
            result = await self.step()
            if result.usage.tokens >= pre_trigger:
                assert result.usage.tokens <= self.engine.threshold
                return result
            await _settle()
            assert [s.calls for s in summarizers] == before

    async def until_threshold_is_next(self) -> int:
        """Step while the next round keeps the view within the threshold; the calls made."""
        calls = 0
        while self.tokens_after() <= self.engine.threshold:
            result = await self.step()
            assert not result.changed
            calls += 1
        return calls


def _summarizers(engine: ContextEngine) -> list[Any]:
    found = []
    for strategy in engine.strategies:
        summary = getattr(strategy, "summary", None)
        inner = getattr(summary, "summary", summary)
        if inner is not None:
            found.append(inner.summarizer)
    return found


async def _settle() -> None:
    """Let tasks the last call started run until they wait on something."""
    for _ in range(20):
        await asyncio.sleep(0)


def background_engine(
    summarizer: object,
    written: asyncio.Event | None = None,
    *,
    max_growth_share: float = 0.5,
    **options: Any,
) -> ContextEngine:
    summary = FullSummary(summarizer=summarizer)  # type: ignore[arg-type]
    wrapped: Any = summary if written is None else Signalling(summary, written)
    strategies = [
        BackgroundSummary(summary=wrapped, max_growth_share=max_growth_share),
        HardTruncate(),
    ]
    return ContextEngine(
        WINDOW,
        strategies,
        reserve_tokens=RESERVE,
        token_counter=FixedTokenCounter(),
        **options,
    )


def info_of(result: Projection) -> SummaryInfo:
    """The checkpoint details of a call that wrote or swapped one in."""
    assert result.event is not None
    assert result.event.info is not None
    return result.event.info


def only_step(result: Projection) -> Any:
    assert result.event is not None
    (step,) = result.event.steps
    return step


# -- the check: no call waits, the swapped-in checkpoint is used ------------------


async def test_background_checkpoint_no_call_waits_for_the_summary_past_the_pre_trigger() -> None:
    """From the pre-trigger to the threshold every call returns while the summary is written."""
    summarizer, written = HeldSummarizer(), asyncio.Event()
    engine = background_engine(summarizer, written)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(summarizer.started.wait(), timeout=5)
    calls = await agent.until_threshold_is_next()
    assert calls >= 3  # calls made while the summary was still being written
    assert (summarizer.calls, summarizer.answered) == (1, 0)
    summarizer.release.set()  # the slow model answers
    await asyncio.wait_for(written.wait(), timeout=5)

    result = await agent.step()  # the threshold: the checkpoint goes in, nothing is written now
    assert result.changed
    assert result.usage.fits
    step = only_step(result)
    assert (step.name, step.applied, step.error) == ("full_summary", True, None)
    assert info_of(result).background
    assert result.commit == result.messages
    assert isinstance(result.messages[1], ContextSummary)
    assert summarizer.calls == 1  # no second summary request
    assert result.messages[-2:] == tuple(agent.transcript[-2:])  # appended rounds verbatim
    await engine.close()


async def test_background_checkpoint_still_being_written_at_the_threshold_is_waited_for() -> None:
    """A call that reaches the threshold first joins the summary; none is written twice."""
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await agent.until_threshold_is_next()
    threshold_call = asyncio.create_task(agent.step())
    await _settle()
    assert not threshold_call.done()  # it waits for the summary being written
    summarizer.release.set()
    result = await threshold_call
    assert info_of(result).background
    assert summarizer.calls == 1
    await engine.close()


async def test_background_checkpoint_swapped_in_passes_the_fidelity_gate() -> None:
    """A forgetful answer still yields a checkpoint the gate passes, recallable in full."""
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    archive = MemoryArchive()
    engine = background_engine(summarizer, written, archive=archive, session_id="s1")
    edit = json.dumps({"command": "create", "path": "src/parser.py", "file_text": "x = 1\n"})
    failing = "Traceback (most recent call last):\nNameError: name 'Group' is not defined\n"
    messages = [
        Message.system("You are a coder."),
        Message.user(TASK),
        Message.assistant(tool_calls=[ToolCall("e0", "str_replace_editor", edit)]),
        Message.tool("e0", "File created."),
        Message.assistant(tool_calls=[ToolCall("b0", "bash", '{"command": "pytest"}')]),
        Message.tool("b0", failing + "<returncode>1</returncode>", name="bash"),
    ]
    agent = Agent(engine, messages)
    await agent.until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    await agent.until_threshold_is_next()
    result = await agent.step()
    step = only_step(result)
    assert step.applied
    assert step.rejected is None
    info = info_of(result)
    assert info.background
    assert info.rejected is None
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    originals = await engine.recall(info.references[0])  # archived when it was swapped in
    review = Review(
        originals=originals,
        previous=None,
        tokens_before=info.tokens_before,
        measure=lambda written: result.usage.tokens,
    )
    assert review.problems(checkpoint) == []
    assert "src/parser.py" in checkpoint.modified_files
    assert "NameError: name 'Group' is not defined" in checkpoint.summary
    await engine.close()


# -- staleness: never swapped in blindly ----------------------------------------------------


async def test_stale_background_checkpoint_is_discarded_when_an_earlier_message_changed() -> None:
    """An edited message before the checkpoint's range: discarded, the summary runs now."""
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    engine = background_engine(summarizer, written)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    await agent.until_threshold_is_next()
    edited = "Fix the lexer instead. Never change the public API."
    agent.transcript[1] = Message.user(edited)
    result = await agent.step()
    step = only_step(result)
    assert step.applied
    assert not info_of(result).background
    assert summarizer.calls == 2  # written again, from the edited transcript
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    assert "summary 2" in checkpoint.summary  # not the one written before the edit
    assert result.messages[2] == Message.user(edited)
    await engine.close()


async def test_stale_background_checkpoint_is_cancelled_when_a_commit_replaced_the_transcript() -> (
    None
):
    """A `/compact` commits its own checkpoint: the one being written is cancelled."""
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(summarizer.started.wait(), timeout=5)
    compacted = await engine.compact(agent.transcript)
    assert compacted.commit is not None
    await _settle()
    assert summarizer.cancelled == 1
    agent.transcript = list(compacted.commit)
    result = await agent.step()
    await _settle()
    assert not result.changed
    assert summarizer.calls == 2  # the compact's own request; nothing started below the trigger
    await engine.close()


async def test_stale_background_checkpoint_is_discarded_when_grown_past_the_bound() -> None:
    """More than ``max_growth_share`` x threshold appended since: not swapped in."""
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    engine = background_engine(summarizer, written)
    agent = Agent(engine)
    started = await agent.until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    rounds = 17  # about 8,800 tokens: past the bound of 8,000 in one step
    assert agent.tokens_after(rounds) - started.usage.tokens > 0.5 * engine.threshold
    result = await agent.step(rounds)
    assert result.usage.fits
    assert not info_of(result).background
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    assert "(summary 1)" not in checkpoint.summary  # written now, not in the background
    await engine.close()


async def test_background_checkpoint_too_short_for_the_growth_is_updated_incrementally() -> None:
    """Swapped in but still above the threshold: the summary step folds in only the new part."""
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    engine = background_engine(summarizer, written, max_growth_share=1.0)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    result = await agent.step(24)  # within the bound, too much for the swapped view alone
    assert result.usage.fits
    assert result.event is not None
    names = [(s.name, s.applied) for s in result.event.steps]
    assert names == [("full_summary", True), ("full_summary", True)]
    info = result.event.info
    assert info is not None
    assert info.is_incremental
    assert not info.background
    first_checkpoint = summarizer.requests[0]
    update = summarizer.requests[-1]
    assert first_checkpoint.previous_summary is None
    assert update.previous_summary is not None
    assert "summary 1" in update.previous_summary  # the background checkpoint's text
    assert result.commit is not None
    await engine.close()


# -- the breaker and the per-request cap -----------------------------------------------------


async def test_open_breaker_starts_no_background_checkpoint() -> None:
    summarizer = HeldSummarizer(held=0)
    engine = background_engine(summarizer, breaker_cooldown_seconds=3600)
    for _ in range(3):
        engine.breaker.record_failure()
    assert engine.breaker_state == "open"
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await agent.step()
    await _settle()
    assert summarizer.calls == 0
    await engine.close()


async def test_failed_background_checkpoint_counts_once_on_the_breaker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reported at the call that would have used it; no second attempt in that call."""
    summarizer = HeldSummarizer(held=0, fail=RuntimeError("model unavailable"))
    engine = background_engine(summarizer)
    agent = Agent(engine)
    with caplog.at_level(logging.WARNING, logger="context_engine.engine"):
        await agent.until_pre_trigger()
        await asyncio.wait_for(summarizer.started.wait(), timeout=5)
        await _settle()
    assert "background checkpoint failed" in caplog.text
    await agent.until_threshold_is_next()
    result = await agent.step()
    assert result.usage.fits
    assert result.event is not None
    summary_step, truncation = result.event.steps
    assert summary_step.name == "full_summary"
    assert not summary_step.applied
    assert summary_step.error is not None
    assert summary_step.error.startswith("background checkpoint failed: SummarizerError")
    assert truncation.name == "hard_truncate"
    assert truncation.applied
    assert engine.consecutive_failures == 1
    assert summarizer.calls == 1
    assert result.commit is None
    await engine.close()


async def test_per_request_cap_keeps_the_background_checkpoint_from_starting() -> None:
    summarizer = HeldSummarizer(held=0)
    engine = background_engine(summarizer, max_llm_rewrites_per_request=0)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await agent.step()
    await _settle()
    assert summarizer.calls == 0
    await engine.close()


async def test_background_swap_counts_toward_the_per_request_cap() -> None:
    """After one swap the same request starts no other; a new user message may."""
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    engine = background_engine(summarizer, written, max_llm_rewrites_per_request=1)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    await agent.until_threshold_is_next()
    swapped = await agent.step()
    assert info_of(swapped).background
    await agent.until_pre_trigger()
    await _settle()
    assert summarizer.calls == 1  # the cap of this request is spent
    agent.transcript.append(Message.user("Now also handle empty groups."))
    await agent.step()
    await asyncio.wait_for(summarizer.started.wait(), timeout=5)
    await _settle()
    assert summarizer.calls == 2  # a new request: the next checkpoint is written again
    await engine.close()


# -- lifecycle: blocking calls, close, reset -------------------------------------------------


def test_blocking_calls_start_no_background_checkpoint() -> None:
    """`project_sync` runs on a loop that stops between calls: the summary runs at the threshold."""
    summarizer = RecordingSummarizer()
    engine = background_engine(summarizer)
    transcript = [Message.system("You are a coder."), Message.user(TASK)]
    pre_trigger = int(0.8 * engine.threshold)
    index = 0
    while engine.estimate(transcript).tokens < pre_trigger:
        transcript += file_round(index)
        index += 1
    assert not engine.project_sync(transcript).changed
    assert summarizer.calls == 0
    while engine.estimate(transcript).tokens <= engine.threshold:
        transcript += file_round(index)
        index += 1
    result = engine.project_sync(transcript)
    assert not info_of(result).background
    assert summarizer.calls == 1


async def test_close_cancels_the_checkpoint_being_written() -> None:
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    await Agent(engine).until_pre_trigger()
    await asyncio.wait_for(summarizer.started.wait(), timeout=5)
    await engine.close()
    assert summarizer.cancelled == 1
    await engine.close()  # nothing left: a second close does nothing


async def test_reset_discards_the_checkpoint_being_written() -> None:
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    agent = Agent(engine)
    await agent.until_pre_trigger()
    await asyncio.wait_for(summarizer.started.wait(), timeout=5)
    engine.reset(agent.transcript)
    await _settle()
    assert summarizer.cancelled == 1
    await engine.close()


async def test_below_the_pre_trigger_an_engine_with_background_checkpoints_does_nothing_extra() -> (
    None
):
    """No task, no summary request, the input back unchanged."""
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    agent = Agent(engine)
    while agent.tokens_after() < 0.8 * engine.threshold:
        result = await agent.step()
        assert result.messages == tuple(agent.transcript)
        assert result.event is None
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []
    assert summarizer.calls == 0
    await engine.close()


async def test_background_checkpoint_is_a_trace_of_its_own_with_its_summarizer_calls() -> None:
    """The call that started it has returned: its span is a root, the summary calls its children."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    summarizer, written = HeldSummarizer(held=0), asyncio.Event()
    engine = background_engine(summarizer, written, tracer_provider=provider)
    await Agent(engine).until_pre_trigger()
    await asyncio.wait_for(written.wait(), timeout=5)
    finished = spans.get_finished_spans()
    (background,) = [s for s in finished if s.name == "context_engine.background_checkpoint"]
    assert background.parent is None
    assert background.attributes is not None
    assert background.attributes["context_engine.strategy.name"] == "full_summary"
    chats = [s for s in finished if s.name.startswith("chat")]
    assert chats
    assert all(
        s.parent is not None and s.parent.span_id == background.context.span_id for s in chats
    )
    await engine.close()


async def test_background_checkpoint_that_cannot_start_raises_into_no_call(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The call that passed the pre-trigger still gets its view; the problem is logged."""

    def refuse(*args: object) -> None:
        raise RuntimeError("event loop is shutting down")

    monkeypatch.setattr(Background, "start", refuse)
    summarizer = HeldSummarizer()
    engine = background_engine(summarizer)
    with caplog.at_level(logging.ERROR, logger="context_engine.engine"):
        result = await Agent(engine).until_pre_trigger()
    assert result.usage.fits
    assert "background checkpoint not started" in caplog.text
    assert summarizer.calls == 0
    await engine.close()
