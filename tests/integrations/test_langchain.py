"""ContextEngineMiddleware in real LangChain agent loops: views, commits, overflow, /compact."""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("langchain", reason=needs("langchain"))
pytest.importorskip("langchain_core", reason=needs("langchain"))

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import Field

from context_engine import ConfigurationError, ContextEngine, RewriteEvent, StrategyResult
from context_engine.archive import REFERENCE_PATTERN, Archive, MemoryArchive, SQLiteArchive
from context_engine.formats.langchain import from_langchain, message_from_langchain
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.conversations import EnginePool
from context_engine.integrations.langchain import ContextEngineMiddleware
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.strategies.base import Budget
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import SummaryRequest
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS
from tests.integrations.support import (
    INSTRUCTIONS,
    LOOP_STEPS,
    TRIGGER,
    WINDOWS,
    grep_output,
    grep_size,
    orphans,
    recall_all,
)

pytestmark = pytest.mark.extra("langchain")

COUNTER = FixedTokenCounter()
LIMIT = 3_000  # the provider's real window in the overflow tests, below the engine's threshold
NOTE = "because the files read so far point at it. " * 5
MODES = ["sync", "async"]
STREAM_MODES = ["stream", "astream"]
"""``agent.stream`` / ``agent.astream``: the model's answer streamed token by token."""
ALL_MODES = MODES + STREAM_MODES


def prompt_tokens(messages: Sequence[BaseMessage]) -> int:
    """The prompt as the engine measures it with ``COUNTER`` (what the fake model bills)."""
    counted = sum(COUNTER.count_message(m) for m in from_langchain(messages))
    return counted + REQUEST_OVERHEAD_TOKENS


class PromptTooLongError(ContextOverflowError):
    """What a provider integration raises: its own error, also a ContextOverflowError."""


OVERFLOW_ERRORS: list[tuple[str, Callable[[int], Exception]]] = [
    ("langchain overflow error", lambda n: ContextOverflowError(f"{n} tokens: over budget")),
    (
        "provider subclass stating sizes",
        lambda n: PromptTooLongError(f"prompt is too long: {n} tokens > {LIMIT} maximum"),
    ),
    (
        "plain error with the provider's text",
        lambda n: ValueError(
            f"This model's maximum context length is {LIMIT} tokens. "
            f"However, your messages resulted in {n} tokens."
        ),
    ),
]


class ScriptedModel(BaseChatModel):
    """Reads ``steps`` files, one tool call per model call, then answers ``done``.

    ``plan`` replaces that script: the tool name and arguments of the n-th
    answer (from 0), None for ``done``. Prompts above ``limit`` tokens are
    rejected with ``overflow(tokens)``; it reports usage like a provider, and
    records every prompt it received.
    """

    steps: int = 40
    tool: str = "read_file"
    plan: Callable[[int], tuple[str, dict[str, Any]] | None] | None = None
    limit: int | None = None
    overflow: Callable[[int], Exception] = OVERFLOW_ERRORS[0][1]
    received: list[list[BaseMessage]] = Field(default_factory=list)
    answered: int = 0
    rejected: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        tokens = prompt_tokens(messages)
        if self.limit is not None and tokens > self.limit:
            self.rejected += 1
            raise self.overflow(tokens)
        step, self.answered = self.answered, self.answered + 1
        message = self.answer(step)
        answer = COUNTER.count_message(message_from_langchain(message))
        message.usage_metadata = {
            "input_tokens": tokens,
            "output_tokens": answer,
            "total_tokens": tokens + answer,
        }
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        yield from stream_answer(self._generate(messages, stop, run_manager, **kw), run_manager)

    def answer(self, step: int) -> AIMessage:
        """The answer to the ``step``-th accepted prompt (from 0): a tool call, or ``done``."""
        if self.plan is not None:
            planned = self.plan(step)
        else:
            planned = None if step >= self.steps else (self.tool, {"path": f"src/mod_{step}.py"})
        if planned is None:
            return AIMessage("done")
        call = {"name": planned[0], "args": planned[1], "id": f"call_{step}"}
        return AIMessage(f"Reading mod_{step} next, {NOTE}", tool_calls=[call])


def stream_answer(result: ChatResult, run_manager: Any) -> Iterator[ChatGenerationChunk]:
    """``result``'s answer as a provider streams it: its words, then its tool calls and usage.

    LangChain's ``GenericFakeChatModel`` drops tool calls when it streams;
    a provider sends them as ``tool_call_chunks`` in the stream.
    """
    message = result.generations[0].message
    assert isinstance(message, AIMessage)
    for token in re.split(r"(\s)", message.text):
        chunk = ChatGenerationChunk(message=AIMessageChunk(content=token))
        if run_manager is not None:
            run_manager.on_llm_new_token(token, chunk=chunk)
        yield chunk
    calls = [
        {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": n}
        for n, c in enumerate(message.tool_calls)
    ]
    last = AIMessageChunk(
        content="",
        tool_call_chunks=calls,  # type: ignore[arg-type]  # the four keys of a ToolCallChunk
        usage_metadata=message.usage_metadata,
        chunk_position="last",
    )
    yield ChatGenerationChunk(message=last)


@tool
def read_file(path: str) -> str:
    """Read a source file."""
    return f"# {path}\n" + "\n".join(f"value_{n} = {n * 7}  # computed" for n in range(5))


@tool
def read_log(path: str) -> str:
    """Read a long log file."""
    return f"# log of {path}\n" + "\n".join(f"step {n}: ok, nothing to report" for n in range(60))


class Recorder(AgentMiddleware):  # type: ignore[type-arg]
    """Outermost middleware: records the agent state's messages at every model call."""

    def __init__(self, engine: ContextEngine) -> None:
        self.engine = engine
        self.transcripts: list[list[BaseMessage]] = []
        self.anchored: list[int] = []  # provider-reported tokens in the engine's estimate

    def _record(self, request: ModelRequest[Any]) -> None:
        system = [request.system_message] if request.system_message is not None else []
        self.transcripts.append([*system, *request.messages])

    def _recorded(self, response: ModelResponse[Any]) -> ModelResponse[Any]:
        usage = self.engine.usage
        self.anchored.append(usage.usage_tokens if usage is not None else 0)
        return response

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> ModelResponse[Any]:
        self._record(request)
        return self._recorded(handler(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        self._record(request)
        return self._recorded(await handler(request))


class Events:
    """The engine's hooks, collected."""

    def __init__(self) -> None:
        self.projected: list[RewriteEvent] = []
        self.recovered: list[RewriteEvent] = []
        self.compacted: list[RewriteEvent] = []

    def engine(self, **options: Any) -> ContextEngine:
        options.setdefault("reserve_tokens", 1_000)
        return ContextEngine.default(
            5_000,
            summarizer=ExtractiveSummarizer(),
            token_counter=COUNTER,
            on_project=self.projected.append,
            on_recover=self.recovered.append,
            on_compact=self.compacted.append,
            **options,
        )


def invoke(
    agent: Any,
    messages: list[BaseMessage],
    mode: str,
    callbacks: Sequence[Any] = (),
    **config: Any,
) -> dict[str, Any]:
    """Run ``agent`` as ``mode`` says; the final state (streamed: the last ``values`` chunk)."""
    payload = {"messages": messages}
    run_config: Any = {"configurable": config, "callbacks": list(callbacks)}
    if mode == "sync":
        return agent.invoke(payload, run_config)  # type: ignore[no-any-return]
    if mode == "async":
        return asyncio.run(agent.ainvoke(payload, run_config))  # type: ignore[no-any-return]
    streamed = ["messages", "values"]
    if mode == "stream":
        return final_state(agent.stream(payload, run_config, stream_mode=streamed))
    return asyncio.run(afinal_state(agent.astream(payload, run_config, stream_mode=streamed)))


def final_state(chunks: Iterator[tuple[str, Any]]) -> dict[str, Any]:
    """The last state a ``stream_mode=["messages", "values"]`` stream gave."""
    states: list[dict[str, Any]] = []
    tokens = 0
    for kind, chunk in chunks:
        if kind == "values":
            states.append(chunk)
        else:
            tokens += 1
    assert tokens > 0  # the model's answers reached the caller token by token
    return states[-1]


async def afinal_state(chunks: AsyncIterator[tuple[str, Any]]) -> dict[str, Any]:
    return final_state(iter([chunk async for chunk in chunks]))


def build(
    model: ScriptedModel,
    engine: ContextEngine,
    tools: Sequence[Any] = (read_file, read_log),
    cap_tool_results: bool = True,
    **options: Any,
) -> tuple[Any, Recorder]:
    recorder = Recorder(engine)
    middleware = [recorder, ContextEngineMiddleware(engine, cap_tool_results=cap_tool_results)]
    agent = create_agent(
        model,
        tools=list(tools),
        system_prompt="You read source files.",
        middleware=middleware,
        **options,
    )
    return agent, recorder


def history(turns: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for n in range(turns):
        messages += [HumanMessage(f"Question {n}: {NOTE}"), AIMessage(f"Answer {n}: {NOTE}")]
    return messages


# ----------------------------------------------------------------------- agent loops


@pytest.mark.parametrize("mode", ALL_MODES)
def test_every_model_call_stays_under_the_threshold_and_commits_leave_a_checkpoint(
    mode: str,
) -> None:
    events = Events()
    engine = events.engine()
    model = ScriptedModel(steps=55)
    agent, recorder = build(model, engine)

    result = invoke(agent, [HumanMessage("Read every module.")], mode)

    assert result["messages"][-1].content == "done"
    assert model.answered == 56
    assert len(model.received) == len(recorder.transcripts) == 56
    commits = [e for e in events.projected if e.committed]
    assert len(commits) >= 2  # the threshold was crossed several times
    assert {e.strategy for e in commits} == {"full_summary"}
    for number, (state, sent) in enumerate(zip(recorder.transcripts, model.received, strict=True)):
        assert prompt_tokens(sent) <= engine.threshold, f"call {number}"
        assert check_view(from_langchain(state), from_langchain(sent)) == [], f"call {number}"
    states = recorder.transcripts
    shrunk = [n for n in range(1, len(states)) if len(states[n]) < len(states[n - 1])]
    assert len(shrunk) == len(commits)  # each commit replaced the state's messages
    assert all(from_langchain(states[n])[1].is_summary for n in shrunk)
    final = from_langchain(result["messages"])
    assert final[0].is_summary
    assert sum(1 for m in final if m.role == "tool") < 55  # the state was really shortened
    # Provider usage anchors every estimate but the first and those of a rewritten view.
    assert [n for n, tokens in enumerate(recorder.anchored) if tokens == 0] == [
        0,
        *(n - 1 for n in shrunk),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_a_projection_changes_what_the_model_sees_not_the_agent_state(mode: str) -> None:
    events = Events()
    engine = events.engine()
    model = ScriptedModel(steps=14, tool="read_log")
    agent, recorder = build(model, engine)

    result = invoke(agent, [HumanMessage("Read the logs.")], mode)

    assert result["messages"][-1].content == "done"
    rewrites = [e for e in events.projected if e.changed]
    assert rewrites
    # View-only rewrites: results capped or cleared in the view, never a commit.
    assert {e.strategy for e in rewrites} <= {"tool_result_cap", "tool_result_microcompact"}
    assert not any(e.committed for e in events.projected)
    logs = [m.content for m in result["messages"] if isinstance(m, ToolMessage)]
    assert len(logs) == 14
    assert all(log.startswith("# log") and len(log) > 1_500 for log in logs)  # state untouched
    shortened = 0
    for state, sent in zip(recorder.transcripts, model.received, strict=True):
        assert prompt_tokens(sent) <= engine.threshold
        assert check_view(from_langchain(state), from_langchain(sent)) == []
        shortened += prompt_tokens(sent) < prompt_tokens(state)
    assert shortened >= 3


# ---------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize(
    "overflow", [f for _, f in OVERFLOW_ERRORS], ids=[n for n, _ in OVERFLOW_ERRORS]
)
def test_an_overflow_is_recovered_and_the_call_retried_once(
    mode: str, overflow: Callable[[int], Exception]
) -> None:
    events = Events()
    model = ScriptedModel(steps=60, limit=LIMIT, overflow=overflow)
    agent, recorder = build(model, events.engine())

    result = invoke(agent, [HumanMessage("Read every module.")], mode)

    assert result["messages"][-1].content == "done"
    assert model.rejected >= 2
    assert len(events.recovered) == model.rejected  # one recovery per rejected call
    assert all(e.committed for e in events.recovered)
    assert len(model.received) == model.answered + model.rejected
    accepted = [sent for sent in model.received if prompt_tokens(sent) <= LIMIT]
    assert len(accepted) == model.answered
    states = recorder.transcripts
    shrunk = [n for n in range(1, len(states)) if len(states[n]) < len(states[n - 1])]
    assert len(shrunk) == model.rejected  # each recovered view was committed
    assert all(from_langchain(states[n])[1].is_summary for n in shrunk)


@pytest.mark.parametrize("mode", MODES)
def test_an_overflow_on_the_retry_surfaces_and_nothing_is_committed(mode: str) -> None:
    events = Events()
    model = ScriptedModel(limit=0)
    agent, _ = build(model, events.engine(), checkpointer=InMemorySaver())
    messages = [*history(20), HumanMessage("Read every module.")]

    with pytest.raises(ContextOverflowError):
        invoke(agent, messages, mode, thread_id="t")

    assert len(model.received) == 2  # the call and one retry
    assert len(events.recovered) == 1
    assert prompt_tokens(model.received[1]) < prompt_tokens(model.received[0])
    state = agent.get_state({"configurable": {"thread_id": "t"}}).values["messages"]
    assert len(state) == len(messages)


@pytest.mark.parametrize("mode", MODES)
def test_an_overflow_nothing_can_shrink_surfaces_without_a_retry(mode: str) -> None:
    events = Events()
    model = ScriptedModel(limit=0)
    agent, _ = build(model, events.engine())

    with pytest.raises(ContextOverflowError):
        invoke(agent, [HumanMessage("hi")], mode)

    assert len(model.received) == 1
    assert not any(e.changed for e in events.recovered)


@pytest.mark.parametrize("mode", MODES)
def test_other_model_errors_surface_untouched(mode: str) -> None:
    events = Events()
    model = ScriptedModel(limit=0, overflow=lambda n: RuntimeError("rate limited"))
    agent, _ = build(model, events.engine())

    with pytest.raises(RuntimeError, match="rate limited"):
        invoke(agent, [*history(20), HumanMessage("go")], mode)

    assert len(model.received) == 1
    assert events.recovered == []


# ---------------------------------------------------------------------------- /compact


@pytest.mark.parametrize("mode", ALL_MODES)
def test_compact_command_compacts_the_state_without_calling_the_model(mode: str) -> None:
    events = Events()
    model = ScriptedModel(steps=10)
    agent, _ = build(model, events.engine(), checkpointer=InMemorySaver())
    invoke(agent, [*history(10), HumanMessage("Read every module.")], mode, thread_id="t")
    calls = len(model.received)

    result = invoke(agent, [HumanMessage("/compact keep the module names")], mode, thread_id="t")

    assert len(model.received) == calls
    assert len(events.compacted) == 1
    state = from_langchain(result["messages"])
    assert state[0].is_summary
    assert "keep the module names" in state[0].summary
    assert result["messages"][-2].content == "/compact keep the module names"
    assert isinstance(result["messages"][-1], AIMessage)
    assert result["messages"][-1].content.startswith("Compacted the conversation")
    assert len(state) < 10 * 2 + 1 + 10 * 2 + 1

    invoke(agent, [HumanMessage("What did you find?")], mode, thread_id="t")

    assert len(model.received) == calls + 1
    assert from_langchain(model.received[-1])[1].is_summary


@pytest.mark.parametrize("mode", MODES)
def test_compact_command_with_nothing_to_compact_only_answers(mode: str) -> None:
    events = Events()
    model = ScriptedModel()
    agent, _ = build(model, events.engine())

    result = invoke(agent, [HumanMessage("/compact")], mode)

    assert model.received == []
    assert [m.content for m in result["messages"]] == [
        "/compact",
        "Nothing to compact: the conversation is already short.",
    ]


def test_compact_command_can_be_left_to_the_model() -> None:
    model = ScriptedModel(steps=0)
    agent = create_agent(
        model, middleware=[ContextEngineMiddleware(Events().engine(), compact_command=False)]
    )

    agent.invoke({"messages": [HumanMessage("/compact")]})

    assert [m.content for m in model.received[0]] == ["/compact"]


# ------------------------------------------------------------------------ reliability


class Exploding:
    name = "exploding"
    uses_llm = True

    def __init__(self) -> None:
        self.calls = 0

    async def apply(
        self, transcript: Sequence[Any], view: Sequence[Any], budget: Budget
    ) -> StrategyResult:
        self.calls += 1
        raise RuntimeError("strategy bug")


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_llm_strategy_still_sends_a_fitting_view_and_the_agent_goes_on(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The failure is on the step and the breaker, not an exception: truncation fits the view."""
    exploding = Exploding()
    engine = ContextEngine(
        2_000, [exploding, HardTruncate()], reserve_tokens=500, token_counter=COUNTER
    )
    model = ScriptedModel(steps=3)
    agent, _ = build(model, engine)

    with caplog.at_level(logging.WARNING, logger="context_engine.integrations.langchain"):
        result = invoke(agent, [*history(20), HumanMessage("go")], mode)

    assert result["messages"][-1].content == "done"
    assert not [r for r in caplog.records if "projection failed" in r.getMessage()]
    assert exploding.calls == 3  # three failed projections opened the breaker; the 4th skipped it
    assert engine.breaker_state == "half_open"
    assert len(model.received) == 4
    assert all(prompt_tokens(sent) <= engine.threshold for sent in model.received)


def test_the_middleware_needs_an_engine() -> None:
    with pytest.raises(ConfigurationError, match=r"ContextEngine\.default"):
        ContextEngineMiddleware(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="compact_command"):
        ContextEngineMiddleware(Events().engine(), compact_command="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cap_tool_results"):
        ContextEngineMiddleware(Events().engine(), cap_tool_results=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_a_capped_tool_message_keeps_its_call_id_name_status_artifact_and_id(mode: str) -> None:
    """The preview the state receives is the tool's own message, shortened, with its fields."""
    from langchain_core.messages import ToolMessage

    middleware = ContextEngineMiddleware(Events().engine())
    output = "\n".join(f"Traceback line {n}: error in handler" for n in range(6_000))
    returned = ToolMessage(
        output, tool_call_id="c1", name="pytest", status="error", id="m1", artifact={"rc": 1}
    )
    small = ToolMessage("ok", tool_call_id="c2", name="pytest")

    def run(message: ToolMessage) -> Any:
        if mode == "sync":
            return middleware.wrap_tool_call(None, lambda request: message)  # type: ignore[arg-type]

        async def handler(request: Any) -> ToolMessage:
            return message

        return asyncio.run(middleware.awrap_tool_call(None, handler))  # type: ignore[arg-type]

    capped = run(returned)
    assert isinstance(capped, ToolMessage)
    assert (capped.tool_call_id, capped.name, capped.status, capped.id, capped.artifact) == (
        "c1",
        "pytest",
        "error",
        "m1",
        {"rc": 1},
    )
    assert len(capped.text) < len(output) // 10
    assert capped.text.splitlines()[0] == output.splitlines()[0]
    assert run(small) is small  # under the cap: the very message
    off = ContextEngineMiddleware(Events().engine(), cap_tool_results=False)
    assert off.wrap_tool_call(None, lambda request: returned) is returned  # type: ignore[arg-type]


# ------------------------------------------------------------------------ observability


@pytest.mark.parametrize("mode", MODES)
def test_engine_spans_are_children_of_the_callers_span(mode: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = Events().engine(tracer_provider=provider)
    agent, _ = build(ScriptedModel(steps=3), engine)

    with provider.get_tracer("app").start_as_current_span("agent run") as root:
        invoke(agent, [HumanMessage("go")], mode)

    projects = [s for s in exporter.get_finished_spans() if s.name == "context_engine.project"]
    assert len(projects) == 4
    root_id = root.get_span_context().span_id
    assert all(s.parent is not None and s.parent.span_id == root_id for s in projects)


def test_tool_results_reach_the_agent_state_unchanged() -> None:
    model = ScriptedModel(steps=2)
    agent, _ = build(model, Events().engine())

    result = agent.invoke({"messages": [HumanMessage("go")]})

    tools = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.tool_call_id for m in tools] == ["call_0", "call_1"]
    assert tools[0].content == read_file.invoke({"path": "src/mod_0.py"})


def test_an_empty_history_reaches_the_model_as_the_system_prompt_alone() -> None:
    model = ScriptedModel(steps=0)
    agent, recorder = build(model, Events().engine())

    result = agent.invoke({"messages": []})

    assert [type(m).__name__ for m in model.received[0]] == ["SystemMessage"]
    assert recorder.anchored == [0]
    assert result["messages"][-1].content == "done"


class RejectsTheFirstCheckpoint(ScriptedModel):
    """Rejects as too long the first prompt that starts with a checkpoint, then answers."""

    summarizer: Any = None
    summaries: list[int] = Field(default_factory=list)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.summaries.append(self.summarizer.calls)
        if from_langchain(messages)[1].is_summary and not self.rejected:
            self.received.append(list(messages))
            self.rejected += 1
            raise ContextOverflowError("prompt is too long")
        return super()._generate(messages, stop, run_manager, **kw)


@pytest.mark.parametrize("mode", MODES)
def test_an_overflow_on_the_call_that_wrote_a_checkpoint_keeps_the_checkpoint(mode: str) -> None:
    """The recovery starts from the checkpoint: the retry sends it, with the cut folded in."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        5_000,
        reserve_tokens=1_000,
        strategies=[FullSummary(summarizer=summarizer, keep_recent_tokens=1_000), HardTruncate()],
        commit_strategies=("full_summary",),
        token_counter=COUNTER,
    )
    model = RejectsTheFirstCheckpoint(steps=0, summarizer=summarizer)
    agent, _ = build(model, engine)

    result = invoke(agent, [*history(40), HumanMessage("Sum it up.")], mode)

    assert result["messages"][-1].content == "done"
    first, retry = (from_langchain(sent) for sent in model.received)
    assert first[1].is_summary
    assert retry[1].is_summary
    assert len(retry) < len(first)
    assert model.summaries[0] >= 1
    # The recovery started from that checkpoint: what it still had to drop was folded
    # into it by requests updating its text, never by summarizing its range again.
    folds = summarizer.requests[model.summaries[0] :]
    assert folds
    assert folds[0].previous_summary
    assert folds[0].previous_summary in first[1].summary  # type: ignore[attr-defined]
    assert from_langchain(result["messages"])[0].text == retry[1].text  # the state keeps it


# ---------------------------------------------------------------------- context providers

STATUS = "Deploy status: green"


@pytest.mark.parametrize("mode", MODES)
def test_provider_blocks_reach_every_model_call_and_never_the_state(mode: str) -> None:
    from context_engine.assembly import CallableProvider, StaticProvider

    events = Events()
    engine = events.engine(
        providers=[
            StaticProvider(text="House rules: be brief.", name="rules"),
            CallableProvider(function=lambda request: STATUS, name="status", placement="tail"),
        ]
    )
    model = ScriptedModel(steps=10)
    agent, _ = build(model, engine, checkpointer=InMemorySaver())
    result = invoke(agent, [*history(10), HumanMessage("Read every module.")], mode, thread_id="t")
    assert len(model.received) == 11
    for sent in model.received:
        texts = [m.content for m in sent]
        assert texts.count("House rules: be brief.") == 1
        assert texts[-1] == STATUS
        assert prompt_tokens(sent) <= engine.threshold
    provided = {"House rules: be brief.", STATUS}
    assert not provided & {m.content for m in result["messages"]}

    compacted = invoke(agent, [HumanMessage("/compact")], mode, thread_id="t")
    assert len(events.compacted) == 1
    assert not provided & {m.content for m in compacted["messages"]}


# ------------------------------------------------------- window and overhead from the runtime

SCHEMA_NOTE = "Give the path relative to the repository root; globs are not expanded. " * 4


@tool
def search_code(
    pattern: str, path: str, language: str, max_results: int, case_sensitive: bool
) -> str:
    """Search the code base for a regular expression and return every matching line.

    Args:
        pattern: The regular expression, in Python syntax, matched line by line.
        path: Where to search. Give the path relative to the repository root.
        language: Only files of this language (python, rust, go, typescript).
        max_results: Stop after this many matches.
        case_sensitive: Match case exactly.
    """
    return grep_output(pattern, max_results)


read_file_documented = tool(
    "read_file",
    description=f"Read a source file and return its whole text. {SCHEMA_NOTE}",
)(read_file.func)


class ToolAwareModel(ScriptedModel):
    """A ScriptedModel that is sent the tool schemas, as a provider is; it reports no usage.

    Like LangChain's own fake models it leaves ``usage_metadata`` unset, so the
    engine has no provider anchor to learn the schemas' size from.
    """

    schemas: list[dict[str, Any]] = Field(default_factory=list)
    requests: list[int] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolAwareModel:  # type: ignore[override]
        self.schemas = [convert_to_openai_tool(t) for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kw)
        tokens = prompt_tokens(messages) + COUNTER.count_text(schema_text(self.schemas))
        self.requests.append(tokens)
        message = result.generations[0].message
        assert isinstance(message, AIMessage)
        message.usage_metadata = None
        return result


class LoopModel(GenericFakeChatModel):
    """LangChain's own fake chat model, with the agent's tools bound as ``create_agent`` binds them.

    It answers from its script and records every request: the messages, and
    their size with the bound tool schemas (what a provider is sent and
    bills). Like LangChain's fake models it reports no usage, so the engine has
    no provider anchor to learn the schemas' size from.
    """

    schemas: list[dict[str, Any]] = Field(default_factory=list)
    received: list[list[BaseMessage]] = Field(default_factory=list)
    requests: list[int] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> LoopModel:  # type: ignore[override]
        self.schemas = [convert_to_openai_tool(t) for t in tools]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.received.append(list(messages))
        schemas = COUNTER.count_text(schema_text(self.schemas))
        self.requests.append(prompt_tokens(messages) + schemas)
        return super()._generate(messages, stop, run_manager, **kw)

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        yield from stream_answer(self._generate(messages, stop, run_manager, **kw), run_manager)


def search_script(steps: int, first: int = 0) -> Iterator[AIMessage]:
    """``steps`` searches with multi-thousand-token outputs, from step ``first``, then ``done``."""
    for step in range(first, first + steps):
        args = {
            "pattern": f"handler_{step}",
            "path": "src",
            "language": "python",
            "max_results": grep_size(step),
            "case_sensitive": False,
        }
        call = {"name": "search_code", "args": args, "id": f"call_{step}"}
        yield AIMessage(f"Searching for handler_{step} next, {NOTE}", tool_calls=[call])
    yield AIMessage("done")


@attrs.define
class LoopProcess:
    """One "process" of an app: its own archive store object, pool, model and agent."""

    agent: Any
    model: LoopModel
    pool: EnginePool
    recorder: Recorder


def assert_fits(process: LoopProcess, threshold: int) -> None:
    """Every request at or under the threshold with its tool schemas, valid, no orphan pairs."""
    calls = zip(process.recorder.transcripts, process.model.received, strict=True)
    for number, (state, sent) in enumerate(calls):
        assert process.model.requests[number] <= threshold, f"request {number}"
        assert orphans(from_langchain(sent)) == [], f"request {number}"
        assert check_view(from_langchain(state), from_langchain(sent)) == [], f"request {number}"


def start_process(
    store: Archive,
    saver: InMemorySaver,
    window: int,
    script: Iterator[AIMessage],
    *,
    count_request: bool = True,
) -> LoopProcess:
    # Every checkpoint is committed: past the per-request cap a call is sent an extracted
    # digest that is not, and the stored history would not start from the newest one.
    pool = EnginePool.archived(
        store,
        100_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=COUNTER,
        max_llm_rewrites_per_request=None,
    )
    model = LoopModel(messages=script, profile={"max_input_tokens": window})
    middleware = ContextEngineMiddleware(
        pool, trigger=("fraction", TRIGGER), count_request=count_request
    )
    recorder = Recorder(pool.engine("t"))
    agent = create_agent(
        model,
        tools=[read_file_documented, search_code],
        system_prompt=INSTRUCTIONS,
        middleware=[recorder, middleware],
        checkpointer=saver,
    )
    return LoopProcess(agent, model, pool, recorder)


def persisted(saver: InMemorySaver) -> bytes:
    """What the checkpointer holds, as bytes: its checkpoints are serialized already."""
    storage = {t: {ns: dict(c) for ns, c in spaces.items()} for t, spaces in saver.storage.items()}
    return pickle.dumps((storage, dict(saver.writes), dict(saver.blobs)))


def restored(data: bytes) -> InMemorySaver:
    """A new checkpointer holding only what ``persisted`` wrote."""
    storage, writes, blobs = pickle.loads(data)
    saver = InMemorySaver()
    for thread, spaces in storage.items():
        for namespace, checkpoints in spaces.items():
            saver.storage[thread][namespace].update(checkpoints)
    saver.writes.update(writes)
    saver.blobs.update(blobs)
    return saver


THREAD = {"configurable": {"thread_id": "t"}}


# Each mode at both windows, and the streamed runs at 8k, where the most checkpoints are written.
LOOP_RUNS = [
    *((mode, window) for mode in MODES for window in WINDOWS),
    *((mode, WINDOWS[0]) for mode in STREAM_MODES),
]


@pytest.mark.parametrize(
    ("mode", "window"), LOOP_RUNS, ids=[f"{m}-{w // 1000}k" for m, w in LOOP_RUNS]
)
def test_a_long_loop_fits_with_its_tool_schemas_and_a_second_process_resumes_it(
    mode: str, window: int, archive_file: Callable[[], SQLiteArchive]
) -> None:
    saver = InMemorySaver()
    first = start_process(archive_file(), saver, window, search_script(LOOP_STEPS))
    result = invoke(first.agent, [HumanMessage("Find every handler.")], mode, thread_id="t")
    uncounted = start_process(
        MemoryArchive(), InMemorySaver(), window, search_script(LOOP_STEPS), count_request=False
    )
    invoke(uncounted.agent, [HumanMessage("Find every handler.")], mode, thread_id="t")

    threshold = int(window * TRIGGER)
    engine = first.pool.engine("t")
    assert result["messages"][-1].content == "done"
    assert (engine.context_window, engine.threshold) == (window, threshold)
    schemas = COUNTER.count_text(schema_text(first.model.schemas))
    assert schemas > 300  # sizeable schemas, so leaving them out matters
    assert engine.overhead_tokens == schemas
    assert len(first.model.requests) == LOOP_STEPS + 1
    assert_fits(first, threshold)
    state = first.agent.get_state(THREAD).values["messages"]
    persisted_state = from_langchain(state)
    assert persisted_state[0].is_summary  # the checkpoint is in the checkpointer's history
    assert max(uncounted.model.requests) > threshold  # the schemas alone push it over

    second = start_process(
        archive_file(), restored(persisted(saver)), window, search_script(3, first=LOOP_STEPS)
    )
    again = invoke(second.agent, [HumanMessage("Find three more.")], mode, thread_id="t")

    assert again["messages"][-1].content == "done"
    resumed = from_langchain(second.model.received[0])
    # The second process reads the persisted history and sends it from its checkpoint on.
    read = from_langchain(second.recorder.transcripts[0])
    assert [m.text for m in read] == [
        INSTRUCTIONS,
        *(m.text for m in persisted_state),
        "Find three more.",
    ]
    assert resumed[1].text == persisted_state[0].text
    assert_fits(second, threshold)
    kept = [m.text for m in persisted_state]
    recalled = asyncio.run(recall_all(second.pool.engine("t"), kept))
    outputs = {grep_output(f"handler_{n}", grep_size(n)) for n in range(LOOP_STEPS)}
    assert outputs - set(kept)  # capped or summarized away from the history ...
    assert outputs <= recalled | set(kept)  # ... and still whole in the archive


def test_an_explicit_window_wins_over_the_model_profile() -> None:
    engine = ContextEngine.default(100_000, token_counter=COUNTER)
    model = ToolAwareModel(steps=2, profile={"max_input_tokens": 8_000})
    middleware = ContextEngineMiddleware(engine, context_window=20_000, trigger=("tokens", 15_000))
    agent = create_agent(model, tools=[read_file], middleware=[middleware])

    invoke(agent, [HumanMessage("Read two modules.")], "sync")

    assert (engine.context_window, engine.threshold) == (20_000, 15_000)


def test_a_model_without_a_profile_keeps_the_engines_window_and_reserve() -> None:
    engine = ContextEngine.default(12_000, reserve_tokens=2_000, overhead_tokens=50)
    model = ToolAwareModel(steps=1)
    agent = create_agent(model, tools=[read_file], middleware=[ContextEngineMiddleware(engine)])

    invoke(agent, [HumanMessage("Read a module.")], "sync")

    assert (engine.context_window, engine.threshold) == (12_000, 10_000)
    schemas = engine.counter.count_text(schema_text(model.schemas))
    assert engine.overhead_tokens == 50 + schemas  # the engine's own overhead is kept


@pytest.mark.parametrize(
    "trigger", [("fraction", 1.5), ("fraction", 0), ("tokens", -3), ("percent", 80), 0.8]
)
def test_a_bad_trigger_is_refused_with_its_form(trigger: Any) -> None:
    engine = ContextEngine.default(8_000)
    with pytest.raises(ConfigurationError, match="trigger must be"):
        ContextEngineMiddleware(engine, trigger=trigger)


# ------------------------------------------------------------------ engines per thread


class ThreadModel(ScriptedModel):
    """Answers each LangGraph thread by its own script: seven log reads, then ``done``, per turn.

    It records the messages each thread's calls were sent, and reports usage like a provider.
    """

    counts: dict[str, int] = Field(default_factory=dict)
    views: dict[str, list[list[BaseMessage]]] = Field(default_factory=dict)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        # The newest request names its thread (get_config() fails in an async run on
        # Python 3.10, where LangGraph's context variables do not reach the model).
        newest = next(m for m in reversed(messages) if m.type == "human")
        thread = str(newest.content).split("thread ")[1].split(":")[0]
        self.views.setdefault(thread, []).append(list(messages))
        step = self.counts.get(thread, 0)
        self.counts[thread] = step + 1
        if step % 8 == 7:
            message = AIMessage(f"{thread}: done")
        else:
            call = {"name": "read_log", "args": {"path": f"{thread}/{step}.log"}, "id": f"c{step}"}
            message = AIMessage(f"{thread}: reading log {step}, {NOTE}", tool_calls=[call])
        tokens = prompt_tokens(messages)
        message.usage_metadata = {
            "input_tokens": tokens,
            "output_tokens": 0,
            "total_tokens": tokens,
        }
        return ChatResult(generations=[ChatGeneration(message=message)])


def masked(content: Any) -> Any:
    """``content`` with every archive reference in its texts replaced by ``arc-*``."""
    if isinstance(content, str):
        return REFERENCE_PATTERN.sub("arc-*", content)
    if isinstance(content, list):
        return [masked(item) for item in content]
    if isinstance(content, dict):
        return {key: masked(value) for key, value in content.items()}
    return content


def shape(messages: Sequence[BaseMessage]) -> list[tuple[Any, ...]]:
    """What a model call was sent, without the ids LangGraph and the commits generate.

    Archive references hash the messages they name, LangGraph's random ids
    included, so they are masked too.
    """
    return [
        (
            m.type,
            masked(m.content),
            [(c["name"], c["args"], c["id"]) for c in getattr(m, "tool_calls", [])],
            getattr(m, "tool_call_id", None),
        )
        for m in messages
    ]


class DownForThreadA:
    """Summarizes thread ``b``; fails on thread ``a``'s history (its provider is down)."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()

    def __call__(self, request: SummaryRequest) -> str:
        if any("a: reading log" in m.text for m in request.messages):
            raise RuntimeError("the summarizer is down for thread a")
        return self.inner(request)


THREAD_OPTIONS: dict[str, Any] = {
    "reserve_tokens": 1_000,
    "token_counter": COUNTER,
    "max_consecutive_failures": 1,  # the breaker opens on the first failed summary
    "breaker_cooldown_calls": 100,
}


def thread_engine(thread: str) -> ContextEngine:
    """A conversation's engine; its breaker opens on the first failed summary."""
    return ContextEngine.default(5_000, summarizer=DownForThreadA(), **THREAD_OPTIONS)


def archived_engine(thread: str) -> ContextEngine:
    """`thread_engine` keeping its originals in an archive of its own."""
    return ContextEngine.default(
        5_000,
        summarizer=DownForThreadA(),
        archive=MemoryArchive(),
        session_id=thread,
        **THREAD_OPTIONS,
    )


# How an app gets its engines: a pool, and the one engine a pool-less app would share.
ENGINES: dict[str, tuple[Callable[[], EnginePool], Callable[[str], ContextEngine]]] = {
    "a factory": (lambda: EnginePool(thread_engine), thread_engine),
    "an archive": (
        lambda: EnginePool.archived(
            MemoryArchive(), 5_000, summarizer=DownForThreadA(), **THREAD_OPTIONS
        ),
        archived_engine,
    ),
}


def run_threads(
    threads: Sequence[str], mode: str, engine: ContextEngine | EnginePool
) -> dict[str, list[list[tuple[Any, ...]]]]:
    """Three turns per thread, the threads taking turns, through one agent and checkpointer."""
    model = ThreadModel()
    agent = create_agent(
        model,
        tools=[read_log],
        system_prompt="You read logs.",
        middleware=[ContextEngineMiddleware(engine)],
        checkpointer=InMemorySaver(),
    )
    for turn in range(3):
        for thread in threads:
            request = HumanMessage(f"Turn {turn} of thread {thread}: read the logs.")
            invoke(agent, [request], mode, thread_id=thread)
    return {thread: [shape(view) for view in views] for thread, views in model.views.items()}


@pytest.mark.parametrize("engines", list(ENGINES.values()), ids=list(ENGINES))
@pytest.mark.parametrize("mode", MODES)
def test_interleaved_threads_get_the_views_each_gets_alone(
    mode: str, engines: tuple[Callable[[], EnginePool], Callable[[str], ContextEngine]]
) -> None:
    pool, one_engine = engines
    together = run_threads(["a", "b"], mode, pool())
    alone = {thread: run_threads([thread], mode, pool())[thread] for thread in ("a", "b")}
    shared = run_threads(["a", "b"], mode, one_engine("shared"))

    assert len(together["a"]) == len(together["b"]) == 24
    assert together == alone
    # One engine for both: thread a's failing summaries open the breaker thread b then meets.
    assert shared["a"] == alone["a"]
    assert shared["b"] != alone["b"]


def test_the_pool_keeps_the_most_recently_used_threads() -> None:
    built: list[str] = []

    def factory(thread: str) -> ContextEngine:
        built.append(thread)
        return thread_engine(thread)

    pool = EnginePool(factory, max_conversations=2)
    first = pool.engine("a")
    pool.engine("b")
    assert pool.engine("a") is first  # used again: kept, not rebuilt
    pool.engine("c")  # "b" is now the least recently used: dropped

    assert list(pool) == ["a", "c"]
    assert "b" not in pool
    assert len(pool) == 2
    assert built == ["a", "b", "c"]
    with pytest.raises(ConfigurationError, match="max_conversations"):
        EnginePool(factory, max_conversations=0)
    with pytest.raises(ConfigurationError, match="must return a ContextEngine"):
        EnginePool(lambda thread: None).engine("a")  # type: ignore[arg-type,return-value]
