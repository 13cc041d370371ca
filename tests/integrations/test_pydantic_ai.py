"""pydantic-ai adapter: real agent loops with FunctionModel and real tools, overflow, /compact."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("pydantic_ai", reason=needs("pydantic-ai"))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import Agent, AgentRunResult, AgentRunResultEvent, RunContext
from pydantic_ai import messages as pm
from pydantic_ai.capabilities import AbstractCapability, Instrumentation, ProcessHistory
from pydantic_ai.exceptions import (
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRateLimitError,
)
from pydantic_ai.models import ModelRequestContext, StreamedResponse
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionDef, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from context_engine import ContextEngine, Message, RewriteEvent
from context_engine.archive import REFERENCE_PATTERN, Archive, MemoryArchive, SQLiteArchive
from context_engine.formats.pydantic_ai import REQUEST_KEY, from_pydantic_ai, to_pydantic_ai
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.conversations import EnginePool
from context_engine.integrations.pydantic_ai import ContextEngineCapability, history_processor
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import SummaryRequest
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session
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

pytestmark = pytest.mark.extra("pydantic-ai")

STEPS = 40


@dataclasses.dataclass
class Recorder(AbstractCapability[Any]):
    """Placed first: records the run's history before the engine sees it.

    ``hook="prepare"`` records each attempt (for the capability, which works
    there); ``hook="before"`` records each step (for a history processor).
    """

    hook: str = "prepare"
    transcripts: list[list[Message]] = dataclasses.field(default_factory=list)

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.hook == "prepare":
            self.transcripts.append(from_pydantic_ai(request_context.messages))
        return request_context

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.hook == "before":
            self.transcripts.append(from_pydantic_ai(list(request_context.messages)))
        return request_context


class ScriptedModel:
    """A FunctionModel body: reads files one by one, then finishes; reports usage like a provider.

    The reported ``input_tokens`` is what the test counter gives for the messages
    received, so the engine's usage anchors are exact. ``plan`` replaces the
    script: the tool name and arguments of the n-th answer (from 0), None for
    the last one.
    """

    def __init__(
        self,
        counter: FixedTokenCounter,
        steps: int = STEPS,
        limit: int | None = None,
        plan: Callable[[int], tuple[str, dict[str, Any]] | None] | None = None,
    ):
        self.counter, self.steps, self.limit, self.plan = counter, steps, limit, plan
        self.views: list[list[Message]] = []
        self.tokens: list[int] = []
        self.outputs: list[int] = []

    def __call__(self, messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        view = from_pydantic_ai(messages)
        tokens = sum(self.counter.count_message(m) for m in view)
        self.views.append(view)
        self.tokens.append(tokens)
        if self.limit is not None and tokens > self.limit:
            raise context_window_error(tokens, self.limit)
        parts = self.parts(len(self.views))
        (answer,) = from_pydantic_ai([pm.ModelResponse(parts=parts)])
        output = self.counter.count_message(answer)
        self.outputs.append(output)
        return pm.ModelResponse(
            parts=parts, usage=RequestUsage(input_tokens=tokens, output_tokens=output)
        )

    def parts(self, call: int) -> list[Any]:
        """The answer to the ``call``-th request (from 1): a tool call, the last one ``done``."""
        if self.plan is not None:
            planned = self.plan(call - 1)
        else:
            planned = None if call > self.steps else ("read_file", {"path": f"src/mod_{call}.py"})
        if planned is None:
            return [pm.TextPart("All modules read; done.")]
        thought = pm.TextPart(f"Step {call}: reading the next module. " + "Reasoning. " * 50)
        return [thought, pm.ToolCallPart(*planned, tool_call_id=f"call_{call}")]


def plain(messages: list[Message]) -> list[Message]:
    """Without the request grouping: pydantic-ai merges consecutive requests when it sends them."""
    return [
        attrs.evolve(m, metadata={k: v for k, v in m.metadata.items() if k != REQUEST_KEY})
        if REQUEST_KEY in m.metadata
        else m
        for m in messages
    ]


UNMEASURED = RequestUsage(unmeasured_requests=1)


class StreamedFunctionModel(FunctionModel):
    """A FunctionModel that streams ``function``'s answer as a provider does: text, then calls.

    FunctionModel's own streamed usage is a word-count guess (50 input tokens
    whatever the prompt), which the engine would take as the provider's count
    of the prompt; these responses report their usage as unmeasured instead.
    """

    def __init__(self, function: FunctionDef, **options: Any) -> None:
        async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
            response = function(messages, info)
            assert isinstance(response, pm.ModelResponse)
            for index, part in enumerate(response.parts):
                if isinstance(part, pm.TextPart):
                    for start in range(0, len(part.content), 20):
                        yield part.content[start : start + 20]
                elif isinstance(part, pm.ToolCallPart):
                    yield {
                        index: DeltaToolCall(
                            name=part.tool_name,
                            json_args=part.args_as_json_str(),
                            tool_call_id=part.tool_call_id,
                        )
                    }

        super().__init__(function, stream_function=stream, **options)

    @asynccontextmanager
    async def request_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[StreamedResponse]:
        async with super().request_stream(*args, **kwargs) as response:
            response._usage = UNMEASURED  # replaces the guess; the deltas only add output tokens
            yield response


MODES = ["run", "run_stream_events", "iter"]
"""How a run is driven: ``run``, ``run_stream_events`` (streamed requests, every event), and
``iter`` with each model request streamed through ``node.stream``."""


async def run_agent(
    agent: Agent[None, str], prompt: str, mode: str, **options: Any
) -> AgentRunResult[str]:
    """Run ``agent`` as ``mode`` says, to the end; its result."""
    if mode == "run":
        return await agent.run(prompt, **options)
    if mode == "run_stream_events":
        results = []
        async with agent.run_stream_events(prompt, **options) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    results.append(event.result)
        (result,) = results
        return result
    async with agent.iter(prompt, **options) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as stream:
                    async for _ in stream:
                        pass
    assert run.result is not None
    return run.result


def context_window_error(tokens: int, limit: int) -> ModelHTTPError:
    message = (
        f"This model's maximum context length is {limit} tokens. "
        f"However, your messages resulted in {tokens} tokens."
    )
    return ModelHTTPError.for_category(
        ModelContextWindowExceededError,
        status_code=400,
        model_name="scripted",
        body={"error": {"message": message, "code": "context_length_exceeded"}},
    )


def read_file(path: str) -> str:
    """Return the contents of a source file."""
    return f"# {path}\n" + "\n".join(f"line {n}: value = {n * 7}" for n in range(80))


def long_history() -> list[pm.ModelMessage]:
    return to_pydantic_ai(synthetic_session(60))


def make_engine(
    counter: FixedTokenCounter, events: list[RewriteEvent], **options: Any
) -> ContextEngine:
    options.setdefault("reserve_tokens", 2000)
    return ContextEngine.default(
        8000,
        tool_result_cap=None,  # these runs exercise checkpoints, which a cap would make rare
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        on_project=events.append,
        **options,
    )


def make_agent(
    model: ScriptedModel,
    *capabilities: AbstractCapability[Any],
    tools: Sequence[Any] = (read_file,),
) -> Agent[None, str]:
    return Agent(
        FunctionModel(model),
        system_prompt="You are a careful agent. Read every module before answering.",
        tools=list(tools),
        capabilities=list(capabilities),
    )


# -------------------------------------------------------------------- agent loops


async def test_capability_keeps_every_call_under_the_threshold_and_commits_checkpoints(
    counter: FixedTokenCounter,
) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    model, recorder = ScriptedModel(counter), Recorder()
    agent = make_agent(model, recorder, ContextEngineCapability(engine))

    result = await agent.run("Read every module in src/ and report.")

    assert result.output == "All modules read; done."
    assert len(model.views) == STEPS + 1 == len(recorder.transcripts)
    assert max(model.tokens) <= engine.threshold
    unmanaged = sum(counter.count_text(read_file(f"src/mod_{n}.py")) for n in range(STEPS))
    assert unmanaged > 2 * engine.threshold  # without the engine: far over, several times
    for transcript, view in zip(recorder.transcripts, model.views, strict=True):
        assert check_view(plain(transcript), plain(view)) == []
    rewrites = [e for e in events if e.changed]
    commits = [e for e in events if e.committed]
    assert len(rewrites) >= 5
    assert len(commits) >= 2
    first_commit = next(
        i for i, t in enumerate(recorder.transcripts[1:], 1) if any(m.is_summary for m in t)
    )
    assert all(any(m.is_summary for m in view) for view in model.views[first_commit:])
    history = from_pydantic_ai(result.all_messages())
    assert sum(m.is_summary for m in history) == 1
    assert len(history) < 2 * STEPS
    assert history[-1].text == "All modules read; done."


async def test_between_commits_the_full_history_is_kept_and_only_the_view_shrinks(
    counter: FixedTokenCounter,
) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    model, recorder = ScriptedModel(counter), Recorder()
    agent = make_agent(model, recorder, ContextEngineCapability(engine))

    await agent.run("Read every module in src/ and report.")

    steps = zip(recorder.transcripts, recorder.transcripts[1:], model.views, strict=False)
    kept = [
        (transcript, view)
        for transcript, following, view in steps
        if view != transcript and following[: len(transcript)] == transcript
    ]
    assert len(kept) >= 3  # the view was rewritten, the history was not
    assert all(len(view) <= len(transcript) for transcript, view in kept)


async def test_history_processor_commits_every_view(counter: FixedTokenCounter) -> None:
    """pydantic-ai writes a processor's result back: each transcript starts with the last view."""
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    model, recorder = ScriptedModel(counter), Recorder(hook="before")
    agent = make_agent(model, recorder, ProcessHistory(history_processor(engine)))

    result = await agent.run("Read every module in src/ and report.")

    assert result.output == "All modules read; done."
    assert max(model.tokens) <= engine.threshold
    assert len([e for e in events if e.changed]) >= 3
    for transcript, view in zip(recorder.transcripts, model.views, strict=True):
        assert check_view(plain(transcript), plain(view)) == []
    for view, following in zip(model.views, recorder.transcripts[1:], strict=False):
        assert following[: len(view)] == view
    history = from_pydantic_ai(result.all_messages())
    assert history[: len(model.views[-1])] == model.views[-1]
    assert any(m.is_summary for m in history)


@pytest.fixture
def event_loop_for_run_sync() -> Iterator[None]:
    """``run_sync`` drives the current event loop and leaves it open: give it one and close it."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@pytest.mark.usefixtures("event_loop_for_run_sync")
def test_run_sync_drives_the_same_async_hooks(counter: FixedTokenCounter) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    model = ScriptedModel(counter, steps=25)
    capability = ContextEngineCapability(engine)
    agent = make_agent(model, capability)

    first = agent.run_sync("Read the modules.")
    second = agent.run_sync("Once more.", message_history=first.all_messages())

    assert first.output == second.output == "All modules read; done."
    assert max(model.tokens) <= engine.threshold
    assert any(e.committed for e in events)
    assert capability._turn is None  # per-run state lives on the run's copy


async def test_provider_usage_anchors_the_engine_estimate(counter: FixedTokenCounter) -> None:
    """Below the threshold the view is the transcript, so the reported usage is trusted."""
    engine = ContextEngine.default(200_000, token_counter=counter)
    model = ScriptedModel(counter, steps=3)
    agent = make_agent(model, ContextEngineCapability(engine))

    await agent.run("Read the modules.")

    assert engine.usage is not None
    assert engine.usage.usage_tokens == model.tokens[-2] + model.outputs[-2]  # the last report
    assert engine.usage.trailing_tokens > 0


async def test_an_image_prompt_reaches_the_model_as_it_was_sent(counter: FixedTokenCounter) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    seen: list[list[pm.ModelMessage]] = []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        seen.append(messages)
        return pm.ModelResponse(parts=[pm.TextPart("a chart")])

    agent = Agent(FunctionModel(model), capabilities=[ContextEngineCapability(engine)])
    prompt = ["What is in this image?", pm.ImageUrl("https://example.com/chart.png")]
    await agent.run(prompt, message_history=long_history())

    assert any(e.changed for e in events)
    (last_request,) = [m for m in seen[0][-1:] if isinstance(m, pm.ModelRequest)]
    (part,) = [p for p in last_request.parts if isinstance(p, pm.UserPromptPart)]
    assert part.content == prompt
    assert sum(counter.count_message(m) for m in from_pydantic_ai(seen[0])) <= engine.threshold


async def test_a_streamed_run_is_projected_by_the_same_hook(counter: FixedTokenCounter) -> None:
    events: list[RewriteEvent] = []
    engine = make_engine(counter, events)
    received: list[int] = []

    async def stream(messages: list[pm.ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        received.append(sum(counter.count_message(m) for m in from_pydantic_ai(messages)))
        yield "streamed "
        yield "answer"

    agent = Agent(
        FunctionModel(stream_function=stream), capabilities=[ContextEngineCapability(engine)]
    )
    async with agent.run_stream("Go on.", message_history=long_history()) as run:
        output = await run.get_output()

    assert output == "streamed answer"
    assert len(received) == 1
    assert received[0] <= engine.threshold
    assert len([e for e in events if e.changed]) == 1


# ----------------------------------------------------------------------- overflow


@pytest.mark.parametrize(
    "error",
    [
        lambda tokens, limit: context_window_error(tokens, limit),
        lambda tokens, limit: ModelHTTPError(
            400,
            "scripted",
            {"error": {"message": f"prompt is too long: {tokens} tokens > {limit} maximum"}},
        ),
    ],
    ids=["typed-context-window-error", "http-400-prompt-too-long"],
)
async def test_overflow_is_recovered_and_the_request_retried_once(
    counter: FixedTokenCounter, error: Any
) -> None:
    recoveries: list[RewriteEvent] = []
    engine = ContextEngine.default(
        200_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        on_recover=recoveries.append,
    )
    limit, calls = 6000, []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        view = from_pydantic_ai(messages)
        tokens = sum(counter.count_message(m) for m in view)
        calls.append(view)
        if tokens > limit:
            raise error(tokens, limit)
        return pm.ModelResponse(
            parts=[pm.TextPart("fits now")], usage=RequestUsage(input_tokens=tokens)
        )

    recorder = Recorder()
    agent = Agent(FunctionModel(model), capabilities=[recorder, ContextEngineCapability(engine)])
    result = await agent.run("Go on.", message_history=long_history())

    assert result.output == "fits now"
    assert len(calls) == 2
    assert len(recoveries) == 1
    assert sum(counter.count_message(m) for m in calls[1]) <= limit
    assert check_view(plain(recorder.transcripts[0]), plain(calls[1])) == []
    history = from_pydantic_ai(result.all_messages())
    assert plain(history[: len(calls[1])]) == plain(calls[1])  # the recovered view was committed
    assert len(history) < len(recorder.transcripts[0])


async def test_a_second_overflow_in_the_same_step_surfaces(counter: FixedTokenCounter) -> None:
    recoveries: list[RewriteEvent] = []
    engine = ContextEngine.default(
        200_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        on_recover=recoveries.append,
    )
    calls: list[int] = []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        calls.append(len(messages))
        raise context_window_error(999_999, 100)

    agent = Agent(FunctionModel(model), capabilities=[ContextEngineCapability(engine)])
    with pytest.raises(ModelContextWindowExceededError):
        await agent.run("Go on.", message_history=long_history())
    assert len(calls) == 2
    assert len(recoveries) == 1


@pytest.mark.parametrize(
    ("error", "recover"),
    [
        (ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="m"), True),
        (context_window_error(9000, 100), False),
    ],
    ids=["rate-limit-is-not-an-overflow", "recovery-switched-off"],
)
async def test_other_errors_surface_at_once(
    counter: FixedTokenCounter, error: Exception, recover: bool
) -> None:
    recoveries: list[RewriteEvent] = []
    engine = ContextEngine.default(200_000, token_counter=counter, on_recover=recoveries.append)
    calls: list[int] = []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        calls.append(len(messages))
        raise error

    capability = ContextEngineCapability(engine, recover_overflow=recover)
    agent = Agent(FunctionModel(model), capabilities=[capability])
    with pytest.raises(type(error)):
        await agent.run("Go on.", message_history=long_history())
    assert len(calls) == 1
    assert recoveries == []


# ------------------------------------------------------------------------- /compact


async def test_compact_command_compacts_without_calling_the_model(
    counter: FixedTokenCounter,
) -> None:
    compactions: list[RewriteEvent] = []
    engine = ContextEngine.default(
        200_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        on_compact=compactions.append,
    )
    calls: list[int] = []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        calls.append(len(messages))
        return pm.ModelResponse(parts=[pm.TextPart("model answer")])

    agent = Agent(FunctionModel(model), capabilities=[ContextEngineCapability(engine)])
    before = long_history()
    result = await agent.run("/compact keep the failing test names", message_history=before)

    assert calls == []
    assert len(compactions) == 1
    assert result.output.startswith("Compacted ")
    history = from_pydantic_ai(result.all_messages())
    assert sum(m.is_summary for m in history) == 1
    assert len(history) < len(from_pydantic_ai(before))
    assert [m.text for m in history[-2:]] == ["/compact keep the failing test names", result.output]
    assert compactions[0].info is not None
    assert compactions[0].info.compacted_count > 0

    follow_up = await agent.run("What next?", message_history=result.all_messages())
    assert follow_up.output == "model answer"
    assert len(calls) == 1


async def test_compact_on_a_new_conversation_has_nothing_to_do(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(
        200_000, summarizer=ExtractiveSummarizer(), token_counter=counter
    )
    agent = Agent(
        FunctionModel(lambda m, i: pm.ModelResponse(parts=[pm.TextPart("x")])),
        capabilities=[ContextEngineCapability(engine)],
    )
    result = await agent.run("/compact")
    assert result.output == "Nothing to compact."


async def test_compact_command_can_be_switched_off(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(200_000, token_counter=counter)
    agent = Agent(
        FunctionModel(lambda m, i: pm.ModelResponse(parts=[pm.TextPart("model answer")])),
        capabilities=[ContextEngineCapability(engine, compact_command=False)],
    )
    result = await agent.run("/compact")
    assert result.output == "model answer"


# ---------------------------------------------------------------- failure, telemetry


async def test_a_failing_summarizer_still_sends_the_best_view(counter: FixedTokenCounter) -> None:
    events: list[RewriteEvent] = []
    summarizer = RecordingSummarizer(fail=RuntimeError("summarizer down"))
    engine = ContextEngine.default(
        8000,
        summarizer=summarizer,
        token_counter=counter,
        reserve_tokens=2000,
        on_project=events.append,
    )
    model = ScriptedModel(counter, steps=30)
    agent = make_agent(model, ContextEngineCapability(engine))

    result = await agent.run("Read the modules.")

    assert result.output == "All modules read; done."
    assert summarizer.calls >= 1
    assert engine.consecutive_failures >= 1
    assert len(model.views) == 31


async def test_engine_spans_are_children_of_the_model_request_span(
    counter: FixedTokenCounter,
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    engine = ContextEngine.default(
        8000, token_counter=counter, reserve_tokens=2000, tracer_provider=provider
    )
    model = ScriptedModel(counter, steps=3)
    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    agent = make_agent(model, instrumentation, ContextEngineCapability(engine))

    await agent.run("Read the modules.")

    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    projects = [s for s in spans if s.name == "context_engine.project"]
    assert len(projects) == len(model.views) == 4
    for span in projects:
        assert span.parent is not None
        parent = by_id[span.parent.span_id]
        assert parent.name.startswith("chat ")
        assert parent.instrumentation_scope.name == "pydantic-ai"
        assert span.context.trace_id == parent.context.trace_id


async def test_an_overflow_on_the_call_that_wrote_a_checkpoint_keeps_the_checkpoint(
    counter: FixedTokenCounter,
) -> None:
    """The recovery starts from the checkpoint: the retry sends it, with the cut folded in."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        20_000,
        reserve_tokens=4096,
        strategies=[FullSummary(summarizer=summarizer, keep_recent_tokens=3000), HardTruncate()],
        commit_strategies=("full_summary",),
        token_counter=counter,
    )
    sent: list[list[Message]] = []
    summaries: list[int] = []

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        sent.append(from_pydantic_ai(messages))
        summaries.append(summarizer.calls)
        if len(sent) == 1:
            raise context_window_error(30_000, 20_000)
        return pm.ModelResponse(parts=[pm.TextPart("fits now")])

    agent = Agent(FunctionModel(model), capabilities=[ContextEngineCapability(engine)])
    result = await agent.run("Go on.", message_history=long_history())

    assert result.output == "fits now"
    first, retry = sent
    assert first[1].is_summary
    assert retry[1].is_summary
    assert len(retry) < len(first)
    assert summaries[0] >= 1
    # The recovery started from that checkpoint: what it still had to drop was folded
    # into it by requests updating its text, never by summarizing its range again.
    folds = summarizer.requests[summaries[0] :]
    assert folds
    assert folds[0].previous_summary
    assert folds[0].previous_summary in first[1].summary  # type: ignore[attr-defined]
    history = from_pydantic_ai(result.all_messages())
    assert history[1].text == retry[1].text  # the run's history keeps it


async def test_history_processor_refuses_an_engine_with_context_providers() -> None:
    """It commits every view, so provider blocks would be stored in the run's history."""
    from context_engine import ConfigurationError
    from context_engine.assembly import StaticProvider

    engine = ContextEngine(32_000, providers=[StaticProvider(text="rules", name="rules")])
    with pytest.raises(ConfigurationError, match="use ContextEngineCapability"):
        history_processor(engine)
    plain = ContextEngine(32_000)
    process = history_processor(plain)
    plain.add_provider(StaticProvider(text="rules", name="rules"))
    with pytest.raises(ConfigurationError, match="use ContextEngineCapability"):
        await process(to_pydantic_ai([Message.user("hi")]))


# ------------------------------------------------------- window and overhead from the runtime


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


class LoopModel:
    """A FunctionModel body: ``steps`` searches with multi-thousand-token outputs, then ``done``.

    It records every request: the messages, the request's size counted with
    the test counter, the tool definitions and instructions sent beside the
    history included (what a provider bills), and the size the engine measured
    for the view it handed out. It reports its usage as unmeasured:
    FunctionModel would otherwise fill in a word-count estimate that the engine
    would take as a provider's usage anchor.
    """

    def __init__(self, counter: FixedTokenCounter, steps: int, first: int = 0) -> None:
        self.counter, self.steps, self.first = counter, steps, first
        self.pool: EnginePool | None = None
        self.views: list[list[Message]] = []
        self.requests: list[int] = []
        self.measured: list[int] = []
        self.beside: list[int] = []

    def __call__(self, messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        view = from_pydantic_ai(messages)
        self.views.append(view)
        tools = [*info.function_tools, *info.output_tools]
        schemas = schema_text(
            {"name": t.name, "description": t.description, "parameters": t.parameters_json_schema}
            for t in tools
        )
        beside = self.counter.count_text(schemas) + self.counter.count_text(info.instructions or "")
        self.beside.append(beside)
        counted = sum(self.counter.count_message(m) for m in view) + REQUEST_OVERHEAD_TOKENS
        self.requests.append(counted + beside)
        assert self.pool is not None
        (conversation,) = self.pool  # one conversation per process
        usage = self.pool.engine(conversation).usage
        self.measured.append(usage.tokens if usage is not None else 0)
        step = self.first + len(self.views) - 1
        if step >= self.first + self.steps:
            return pm.ModelResponse(parts=[pm.TextPart("done")], usage=UNMEASURED)
        args = {"pattern": f"handler_{step}", "path": "src", "language": "python"}
        parts = [
            pm.TextPart(f"Searching for handler_{step} next. " + "Reasoning. " * 40),
            pm.ToolCallPart("search_code", args | {"max_results": grep_size(step)}, f"c{step}"),
        ]
        return pm.ModelResponse(parts=parts, usage=UNMEASURED)


@attrs.define
class LoopProcess:
    """One "process" of an app: its own archive store object, pool, model and agent."""

    agent: Agent[None, str]
    model: LoopModel
    pool: EnginePool
    recorder: Recorder


def start_process(
    counter: FixedTokenCounter,
    store: Archive,
    window: int,
    model: LoopModel,
    *,
    count_request: bool = True,
    streamed: bool = False,
) -> LoopProcess:
    # Every checkpoint is committed: past the per-request cap a call is sent an extracted
    # digest that is not, and the stored history would not start from the newest one.
    pool = EnginePool.archived(
        store,
        100_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        max_llm_rewrites_per_request=None,
    )
    kind = StreamedFunctionModel if streamed else FunctionModel
    served = FallbackModel(  # its window is the smallest of its models': any may answer
        kind(model, profile={"context_window": window}),
        kind(model, profile={"context_window": 4 * window}),
    )
    model.pool = pool
    recorder = Recorder()
    capability = ContextEngineCapability(
        pool, trigger=("fraction", TRIGGER), count_request=count_request
    )
    agent = Agent(
        served, instructions=INSTRUCTIONS, tools=[search_code], capabilities=[recorder, capability]
    )
    return LoopProcess(agent, model, pool, recorder)


def assert_fits(process: LoopProcess, threshold: int) -> None:
    """Every request at or under the threshold with tools and instructions, valid, no orphans."""
    calls = zip(process.recorder.transcripts, process.model.views, strict=True)
    for number, (transcript, view) in enumerate(calls):
        measured, sent = process.model.measured[number], process.model.requests[number]
        assert measured <= threshold, f"request {number}"
        # pydantic-ai sends a tool result as one string: a result the engine wrote as two
        # text blocks (a placeholder and its reference note) goes out joined by a newline,
        # which the engine counts, so what is sent fits too.
        assert sent <= threshold, f"request {number}"
        assert orphans(view) == [], f"request {number}"
        assert check_view(plain(transcript), plain(view)) == [], f"request {number}"


# A plain run at both windows; the streamed runs at 8k, where the most checkpoints are written.
LOOP_RUNS = [("run", window) for window in WINDOWS] + [(m, WINDOWS[0]) for m in MODES[1:]]


@pytest.mark.parametrize(
    ("mode", "window"), LOOP_RUNS, ids=[f"{m}-{w // 1000}k" for m, w in LOOP_RUNS]
)
async def test_a_long_loop_fits_with_tools_and_instructions_and_a_second_process_resumes_it(
    counter: FixedTokenCounter, mode: str, window: int, archive_file: Callable[[], SQLiteArchive]
) -> None:
    streamed = mode != "run"
    model = LoopModel(counter, LOOP_STEPS)
    first = start_process(counter, archive_file(), window, model, streamed=streamed)
    result = await run_agent(first.agent, "Find every handler.", mode)
    uncounted = start_process(
        counter,
        MemoryArchive(),
        window,
        LoopModel(counter, LOOP_STEPS),
        count_request=False,
        streamed=streamed,
    )
    await run_agent(uncounted.agent, "Find every handler.", mode)

    threshold = int(window * TRIGGER)
    (conversation,) = first.pool
    engine = first.pool.engine(conversation)
    assert result.output == "done"
    assert (engine.context_window, engine.threshold) == (window, threshold)
    assert first.model.beside[0] > 300  # sizeable tools and instructions
    assert engine.overhead_tokens == first.model.beside[-1]
    assert len(first.model.requests) == LOOP_STEPS + 1
    assert_fits(first, threshold)
    assert max(uncounted.model.requests) > threshold  # tools and instructions push it over
    persisted = result.all_messages_json()  # what the app stores between requests
    history = pm.ModelMessagesTypeAdapter.validate_json(persisted)
    assert from_pydantic_ai(history)[0].is_summary  # the checkpoint is in the stored history

    second = start_process(
        counter, archive_file(), window, LoopModel(counter, 3, LOOP_STEPS), streamed=streamed
    )
    again = await run_agent(second.agent, "Find three more.", mode, message_history=history)

    assert again.output == "done"
    assert list(second.pool) == [conversation]  # the id pydantic-ai stamped on the history
    read = plain(second.recorder.transcripts[0])
    assert read[:-1] == plain(from_pydantic_ai(history))  # the stored history, read back ...
    assert second.model.views[0][0].text == read[0].text  # ... and sent from its checkpoint on
    assert_fits(second, threshold)
    kept = [m.text for m in from_pydantic_ai(history)]
    recalled = await recall_all(second.pool.engine(conversation), kept)
    outputs = {grep_output(f"handler_{n}", grep_size(n)) for n in range(LOOP_STEPS)}
    assert outputs - set(kept)  # capped or summarized away from the history ...
    assert outputs <= recalled | set(kept)  # ... and still whole in the archive


async def test_an_explicit_window_wins_over_the_model_profile(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(100_000, token_counter=counter, overhead_tokens=40)
    model = ScriptedModel(counter, steps=1)
    capability = ContextEngineCapability(engine, context_window=20_000, trigger=("tokens", 15_000))
    agent = Agent(
        FunctionModel(model, profile={"context_window": 8_000}),
        tools=[read_file],
        capabilities=[capability],
    )

    await agent.run("Read one module.")
    await agent.run("And again.")  # a second run does not add the schemas twice

    assert (engine.context_window, engine.threshold) == (20_000, 15_000)
    schemas = engine.overhead_tokens - 40
    assert 0 < schemas < 200  # the one small tool's schema on top of the engine's own 40


# ------------------------------------------------------------ engines per conversation


def masked(text: str) -> str:
    """``text`` with every archive reference replaced by ``arc-*``."""
    return REFERENCE_PATTERN.sub("arc-*", text)


class ConversationModel:
    """A FunctionModel body answering each conversation by its own script, per turn.

    The conversation is the tag its user prompts start with (``"a: ..."``);
    each turn reads seven files, then answers ``done``. It records the views
    each conversation's requests were sent, and reports usage like a provider.
    """

    def __init__(self, counter: FixedTokenCounter) -> None:
        self.counter = counter
        self.counts: dict[str, int] = {}
        self.views: dict[str, list[list[tuple[Any, ...]]]] = {}

    def __call__(self, messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        prompts = [
            part.content
            for message in messages
            for part in message.parts
            if isinstance(part, pm.UserPromptPart) and isinstance(part.content, str)
        ]
        tag = prompts[-1].split(":")[0]
        view = from_pydantic_ai(messages)
        self.views.setdefault(tag, []).append(
            # No timestamps; archive references hash them, so they are masked too.
            [(m.role, masked(m.text), m.tool_calls, m.tool_call_id) for m in view]
        )
        step = self.counts.get(tag, 0)
        self.counts[tag] = step + 1
        if step % 8 == 7:
            parts: list[Any] = [pm.TextPart(f"{tag}: done")]
        else:
            parts = [
                pm.TextPart(f"{tag}: reading file {step}. " + "Reasoning. " * 40),
                pm.ToolCallPart("read_file", {"path": f"{tag}/{step}.py"}, tool_call_id=f"c{step}"),
            ]
        tokens = sum(self.counter.count_message(m) for m in view)
        return pm.ModelResponse(parts=parts, usage=RequestUsage(input_tokens=tokens))


class DownForConversationA:
    """Summarizes conversation ``b``; fails on conversation ``a``'s history."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()

    def __call__(self, request: SummaryRequest) -> str:
        if any("a: reading file" in m.text for m in request.messages):
            raise RuntimeError("the summarizer is down for conversation a")
        return self.inner(request)


def conversation_options(counter: FixedTokenCounter) -> dict[str, Any]:
    return {
        "reserve_tokens": 1_500,
        "tool_result_cap": None,
        "summarizer": DownForConversationA(),
        "token_counter": counter,
        "max_consecutive_failures": 1,  # the breaker opens on the first failed summary
        "breaker_cooldown_calls": 100,
    }


def conversation_engine(counter: FixedTokenCounter) -> Callable[[str], ContextEngine]:
    def build(conversation: str) -> ContextEngine:
        return ContextEngine.default(6_000, **conversation_options(counter))

    return build


def archived_engine(counter: FixedTokenCounter) -> Callable[[str], ContextEngine]:
    """`conversation_engine` keeping its originals in an archive of its own."""

    def build(conversation: str) -> ContextEngine:
        options = conversation_options(counter)
        return ContextEngine.default(
            6_000, archive=MemoryArchive(), session_id=conversation, **options
        )

    return build


# How an app gets its engines: a pool, and the one engine a pool-less app would share.
ENGINES: dict[str, Callable[[FixedTokenCounter], tuple[Callable[[], EnginePool], Any]]] = {
    "a factory": lambda counter: (
        lambda: EnginePool(conversation_engine(counter)),
        conversation_engine(counter),
    ),
    "an archive": lambda counter: (
        lambda: EnginePool.archived(MemoryArchive(), 6_000, **conversation_options(counter)),
        archived_engine(counter),
    ),
}


async def run_conversations(
    counter: FixedTokenCounter, tags: Sequence[str], engine: ContextEngine | EnginePool
) -> dict[str, list[list[tuple[Any, ...]]]]:
    """Three turns per conversation, taking turns, through one agent."""
    model = ConversationModel(counter)
    agent = Agent(
        FunctionModel(model),
        system_prompt="You read files.",
        tools=[read_file],
        capabilities=[ContextEngineCapability(engine)],
    )
    histories: dict[str, list[pm.ModelMessage]] = {tag: [] for tag in tags}
    for turn in range(3):
        for tag in tags:
            result = await agent.run(
                f"{tag}: turn {turn}, read the files.",
                message_history=histories[tag],
                conversation_id=tag,
            )
            histories[tag] = result.all_messages()
    return model.views


@pytest.mark.parametrize("engines", list(ENGINES.values()), ids=list(ENGINES))
async def test_interleaved_conversations_get_the_views_each_gets_alone(
    counter: FixedTokenCounter, engines: Callable[[FixedTokenCounter], Any]
) -> None:
    pool, one_engine = engines(counter)
    together = await run_conversations(counter, ["a", "b"], pool())
    alone = {tag: (await run_conversations(counter, [tag], pool()))[tag] for tag in "ab"}
    shared = await run_conversations(counter, ["a", "b"], one_engine("shared"))

    assert len(together["a"]) == len(together["b"]) == 24
    assert together == alone
    # One engine for both: conversation a's failing summaries open the breaker b then meets.
    assert shared["a"] == alone["a"]
    assert shared["b"] != alone["b"]
