"""The OpenAI Agents SDK adapter: real runner loops with the SDK's scripted model and real tools."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("agents", reason=needs("openai-agents"))

import openai
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tracing import TracingProcessor, get_trace_provider, set_trace_provider
from agents.tracing.provider import DefaultTraceProvider
from agents.usage import Usage as AgentsUsage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from context_engine import ContextEngine, ContextSummary, Message, Summarizer, ToolCall, Usage
from context_engine.errors import ConfigurationError
from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents
from context_engine.integrations._openai_agents_filter import _tool_schemas
from context_engine.integrations._openai_agents_state import (
    Commit,
    Commits,
    MessageCache,
    MessageCaches,
)
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.openai_agents import (
    ContextEngineInputFilter,
    ContextEngineModel,
    ContextEngineSession,
)
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS
from tests.provider_errors import openai_status_error

pytestmark = pytest.mark.extra("openai-agents")

INSTRUCTIONS = "You are a careful coding agent. Read the modules before you change them."
TOOL_SCHEMA_TOKENS = 50  # what the fake provider bills on top of the messages


@function_tool
def read_file(path: str) -> str:
    """Read a source file of the repository."""
    return f"# {path}\n" + "\n".join(f"line {n}: value = compute({n})" for n in range(30))


def overflow() -> openai.APIStatusError:
    return openai_status_error(
        400,
        "This model's maximum context length is 2048 tokens. However, your messages resulted "
        "in 3100 tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
    )


@attrs.define
class Harness:
    """An engine, its filter, and what every model call received."""

    counter: FixedTokenCounter
    engine: ContextEngine
    input_filter: ContextEngineInputFilter
    events: list[Any] = attrs.field(factory=list)
    recoveries: list[Any] = attrs.field(factory=list)
    received: list[tuple[list[Any], str | None]] = attrs.field(factory=list)

    async def recording_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """The filter, remembering the full history the SDK passed in."""
        self.received.append((list(data.model_data.input), data.model_data.instructions))
        return await self.input_filter(data)

    def run_config(self, **options: Any) -> RunConfig:
        options.setdefault("tracing_disabled", True)
        return RunConfig(call_model_input_filter=self.recording_filter, **options)

    def view(self, call: ModelCall) -> list[Message]:
        """What one model call received, as messages (the instructions first)."""
        head = [Message.system(call.system_instructions)] if call.system_instructions else []
        return head + from_openai_agents(call.input)

    def transcript(self, index: int) -> list[Message]:
        """The full history the SDK held at model call ``index``."""
        items, instructions = self.received[index]
        return [Message.system(instructions or ""), *from_openai_agents(items)]

    def tokens(self, messages: list[Message]) -> int:
        return sum(self.counter.count_message(m) for m in messages) + REQUEST_OVERHEAD_TOKENS

    def answer(self, call: ModelCall, text: str, *, call_id: str | None = None) -> ModelStep:
        """The answer to ``call``: ``text``, a read_file call unless ``call_id`` is None, usage."""
        output = [assistant_message(text, item_id=f"msg_{call_id or 'final'}")]
        if call_id is not None:
            output.append(function_call("read_file", {"path": f"{call_id}.py"}, call_id=call_id))
        prompt = self.tokens(self.view(call)) + TOOL_SCHEMA_TOKENS
        usage = AgentsUsage(requests=1, input_tokens=prompt, output_tokens=40)
        usage.total_tokens = prompt + 40
        return ModelStep(output=output, usage=usage)

    def respond(self, text: str, *, call_id: str | None = None) -> ModelStep:
        """A scripted step answering with `answer`."""
        return ModelStep.respond(lambda call: self.answer(call, text, call_id=call_id))


def make_harness(
    window: int = 3000,
    reserve: int | None = 600,
    summarizer: Summarizer | None = None,
    cap_tool_results: bool = True,
    **options: Any,
) -> Harness:
    """A harness; ``options`` go to ``ContextEngine.default`` (``reserve=None``: its default)."""
    counter = FixedTokenCounter()
    harness = Harness(counter, None, None)  # type: ignore[arg-type]  # filled below
    # These runs exercise checkpoints by default, which a tool-result cap would make rare.
    options.setdefault("tool_result_cap", None)
    harness.engine = ContextEngine.default(
        window,
        summarizer=summarizer or ExtractiveSummarizer(),
        token_counter=counter,
        reserve_tokens=reserve,
        on_project=harness.events.append,
        on_recover=harness.recoveries.append,
        **options,
    )
    harness.input_filter = ContextEngineInputFilter(
        harness.engine, cap_tool_results=cap_tool_results
    )
    return harness


def steps(harness: Harness, count: int, tag: str = "s") -> list[ModelStep]:
    """``count`` tool steps with a reasoned sentence each, then a final answer."""
    script = [
        harness.respond(
            f"Step {n}: reading module {n} because the parser calls it on nested groups; "
            "progress so far is noted here in a full sentence.",
            call_id=f"{tag}{n}",
        )
        for n in range(count)
    ]
    return [*script, harness.respond(f"{tag}: done")]


def agent_for(model: Model) -> Agent[Any]:
    return Agent(name="coder", instructions=INSTRUCTIONS, model=model, tools=[read_file])


# ------------------------------------------------------------------- the agent loop


async def test_agent_loop_keeps_every_model_call_under_the_threshold_with_checkpoints() -> None:
    """A long run crosses the threshold many times; every call fits, keeps the invariants."""
    harness = make_harness()
    model = ScriptedModel(steps(harness, 40))
    wrapped = ContextEngineModel(model, harness.input_filter)

    result = await Runner.run(
        agent_for(wrapped),
        "Fix the nested parentheses bug.",
        run_config=harness.run_config(),
        max_turns=60,
    )

    assert result.final_output == "s: done"
    calls = model.calls
    assert len(calls) == 41
    threshold = harness.engine.threshold
    full_sizes = [harness.tokens(harness.transcript(i)) for i in range(len(calls))]
    assert sum(size > threshold for size in full_sizes) >= 30  # the history really overflowed
    assert sum(e.committed for e in harness.events) >= 2
    assert sum(e.changed for e in harness.events) >= 10
    views = [harness.view(call) for call in calls]
    first_commit = next(i for i, view in enumerate(views) if view[1].is_summary)
    for index, view in enumerate(views):
        assert harness.tokens(view) <= threshold, index
        assert check_view(harness.transcript(index), view) == [], index
        assert view[1].is_summary == (index >= first_commit), index
    checkpoints = {view[1].text for view in views if view[1].is_summary}
    assert len(checkpoints) >= 2  # later commits replaced the first checkpoint


async def test_usage_reported_by_the_model_anchors_the_engine_estimate() -> None:
    """Each response's usage reaches the engine: tool schemas the counter misses are seen."""
    harness = make_harness(window=20_000, reserve=4096)
    model = ScriptedModel(steps(harness, 3))
    usages = []

    async def spy(data: CallModelData[Any]) -> ModelInputData:
        result = await harness.recording_filter(data)
        usages.append(harness.engine.usage)
        return result

    config = RunConfig(call_model_input_filter=spy, tracing_disabled=True)
    await Runner.run(
        agent_for(ContextEngineModel(model, harness.input_filter)), "go", run_config=config
    )

    anchored = [u.usage_tokens for u in usages]
    assert anchored[0] == 0  # nothing reported yet
    assert all(tokens > 0 for tokens in anchored[1:])
    for usage, call in zip(usages[1:], model.calls[1:], strict=True):
        counted = harness.tokens(harness.view(call))
        assert usage.tokens >= counted + TOOL_SCHEMA_TOKENS - 40  # the schema overhead is in


async def test_streamed_run_is_projected_like_a_plain_run() -> None:
    """``Runner.run_streamed`` goes through the same filter; every call fits."""
    harness = make_harness()
    model = ScriptedModel(steps(harness, 25))
    result = Runner.run_streamed(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "Fix it.",
        run_config=harness.run_config(),
        max_turns=40,
    )
    async for _ in result.stream_events():
        pass

    assert result.final_output == "s: done"
    assert all(call.streamed for call in model.calls)
    assert any(e.committed for e in harness.events)
    for index, call in enumerate(model.calls):
        view = harness.view(call)
        assert harness.tokens(view) <= harness.engine.threshold
        assert check_view(harness.transcript(index), view) == []


@pytest.fixture
def sdk_default_loop() -> Iterator[None]:
    """``Runner.run_sync`` leaves the thread's default loop open: close it afterwards."""
    yield
    policy = asyncio.get_event_loop_policy()
    policy.get_event_loop().close()
    policy.set_event_loop(None)


@pytest.mark.usefixtures("sdk_default_loop")
def test_run_sync_goes_through_the_same_filter() -> None:
    """The blocking runner drives the same async filter: one body, no second path."""
    harness = make_harness()
    model = ScriptedModel(steps(harness, 25))
    result = Runner.run_sync(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "Fix it.",
        run_config=harness.run_config(),
        max_turns=40,
    )
    assert result.final_output == "s: done"
    assert any(e.committed for e in harness.events)
    assert all(harness.tokens(harness.view(c)) <= harness.engine.threshold for c in model.calls)


async def test_later_runs_that_continue_the_history_start_from_the_commit() -> None:
    """``result.to_input_list()`` fed back in: the filter still puts its checkpoint first."""
    harness = make_harness()
    model = ScriptedModel([*steps(harness, 25, "a"), *steps(harness, 2, "b")])
    agent = agent_for(ContextEngineModel(model, harness.input_filter))
    first = await Runner.run(agent, "Fix it.", run_config=harness.run_config(), max_turns=40)
    assert harness.input_filter.commit is not None
    calls_before = len(model.calls)
    # Stored after the run (a later run's checkpoint commits a longer history).
    stored = harness.input_filter.apply_commit(first.to_input_list())
    assert len(stored) < len(first.to_input_list())
    assert isinstance(from_openai_agents(stored)[0], ContextSummary)

    history = [*first.to_input_list(), {"role": "user", "content": "Now the lexer."}]
    await Runner.run(agent, history, run_config=harness.run_config(), max_turns=40)

    later = [harness.view(call) for call in model.calls[calls_before:]]
    assert len(later) == 3
    assert all(view[1].is_summary for view in later)


# ------------------------------------------------------------------- sub-agents


@attrs.define
class Orchestrator:
    """A parent agent's script: tool steps until its first checkpoint, a sub-agent, then more.

    Records, for each of the parent's calls, how many summaries had been paid for.
    """

    harness: Harness
    summarizer: RecordingSummarizer
    delegated_at: int | None = None
    summaries: list[int] = attrs.field(factory=list)

    def answer(self, call: ModelCall) -> ModelStep:
        index = len(self.summaries)
        self.summaries.append(self.summarizer.calls)
        if self.delegated_at is None and self.harness.view(call)[1].is_summary:
            self.delegated_at = index
            task = {"input": "Check that the lexer handles nested parentheses."}
            return ModelStep(output=[function_call("lexer_expert", task, call_id="sub")])
        if self.delegated_at is not None and index >= self.delegated_at + 3:
            return ModelStep(output=[assistant_message("All checked.")])
        text = f"Step {index}: reading module {index}, which the parser calls on nested groups."
        return self.harness.answer(call, text, call_id=f"p{index}")


async def test_a_sub_agent_under_the_same_run_config_keeps_the_parents_checkpoint() -> None:
    """``Agent.as_tool``: the sub-agent's fresh input is its own conversation for the filter."""
    summarizer = RecordingSummarizer()
    harness = make_harness(summarizer=summarizer)
    script = Orchestrator(harness, summarizer)
    parent_model = ScriptedModel([ModelStep.respond(script.answer) for _ in range(60)])
    sub_model = ScriptedModel(
        [harness.respond("Reading the lexer.", call_id="lex"), harness.respond("Lexer is fine.")]
    )
    expert = Agent(
        name="lexer_expert",
        instructions="You review the lexer.",
        model=ContextEngineModel(sub_model, harness.input_filter),
        tools=[read_file],
    )
    parent = Agent(
        name="coder",
        instructions=INSTRUCTIONS,
        model=ContextEngineModel(parent_model, harness.input_filter),
        tools=[read_file, expert.as_tool("lexer_expert", "Reviews the lexer.")],
    )

    result = await Runner.run(parent, "Fix it.", run_config=harness.run_config(), max_turns=60)

    assert result.final_output == "All checked."
    assert script.delegated_at is not None
    assert len(sub_model.calls) == 2  # the sub-agent ran, through the same filter
    assert [call.input[0] for call in sub_model.calls] == [
        {"role": "user", "content": "Check that the lexer handles nested parentheses."}
    ] * 2
    parent_calls = parent_model.calls
    before, *after = parent_calls[script.delegated_at :]
    assert len(after) == 3
    checkpoint = harness.view(before)[1]
    assert checkpoint.is_summary
    for call in after:  # the parent goes on from its own checkpoint
        assert harness.view(call)[1] == checkpoint
    paid = script.summaries[script.delegated_at]
    assert paid >= 1
    assert summarizer.calls == paid  # nobody summarized the parent's history again


# ------------------------------------------------------------------- overflow


def overflow_script(harness: Harness, *, overflows: int) -> list[Any]:
    """Six tool steps, the provider's context-length error(s), then two more steps."""
    return [*steps(harness, 6)[:-1], *[overflow()] * overflows, *steps(harness, 2, "t")]


async def run_agent(harness: Harness, model: Model, *, streamed: bool) -> Any:
    agent = agent_for(ContextEngineModel(model, harness.input_filter))
    config = harness.run_config()
    if not streamed:
        return (await Runner.run(agent, "Fix it.", run_config=config, max_turns=20)).final_output
    result = Runner.run_streamed(agent, "Fix it.", run_config=config, max_turns=20)
    async for _ in result.stream_events():
        pass
    return result.final_output


@pytest.mark.parametrize("streamed", [False, True], ids=["get_response", "stream_response"])
async def test_context_length_error_is_recovered_and_the_call_retried_once(
    streamed: bool,
) -> None:
    """The rejected call is retried once with the recovered view, which later calls keep."""
    harness = make_harness(window=8000, reserve=1000)
    model = ScriptedModel(overflow_script(harness, overflows=1))

    assert await run_agent(harness, model, streamed=streamed) == "t: done"

    assert len(harness.recoveries) == 1
    rejected, retried, after = model.calls[6], model.calls[7], model.calls[8]
    assert retried.input != rejected.input
    assert harness.tokens(harness.view(retried)) < harness.tokens(harness.view(rejected))
    assert check_view(harness.transcript(6), harness.view(retried)) == []
    assert after.input[: len(retried.input)] == retried.input  # the recovery was committed
    assert len(model.calls) == 10


@pytest.mark.parametrize("streamed", [False, True], ids=["get_response", "stream_response"])
async def test_a_second_context_length_error_surfaces(streamed: bool) -> None:
    """Recovery happens once; the retry's own overflow reaches the caller unchanged."""
    harness = make_harness(window=8000, reserve=1000)
    model = ScriptedModel(overflow_script(harness, overflows=2))

    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        await run_agent(harness, model, streamed=streamed)

    assert len(harness.recoveries) == 1
    assert len(model.calls) == 8


async def test_an_overflow_nothing_can_be_cut_for_surfaces_without_a_retry() -> None:
    """The only message is the user's request: recovery shrinks nothing, so no second call."""
    harness = make_harness()
    model = ScriptedModel([overflow()])

    with pytest.raises(openai.BadRequestError):
        await run_agent(harness, model, streamed=False)
    assert len(model.calls) == 1


async def test_recover_around_a_call_of_ones_own_model_retries_once() -> None:
    """``recover`` without ``ContextEngineModel``: a shorter input once, then None."""
    harness = make_harness(window=2000, reserve=500)
    items: list[Any] = [{"role": "user", "content": "Fix it."}]
    for n in range(12):
        items.append(
            {"type": "function_call", "call_id": f"c{n}", "name": "read_file", "arguments": "{}"}
        )
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "x" * 100})
    sent = await harness.input_filter(call_data(items))
    assert sent.input == items  # under the threshold: sent as it is

    retry = await harness.input_filter.recover(
        overflow(), input=sent.input, instructions=INSTRUCTIONS
    )

    assert retry is not None
    assert len(retry.input) < len(items)
    assert retry.instructions == INSTRUCTIONS
    assert len(harness.recoveries) == 1
    again = await harness.input_filter.recover(
        overflow(), input=retry.input, instructions=INSTRUCTIONS
    )
    assert again is None  # the retry's own overflow surfaces
    assert len(harness.recoveries) == 1
    later = await harness.input_filter(call_data([*items, {"role": "user", "content": "next"}]))
    assert later.input[: len(retry.input)] == retry.input  # the recovery was committed


async def test_recover_for_a_call_the_filter_did_not_see_starts_its_turn() -> None:
    """A model called without the filter in the run config: the recovery still applies once."""
    harness = make_harness(window=2000, reserve=500)
    items: list[Any] = [{"role": "user", "content": "Fix it."}]
    for n in range(12):
        items.append(
            {"type": "function_call", "call_id": f"c{n}", "name": "read_file", "arguments": "{}"}
        )
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "x" * 100})

    retry = await harness.input_filter.recover(overflow(), input=items, instructions=None)

    assert retry is not None
    assert len(retry.input) < len(items)
    assert len(harness.recoveries) == 1
    assert (
        await harness.input_filter.recover(overflow(), input=retry.input, instructions=None) is None
    )
    limit = openai_status_error(429, "Rate limit reached: tokens per min (TPM): 30000")
    assert await harness.input_filter.recover(limit, input=items, instructions=None) is None
    assert len(harness.recoveries) == 1


async def test_other_errors_pass_through_without_recovery() -> None:
    """A rate limit on tokens per minute is not an overflow: no recovery, no retry."""
    harness = make_harness()
    limit = openai_status_error(429, "Rate limit reached: tokens per min (TPM): 30000")
    model = ScriptedModel([harness.respond("reading", call_id="c0"), limit])

    with pytest.raises(openai.RateLimitError):
        await run_agent(harness, model, streamed=False)
    assert harness.recoveries == []
    assert len(model.calls) == 2


@pytest.mark.parametrize("streamed", [False, True], ids=["get_response", "stream_response"])
async def test_an_overflow_on_the_call_that_wrote_a_checkpoint_keeps_the_checkpoint(
    streamed: bool,
) -> None:
    """The recovery starts from the checkpoint: the retry sends it, no second summary is paid."""
    summarizer = RecordingSummarizer()
    paid: list[int] = []  # summaries paid for when each projection was done
    engine = ContextEngine(
        20_000,
        reserve_tokens=4096,
        strategies=[FullSummary(summarizer=summarizer, keep_recent_tokens=3000), HardTruncate()],
        commit_strategies=("full_summary",),
        token_counter=FixedTokenCounter(),
        on_project=lambda event: paid.append(summarizer.calls),
    )
    input_filter = ContextEngineInputFilter(engine)
    model = ScriptedModel([overflow(), [assistant_message("fits now")]])
    stored = SQLiteSession("long conversation")
    await stored.add_items(to_openai_agents(synthetic_session(60)[1:]))
    session = ContextEngineSession(stored, input_filter)
    agent = agent_for(ContextEngineModel(model, input_filter))
    config = RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)

    if streamed:
        result: Any = Runner.run_streamed(agent, "Go on.", session=session, run_config=config)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "Go on.", session=session, run_config=config)

    assert result.final_output == "fits now"
    first, retry = (from_openai_agents(call.input) for call in model.calls)
    assert first[0].is_summary
    # The retry starts from that checkpoint (its text trimmed when nothing else could go).
    assert retry[0].is_summary
    assert retry[0].text.split("\n", 1)[0] == first[0].text.split("\n", 1)[0]
    assert len(retry) < len(first)
    assert len(paid) == 1  # one projection, which paid for the checkpoint
    assert paid[0] >= 1
    assert summarizer.calls == paid[0]  # the recovery wrote no second summary
    assert await session.persist_commit()  # the session's history takes the checkpoint
    history = from_openai_agents(await stored.get_items())
    stored.close()
    # The history keeps the checkpoint whole: only the retry's view needed it cut.
    assert history[0].text == first[0].text
    assert history[-1].text == "fits now"


class FailingStream(Model):
    """Streams one event, then fails with a context-length error."""

    def __init__(self) -> None:
        self.calls = 0
        self.closed = False
        self.advice = ModelRetryAdvice(suggested=False)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        return self.advice

    async def close(self) -> None:
        self.closed = True

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise NotImplementedError

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        self.calls += 1
        yield attrs.make_class("Event", {"type": attrs.field(default="response.created")})()
        raise overflow()


async def test_a_stream_that_already_produced_events_is_not_retried() -> None:
    """Retrying after the first event would duplicate output: the error surfaces."""
    harness = make_harness()
    inner = FailingStream()
    model = ContextEngineModel(inner, harness.input_filter)
    events = []

    async def consume() -> None:
        async for event in model.stream_response(None, []):
            events.append(event)

    with pytest.raises(openai.BadRequestError):
        await consume()
    assert len(events) == 1
    assert inner.calls == 1
    assert harness.recoveries == []


# ------------------------------------------------------------------- session


async def test_session_stores_the_commit_and_compact_command_compacts_it() -> None:
    """The stored history takes the checkpoint at the next run; /compact rewrites it."""
    harness = make_harness()
    model = ScriptedModel(
        [*steps(harness, 25, "a"), *steps(harness, 1, "b"), *steps(harness, 0, "c")]
    )
    inner = SQLiteSession("conversation")
    session = ContextEngineSession(inner, harness.input_filter)
    agent = agent_for(ContextEngineModel(model, harness.input_filter))
    config = harness.run_config()

    await Runner.run(agent, "Fix the parser.", session=session, run_config=config, max_turns=40)
    stored = await inner.get_items()
    assert not isinstance(from_openai_agents(stored)[0], ContextSummary)  # not yet persisted

    await Runner.run(agent, "Now the lexer.", session=session, run_config=config, max_turns=40)
    persisted = await inner.get_items()
    assert isinstance(from_openai_agents(persisted)[0], ContextSummary)
    assert len(persisted) < len(stored) + 6
    assert harness.view(model.calls[26])[1].is_summary

    result = await session.compact("keep the file names")
    assert result.changed
    assert result.info.compacted_count > 0
    compacted = from_openai_agents(await inner.get_items())
    assert "keep the file names" in compacted[0].text
    assert len(compacted) == result.info.kept_count + 1

    await Runner.run(agent, "And the cli.", session=session, run_config=config)
    assert harness.view(model.calls[-1])[1] == compacted[0]
    await session.clear_session()
    assert await session.get_items() == []
    assert harness.input_filter.commit is None
    inner.close()


async def test_persist_commit_leaves_a_history_it_does_not_stand_for() -> None:
    """A session whose history does not start with the committed part is not rewritten."""
    harness = make_harness()
    model = ScriptedModel(steps(harness, 25))
    await Runner.run(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "Fix it.",
        run_config=harness.run_config(),
        max_turns=40,
    )
    other = SQLiteSession("other")
    await other.add_items([{"role": "user", "content": "unrelated"}])
    session = ContextEngineSession(other, harness.input_filter)

    assert await session.persist_commit() is False
    assert await other.get_items() == [{"role": "user", "content": "unrelated"}]
    other.close()


# ------------------------------------------------------------------- edge cases


def call_data(items: list[Any], instructions: str | None = INSTRUCTIONS) -> CallModelData[Any]:
    agent = Agent(name="a")
    return CallModelData(ModelInputData(input=items, instructions=instructions), agent, None)


@pytest.mark.parametrize(
    ("items", "instructions"),
    [
        ([], INSTRUCTIONS),
        ([{"role": "user", "content": "hi"}], None),
        ([{"role": "user", "content": "hi"}], ""),
        (
            [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": "{}"},
            ],
            INSTRUCTIONS,
        ),
    ],
    ids=["empty history", "no instructions", "empty instructions", "pending call at the end"],
)
async def test_input_below_the_threshold_goes_to_the_model_unchanged(
    items: list[Any], instructions: str | None
) -> None:
    """The filter hands the very items and instructions back when nothing must shrink."""
    harness = make_harness()
    result = await harness.input_filter(call_data(items, instructions))
    assert result.input == items
    assert all(a is b for a, b in zip(result.input, items, strict=True))
    assert result.instructions == instructions


async def test_pending_call_at_the_end_survives_a_rewrite() -> None:
    """A call still waiting for its result stays as it was in a view above the threshold."""
    harness = make_harness(window=2000, reserve=500)
    items: list[Any] = [{"role": "user", "content": "Fix it."}]
    for n in range(12):
        items.append(
            {"type": "function_call", "call_id": f"c{n}", "name": "read_file", "arguments": "{}"}
        )
        items.append({"type": "function_call_output", "call_id": f"c{n}", "output": "x" * 800})
    pending = {"type": "function_call", "call_id": "last", "name": "read_file", "arguments": "{}"}
    items.append(pending)

    result = await harness.input_filter(call_data(items))

    assert harness.events
    assert harness.events[-1].changed
    assert result.input[-1] is pending
    transcript = [Message.system(INSTRUCTIONS), *from_openai_agents(items)]
    assert check_view(transcript, [transcript[0], *from_openai_agents(result.input)]) == []


def test_filter_needs_an_engine() -> None:
    with pytest.raises(ConfigurationError, match=r"ContextEngine\.default"):
        ContextEngineInputFilter("engine")  # type: ignore[arg-type]
    engine = ContextEngine.default(8_000)
    with pytest.raises(ConfigurationError, match="cap_tool_results"):
        ContextEngineInputFilter(engine, cap_tool_results=None)  # type: ignore[arg-type]


async def test_model_wrapper_forwards_retry_advice_and_close() -> None:
    """The SDK asks the wrapper for retry advice and closes it: the wrapped model answers."""
    inner = FailingStream()
    model = ContextEngineModel(inner, make_harness().input_filter)
    request = ModelRetryAdviceRequest(error=RuntimeError("boom"), attempt=1, stream=False)
    assert model.get_retry_advice(request) is inner.advice
    await model.close()
    assert inner.closed


# ------------------------------------------------------------------- pure state


def test_cache_reuses_message_objects_for_items_it_has_seen() -> None:
    """An appended history converts only its new items; the old messages stay the same objects."""
    cache = MessageCache()
    first = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    before = cache.convert(first)
    after = cache.convert(
        [*first, {"type": "function_call_output", "call_id": "c1", "output": "ok"}]
    )
    assert after[0] is before[0]
    assert after[1] is not before[1]  # model items at the end may go on: converted again
    assert after[1] == before[1]
    assert cache.items_of(after[2]) == [
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    ]
    assert cache.items_of(Message.user("hi")) is None
    assert cache.item_count(2) == 2


def test_cache_attaches_a_response_usage_to_its_last_item() -> None:
    """Usage is keyed by the response's last output item, and only the newest are kept."""
    cache = MessageCache()
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    for n in range(40):
        cache.remember_usage(
            [{"type": "function_call", "call_id": f"old{n}", "name": "f"}], Usage(5)
        )
    cache.remember_usage([{"role": "assistant", "content": "x"}, call], Usage(120, 7))
    cache.remember_usage([call], Usage(0))  # an empty report is ignored
    messages = cache.convert([{"role": "user", "content": "hi"}, call])
    assert messages[1].usage == Usage(120, 7)
    assert len(cache._usage) == 32


def test_commit_applies_only_to_the_history_it_stands_for() -> None:
    source = (Message.user("a"), Message.assistant("b"))
    commit = Commit(source, (ContextSummary(summary="a and b"),))
    assert commit.apply((*source, Message.user("c"))) == (commit.messages[0], Message.user("c"))
    assert commit.apply((Message.user("x"), Message.assistant("b"))) is None
    assert commit.apply(source[:1]) is None


def test_commits_are_kept_per_conversation() -> None:
    """A newer commit replaces its conversation's; another conversation's history leaves it."""
    parent = (Message.user("fix the parser"), Message.assistant("reading"), Message.user("go"))
    first = Commit(parent[:2], (ContextSummary(summary="parser"),))
    commits = Commits()
    commits.add(first)
    sub_agent = (Message.user("check the lexer"),)
    assert commits.find(sub_agent) is None
    commits.add(Commit(sub_agent, (ContextSummary(summary="lexer"),)))
    assert commits.find(parent) is first  # the sub-agent's commit did not displace it
    assert commits.latest is first
    newer = Commit(parent, (ContextSummary(summary="parser, later"),))
    commits.add(newer)
    assert commits.find((*parent, Message.assistant("done"))) is newer
    assert commits.find(parent[:2]) is None  # the older commit of the parent is gone
    assert commits.find(sub_agent) is not None


def test_a_newer_commit_applies_to_a_history_stored_with_an_older_one() -> None:
    """Stored mid-run with one commit, the history takes the run's later commit in its place."""
    history = tuple(Message.user(f"step {n}") for n in range(6))
    first = Commit(history[:3], (ContextSummary(summary="steps 0-2"),))
    read_back = (ContextSummary(summary="steps 0-2"),)  # what the store gives back for it
    commits = Commits()
    commits.add(first)
    commits.handed_out(first, read_back)
    stored = (*read_back, *history[3:])
    assert commits.find(stored) is None
    assert commits.find_after_stored(stored) is None  # no commit newer than the stored one

    newer = Commit(history[:5], (ContextSummary(summary="steps 0-4"),))
    commits.add(newer)  # made from the run's own items, which still hold steps 0-2

    assert commits.find_after_stored(stored) == (newer, 3)  # the checkpoint and steps 3-4
    assert commits.find_after_stored((Message.user("other"), *history[3:])) is None
    commits.clear()
    assert commits.find_after_stored(stored) is None


def test_caches_keep_each_conversation_apart() -> None:
    """A sub-agent's fresh items get a cache of their own; the parent's messages stay."""
    caches = MessageCaches()
    parent = [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "ok"}]
    cache = caches.for_items(parent)
    before = cache.convert(parent)
    sub_agent = [{"role": "user", "content": "check the lexer"}]
    assert caches.for_items(sub_agent) is not cache
    caches.for_items(sub_agent).convert(sub_agent)
    longer = [*parent, {"role": "user", "content": "and the cli"}]
    assert caches.for_items(longer) is cache
    assert cache.convert(longer)[0] is before[0]


def test_apply_commit_without_a_commit_copies_the_items() -> None:
    harness = make_harness()
    items = [{"role": "user", "content": "hi"}]
    assert harness.input_filter.apply_commit(items) == items


# ------------------------------------------------------------------- observability


class Collector(TracingProcessor):
    """Keeps every finished SDK span."""

    def __init__(self) -> None:
        self.spans: list[Any] = []

    def on_trace_start(self, trace: Any) -> None:
        pass

    def on_trace_end(self, trace: Any) -> None:
        pass

    def on_span_start(self, span: Any) -> None:
        pass

    def on_span_end(self, span: Any) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass


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


async def test_engine_calls_are_custom_spans_in_the_sdk_trace(sdk_spans: Collector) -> None:
    """Each projection is a ``context_engine.project`` span inside its turn of the agent."""
    harness = make_harness()
    model = ScriptedModel(steps(harness, 2))
    await Runner.run(
        agent_for(ContextEngineModel(model, harness.input_filter)),
        "go",
        run_config=harness.run_config(tracing_disabled=False),
    )
    engine_spans = [
        s for s in sdk_spans.spans if getattr(s.span_data, "name", "") == "context_engine.project"
    ]
    turns = {s.span_id: s for s in sdk_spans.spans if s.span_data.type == "turn"}
    (agent_span,) = [s for s in sdk_spans.spans if s.span_data.type == "agent"]
    assert len(engine_spans) == len(model.calls) == len(turns) == 3
    assert {s.parent_id for s in engine_spans} == set(turns)  # one in each turn of the agent
    assert {turn.parent_id for turn in turns.values()} == {agent_span.span_id}
    assert engine_spans[0].span_data.data["threshold"] == harness.engine.threshold
    assert engine_spans[0].span_data.data["changed"] is False


async def test_engine_otel_spans_nest_under_the_callers_span() -> None:
    """The SDK has no OpenTelemetry; the engine's spans join the caller's current span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = ContextEngine.default(
        3000, token_counter=FixedTokenCounter(), tracer_provider=provider
    )
    input_filter = ContextEngineInputFilter(engine)
    model = ScriptedModel([[assistant_message("hello")]])
    config = RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)

    with provider.get_tracer("app").start_as_current_span("handle request") as parent:
        await Runner.run(
            agent_for(ContextEngineModel(model, input_filter)), "hi", run_config=config
        )

    projects = [s for s in exporter.get_finished_spans() if s.name == "context_engine.project"]
    assert len(projects) == 1
    assert projects[0].parent is not None
    assert projects[0].parent.span_id == parent.get_span_context().span_id


# ------------------------------------------------------------------- the extra


@pytest.mark.parametrize(
    "module",
    ["context_engine.formats.openai_agents", "context_engine.integrations.openai_agents"],
)
def test_missing_sdk_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    for name in ("agents", "agents.items", "agents.memory"):
        monkeypatch.setitem(sys.modules, name, None)
    for name in (module, "context_engine.formats.openai_agents"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match=r"pip install 'context-engine\[openai-agents\]'"):
        importlib.import_module(module)


def test_round_trip_of_the_tool_call_shape_used_in_these_tests() -> None:
    """The items the scripted model produces convert as the loop tests assume."""
    items = [
        assistant_message("reading", item_id="m").model_dump(exclude_unset=True),
        function_call("read_file", {"path": "a.py"}, call_id="c").model_dump(exclude_unset=True),
    ]
    (message,) = from_openai_agents(items)
    assert message.tool_calls == (ToolCall("c", "read_file", '{"path":"a.py"}'),)
    assert to_openai_agents([message]) == items


# ------------------------------------------------------- window and overhead from the runtime


@function_tool
def search_code(pattern: str, path: str, language: str, max_results: int) -> str:
    """Search the code base for a regular expression and return every matching line.

    Args:
        pattern: The regular expression, in Python syntax, matched line by line against
            every file under the path; groups are ignored.
        path: Where to search, relative to the repository root; globs are not expanded.
        language: Only files of this language: python, rust, go or typescript.
        max_results: Stop after this many matches; the rest are counted, not listed.
    """
    return f"{pattern} in {path}:\n" + "\n".join(f"{path}/m{n}.py:{n}: match" for n in range(60))


def schema_tokens(counter: FixedTokenCounter, call: ModelCall) -> int:
    """The tool schemas the call carried, as the filter describes them to the engine."""
    return counter.count_text(schema_text(_tool_schemas(Agent(name="a", tools=list(call.tools)))))


async def sized_run(*, count_request: bool) -> tuple[ScriptedModel, Harness, list[int]]:
    harness = make_harness(window=100_000, reserve=None, tool_result_cap="default")
    harness.input_filter = ContextEngineInputFilter(
        harness.engine, context_window=8_000, trigger=("fraction", 0.8), count_request=count_request
    )

    def search(n: int) -> ModelStep:
        arguments = {"pattern": f"f{n}", "path": "src", "language": "python", "max_results": 60}
        text = f"Step {n}: searching for the next definition, noting what each one returns. " * 3
        return ModelStep(
            output=[
                assistant_message(text, item_id=f"msg_{n}"),
                function_call("search_code", arguments, call_id=f"c{n}"),
            ]
        )

    final = ModelStep(output=[assistant_message("done", item_id="msg_final")])
    model = ScriptedModel([*(search(n) for n in range(45)), final])
    agent = Agent(
        name="searcher", instructions=INSTRUCTIONS * 5, model=model, tools=[search_code, read_file]
    )
    result = await Runner.run(
        agent, "Find every definition.", run_config=harness.run_config(), max_turns=60
    )
    assert result.final_output == "done"
    requests = [
        harness.tokens(harness.view(call)) + schema_tokens(harness.counter, call)
        for call in model.calls
    ]
    return model, harness, requests


async def test_tool_schemas_count_on_every_call_and_the_trigger_sets_the_threshold(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model, harness, requests = await sized_run(count_request=True)
    _, _, uncounted = await sized_run(count_request=False)

    schemas = schema_tokens(harness.counter, model.calls[0])
    assert schemas > 200  # sizeable tool schemas
    assert (harness.engine.context_window, harness.engine.threshold) == (8_000, 6_400)
    assert harness.engine.overhead_tokens == schemas
    assert len(requests) == 46
    assert max(requests) <= 6_400
    assert max(uncounted) > 6_400
    with capsys.disabled():
        print(
            f"\nopenai-agents 8k/0.8: request max {max(requests)} with tool schemas counted, "
            f"{max(uncounted)} without (schemas {schemas} tokens)"
        )
