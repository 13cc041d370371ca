"""ContextEngineMiddleware and LangChain's conventions: callbacks, astream_events, edit settings."""

from __future__ import annotations

import asyncio
import sys
from typing import Any
from uuid import UUID

import pytest

from tests.extras import needs

pytest.importorskip("langchain", reason=needs("langchain"))

from langchain.agents import create_agent
from langchain.agents.middleware import ClearToolUsesEdit
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from context_engine import ConfigurationError, ContextEngine, Message, RewriteEvent, ToolCall
from context_engine.formats.langchain import from_langchain
from context_engine.integrations._langchain_events import adispatch_rewrite, dispatch_rewrite
from context_engine.integrations._reporting import rewrite_fields
from context_engine.integrations.langchain import (
    ContextEngineMiddleware,
    ExcludeTools,
    from_clear_tool_uses,
)
from context_engine.strategies import HardTruncate
from tests.integrations.test_langchain import (
    ALL_MODES,
    COUNTER,
    LIMIT,
    Events,
    ScriptedModel,
    build,
    history,
    invoke,
    read_file,
    read_log,
)

pytestmark = pytest.mark.extra("langchain")

# Before Python 3.11 an async LangGraph run hands its nodes no config (asyncio tasks take no
# context there), so an async run has no LangChain run inside the model node to dispatch to.
NO_ASYNC_RUN = pytest.mark.xfail(
    sys.version_info < (3, 11),
    reason="LangGraph passes no run config into async nodes before Python 3.11",
    strict=True,
)
CALLBACK_MODES = [
    pytest.param(mode, marks=NO_ASYNC_RUN) if mode in ("async", "astream") else mode
    for mode in ALL_MODES
]


class Handler(BaseCallbackHandler):
    """A LangChain callback handler keeping every custom event, and how many calls preceded it."""

    def __init__(self, model: ScriptedModel) -> None:
        self.model = model
        self.events: list[tuple[str, dict[str, Any], int]] = []

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self.events.append((name, data, len(self.model.received)))


# ------------------------------------------------------------------------------ callbacks


@pytest.mark.parametrize("mode", CALLBACK_MODES)
def test_every_rewrite_reaches_the_runs_callbacks_before_its_view_is_sent(mode: str) -> None:
    events = Events()
    model = ScriptedModel(steps=55)
    agent, _ = build(model, events.engine())
    handler = Handler(model)

    invoke(agent, [HumanMessage("Read every module.")], mode, callbacks=[handler])

    rewrites = events.projected
    assert [name for name, _, _ in handler.events] == ["context_engine.project"] * len(rewrites)
    assert [data for _, data, _ in handler.events] == [rewrite_fields(e) for e in rewrites]
    committed = [(data, calls) for _, data, calls in handler.events if data["committed"]]
    assert len(committed) >= 2
    for data, calls in committed:
        assert data["strategy"] == "full_summary"
        # Dispatched before the call it made the view for: that call starts from the checkpoint.
        assert from_langchain(model.received[calls])[1].is_summary


@NO_ASYNC_RUN
def test_rewrites_are_on_custom_event_entries_of_astream_events() -> None:
    events = Events()
    model = ScriptedModel(steps=55)
    agent, _ = build(model, events.engine())

    async def run() -> list[dict[str, Any]]:
        stream = agent.astream_events(
            {"messages": [HumanMessage("Read every module.")]},
            {"recursion_limit": 200},  # astream_events does not take the agent's own limit
            version="v2",
        )
        return [event async for event in stream if event["event"] == "on_custom_event"]

    custom = asyncio.run(run())

    assert len(custom) == len(events.projected) >= 2
    assert {event["name"] for event in custom} == {"context_engine.project"}
    assert [event["data"]["tokens_after"] for event in custom] == [
        e.tokens_after for e in events.projected
    ]


@pytest.mark.parametrize("mode", CALLBACK_MODES)
def test_an_overflow_recovery_is_a_recover_overflow_event(mode: str) -> None:
    events = Events()
    model = ScriptedModel(steps=60, limit=LIMIT)
    agent, _ = build(model, events.engine())
    handler = Handler(model)

    invoke(agent, [HumanMessage("Read every module.")], mode, callbacks=[handler])

    recoveries = [
        data for name, data, _ in handler.events if name == "context_engine.recover_overflow"
    ]
    assert len(recoveries) == len(events.recovered) == model.rejected >= 1
    assert all(data["reason"] == "overflow" and data["committed"] for data in recoveries)


@pytest.mark.parametrize("mode", CALLBACK_MODES)
def test_a_compact_command_is_a_compact_event(mode: str) -> None:
    events = Events()
    model = ScriptedModel(steps=0)
    agent, _ = build(model, events.engine(), checkpointer=InMemorySaver())
    invoke(agent, [*history(10), HumanMessage("Hi")], mode, thread_id="t")
    handler = Handler(model)

    invoke(agent, [HumanMessage("/compact keep names")], mode, [handler], thread_id="t")

    assert [(name, data["reason"]) for name, data, _ in handler.events] == [
        ("context_engine.compact", "manual")
    ]
    assert handler.events[0][1] == rewrite_fields(events.compacted[0])


def test_outside_a_langchain_run_a_rewrite_is_not_dispatched_and_nothing_fails() -> None:
    event = RewriteEvent(reason="threshold", strategy="light_trim", changed=True)

    dispatch_rewrite(event)
    asyncio.run(adispatch_rewrite(event))


# ------------------------------------------------------- ClearToolUsesEdit -> microcompact


def test_a_clear_tool_uses_edit_maps_onto_the_microcompact() -> None:
    edit = ClearToolUsesEdit(keep=2, exclude_tools=["todo"], placeholder="[gone]")

    strategy = from_clear_tool_uses(edit, min_result_tokens=10)

    assert (strategy.keep_recent, strategy.placeholder, strategy.min_result_tokens) == (
        2,
        "[gone]",
        10,
    )
    assert strategy.classifier == ExcludeTools(["todo"])
    call = ToolCall(id="c1", name="todo", arguments="{}")
    assert not strategy.classifier(call, Message.tool("c1", "1. fix", name="todo"))
    assert strategy.classifier(call, Message.tool("c1", "out", name="grep"))  # the result's name
    unnamed = Message.tool("c1", "1. fix")
    assert not strategy.classifier(call, unnamed)  # no name on the result: the call's


def test_the_edits_defaults_keep_three_and_the_describing_placeholder() -> None:
    strategy = from_clear_tool_uses()

    assert (strategy.keep_recent, strategy.placeholder, strategy.classifier) == (3, None, None)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (ClearToolUsesEdit(clear_tool_inputs=True), "clear_tool_inputs"),
        ({"exclude_tools": ["todo"]}, "ClearToolUsesEdit"),
        (ClearToolUsesEdit(exclude_tools="todo"), "list of tool names"),
    ],
    ids=["clear_tool_inputs", "not an edit", "one name as a string"],
)
def test_an_edit_that_cannot_be_carried_over_is_refused(edit: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        from_clear_tool_uses(edit)


@pytest.mark.parametrize("mode", ["sync", "astream"])
def test_an_excluded_tools_results_are_never_cleared_in_an_agent_loop(mode: str) -> None:
    edit = ClearToolUsesEdit(keep=1, exclude_tools=["read_log"], placeholder="[gone]")
    projected: list[RewriteEvent] = []
    engine = ContextEngine(
        5_000,
        [from_clear_tool_uses(edit, min_result_tokens=0), HardTruncate()],
        reserve_tokens=1_000,
        token_counter=COUNTER,
        on_project=projected.append,
    )

    def plan(step: int) -> tuple[str, dict[str, Any]] | None:
        tool = "read_log" if step % 3 == 0 else "read_file"
        return None if step >= 24 else (tool, {"path": f"src/mod_{step}.py"})

    model = ScriptedModel(plan=plan)
    agent = create_agent(
        model, tools=[read_file, read_log], middleware=[ContextEngineMiddleware(engine)]
    )

    result = invoke(agent, [HumanMessage("Read the modules and their logs.")], mode)

    assert result["messages"][-1].content == "done"
    cleared = [s for e in projected for s in e.steps if s.name == "tool_result_microcompact"]
    assert cleared
    assert all(step.applied for step in cleared)
    sent = [m for view in model.received for m in view if isinstance(m, ToolMessage)]
    logs = [m for m in sent if m.name == "read_log"]
    files = [m for m in sent if m.name == "read_file"]
    assert logs
    assert all(str(m.content).startswith("# log of") for m in logs)
    assert sum(m.content == "[gone]" for m in files) >= 5
