"""The Agents SDK adapter and the SDK's conventions: every runner entry point, its own tracing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("agents", reason=needs("openai-agents"))

from agents import Runner, SQLiteSession, trace
from agents.testing import ScriptedModel
from agents.tracing import get_trace_provider, set_trace_provider
from agents.tracing.provider import DefaultTraceProvider

from context_engine.integrations._reporting import rewrite_fields
from context_engine.integrations.openai_agents import ContextEngineModel
from tests.integrations.test_openai_agents import (
    Collector,
    agent_for,
    make_harness,
    overflow_script,
    steps,
)
from tests.integrations.test_openai_agents_provider import (
    App,
    Loop,
    coder,
    request_tokens,
    scripted,
    stored,
    view,
)

pytestmark = pytest.mark.extra("openai-agents")

RUNS = ["run", "run_sync", "run_streamed"]


def run_with(app: App, session: SQLiteSession, task: str, how: str) -> Any:
    """Run ``coder()`` on ``task`` the way ``how`` names (the blocking runner outside a loop)."""
    config = app.provider.run_config(session, tracing_disabled=True)
    options: dict[str, Any] = {"session": session, "run_config": config, "max_turns": 100}
    if how == "run_sync":
        output = Runner.run_sync(coder(), task, **options).final_output
        # run_sync runs on the thread's default loop and leaves it open: close it here.
        policy = asyncio.get_event_loop_policy()
        policy.get_event_loop().close()
        policy.set_event_loop(None)
        return output

    async def run() -> Any:
        if how == "run":
            return (await Runner.run(coder(), task, **options)).final_output
        streamed = Runner.run_streamed(coder(), task, **options)
        async for _ in streamed.stream_events():
            pass
        return streamed.final_output

    return asyncio.run(run())


@pytest.mark.parametrize("how", RUNS)
def test_each_runner_entry_point_fits_every_request_and_stores_the_checkpoint(how: str) -> None:
    app = App(8_000, scripted(Loop({"alpha": 45}).answer))
    session = SQLiteSession("user-1")

    assert run_with(app, session, "[alpha] Fix it.", how) == "alpha done"

    assert len(app.model.calls) == 46
    assert max(request_tokens(c) for c in app.model.calls) <= app.threshold("user-1")
    persisted = asyncio.run(stored(session))
    assert persisted[0].is_summary  # stored in the session when the run ended
    assert persisted[0] == view(app.model.calls[-1])[0]
    session.close()


# ----------------------------------------------------------------------- the SDK's tracing


@pytest.fixture
def sdk_spans() -> Iterator[Collector]:
    """The SDK's tracing on, to a local collector (nothing exported), restored afterwards."""
    previous = get_trace_provider()
    provider = DefaultTraceProvider()
    collector = Collector()
    provider.set_processors([collector])
    provider.set_disabled(False)
    set_trace_provider(provider)
    yield collector
    set_trace_provider(previous)


def custom(collector: Collector, name: str) -> list[dict[str, Any]]:
    return [
        s.span_data.data
        for s in collector.spans
        if getattr(s.span_data, "name", "") == name and s.span_data.type == "custom"
    ]


async def test_a_rewrites_facts_are_on_its_project_span(sdk_spans: Collector) -> None:
    harness = make_harness()
    model = ScriptedModel(steps(harness, 40))

    await Runner.run(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "Fix it.",
        run_config=harness.run_config(tracing_disabled=False),
        max_turns=60,
    )

    rewritten = [d for d in custom(sdk_spans, "context_engine.project") if "reason" in d]
    assert len(rewritten) == len(harness.events) >= 5
    for data, event in zip(rewritten, harness.events, strict=True):
        fields = rewrite_fields(event)
        assert {k: data[k] for k in fields if k not in ("changed", "committed")} == {
            k: v for k, v in fields.items() if k not in ("changed", "committed")
        }
        assert data["committed"] == event.committed


async def test_an_overflow_recovery_is_on_its_recover_overflow_span(sdk_spans: Collector) -> None:
    harness = make_harness(window=8000, reserve=1000)
    model = ScriptedModel(overflow_script(harness, overflows=1))

    await Runner.run(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "Fix it.",
        run_config=harness.run_config(tracing_disabled=False),
        max_turns=20,
    )

    (data,) = custom(sdk_spans, "context_engine.recover_overflow")
    (recovery,) = harness.recoveries
    assert (data["reason"], data["operation"], data["committed"]) == (
        "overflow",
        "recover_overflow",
        True,
    )
    assert data["tokens_after"] == recovery.tokens_after


async def test_a_compact_command_is_a_compact_span(sdk_spans: Collector) -> None:
    app = App(16_000, scripted(Loop({"alpha": 10}).answer))
    session = SQLiteSession("user-1")
    await app.run(session, "[alpha] Fix it.")

    with trace("compact command"):
        result = await app.provider.session(session).compact("keep the module names")

    (data,) = custom(sdk_spans, "context_engine.compact")
    assert result.event is not None
    assert data == rewrite_fields(result.event)
    assert (data["operation"], data["reason"], data["committed"]) == ("compact", "manual", True)
    session.close()
