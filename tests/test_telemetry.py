"""OpenTelemetry spans and metrics, logging, and prompt-cache prefix tracking."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, NoOpTracerProvider, StatusCode

from context_engine import ContextEngine, Message
from context_engine.strategies import FullSummary
from context_engine.telemetry import Telemetry, current_telemetry, set_attributes
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.fakes import Checkpointer, Exploding, ShrinkToolResults, agent_session


class Otel:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def engine(self, *strategies: Any, **options: Any) -> ContextEngine:
        return ContextEngine(
            options.pop("window", 3000),
            strategies,
            reserve_tokens=options.pop("reserve_tokens", 1000),
            token_counter=FixedTokenCounter(),
            tracer_provider=self.tracer_provider,
            meter_provider=self.meter_provider,
            **options,
        )

    def finished(self, name: str) -> list[Any]:
        return [s for s in self.spans.get_finished_spans() if s.name == name]

    def metric(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        points = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        points.extend(metric.data.data_points)
        return points


@pytest.fixture
def otel() -> Otel:
    return Otel()


def children(parent: Any, spans: list[Any]) -> list[Any]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


async def test_threshold_rewrite_has_an_operation_span_with_strategy_children_and_metrics(
    otel: Otel,
) -> None:
    engine = otel.engine(ShrinkToolResults(), Checkpointer())
    result = await engine.project(agent_session(120, result_chars=400))
    (span,) = otel.finished("context_engine.project")
    assert span.instrumentation_scope.name == "context_engine"
    attrs = span.attributes
    assert attrs["context_engine.window"] == 3000
    assert attrs["context_engine.threshold"] == 2000
    assert attrs["context_engine.changed"] is True
    assert attrs["context_engine.committed"] is True
    assert attrs["context_engine.strategy"] == "full_summary"
    assert attrs["context_engine.tokens_after"] == result.usage.tokens
    assert attrs["context_engine.tokens_before"] > attrs["context_engine.tokens_after"]
    strategy_spans = children(span, otel.finished("context_engine.strategy"))
    assert [s.attributes["context_engine.strategy.name"] for s in strategy_spans] == [
        "shrink",
        "full_summary",
    ]
    rewrites = {
        p.attributes["context_engine.strategy"]: p.value
        for p in otel.metric("context_engine.rewrites")
    }
    assert rewrites == {"shrink": 1, "full_summary": 1}
    (saved,) = [
        p
        for p in otel.metric("context_engine.tokens_saved")
        if p.attributes["context_engine.strategy"] == "shrink"
    ]
    assert saved.count == 1
    assert saved.sum > 0


async def test_manual_compact_span_and_summarizer_child_follow_genai_conventions(
    otel: Otel,
) -> None:
    summarizer = RecordingSummarizer()
    summarizer.model = "gpt-test"  # type: ignore[attr-defined]
    engine = otel.engine(FullSummary(summarizer=summarizer), window=200_000, reserve_tokens=None)
    await engine.compact(agent_session(30), instructions="keep names")
    (operation,) = otel.finished("context_engine.compact")
    assert operation.attributes["context_engine.reason"] == "manual"
    (strategy,) = children(operation, otel.finished("context_engine.strategy"))
    chats = children(strategy, otel.finished("chat gpt-test"))
    assert len(chats) == summarizer.calls >= 1
    chat = chats[0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.request.model"] == "gpt-test"
    assert chat.attributes["context_engine.summary.reason"] == "manual"
    assert sum(p.value for p in otel.metric("context_engine.summarizer.calls")) == summarizer.calls
    durations = otel.metric("context_engine.operation.duration")
    engine_only = otel.metric("context_engine.operation.engine_duration")
    assert durations[0].sum >= engine_only[0].sum


async def test_overflow_recovery_span(otel: Otel) -> None:
    engine = otel.engine(ShrinkToolResults(), window=20_000, reserve_tokens=4096)
    await engine.recover_overflow(
        agent_session(40), "prompt is too long: 30000 tokens > 20000 maximum"
    )
    (span,) = otel.finished("context_engine.recover_overflow")
    assert span.attributes["context_engine.reason"] == "overflow"
    assert span.attributes["context_engine.changed"] is True


async def test_strategy_failure_is_recorded_on_its_span_and_counted_on_the_operation(
    otel: Otel,
) -> None:
    """The failing strategy's span errors; the operation succeeds and carries the breaker count."""
    engine = otel.engine(ShrinkToolResults(), Exploding())
    result = await engine.project(agent_session(120, result_chars=400))
    assert result.changed  # the cheaper strategy's view goes out
    (operation,) = otel.finished("context_engine.project")
    assert operation.status.status_code != StatusCode.ERROR
    assert operation.attributes["context_engine.breaker.failures"] == 1
    assert operation.attributes["context_engine.strategy"] == "shrink"
    failed = [
        s
        for s in otel.finished("context_engine.strategy")
        if s.attributes["context_engine.strategy.name"] == "exploding"
    ]
    assert failed[0].status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in failed[0].events)


async def test_breaker_trip_is_counted_and_its_state_tracked(otel: Otel) -> None:
    engine = otel.engine(Exploding(uses_llm=True), max_consecutive_failures=1)
    messages = agent_session(120, result_chars=400)
    failed = await engine.project(messages)
    assert failed.event is not None
    assert failed.event.steps[0].error is not None
    assert sum(p.value for p in otel.metric("context_engine.breaker.trips")) == 1
    assert sum(p.value for p in otel.metric("context_engine.breaker.open")) == 1
    skipped = await engine.project(messages)
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert sum(p.value for p in otel.metric("context_engine.breaker.open")) == 0
    spans = otel.finished("context_engine.project")
    assert spans[-1].attributes["context_engine.strategy"] == "circuit_breaker"


async def test_a_deterministic_strategy_failing_never_trips_the_breaker(otel: Otel) -> None:
    engine = otel.engine(Exploding(uses_llm=False), max_consecutive_failures=1)
    messages = agent_session(120, result_chars=400)
    for _ in range(2):
        result = await engine.project(messages)
        assert result.event is not None
        assert result.event.steps[0].error is not None
        assert result.event.reason == "threshold"
    assert sum(p.value for p in otel.metric("context_engine.breaker.trips")) == 0
    assert engine.consecutive_failures == 0


def test_without_an_sdk_the_engine_runs_and_records_nothing() -> None:
    engine = ContextEngine(
        3000, [ShrinkToolResults()], reserve_tokens=1000, token_counter=FixedTokenCounter()
    )
    assert engine.project_sync(agent_session(120, result_chars=400)).changed


# -- prompt-cache prefix ---------------------------------------------------------------


def test_a_growing_transcript_below_the_threshold_keeps_the_prefix_stable() -> None:
    engine = ContextEngine(10_000_000, token_counter=FixedTokenCounter(), overhead_tokens=100)
    history = agent_session(10)
    first = engine.project_sync(history)
    assert first.usage.prefix_stable is None
    assert first.usage.prefix_reused_tokens == 0
    second = engine.project_sync([*history, Message.user("next")])
    assert second.usage.prefix_stable is True
    assert (
        second.usage.prefix_reused_tokens == first.usage.tokens - 3
    )  # all but the request framing


def test_a_rewrite_that_changes_earlier_messages_breaks_the_prefix() -> None:
    engine = ContextEngine(
        3000, [ShrinkToolResults()], reserve_tokens=1000, token_counter=FixedTokenCounter()
    )
    history = agent_session(5)
    engine.project_sync(history)
    grown = history + agent_session(120, result_chars=400)[2:]
    result = engine.project_sync(grown)
    assert result.changed
    assert result.usage.prefix_stable is False
    assert result.event is not None
    assert result.event.prefix_stable is False
    assert 0 < result.usage.prefix_reused_tokens < result.usage.tokens


# -- logging ---------------------------------------------------------------------------


def test_one_info_line_per_rewrite_and_nothing_at_warning_on_the_happy_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = ContextEngine(
        3000, [ShrinkToolResults()], reserve_tokens=1000, token_counter=FixedTokenCounter()
    )
    secret = "TOP-SECRET-CONTENT"
    messages = [*agent_session(120, result_chars=400), Message.user(secret)]
    with caplog.at_level(logging.DEBUG, logger="context_engine"):
        engine.project_sync(messages)
    info = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(info) == 1
    assert "strategy=<shrink>" in info[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in caplog.records if r.levelno > logging.DEBUG and secret in r.getMessage()]


def test_the_callers_current_span_becomes_the_parent_of_the_engine_span(otel: Otel) -> None:
    tracer = otel.tracer_provider.get_tracer("agent-runtime")
    engine = otel.engine(ShrinkToolResults())
    with tracer.start_as_current_span("agent.step") as outer:
        engine.project_sync(agent_session(120, result_chars=400))
    (span,) = otel.finished("context_engine.project")
    assert span.parent is not None
    assert span.parent.span_id == outer.get_span_context().span_id


@pytest.mark.extra("openai")
async def test_a_model_summarizer_reports_provider_usage_on_its_chat_span(otel: Otel) -> None:
    import openai

    from context_engine.summarize.openai import OpenAISummarizer
    from tests.summarize.provider_server import ProviderServer, Reply, openai_ok

    server = ProviderServer()
    server.queue(*[Reply(body=openai_ok("<summary>checkpoint</summary>")) for _ in range(4)])
    with server.running():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5)
        summarizer = OpenAISummarizer(client, "summary-model")
        engine = otel.engine(
            FullSummary(summarizer=summarizer), window=200_000, reserve_tokens=None
        )
        await engine.compact(agent_session(30))
        await client.close()
    (chat, *_) = otel.finished("chat summary-model")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 100
    assert chat.attributes["gen_ai.usage.output_tokens"] == 20
    assert chat.attributes["gen_ai.response.model"] == "summary-model"


# -- a non-recording span instead of None ------------------------------------------------


def test_outside_an_engine_call_the_current_telemetry_is_the_disabled_one() -> None:
    """Code running outside an engine call gets a telemetry it can use without a None check."""
    telemetry = current_telemetry()
    assert telemetry is Telemetry.disabled()
    assert not telemetry.tracing()
    with telemetry.strategy("shrink", 100) as span:
        set_attributes(span, {"context_engine.tokens_after": 50})
        assert not span.is_recording()
    with telemetry.operation("project", {}) as span:
        assert not span.is_recording()
        assert current_telemetry() is telemetry


async def test_a_summarizer_called_outside_an_engine_runs_under_the_disabled_telemetry() -> None:
    """A direct summarizer call, with no engine call around it, needs no telemetry to run."""
    from context_engine.summarize.request import SummaryRequest
    from context_engine.summarize.run import call_summarizer

    request = SummaryRequest(
        messages=(Message.user("hello"),),
        prompt_messages=(Message.user("summarize"),),
        previous_summary=None,
        instructions=None,
        reason="manual",
        kind="history",
        max_tokens=100,
    )
    summarizer = RecordingSummarizer()
    assert await call_summarizer(summarizer, request, None)
    assert len(summarizer.requests) == 1


@pytest.mark.parametrize(
    "provider",
    [None, NoOpTracerProvider()],
    ids=["no-sdk-installed", "explicit-no-op-provider"],
)
def test_without_a_recording_provider_every_span_is_the_invalid_span(provider: Any) -> None:
    """No provider that records: the context managers yield OpenTelemetry's `INVALID_SPAN`."""
    telemetry = Telemetry(tracer_provider=provider)
    with telemetry.operation("project", {"context_engine.window": 1}) as span:
        assert span is INVALID_SPAN
        with telemetry.strategy("shrink", 10) as child:
            assert child is INVALID_SPAN
        with telemetry.summarizer_call(RecordingSummarizer(), {}) as chat:
            assert chat is INVALID_SPAN


def test_with_a_provider_the_spans_record(otel: Otel) -> None:
    """A real provider: the same context managers yield recording spans that reach the exporter."""
    telemetry = Telemetry(tracer_provider=otel.tracer_provider)
    with telemetry.operation("project", {}) as span, telemetry.strategy("shrink", 10) as child:
        assert span.is_recording()
        set_attributes(child, {"context_engine.tokens_after": 5, "dropped": None})
    (strategy,) = otel.finished("context_engine.strategy")
    assert strategy.attributes["context_engine.tokens_after"] == 5
    assert "dropped" not in strategy.attributes


async def test_the_operation_span_carries_the_cache_estimate_and_dropped_reasoning(
    otel: Otel,
) -> None:
    """With pricing, the span says what the cache should serve and what the prompt costs."""
    engine = otel.engine(ShrinkToolResults(), pricing="openai")
    result = await engine.project(agent_session(120, result_chars=400))
    (span,) = otel.finished("context_engine.project")
    assert result.usage.cache is not None
    assert result.event is not None
    assert span.attributes["context_engine.cache.cached_tokens"] == result.usage.cache.cached_tokens
    assert span.attributes["context_engine.cache.cost"] == result.usage.cache.cost
    assert (
        span.attributes["context_engine.reasoning_tokens_dropped"]
        == result.event.reasoning_tokens_dropped
    )


CACHE_METRICS = (
    "context_engine.cache.read_tokens",
    "context_engine.cache.write_tokens",
    "context_engine.prompt.cost",
    "context_engine.prompt.dollars",
    "context_engine.cache.breaks",
    "context_engine.cache.invalidated_tokens",
)


def total(otel: Otel, name: str) -> float:
    return float(sum(p.value for p in otel.metric(name)))


async def test_priced_calls_export_their_cache_reads_writes_and_cost_as_metrics(
    otel: Otel,
) -> None:
    engine = otel.engine(window=200_000, reserve_tokens=None, pricing="anthropic")
    session = agent_session(6, result_chars=2000)
    results = [await engine.project(session[:n]) for n in (8, 12, len(session))]
    caches = [r.usage.cache for r in results]
    assert all(cache is not None for cache in caches)
    estimates = [cache for cache in caches if cache is not None]
    assert estimates[-1].cached_tokens > 0  # each call extends the last: the cache serves it
    assert total(otel, "context_engine.cache.read_tokens") == sum(
        c.cached_tokens for c in estimates
    )
    assert total(otel, "context_engine.cache.write_tokens") == sum(
        c.uncached_tokens for c in estimates
    )
    assert total(otel, "context_engine.prompt.cost") == pytest.approx(
        sum(c.cost for c in estimates)
    )
    dollars = sum(c.dollars or 0.0 for c in estimates)
    assert total(otel, "context_engine.prompt.dollars") == pytest.approx(dollars)
    (point,) = otel.metric("context_engine.prompt.dollars")
    assert dict(point.attributes) == {
        "context_engine.operation": "project",
        "context_engine.pricing.family": "anthropic",
    }
    assert otel.metric("context_engine.cache.breaks") == []


async def test_a_rewrite_that_invalidates_cached_tokens_counts_as_a_cache_break(
    otel: Otel,
) -> None:
    engine = otel.engine(ShrinkToolResults(), window=3000, pricing="anthropic")
    session = agent_session(12, result_chars=800)
    await engine.project(session[:16])  # fits: what the provider caches
    result = await engine.project(session)  # above the threshold: earlier results shrink
    assert result.event is not None
    assert result.event.cost is not None
    invalidated = result.event.cost.invalidated_tokens
    assert invalidated > 0
    (breaks,) = otel.metric("context_engine.cache.breaks")
    assert breaks.value == 1
    assert breaks.attributes["context_engine.strategy"] == "shrink"
    assert breaks.attributes["context_engine.reason"] == "threshold"
    (histogram,) = otel.metric("context_engine.cache.invalidated_tokens")
    assert (histogram.count, histogram.sum) == (1, invalidated)


async def test_without_a_pricing_no_cache_or_cost_metric_is_recorded(otel: Otel) -> None:
    engine = otel.engine(ShrinkToolResults(), window=3000)
    session = agent_session(12, result_chars=800)
    await engine.project(session[:16])
    await engine.project(session)
    assert otel.metric("context_engine.rewrites") != []
    for name in CACHE_METRICS:
        assert otel.metric(name) == [], name
