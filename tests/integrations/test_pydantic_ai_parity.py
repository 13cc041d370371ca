"""ContextEngineCapability and pydantic-ai's conventions: streamed runs, run events, spans."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("pydantic_ai", reason=needs("pydantic-ai"))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, CapabilityEvent, RunContext
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.models.instrumented import InstrumentationSettings

from context_engine import ContextEngine, RewriteEvent
from context_engine.formats.pydantic_ai import from_pydantic_ai
from context_engine.integrations._reporting import rewrite_fields
from context_engine.integrations.pydantic_ai import ContextEngineCapability, ContextRewriteEvent
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter
from tests.integrations.test_pydantic_ai import (
    MODES,
    STEPS,
    Recorder,
    ScriptedModel,
    StreamedFunctionModel,
    context_window_error,
    long_history,
    make_engine,
    plain,
    read_file,
    run_agent,
)

pytestmark = pytest.mark.extra("pydantic-ai")


class CallsOnly(ScriptedModel):
    """A ScriptedModel whose tool-calling answers hold only the calls, no text.

    ``run_stream`` ends the run at the first text it can stream as the output,
    so an agent driven by it answers with calls alone until its final text.
    """

    def parts(self, call: int) -> list[Any]:
        return [p for p in super().parts(call) if not isinstance(p, pm.TextPart)] or [
            pm.TextPart("All modules read; done.")
        ]


def streamed_agent(
    model: ScriptedModel, *capabilities: AbstractCapability[Any]
) -> Agent[None, str]:
    return Agent(
        StreamedFunctionModel(model),
        system_prompt="You are a careful agent. Read every module before answering.",
        tools=[read_file],
        capabilities=list(capabilities),
    )


# --------------------------------------------------------------------------- run_stream


async def test_run_stream_keeps_every_request_under_the_threshold_and_commits(
    counter: FixedTokenCounter,
) -> None:
    events: list[RewriteEvent] = []
    engine = ContextEngine(  # checkpoints only, so the short answers still make several
        8_000,
        [FullSummary(summarizer=ExtractiveSummarizer()), HardTruncate()],
        reserve_tokens=2_000,
        token_counter=counter,
        on_project=events.append,
    )
    model, recorder = CallsOnly(counter), Recorder()
    agent = streamed_agent(model, recorder, ContextEngineCapability(engine))

    async with agent.run_stream("Read every module in src/ and report.") as run:
        output = await run.get_output()

    assert output == "All modules read; done."
    assert len(model.views) == STEPS + 1
    assert max(model.tokens) <= engine.threshold
    for transcript, view in zip(recorder.transcripts, model.views, strict=True):
        assert check_view(plain(transcript), plain(view)) == []
    assert sum(e.committed for e in events) >= 2
    history = from_pydantic_ai(run.all_messages())
    assert sum(m.is_summary for m in history) == 1  # the newest checkpoint, in the run's history
    assert len(history) < 2 * STEPS


# ------------------------------------------------------------------- the run's event stream


@dataclasses.dataclass
class Listener(AbstractCapability[Any]):
    """Another capability of the agent: every capability event reaches its ``on_event``."""

    seen: list[ContextRewriteEvent] = dataclasses.field(default_factory=list)

    async def on_event(self, ctx: RunContext[Any], *, event: Any) -> None:
        if isinstance(event, ContextRewriteEvent):
            self.seen.append(event)


def expected(events: list[RewriteEvent]) -> list[dict[str, Any]]:
    return [rewrite_fields(e) for e in events]


def payload(event: ContextRewriteEvent) -> dict[str, Any]:
    """The event's own fields, without the envelope pydantic-ai stamps."""
    envelope = {f.name for f in dataclasses.fields(CapabilityEvent)}
    return {k: v for k, v in dataclasses.asdict(event).items() if k not in envelope}


@pytest.mark.parametrize("mode", MODES)
async def test_every_rewrite_is_a_capability_event_of_the_run(
    counter: FixedTokenCounter, mode: str
) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    listener = Listener()
    agent = streamed_agent(ScriptedModel(counter), listener, ContextEngineCapability(engine))
    handled: list[Any] = []

    async def handler(ctx: RunContext[Any], stream: Any) -> None:
        handled.extend([event async for event in stream])

    options = {"event_stream_handler": handler} if mode == "run" else {}
    await run_agent(agent, "Read every module in src/ and report.", mode, **options)

    assert len(events) >= 5
    assert [payload(e) for e in listener.seen] == expected(events)
    assert {e.kind for e in listener.seen} == {"context_engine.rewrite"}
    assert sum(e.committed for e in listener.seen) >= 2
    if mode == "run":  # the application's handler gets them in the stream too
        assert [e for e in handled if isinstance(e, ContextRewriteEvent)] == listener.seen


async def test_an_overflow_recovery_is_a_recover_overflow_event(
    counter: FixedTokenCounter,
) -> None:
    recoveries: list[RewriteEvent] = []
    engine = ContextEngine.default(
        200_000, summarizer=ExtractiveSummarizer(), token_counter=counter
    )
    engine.on_recover = recoveries.append
    limit = 6_000

    def model(messages: list[pm.ModelMessage], info: Any) -> pm.ModelResponse:
        tokens = sum(counter.count_message(m) for m in from_pydantic_ai(messages))
        if tokens > limit:
            raise context_window_error(tokens, limit)
        return pm.ModelResponse(parts=[pm.TextPart("fits now")])

    listener = Listener()
    agent = Agent(
        StreamedFunctionModel(model), capabilities=[listener, ContextEngineCapability(engine)]
    )
    async with agent.run_stream_events("Go on.", message_history=long_history()) as stream:
        async for _ in stream:
            pass

    assert len(recoveries) == 1
    assert [payload(e) for e in listener.seen] == expected(recoveries)
    assert listener.seen[0].operation == "recover_overflow"
    assert listener.seen[0].committed


async def test_a_compact_command_is_a_compact_event(counter: FixedTokenCounter) -> None:
    compacted: list[RewriteEvent] = []
    engine = make_engine(counter, [])
    engine.on_compact = compacted.append
    listener = Listener()
    agent = streamed_agent(ScriptedModel(counter), listener, ContextEngineCapability(engine))

    async with agent.run_stream_events("/compact", message_history=long_history()) as stream:
        async for _ in stream:
            pass

    assert [payload(e) for e in listener.seen] == expected(compacted)
    assert [(e.operation, e.reason) for e in listener.seen] == [("compact", "manual")]


# ------------------------------------------------------------------------ instrumentation


async def test_each_rewrite_is_on_the_requests_chat_span(counter: FixedTokenCounter) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    agent = Agent(
        StreamedFunctionModel(ScriptedModel(counter)),
        tools=[read_file],
        capabilities=[instrumentation, ContextEngineCapability(engine)],
    )

    await agent.run("Read every module in src/ and report.")

    chats = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    annotated = [
        s.attributes for s in chats if s.attributes and "context_engine.reason" in s.attributes
    ]
    assert len(annotated) == len(events) >= 5
    for attributes, event in zip(annotated, events, strict=True):
        assert attributes["context_engine.operation"] == "project"
        assert attributes["context_engine.strategy"] == event.strategy
        assert attributes["context_engine.tokens_after"] == event.tokens_after
        assert attributes["context_engine.committed"] == event.committed
        assert event.strategy in attributes["context_engine.strategies_applied"]  # type: ignore[operator]
