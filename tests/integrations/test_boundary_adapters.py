"""Request-boundary compaction in the adapters that own a session store.

A stored session is loaded whole at the start of every request. Each adapter
that owns the store (the Agents SDK session, the LangGraph checkpointer, the
Strands session manager) exposes `ContextEngine.compact_if_needed`: above the
trigger it writes one checkpoint (reason ``request_boundary``), the store
keeps the compacted history, and the request's model calls start from it.
Below the trigger (or under ``min_messages``) nothing is written and no hook
fires.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import attrs
import pytest

from context_engine import CompactResult, ContextEngine, Message, RewriteEvent
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session

COUNTER = FixedTokenCounter()
TRIGGER = 6_000  # history tokens above which a request starts with a checkpoint
MIN_MESSAGES = 20
MODES = ["sync", "async"]


@attrs.define
class Boundary:
    """An engine with a large window (no projection rewrites), its summarizer and hooks."""

    summarizer: RecordingSummarizer = attrs.field(factory=RecordingSummarizer)
    compacted: list[RewriteEvent] = attrs.field(factory=list)
    started: list[int] = attrs.field(factory=list)
    ended: list[CompactResult | None] = attrs.field(factory=list)

    def engine(self, _conversation: str = "") -> ContextEngine:
        return ContextEngine.default(
            200_000,
            summarizer=self.summarizer,
            token_counter=COUNTER,
            on_compact=self.compacted.append,
        )

    def bounds(self, trigger_tokens: int = TRIGGER) -> dict[str, Any]:
        return {
            "trigger_tokens": trigger_tokens,
            "min_messages": MIN_MESSAGES,
            "on_start": self.started.append,
            "on_end": self.ended.append,
        }

    def assert_one_checkpoint(self, result: CompactResult | None) -> None:
        assert result is not None
        assert result.commit is not None
        assert [e.reason for e in self.compacted] == ["request_boundary"]
        assert len(self.started) == 1
        assert self.started[0] > TRIGGER
        assert self.ended == [result]
        assert self.summarizer.calls >= 1
        assert {r.reason for r in self.summarizer.requests} == {"request_boundary"}

    def assert_nothing_ran(self) -> None:
        assert self.compacted == []
        assert self.started == []
        assert self.ended == []
        assert self.summarizer.calls == 0


def texts(messages: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


def stored_history(steps: int = 30) -> list[Message]:
    """An earlier session without its system prompt: well above ``TRIGGER`` at 30 steps."""
    return synthetic_session(steps)[1:]


# -- the Agents SDK session -----------------------------------------------------------------


def agents_provider(boundary: Boundary) -> Any:
    from agents.models.interface import Model, ModelProvider
    from agents.testing import ModelStep, ScriptedModel, assistant_message

    from context_engine.integrations.openai_agents import ContextEngineProvider

    model = ScriptedModel(
        [ModelStep(output=[assistant_message("done", item_id=f"m{n}")]) for n in range(4)]
    )

    class Models(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return model

    return ContextEngineProvider(boundary.engine, model_provider=Models()), model


@pytest.mark.extra("openai-agents")
async def test_an_agents_sdk_session_starts_the_request_from_a_stored_checkpoint(
    tmp_path: Path,
) -> None:
    from agents import Agent, Runner, SQLiteSession

    from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents

    boundary = Boundary()
    provider, model = agents_provider(boundary)
    session = SQLiteSession("user-1", tmp_path / "sessions.db")
    await session.add_items(to_openai_agents(stored_history()))

    result = await provider.session(session).compact_if_needed(**boundary.bounds())

    boundary.assert_one_checkpoint(result)
    assert result is not None
    stored = from_openai_agents(await session.get_items())
    assert stored == from_openai_agents(to_openai_agents(result.commit or ()))
    assert stored[0].is_summary
    agent = Agent(name="coder", instructions="You fix bugs.", model="gpt-test")
    config = provider.run_config(session, tracing_disabled=True)
    answer = await Runner.run(agent, "Now the lexer.", session=session, run_config=config)
    assert answer.final_output == "done"
    (call,) = model.calls
    sent = from_openai_agents(call.input)
    assert sent[0].is_summary  # the run read the compacted session
    assert len(sent) < len(stored_history())
    session.close()


@pytest.mark.extra("openai-agents")
async def test_an_agents_sdk_session_below_the_trigger_is_left_as_stored(tmp_path: Path) -> None:
    from agents import SQLiteSession

    from context_engine.formats.openai_agents import to_openai_agents

    boundary = Boundary()
    provider, _ = agents_provider(boundary)
    session = SQLiteSession("user-1", tmp_path / "sessions.db")
    items = to_openai_agents(stored_history())
    await session.add_items(items)

    result = await provider.session(session).compact_if_needed(
        **boundary.bounds(trigger_tokens=1_000_000)
    )

    assert result is None
    boundary.assert_nothing_ran()
    assert await session.get_items() == items
    session.close()


# -- the LangGraph checkpointer ---------------------------------------------------------------


def langgraph_agent(boundary: Boundary, trigger_tokens: int = TRIGGER) -> tuple[Any, Any]:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from context_engine.integrations.langchain import (
        ContextEngineMiddleware,
        RequestBoundaryMiddleware,
    )
    from tests.integrations.test_langchain import ScriptedModel

    model = ScriptedModel(plan=lambda step: None)  # answers "done" at once
    middleware = ContextEngineMiddleware(boundary.engine())
    at_start = RequestBoundaryMiddleware(middleware, **boundary.bounds(trigger_tokens))
    agent = create_agent(
        model,
        tools=[],
        system_prompt="You fix bugs.",
        middleware=[at_start, middleware],
        checkpointer=InMemorySaver(),
    )
    return agent, model


def run_thread(agent: Any, messages: list[Any], mode: str) -> dict[str, Any]:
    config = {"configurable": {"thread_id": "t1"}}
    payload = {"messages": messages}
    if mode == "sync":
        return agent.invoke(payload, config)  # type: ignore[no-any-return]
    return asyncio.run(agent.ainvoke(payload, config))  # type: ignore[no-any-return]


@pytest.mark.extra("langchain")
@pytest.mark.parametrize("mode", MODES)
def test_a_langgraph_thread_is_compacted_once_when_a_run_starts(mode: str) -> None:
    from langchain_core.messages import HumanMessage

    from context_engine.formats.langchain import from_langchain, to_langchain

    boundary = Boundary()
    agent, model = langgraph_agent(boundary)

    first = run_thread(agent, to_langchain(stored_history()), mode)

    assert first["messages"][-1].content == "done"
    (result,) = boundary.ended
    boundary.assert_one_checkpoint(result)
    (prompt,) = model.received
    assert from_langchain(prompt)[1].is_summary  # system prompt, then the checkpoint
    state = agent.get_state({"configurable": {"thread_id": "t1"}}).values["messages"]
    assert from_langchain(state)[0].is_summary  # the checkpointer stores the compacted thread

    second = run_thread(agent, [HumanMessage("Now the lexer.")], mode)

    assert second["messages"][-1].content == "done"
    assert len(boundary.compacted) == 1  # the compacted thread is below the trigger
    assert from_langchain(model.received[-1])[1].is_summary


@pytest.mark.extra("langchain")
def test_a_langgraph_thread_below_the_trigger_is_left_as_it_is() -> None:
    from context_engine.formats.langchain import from_langchain, to_langchain

    boundary = Boundary()
    agent, model = langgraph_agent(boundary, trigger_tokens=1_000_000)
    history = stored_history()

    run_thread(agent, to_langchain(history), "sync")

    boundary.assert_nothing_ran()
    (prompt,) = model.received
    assert texts(from_langchain(prompt)[1:]) == texts(history)


@pytest.mark.extra("langchain")
def test_a_failed_boundary_compaction_leaves_the_thread_and_the_run_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from context_engine.formats.langchain import from_langchain, to_langchain

    boundary = Boundary(summarizer=RecordingSummarizer(fail=RuntimeError("down")))
    agent, model = langgraph_agent(boundary)
    history = stored_history()

    result = run_thread(agent, to_langchain(history), "sync")

    assert result["messages"][-1].content == "done"
    assert boundary.ended == [None]  # the server's end event still fires
    assert texts(from_langchain(model.received[0])[1:]) == texts(history)
    assert "request-boundary compaction failed" in caplog.text


@pytest.mark.extra("langchain")
def test_the_boundary_middleware_needs_the_engine_middleware() -> None:
    from context_engine.errors import ConfigurationError
    from context_engine.integrations.langchain import RequestBoundaryMiddleware

    with pytest.raises(ConfigurationError, match="ContextEngineMiddleware"):
        RequestBoundaryMiddleware(Boundary().engine())  # type: ignore[arg-type]


# -- the Strands session manager --------------------------------------------------------------


@pytest.mark.extra("strands")
def test_a_strands_session_is_compacted_before_the_request_and_stored(tmp_path: Path) -> None:
    from strands.session.file_session_manager import FileSessionManager

    from context_engine.formats.strands import from_strands
    from tests.integrations.test_strands import ScriptedModel, make_run

    def session() -> FileSessionManager:
        return FileSessionManager(session_id="s1", storage_dir=str(tmp_path))

    boundary = Boundary()
    first = make_run(COUNTER, ScriptedModel(30, COUNTER), window=200_000, session_manager=session())
    first.agent("Review every module in src/.")  # a long stored session, nothing compacted
    assert first.manager.commits == 0

    request = make_run(
        COUNTER,
        ScriptedModel(1, COUNTER),
        engine=boundary.engine(),
        session_manager=session(),
    )
    stored = len(request.agent.messages)
    result = request.manager.compact_if_needed_sync(request.agent, **boundary.bounds())

    boundary.assert_one_checkpoint(result)
    assert from_strands(request.agent.messages)[0].is_summary
    assert len(request.agent.messages) < stored
    assert request.manager.removed_message_count > 0
    request.agent("Now report.")
    assert from_strands(request.model.received[0])[0].is_summary

    restored = make_run(COUNTER, ScriptedModel(1, COUNTER), session_manager=session())
    assert from_strands(restored.agent.messages)[0].is_summary  # the store kept the checkpoint


@pytest.mark.extra("strands")
async def test_a_short_strands_history_is_not_compacted() -> None:
    from tests.integrations.test_strands import ScriptedModel, make_run

    boundary = Boundary()
    request = make_run(
        COUNTER,
        ScriptedModel(1, COUNTER),
        engine=boundary.engine(),
        messages=stored_history(4),  # under min_messages
    )

    assert len(request.agent.messages) < MIN_MESSAGES
    result = await request.manager.compact_if_needed(request.agent, **boundary.bounds(0))

    assert result is None
    boundary.assert_nothing_ran()
    assert request.manager.commits == 0
