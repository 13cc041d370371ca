"""The agent loops of `benchmarks/adapters.py`: each runtime's own loop around a fake model.

Each loop is the runtime's agent (LangChain ``create_agent``, a pydantic-ai
``Agent``, a Strands ``Agent``, an Agents SDK ``Agent`` run with
`ContextEngineProvider.run_config`) with our adapter over an archived
`EnginePool`, a code-search tool whose outputs run to several thousand tokens,
tool schemas and instructions of a few hundred tokens, and a fake model of the
runtime's own kind (LangChain ``GenericFakeChatModel``, pydantic-ai
``FunctionModel``, a minimal Strands ``Model``, the Agents SDK's
``ScriptedModel``) that searches ``steps`` times and then answers. The model
reports no usage, so the engine cannot learn the request's size from a
provider anchor; every request is measured as sent: its messages with the
engine's counter, the request framing, and the tool schemas and instructions
beside them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from context_engine import ExtractiveSummarizer, Message, TokenCounter
from context_engine.archive import MemoryArchive
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.conversations import EnginePool
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS

TRIGGER = 0.8
INSTRUCTIONS = "You search code bases and answer with file and line numbers. " * 10
PROMPT = "Find every handler."
NOTE = "The matches so far point at the handler module, so I search the next name. " * 4


def grep_size(step: int) -> int:
    """How many matches the ``step``-th search returns: 80 to 319 lines."""
    return 80 + (step * 97) % 240


def grep_output(pattern: str, max_results: int) -> str:
    """A repository search's output: ``max_results`` matching lines."""
    lines = (
        f"src/pkg/module_{n % 37:02d}.py:{n * 3 + 1}: def {pattern}_{n}(value): return value * {n}"
        for n in range(max_results)
    )
    return f"{max_results} matches for {pattern!r}:\n" + "\n".join(lines)


def search_code(pattern: str, path: str, language: str, max_results: int) -> str:
    """Search the code base for a regular expression and return every matching line.

    Args:
        pattern: The regular expression, in Python syntax, matched line by line against
            every file under the path; groups are ignored.
        path: Where to search, relative to the repository root; globs are not expanded.
        language: Only files of this language: python, rust, go or typescript.
        max_results: Stop after this many matches; the rest are counted, not listed.
    """
    return grep_output(pattern, max_results)


def search_args(step: int) -> dict[str, Any]:
    return {
        "pattern": f"handler_{step}",
        "path": "src",
        "language": "python",
        "max_results": grep_size(step),
    }


@dataclass
class Loop:
    """What one agent loop sent: each request's tokens as billed, and what the engine measured."""

    threshold: int
    beside: int = 0  # tool schemas and instructions, tokens
    requests: list[int] = field(default_factory=list)
    measured: list[int] = field(default_factory=list)  # the engine's usage of each view
    finished: bool = False
    checkpoint: bool = False  # the runtime's history starts with a checkpoint


def pool(counter: TokenCounter) -> EnginePool:
    return EnginePool.archived(
        MemoryArchive(), 100_000, summarizer=ExtractiveSummarizer(), token_counter=counter
    )


def billed(counter: TokenCounter, view: Sequence[Message], beside: int) -> int:
    return sum(counter.count_message(m) for m in view) + REQUEST_OVERHEAD_TOKENS + beside


def measured(engines: EnginePool) -> int:
    usage = engines.engine(next(iter(engines))).usage
    return usage.tokens if usage is not None else 0


def langchain_loop(window: int, steps: int, count_request: bool, counter: TokenCounter) -> Loop:
    """``create_agent`` with `ContextEngineMiddleware` and a ``GenericFakeChatModel``."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.checkpoint.memory import InMemorySaver

    from context_engine.formats.langchain import from_langchain
    from context_engine.integrations.langchain import ContextEngineMiddleware

    loop, engines = Loop(int(window * TRIGGER)), pool(counter)

    class Model(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Model:  # type: ignore[override]
            schemas = schema_text(convert_to_openai_tool(t) for t in tools)
            loop.beside = counter.count_text(schemas)
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            loop.requests.append(billed(counter, from_langchain(messages), loop.beside))
            loop.measured.append(measured(engines))
            return super()._generate(messages, *args, **kwargs)

    def script() -> Iterator[AIMessage]:
        for step in range(steps):
            call = {"name": "search_code", "args": search_args(step), "id": f"call_{step}"}
            yield AIMessage(f"Step {step}. {NOTE}", tool_calls=[call])
        yield AIMessage("done")

    agent = create_agent(
        Model(messages=script(), profile={"max_input_tokens": window}),
        tools=[tool(search_code)],
        system_prompt=INSTRUCTIONS,
        middleware=[
            ContextEngineMiddleware(
                engines, trigger=("fraction", TRIGGER), count_request=count_request
            )
        ],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "bench"}}
    result = agent.invoke({"messages": [HumanMessage(PROMPT)]}, config)
    loop.finished = result["messages"][-1].content == "done"
    state = agent.get_state(config).values["messages"]
    loop.checkpoint = from_langchain(state)[0].is_summary
    return loop


def pydantic_ai_loop(window: int, steps: int, count_request: bool, counter: TokenCounter) -> Loop:
    """An ``Agent`` with `ContextEngineCapability`, instructions and a ``FunctionModel``."""
    from pydantic_ai import Agent
    from pydantic_ai import messages as pm
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import RequestUsage, UsageLimits

    from context_engine.formats.pydantic_ai import from_pydantic_ai
    from context_engine.integrations.pydantic_ai import ContextEngineCapability

    loop, engines = Loop(int(window * TRIGGER)), pool(counter)
    # Unmeasured: FunctionModel would otherwise report a word-count estimate, which the
    # engine would take as the provider's usage anchor.
    unmeasured = RequestUsage(unmeasured_requests=1)

    def answer(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        tools = [*info.function_tools, *info.output_tools]
        schemas = schema_text(
            {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
            for t in tools
        )
        loop.beside = counter.count_text(schemas) + counter.count_text(info.instructions or "")
        loop.requests.append(billed(counter, from_pydantic_ai(messages), loop.beside))
        loop.measured.append(measured(engines))
        step = len(loop.requests) - 1
        if step >= steps:
            return pm.ModelResponse(parts=[pm.TextPart("done")], usage=unmeasured)
        parts = [
            pm.TextPart(f"Step {step}. {NOTE}"),
            pm.ToolCallPart("search_code", search_args(step), f"call_{step}"),
        ]
        return pm.ModelResponse(parts=parts, usage=unmeasured)

    capability = ContextEngineCapability(
        engines, trigger=("fraction", TRIGGER), count_request=count_request
    )
    agent = Agent(
        FunctionModel(answer, profile={"context_window": window}),
        instructions=INSTRUCTIONS,
        tools=[search_code],
        capabilities=[capability],
    )
    result = asyncio.run(agent.run(PROMPT, usage_limits=UsageLimits(request_limit=None)))
    loop.finished = result.output == "done"
    loop.checkpoint = from_pydantic_ai(result.all_messages())[0].is_summary
    return loop


def strands_loop(window: int, steps: int, count_request: bool, counter: TokenCounter) -> Loop:
    """A Strands ``Agent`` with `ContextEngineConversationManager` and a minimal ``Model``."""
    from strands import Agent, tool
    from strands.models import Model

    from context_engine.formats.strands import from_strands
    from context_engine.integrations.strands import ContextEngineConversationManager

    loop, engines = Loop(int(window * TRIGGER)), pool(counter)

    class Searcher(Model):
        def update_config(self, **model_config: Any) -> None:
            pass

        def get_config(self) -> dict[str, Any]:
            return {"context_window_limit": window}

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(
            self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kw: Any
        ) -> AsyncIterator[dict[str, Any]]:
            loop.beside = counter.count_text(schema_text(tool_specs or ()))
            view = from_strands(messages, system_prompt=system_prompt)
            loop.requests.append(billed(counter, view, loop.beside))
            loop.measured.append(measured(engines))
            step = len(loop.requests) - 1
            for event in _strands_events(step, steps):
                yield event

    agent = Agent(
        model=Searcher(),
        tools=[tool(search_code)],
        system_prompt=INSTRUCTIONS,
        callback_handler=None,
        conversation_manager=ContextEngineConversationManager(
            engines, trigger=("fraction", TRIGGER), count_request=count_request
        ),
    )
    result = agent(PROMPT)
    loop.finished = str(result).strip() == "done"
    loop.checkpoint = from_strands(agent.messages)[0].is_summary
    return loop


def openai_agents_loop(window: int, steps: int, count_request: bool, counter: TokenCounter) -> Loop:
    """An Agents SDK ``Agent`` run with `ContextEngineProvider.run_config` and a ``ScriptedModel``.

    The agent names its model; a ``ModelProvider`` resolves the name to the
    scripted model, so the provider wraps it as it would a real one, and a
    ``SQLiteSession`` keeps the history. The SDK's models state no window, so
    the provider is given it. The instructions reach the engine as the leading
    system message, so they are counted in both runs; ``count_request`` adds
    the tool schemas.
    """
    from agents import Agent, Runner, SQLiteSession, function_tool
    from agents.models.interface import Model, ModelProvider
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

    from context_engine.formats.openai_agents import from_openai_agents
    from context_engine.integrations.openai_agents import ContextEngineProvider

    loop, engines = Loop(int(window * TRIGGER)), pool(counter)

    def answer(call: ModelCall) -> ModelStep:
        schemas = schema_text(
            {"name": t.name, "description": t.description, "parameters": t.params_json_schema}
            for t in call.tools
            if hasattr(t, "params_json_schema")
        )
        loop.beside = counter.count_text(schemas)
        head = [Message.system(call.system_instructions)] if call.system_instructions else []
        view = [*head, *from_openai_agents(call.input)]
        loop.requests.append(billed(counter, view, loop.beside))
        loop.measured.append(measured(engines))
        step = len(loop.requests) - 1
        if step >= steps:  # no usage reported: the engine has no provider anchor
            return ModelStep(output=[assistant_message("done", item_id="msg_done")])
        output = [
            assistant_message(f"Step {step}. {NOTE}", item_id=f"msg_{step}"),
            function_call("search_code", search_args(step), call_id=f"call_{step}"),
        ]
        return ModelStep(output=output)

    class Models(ModelProvider):
        def __init__(self, model: Model) -> None:
            self.model = model

        def get_model(self, model_name: str | None) -> Model:
            return self.model

    scripted = ScriptedModel([ModelStep.respond(answer) for _ in range(steps + 1)])
    provider = ContextEngineProvider(
        engines,
        model_provider=Models(scripted),
        context_window=window,
        trigger=("fraction", TRIGGER),
        count_request=count_request,
    )
    agent: Agent[Any] = Agent(
        name="searcher",
        instructions=INSTRUCTIONS,
        model="searcher",
        tools=[function_tool(search_code)],
    )
    session = SQLiteSession("bench")

    async def run() -> tuple[Any, list[Any]]:
        config = provider.run_config(session, tracing_disabled=True)
        result = await Runner.run(
            agent, PROMPT, session=session, run_config=config, max_turns=steps + 2
        )
        return result.final_output, await session.get_items()

    try:
        output, stored = asyncio.run(run())
    finally:
        session.close()
    loop.finished = output == "done"
    loop.checkpoint = from_openai_agents(stored)[0].is_summary  # the commit stored at run end
    return loop


def _strands_events(step: int, steps: int) -> list[dict[str, Any]]:
    """The stream of one answer: a search with its reasoning, or ``done``; no usage."""
    usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    end = {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}
    if step >= steps:
        text = [{"contentBlockDelta": {"delta": {"text": "done"}}}, {"contentBlockStop": {}}]
        stop = {"messageStop": {"stopReason": "end_turn"}}
        return [{"messageStart": {"role": "assistant"}}, *text, stop, end]
    call = {"toolUseId": f"call_{step}", "name": "search_code"}
    arguments = json.dumps(search_args(step))
    return [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": f"Step {step}. {NOTE}"}}},
        {"contentBlockStop": {}},
        {"contentBlockStart": {"start": {"toolUse": call}}},
        {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}},
        {"contentBlockStop": {}},
        {"messageStop": {"stopReason": "tool_use"}},
        end,
    ]


RUNTIMES: dict[str, tuple[str, Callable[[int, int, bool, TokenCounter], Loop]]] = {
    "langchain": ("langchain", langchain_loop),
    "pydantic-ai": ("pydantic_ai", pydantic_ai_loop),
    "strands": ("strands", strands_loop),
    "openai-agents": ("agents", openai_agents_loop),
}
"""Each runtime: the module that must import for it to run, and its loop."""
