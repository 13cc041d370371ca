"""The Strands conversation manager, driven by real Strands agent loops with a scripted model."""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("strands", reason=needs("strands"))

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands import Agent, tool
from strands.hooks import BeforeModelCallEvent
from strands.models import Model
from strands.session.file_session_manager import FileSessionManager
from strands.telemetry import tracer as strands_tracer
from strands.types.exceptions import ContextWindowOverflowException

from context_engine import ContextEngine, ExtractiveSummarizer, Message, RewriteEvent, ToolCall
from context_engine.archive import REFERENCE_PATTERN, Archive, MemoryArchive, SQLiteArchive
from context_engine.errors import ConfigurationError
from context_engine.formats.strands import from_strands, to_strands
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.conversations import EnginePool
from context_engine.integrations.strands import ContextEngineConversationManager
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize.gate import last_failure_line
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

pytestmark = pytest.mark.extra("strands")

SYSTEM = "You review code. Read the modules one by one, then report."
OVERFLOW = "prompt is too long: 250000 tokens > 200000 maximum"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(64))


@tool
def read_file(path: str) -> str:
    """Read a source file.

    Args:
        path: The file to read.
    """
    return "\n".join(f"{path}:{n}: def handler_{n}(value): return value + {n}" for n in range(40))


class ScriptedModel(Model):
    """A Strands model provider that reads one module per call, then reports.

    It records every request and reports as usage what it was sent, counted
    with the test's counter, the way a provider reports the prompt it billed.
    ``plan`` replaces the script (the tool name and input of the n-th answer
    from 0, None for the report); a prompt billed above ``limit`` tokens is
    rejected as too long, as is the call ``overflow`` picks by its number.
    """

    def __init__(
        self,
        steps: int,
        counter: FixedTokenCounter,
        *,
        overflow: Callable[[int], bool] = lambda call: False,
        extra_usage: int = 0,
        plan: Callable[[int], tuple[str, dict[str, Any]] | None] | None = None,
        limit: int | None = None,
    ) -> None:
        self.steps = steps
        self.counter = counter
        self.overflow = overflow
        self.extra_usage = extra_usage
        self.plan = plan
        self.limit = limit
        self.received: list[list[dict[str, Any]]] = []
        self.billed: list[int] = []
        self.answered = 0
        self.rejected = 0

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> dict[str, Any]:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.received.append(copy.deepcopy(messages))
        if self.overflow(len(self.received)):
            raise ContextWindowOverflowException(OVERFLOW)
        view = from_strands(messages, system_prompt=system_prompt)
        prompt = sum(self.counter.count_message(m) for m in view) + self.extra_usage
        self.billed.append(prompt)
        if self.limit is not None and prompt > self.limit:
            self.rejected += 1
            raise ContextWindowOverflowException(
                f"prompt is too long: {prompt} tokens > {self.limit} maximum"
            )
        step, self.answered = self.answered, self.answered + 1
        planned = self.tool_call(step)
        if planned is not None:
            text = f"Step {step}: module {step} is next; I note what each handler returns. " * 20
            call = {"toolUseId": f"call_{step}", "name": planned[0]}
            arguments = json.dumps(planned[1])
        else:
            text, call, arguments = "All modules reviewed.", None, ""
        answer = Message.assistant(
            text, [ToolCall(**_ids(call), arguments=arguments)] if call else []
        )
        output = self.counter.count_message(answer)
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": text}}}
        yield {"contentBlockStop": {}}
        if call is not None:
            yield {"contentBlockStart": {"start": {"toolUse": call}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": arguments}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if call else "end_turn"}}
        usage = {"inputTokens": prompt, "outputTokens": output, "totalTokens": prompt + output}
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}

    def tool_call(self, step: int) -> tuple[str, dict[str, Any]] | None:
        """The tool and input the ``step``-th answer calls; None for the final answer."""
        if self.plan is not None:
            return self.plan(step)
        return ("read_file", {"path": f"src/mod_{step}.py"}) if step < self.steps - 1 else None


def _ids(call: dict[str, str]) -> dict[str, str]:
    return {"id": call["toolUseId"], "name": call["name"]}


@attrs.define
class Run:
    """An agent wired to an engine, with what the test observes of it."""

    agent: Agent
    manager: ContextEngineConversationManager
    model: ScriptedModel
    engine: ContextEngine
    events: list[RewriteEvent]
    recoveries: list[RewriteEvent]
    transcripts: list[list[dict[str, Any]]] = attrs.field(factory=list)


def make_run(
    counter: FixedTokenCounter,
    model: ScriptedModel,
    *,
    window: int = 8_000,
    messages: Sequence[Message] = (),
    engine: ContextEngine | None = None,
    tools: Sequence[Any] = (read_file,),
    cap_tool_results: bool = True,
    **agent_options: Any,
) -> Run:
    events: list[RewriteEvent] = []
    recoveries: list[RewriteEvent] = []
    engine = engine or ContextEngine.default(
        window,
        tool_result_cap=None,  # these loops exercise checkpoints, which a cap would make rare
        reserve_tokens=window // 4,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        on_project=events.append,
        on_recover=recoveries.append,
    )
    manager = ContextEngineConversationManager(engine, cap_tool_results=cap_tool_results)
    agent = Agent(
        model=model,
        tools=list(tools),
        system_prompt=SYSTEM,
        callback_handler=None,
        conversation_manager=manager,
        messages=to_strands(messages),
        **agent_options,
    )
    run = Run(agent, manager, model, engine, events, recoveries)
    agent.add_hook(
        lambda event: run.transcripts.append(copy.deepcopy(agent.messages)), BeforeModelCallEvent
    )
    return run


def bare(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as a model receives them: role and content only."""
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def tokens(counter: FixedTokenCounter, messages: list[dict[str, Any]]) -> int:
    return sum(counter.count_message(m) for m in from_strands(messages, system_prompt=SYSTEM))


def history(steps: int) -> list[Message]:
    """A long earlier session, without its system prompt (the agent has its own)."""
    return synthetic_session(steps)[1:]


# -- the agent loop ---------------------------------------------------------------------


async def streamed(agent: Agent, prompt: str) -> Any:
    """``agent.stream_async(prompt)`` to its end: the result its last event carries."""
    results = [event["result"] async for event in agent.stream_async(prompt) if "result" in event]
    (result,) = results
    return result


@pytest.mark.parametrize("mode", ["async", "stream"])
async def test_a_long_agent_loop_sends_every_call_under_the_threshold_and_finishes(
    counter: FixedTokenCounter, mode: str
) -> None:
    """Forty model calls cross the threshold again and again; each view fits and is valid."""
    run = make_run(counter, ScriptedModel(40, counter))
    prompt = "Review every module in src/."
    if mode == "async":
        result = await run.agent.invoke_async(prompt)
    else:
        result = await streamed(run.agent, prompt)

    assert str(result).strip() == "All modules reviewed."
    assert result.stop_reason == "end_turn"
    assert len(run.model.received) == 40
    assert len(run.transcripts) == 40
    threshold = run.engine.threshold
    for transcript, received in zip(run.transcripts, run.model.received, strict=True):
        view = from_strands(received, system_prompt=SYSTEM)
        assert check_view(from_strands(bare(transcript), system_prompt=SYSTEM), view) == []
        assert tokens(counter, received) <= threshold
    assert sum(tokens(counter, bare(t)) > threshold for t in run.transcripts) >= 10
    committed = [e for e in run.events if e.committed]
    assert len(committed) >= 3
    assert run.manager.commits == len(committed)
    with_checkpoint = [
        from_strands(r, system_prompt=SYSTEM)[1].is_summary for r in run.model.received
    ]
    first = with_checkpoint.index(True)
    assert all(with_checkpoint[first:])
    checkpoints = {from_strands(r)[0].text for r in run.model.received[first:]}
    assert len(checkpoints) >= 3
    assert from_strands(run.agent.messages)[0].is_summary
    assert run.manager.removed_message_count > 0


def test_the_blocking_agent_call_is_managed_the_same_way(counter: FixedTokenCounter) -> None:
    """``agent(...)`` (Strands runs its loop on a thread) gets the same projections."""
    run = make_run(counter, ScriptedModel(24, counter))
    result = run.agent("Review every module in src/.")
    assert str(result).strip() == "All modules reviewed."
    assert run.manager.commits >= 1
    assert all(tokens(counter, r) <= run.engine.threshold for r in run.model.received)


def test_below_the_threshold_the_model_gets_the_history_untouched(
    counter: FixedTokenCounter,
) -> None:
    """No rewrite, no commit: the model receives exactly agent.messages."""
    run = make_run(counter, ScriptedModel(3, counter), window=100_000)
    run.agent("Review the two modules.")
    assert [bare(t) for t in run.transcripts] == run.model.received
    assert run.manager.commits == 0
    assert run.events == []


def test_provider_usage_on_the_history_anchors_the_engine(counter: FixedTokenCounter) -> None:
    """The usage Strands stores with each answer is what the engine measures the next call from."""
    run = make_run(counter, ScriptedModel(3, counter, extra_usage=300), window=100_000)
    run.agent("Review the two modules.")
    transcript = from_strands(run.agent.messages, system_prompt=run.agent.system_prompt_content)
    last_answer = max(i for i, m in enumerate(transcript) if m.role == "assistant")
    usage = transcript[last_answer].usage
    assert usage is not None
    assert usage.input_tokens == tokens(counter, run.model.received[-1]) + 300
    measured = run.engine.usage  # of apply_management's projection of the whole history
    assert measured is not None
    assert measured.usage_tokens == usage.total_tokens
    assert measured.tokens == usage.total_tokens + measured.trailing_tokens


def test_images_reach_the_model_byte_for_byte(counter: FixedTokenCounter) -> None:
    """A screenshot in the prompt survives the projection of a long history."""
    run = make_run(counter, ScriptedModel(1, counter), messages=history(60))
    image = {"image": {"format": "png", "source": {"bytes": PNG}}}
    run.agent([{"text": "What does this screenshot show?"}, image])
    (received,) = run.model.received
    assert tokens(counter, received) <= run.engine.threshold
    assert received[-1]["content"][1] == image


async def test_a_failing_pipeline_still_calls_the_model_with_the_best_view(
    counter: FixedTokenCounter,
) -> None:
    """A strategy error is logged and counted by the breaker; the agent keeps going."""
    failing = FullSummary(summarizer=RecordingSummarizer(fail=RuntimeError("summarizer down")))
    engine = ContextEngine(4_000, [failing], reserve_tokens=1_000, token_counter=counter)
    run = make_run(counter, ScriptedModel(1, counter), messages=history(30), engine=engine)
    result = await run.agent.invoke_async("Status?")
    assert str(result).strip() == "All modules reviewed."
    assert bare(run.transcripts[0]) == run.model.received[0]
    assert engine.consecutive_failures >= 1
    assert run.manager.commits == 0


# -- overflow ---------------------------------------------------------------------------


def test_an_overflow_is_recovered_once_and_the_call_retried(counter: FixedTokenCounter) -> None:
    """The model rejects the prompt once: reduce_context commits a recovery, the retry succeeds."""
    model = ScriptedModel(1, counter, overflow=lambda call: call == 1)
    run = make_run(counter, model, window=200_000, messages=history(60))
    result = run.agent("Status?")
    assert str(result).strip() == "All modules reviewed."
    assert len(model.received) == 2
    assert len(run.recoveries) == 1
    rejected, retried = model.received
    assert tokens(counter, retried) < tokens(counter, rejected)
    assert from_strands(retried, system_prompt=SYSTEM)[1].is_summary
    assert from_strands(run.agent.messages)[0].is_summary
    assert run.manager.commits == 1
    assert (
        check_view(
            from_strands(rejected, system_prompt=SYSTEM),
            from_strands(retried, system_prompt=SYSTEM),
        )
        == []
    )


def test_an_overflow_on_the_retry_surfaces(counter: FixedTokenCounter) -> None:
    """Recovery and retry happen once; the second overflow reaches the caller."""
    model = ScriptedModel(1, counter, overflow=lambda call: True)
    run = make_run(counter, model, window=200_000, messages=history(60))
    with pytest.raises(ContextWindowOverflowException, match="prompt is too long"):
        run.agent("Status?")
    assert len(model.received) == 2
    assert len(run.recoveries) == 1
    assert run.manager.commits == 1


def test_an_overflow_with_nothing_left_to_remove_surfaces_at_once(
    counter: FixedTokenCounter,
) -> None:
    """reduce_context must reduce or raise: with a two-message history it raises."""
    model = ScriptedModel(1, counter, overflow=lambda call: True)
    run = make_run(counter, model, window=200_000)
    with pytest.raises(ContextWindowOverflowException, match="could not shrink") as raised:
        run.agent("hi")
    assert "prompt is too long" in str(raised.value)  # the provider's own words, kept
    assert len(model.received) == 1
    assert run.manager.commits == 0


def test_a_new_invocation_may_recover_again(counter: FixedTokenCounter) -> None:
    """The one-retry rule is per overflow, not per agent."""
    model = ScriptedModel(1, counter, overflow=lambda call: call in (1, 3))
    run = make_run(counter, model, window=200_000, messages=history(60))
    run.agent("Status?")
    run.agent("And now?")
    assert len(model.received) == 4
    assert len(run.recoveries) == 2


# -- direct calls -----------------------------------------------------------------------


def make_idle(counter: FixedTokenCounter, messages: list[Message], **options: Any) -> Run:
    return make_run(counter, ScriptedModel(1, counter), messages=messages, **options)


@pytest.mark.parametrize("in_loop", [False, True], ids=["from plain code", "inside an event loop"])
async def test_apply_management_commits_from_sync_and_async_callers(
    counter: FixedTokenCounter, in_loop: bool
) -> None:
    """Strands calls it synchronously inside its loop; it works there and outside one."""
    run = make_idle(counter, history(80), window=6_000)
    before = len(run.agent.messages)
    if in_loop:
        run.manager.apply_management(run.agent)
    else:
        await asyncio.to_thread(run.manager.apply_management, run.agent)
    assert run.manager.commits == 1
    assert len(run.agent.messages) < before
    assert from_strands(run.agent.messages)[0].is_summary


def test_apply_management_on_an_empty_history_does_nothing(counter: FixedTokenCounter) -> None:
    run = make_idle(counter, [])
    run.manager.apply_management(run.agent)
    assert run.agent.messages == []
    assert run.manager.commits == 0


def test_a_pending_tool_call_at_the_end_is_kept_as_it_is(counter: FixedTokenCounter) -> None:
    """A call still waiting for its result (an interrupt) survives a commit unchanged."""
    pending = Message.assistant(
        "Deleting the build directory.", tool_calls=[ToolCall("rm_1", "rm", '{"path": "build"}')]
    )
    run = make_idle(counter, [*history(80), Message.user("clean up"), pending], window=6_000)
    last = copy.deepcopy(run.agent.messages[-1])
    run.manager.apply_management(run.agent)
    assert run.manager.commits == 1
    assert run.agent.messages[-1] == last


def test_proactive_reduce_context_compacts(counter: FixedTokenCounter) -> None:
    """Without an error reduce_context compacts the history now."""
    run = make_idle(counter, history(40), window=100_000)
    run.manager.reduce_context(run.agent)
    assert run.manager.commits == 1
    assert from_strands(run.agent.messages)[0].is_summary


def test_proactive_reduce_context_never_raises(counter: FixedTokenCounter) -> None:
    """Best effort: a failing compaction leaves the history as it was."""
    failing = FullSummary(summarizer=RecordingSummarizer(fail=RuntimeError("down")))
    engine = ContextEngine(100_000, [failing], token_counter=counter)
    run = make_idle(counter, history(40), engine=engine)
    before = copy.deepcopy(run.agent.messages)
    run.manager.reduce_context(run.agent)
    assert run.agent.messages == before
    assert run.manager.commits == 0


def test_a_compact_command_compacts_without_calling_the_model(counter: FixedTokenCounter) -> None:
    """``agent("/compact keep the parser notes")`` is a manual compaction."""
    # The answer quotes the last failure, or the quality gate would use the extractive digest.
    failure = last_failure_line(history(40))
    summarizer = RecordingSummarizer([f"## Goal\n- fix the parser\n- last failure: {failure}"])
    engine = ContextEngine.default(100_000, summarizer=summarizer, token_counter=counter)
    run = make_idle(counter, history(40), engine=engine)
    result = run.agent("/compact keep the parser notes")
    assert run.model.received == []
    assert str(result).startswith("Compacted ")
    assert [r.instructions for r in summarizer.requests] == ["keep the parser notes"]
    assert [r.reason for r in summarizer.requests] == ["manual"]
    ours = from_strands(run.agent.messages)
    assert ours[0].is_summary
    assert "fix the parser" in ours[0].text


def test_a_compact_command_can_be_switched_off(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(100_000, token_counter=counter)
    manager = ContextEngineConversationManager(engine, compact_command=False)
    model = ScriptedModel(1, counter)
    agent = Agent(model=model, callback_handler=None, conversation_manager=manager)
    agent("/compact")
    assert len(model.received) == 1


# -- sessions ---------------------------------------------------------------------------


def test_a_restored_session_continues_from_the_checkpoint(
    counter: FixedTokenCounter, tmp_path: Path
) -> None:
    """Strands' session manager restores the checkpoint and the messages after it."""
    first = make_run(
        counter,
        ScriptedModel(30, counter),
        session_manager=FileSessionManager(session_id="s1", storage_dir=str(tmp_path)),
    )
    first.agent("Review every module in src/.")
    assert first.manager.commits >= 1
    second = make_run(
        counter,
        ScriptedModel(1, counter),
        session_manager=FileSessionManager(session_id="s1", storage_dir=str(tmp_path)),
    )
    assert second.manager.removed_message_count == first.manager.removed_message_count
    assert bare(second.agent.messages) == bare(first.agent.messages)
    assert from_strands(second.agent.messages)[0].is_summary


def test_state_of_another_manager_is_refused(counter: FixedTokenCounter) -> None:
    manager = ContextEngineConversationManager(ContextEngine.default(10_000, token_counter=counter))
    with pytest.raises(ValueError, match="Invalid conversation manager state"):
        manager.restore_from_session({"__name__": "SlidingWindowConversationManager"})
    state = manager.get_state()
    assert state == {
        "__name__": "ContextEngineConversationManager",
        "removed_message_count": 0,
        "head": [],
    }
    assert manager.restore_from_session(state) is None


def test_the_manager_needs_an_engine() -> None:
    with pytest.raises(ConfigurationError, match=r"ContextEngine\.default"):
        ContextEngineConversationManager(object())  # type: ignore[arg-type]
    engine = ContextEngine.default(8_000)
    with pytest.raises(ConfigurationError, match="cap_tool_results"):
        ContextEngineConversationManager(engine, cap_tool_results="no")  # type: ignore[arg-type]


def test_missing_strands_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "strands", None)
    monkeypatch.delitem(sys.modules, "context_engine.integrations.strands")
    with pytest.raises(ImportError, match=r"pip install 'context-engine\[strands\]'"):
        importlib.import_module("context_engine.integrations.strands")


# -- tracing ----------------------------------------------------------------------------


def test_engine_spans_are_children_of_the_strands_spans(
    counter: FixedTokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each projection is traced inside the event-loop cycle around the model call."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    runtime_tracer = strands_tracer.Tracer()
    runtime_tracer.tracer_provider = provider
    runtime_tracer.tracer = provider.get_tracer(runtime_tracer.service_name)
    monkeypatch.setattr(strands_tracer, "_tracer_instance", runtime_tracer)
    engine = ContextEngine.default(
        8_000,
        reserve_tokens=2_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=counter,
        tracer_provider=provider,
    )
    run = make_run(counter, ScriptedModel(16, counter), engine=engine)
    run.agent("Review every module in src/.")

    spans = exporter.get_finished_spans()
    by_id = {span.context.span_id: span for span in spans}
    projects = [s for s in spans if s.name == "context_engine.project"]
    parents = [by_id[s.parent.span_id].name for s in projects if s.parent is not None]
    assert len(parents) == len(projects) == 16 + 1  # every call, and apply_management at the end
    assert parents.count("execute_event_loop_cycle") == 16
    assert parents[-1].startswith("invoke_agent")
    (agent_span,) = [s for s in spans if s.name.startswith("invoke_agent")]
    assert {s.context.trace_id for s in projects} == {agent_span.context.trace_id}
    assert any(s.name == "context_engine.strategy" for s in spans)


def test_an_overflow_on_the_call_that_wrote_a_checkpoint_keeps_the_checkpoint(
    counter: FixedTokenCounter,
) -> None:
    """The recovery starts from the checkpoint: the retry sends it, no second summary is paid."""
    # A short answer that keeps the last failure: the quality gate takes it as it is.
    summarizer = RecordingSummarizer([f"Last failure: {last_failure_line(history(60))}"])
    engine = ContextEngine(
        20_000,
        reserve_tokens=4096,
        strategies=[FullSummary(summarizer=summarizer, keep_recent_tokens=3000), HardTruncate()],
        commit_strategies=("full_summary",),
        token_counter=counter,
    )
    summaries: list[int] = []

    def overflow(call: int) -> bool:
        summaries.append(summarizer.calls)
        return call == 1

    model = ScriptedModel(1, counter, overflow=overflow)
    run = make_run(counter, model, messages=history(60), engine=engine)
    result = run.agent("Status?")

    assert str(result).strip() == "All modules reviewed."
    first, retry = (from_strands(sent, system_prompt=SYSTEM) for sent in model.received)
    assert first[1].is_summary
    # The retry starts with that very checkpoint (the last resort may trim its middle to fit).
    opening = first[1].text.split("\n[")[0][:100]
    assert retry[1].is_summary
    assert retry[1].text.startswith(opening)
    assert len(retry) < len(first)
    assert summaries[0] >= 1
    assert summarizer.calls == summaries[0]  # the recovery wrote no second summary
    # The history keeps the checkpoint whole: only the retry's view needed it cut.
    assert from_strands(run.agent.messages)[0].text == first[1].text


# ------------------------------------------------------- window and overhead from the runtime


@tool
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


def search(step: int) -> tuple[str, dict[str, Any]]:
    """The ``step``-th search: a multi-thousand-token output."""
    args = {"pattern": f"handler_{step}", "path": "src", "language": "python"}
    return "search_code", args | {"max_results": grep_size(step)}


class SizedModel(ScriptedModel):
    """A minimal Strands model with a ``context_window_limit`` that is billed its tool specs.

    By default it searches ``steps`` times from step ``first``, then reports. It
    records each request's size with its tool specs (what a provider bills) and
    reports no usage (zero counts), so the engine cannot learn the specs' size
    from a provider anchor.
    """

    def __init__(
        self, counter: FixedTokenCounter, window: int, steps: int = LOOP_STEPS, first: int = 0
    ) -> None:
        super().__init__(
            steps + 1,
            counter,
            plan=lambda n: None if n >= steps else search(first + n),
        )
        self.window = window
        self.requests: list[int] = []
        self.specs = 0

    def get_config(self) -> dict[str, Any]:
        return {"context_window_limit": self.window}

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.specs = self.counter.count_text(schema_text(tool_specs or ()))
        async for event in super().stream(messages, tool_specs, system_prompt, **kwargs):
            if "metadata" in event:
                self.requests.append(self.billed[-1] + REQUEST_OVERHEAD_TOKENS + self.specs)
                usage = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
                event = {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}
            yield event


@attrs.define
class LoopProcess:
    """One "process" of an app: its own archive store object, pool, model and agent."""

    agent: Agent
    model: SizedModel
    pool: EnginePool
    transcripts: list[list[dict[str, Any]]]


def start_process(
    counter: FixedTokenCounter,
    store: Archive,
    model: SizedModel,
    *,
    count_request: bool = True,
    **agent_options: Any,
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
    manager = ContextEngineConversationManager(
        pool, trigger=("fraction", TRIGGER), count_request=count_request
    )
    agent = Agent(
        model=model,
        tools=[search_code, read_file],
        system_prompt=INSTRUCTIONS,
        callback_handler=None,
        conversation_manager=manager,
        **agent_options,
    )
    transcripts: list[list[dict[str, Any]]] = []
    agent.add_hook(
        lambda event: transcripts.append(copy.deepcopy(agent.messages)), BeforeModelCallEvent
    )
    return LoopProcess(agent, model, pool, transcripts)


def run_agent(agent: Agent, prompt: str, mode: str) -> Any:
    if mode == "sync":
        return agent(prompt)
    if mode == "stream":
        return asyncio.run(streamed(agent, prompt))
    return asyncio.run(agent.invoke_async(prompt))


def assert_fits(process: LoopProcess, threshold: int) -> None:
    """Every request at or under the threshold with its tool specs, valid, no orphan pairs."""
    calls = zip(process.transcripts, process.model.received, strict=True)
    for number, (transcript, received) in enumerate(calls):
        view = from_strands(received, system_prompt=INSTRUCTIONS)
        assert process.model.requests[number] <= threshold, f"request {number}"
        assert orphans(view) == [], f"request {number}"
        history = from_strands(bare(transcript), system_prompt=INSTRUCTIONS)
        assert check_view(history, view) == [], f"request {number}"


# Each mode at both windows; the streamed run at 8k, where the most checkpoints are written.
LOOP_RUNS = [(m, w) for m in ("sync", "async") for w in WINDOWS] + [("stream", WINDOWS[0])]


@pytest.mark.parametrize(
    ("mode", "window"), LOOP_RUNS, ids=[f"{m}-{w // 1000}k" for m, w in LOOP_RUNS]
)
def test_a_long_loop_fits_with_its_tool_specs_and_a_second_process_resumes_it(
    counter: FixedTokenCounter,
    mode: str,
    window: int,
    archive_file: Callable[[], SQLiteArchive],
    tmp_path: Path,
) -> None:
    def session() -> FileSessionManager:
        return FileSessionManager(session_id="s1", storage_dir=str(tmp_path / "sessions"))

    first = start_process(
        counter, archive_file(), SizedModel(counter, window), session_manager=session()
    )
    result = run_agent(first.agent, "Find every handler.", mode)
    uncounted = start_process(
        counter, MemoryArchive(), SizedModel(counter, window), count_request=False
    )
    run_agent(uncounted.agent, "Find every handler.", mode)

    threshold = int(window * TRIGGER)
    engine = first.pool.engine("s1/default")  # the session id and the agent id
    assert str(result).strip() == "All modules reviewed."
    assert (engine.context_window, engine.threshold) == (window, threshold)
    assert first.model.specs > 200  # sizeable tool specs
    assert engine.overhead_tokens == first.model.specs
    assert len(first.model.requests) == LOOP_STEPS + 1
    assert_fits(first, threshold)
    assert max(uncounted.model.requests) > threshold  # the specs push it over
    stored = session().read_agent("s1", "default")
    assert stored is not None
    head = from_strands(stored.conversation_manager_state["head"])
    assert head[0].is_summary  # the checkpoint is in the session's persisted state

    second = start_process(
        counter,
        archive_file(),
        SizedModel(counter, window, steps=3, first=LOOP_STEPS),
        session_manager=session(),
    )
    restored = from_strands(second.agent.messages)
    assert restored[0].text == head[0].text  # the session manager restored the checkpoint
    again = run_agent(second.agent, "Find three more.", mode)

    assert str(again).strip() == "All modules reviewed."
    resumed = from_strands(second.model.received[0], system_prompt=INSTRUCTIONS)
    assert resumed[1].text == head[0].text  # sent from its checkpoint on
    assert_fits(second, threshold)
    kept = [m.text for m in restored]
    recalled = asyncio.run(recall_all(second.pool.engine("s1/default"), kept))
    outputs = {grep_output(f"handler_{n}", grep_size(n)) for n in range(LOOP_STEPS)}
    assert outputs - set(kept)  # capped or summarized away from the history ...
    assert outputs <= recalled | set(kept)  # ... and still whole in the archive


def test_an_explicit_window_wins_over_the_models_limit(counter: FixedTokenCounter) -> None:
    engine = ContextEngine.default(100_000, token_counter=counter, overhead_tokens=40)
    model = SizedModel(counter, 8_000)
    model.plan = lambda n: None
    manager = ContextEngineConversationManager(
        engine, context_window=20_000, trigger=("tokens", 15_000)
    )
    agent = Agent(
        model=model, tools=[read_file], callback_handler=None, conversation_manager=manager
    )

    agent("Report.")
    agent("Report again.")  # the specs are counted once on top of the engine's own 40

    assert (engine.context_window, engine.threshold) == (20_000, 15_000)
    assert engine.overhead_tokens == 40 + model.specs


# ------------------------------------------------------------- engines per session


class SessionModel(ScriptedModel):
    """Answers each session by its own script, per turn: seven reads, then a report.

    The session is the tag its user prompts start with (``"a: ..."``). It
    records what each session's calls were sent, and reports usage.
    """

    def __init__(self, counter: FixedTokenCounter) -> None:
        super().__init__(0, counter)
        self.counts: dict[str, int] = {}
        self.views: dict[str, list[list[tuple[Any, ...]]]] = {}
        self.tag = ""

    def tool_call(self, step: int) -> tuple[str, dict[str, Any]] | None:
        return None if step % 8 == 7 else ("read_file", {"path": f"{self.tag}/{step}.py"})

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        prompts = [
            block["text"]
            for message in messages
            if message["role"] == "user"
            for block in message["content"]
            if "text" in block and ": turn " in block["text"]
        ]
        self.tag = prompts[-1].split(":")[0]
        view = from_strands(messages, system_prompt=system_prompt)
        self.views.setdefault(self.tag, []).append(
            # Archive references hash message timestamps and ids: masked.
            [
                (m.role, REFERENCE_PATTERN.sub("arc-*", m.text), m.tool_calls, m.tool_call_id)
                for m in view
            ]
        )
        self.answered = self.counts.get(self.tag, 0)  # the session's own step (and call ids)
        async for event in super().stream(messages, tool_specs, system_prompt, **kwargs):
            yield event
        self.counts[self.tag] = self.answered


class DownForSessionA:
    """Summarizes session ``b``; fails on session ``a``'s history."""

    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()

    def __call__(self, request: Any) -> str:
        if any("a/" in m.text for m in request.messages):
            raise RuntimeError("the summarizer is down for session a")
        return self.inner(request)


def session_options(counter: FixedTokenCounter) -> dict[str, Any]:
    return {
        "reserve_tokens": 1_500,
        "tool_result_cap": None,
        "summarizer": DownForSessionA(),
        "token_counter": counter,
        "max_consecutive_failures": 1,  # the breaker opens on the first failed summary
        "breaker_cooldown_calls": 100,
    }


def session_engine(counter: FixedTokenCounter) -> Callable[[str], ContextEngine]:
    def build(session: str) -> ContextEngine:
        return ContextEngine.default(6_000, **session_options(counter))

    return build


def archived_engine(counter: FixedTokenCounter) -> Callable[[str], ContextEngine]:
    """`session_engine` keeping its originals in an archive of its own."""

    def build(session: str) -> ContextEngine:
        options = session_options(counter)
        return ContextEngine.default(6_000, archive=MemoryArchive(), session_id=session, **options)

    return build


# How an app gets its engines: a pool, and the one engine a pool-less app would share.
ENGINES: dict[str, Callable[[FixedTokenCounter], tuple[Callable[[], EnginePool], Any]]] = {
    "a factory": lambda counter: (
        lambda: EnginePool(session_engine(counter)),
        session_engine(counter),
    ),
    "an archive": lambda counter: (
        lambda: EnginePool.archived(MemoryArchive(), 6_000, **session_options(counter)),
        archived_engine(counter),
    ),
}


def run_sessions(
    counter: FixedTokenCounter,
    tags: Sequence[str],
    engine: ContextEngine | EnginePool,
    storage: Path,
) -> dict[str, list[list[tuple[Any, ...]]]]:
    """Three requests per session, taking turns; each request builds its agent, as an app does."""
    model = SessionModel(counter)
    for turn in range(3):
        for tag in tags:
            agent = Agent(
                model=model,
                tools=[read_file],
                system_prompt=SYSTEM,
                callback_handler=None,
                conversation_manager=ContextEngineConversationManager(engine),
                session_manager=FileSessionManager(session_id=tag, storage_dir=str(storage)),
            )
            agent(f"{tag}: turn {turn}, read the modules.")
    return model.views


@pytest.mark.parametrize("engines", list(ENGINES.values()), ids=list(ENGINES))
def test_interleaved_sessions_get_the_views_each_gets_alone(
    counter: FixedTokenCounter, tmp_path: Path, engines: Callable[[FixedTokenCounter], Any]
) -> None:
    make_pool, one_engine = engines(counter)
    pool = make_pool()
    together = run_sessions(counter, ["a", "b"], pool, tmp_path / "together")
    alone = {
        tag: run_sessions(counter, [tag], make_pool(), tmp_path / f"alone-{tag}")[tag]
        for tag in "ab"
    }
    shared = run_sessions(counter, ["a", "b"], one_engine("shared"), tmp_path / "shared")

    assert len(together["a"]) == len(together["b"]) == 24
    assert list(pool) == ["a/default", "b/default"]  # session id and agent id
    assert together == alone
    # One engine for both: session a's failing summaries open the breaker b then meets.
    assert shared["b"] != alone["b"]


def test_a_pool_manager_has_its_engine_once_its_agent_is_built(counter: FixedTokenCounter) -> None:
    manager = ContextEngineConversationManager(EnginePool(session_engine(counter)))
    with pytest.raises(ConfigurationError, match="when its agent is built"):
        _ = manager.engine
    Agent(model=ScriptedModel(1, counter), callback_handler=None, conversation_manager=manager)
    assert manager.pool is not None
    assert manager.engine is manager.pool.engine("default")
