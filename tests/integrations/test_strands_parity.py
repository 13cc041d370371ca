"""ContextEngineConversationManager and Strands' conventions: hook events and its spans."""

from __future__ import annotations

from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("strands", reason=needs("strands"))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands.hooks import HookProvider, HookRegistry
from strands.telemetry import tracer as strands_tracer

from context_engine import ContextEngine
from context_engine.formats.strands import from_strands
from context_engine.integrations.strands import ContextRewriteEvent
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.integrations.test_strands import (
    SYSTEM,
    Run,
    ScriptedModel,
    history,
    make_idle,
    make_run,
    run_agent,
)

pytestmark = pytest.mark.extra("strands")


class Rewrites(HookProvider):
    """A Strands hook provider subscribed to the engine's rewrites, as to Strands' own events.

    It records each event with how many model calls the model had received by then.
    """

    def __init__(self, run: Run) -> None:
        self.run = run
        self.seen: list[tuple[ContextRewriteEvent, int]] = []

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(ContextRewriteEvent, self.record)

    async def record(self, event: ContextRewriteEvent) -> None:  # an async callback is awaited
        self.seen.append((event, len(self.run.model.received)))


def subscribed(run: Run) -> Rewrites:
    rewrites = Rewrites(run)
    run.agent.hooks.add_hook(rewrites)
    return rewrites


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
def test_every_rewrite_reaches_the_agents_hooks_before_its_view_is_sent(
    counter: FixedTokenCounter, mode: str
) -> None:
    run = make_run(counter, ScriptedModel(40, counter))
    rewrites = subscribed(run)

    run_agent(run.agent, "Review every module in src/.", mode)

    assert [event.rewrite for event, _ in rewrites.seen] == run.events
    assert all(event.agent is run.agent for event, _ in rewrites.seen)
    assert {event.operation for event, _ in rewrites.seen} == {"project"}
    calls = len(run.model.received)
    committed = [n for event, n in rewrites.seen if event.rewrite.committed and n < calls]
    assert len(committed) >= 3
    for n in committed:  # invoked before the call it made the view for: that call has it
        assert from_strands(run.model.received[n], system_prompt=SYSTEM)[1].is_summary


def test_an_overflow_recovery_is_a_recover_overflow_event(counter: FixedTokenCounter) -> None:
    model = ScriptedModel(1, counter, overflow=lambda call: call == 1)
    run = make_run(counter, model, window=200_000, messages=history(60))
    rewrites = subscribed(run)

    run.agent("Status?")

    recoveries = [event for event, _ in rewrites.seen if event.operation == "recover_overflow"]
    assert [event.rewrite for event in recoveries] == run.recoveries
    assert len(recoveries) == 1
    assert recoveries[0].rewrite.committed


def test_a_compact_command_is_a_compact_event(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(
        100_000, summarizer=ExtractiveSummarizer(), token_counter=counter
    )
    run = make_idle(counter, history(40), engine=engine)
    rewrites = subscribed(run)

    run.agent("/compact")

    assert [(e.operation, e.rewrite.reason) for e, _ in rewrites.seen] == [("compact", "manual")]
    assert rewrites.seen[0][0].rewrite.committed


def test_a_failing_hook_callback_is_logged_and_the_agent_goes_on(
    counter: FixedTokenCounter, caplog: pytest.LogCaptureFixture
) -> None:
    run = make_run(counter, ScriptedModel(30, counter))

    def broken(event: ContextRewriteEvent) -> None:
        raise RuntimeError("observer bug")

    run.agent.hooks.add_callback(ContextRewriteEvent, broken)
    result = run.agent("Review every module in src/.")

    assert str(result).strip() == "All modules reviewed."
    assert run.manager.commits >= 1
    assert "ContextRewriteEvent callback failed" in caplog.text


def test_each_rewrite_is_on_the_strands_span_of_its_model_call(
    counter: FixedTokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime_tracer = strands_tracer.Tracer()
    runtime_tracer.tracer_provider = provider
    runtime_tracer.tracer = provider.get_tracer(runtime_tracer.service_name)
    monkeypatch.setattr(strands_tracer, "_tracer_instance", runtime_tracer)
    summarizer = RecordingSummarizer()
    engine = ContextEngine.default(
        8_000, reserve_tokens=2_000, summarizer=summarizer, token_counter=counter
    )
    run = make_run(counter, ScriptedModel(30, counter), engine=engine)
    rewrites = subscribed(run)

    run.agent("Review every module in src/.")

    cycles = [
        s.attributes
        for s in exporter.get_finished_spans()
        if s.name == "execute_event_loop_cycle"
        and s.attributes
        and "context_engine.reason" in s.attributes
    ]
    in_cycles = [event.rewrite for event, n in rewrites.seen if n < len(run.model.received)]
    assert len(cycles) == len(in_cycles) >= 3
    for attributes, event in zip(cycles, in_cycles, strict=True):
        assert attributes["context_engine.operation"] == "project"
        assert attributes["context_engine.strategy"] == event.strategy
        assert attributes["context_engine.tokens_before"] == event.tokens_before
        assert attributes["context_engine.committed"] == event.committed


async def test_apply_management_reports_its_commit_to_the_hooks(
    counter: FixedTokenCounter,
) -> None:
    """Strands calls it synchronously inside its loop; the async callback still runs."""
    run = make_idle(counter, history(80), window=6_000)
    rewrites = subscribed(run)

    run.manager.apply_management(run.agent)

    assert [e.rewrite.committed for e, _ in rewrites.seen] == [True]
    assert rewrites.seen[0][0].rewrite is run.events[-1]
