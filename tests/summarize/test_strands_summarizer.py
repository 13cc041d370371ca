"""StrandsSummarizer with a scripted Strands model: prompts, retries, its own overflow, breaker."""

from __future__ import annotations

import asyncio
import copy
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("strands", reason=needs("strands"))

from strands import Agent, tool
from strands.models import Model
from strands.types.exceptions import ContextWindowOverflowException, ModelThrottledException

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.formats.strands import from_strands
from context_engine.integrations.strands import ContextEngineConversationManager
from context_engine.summarize.prompts import DEFAULT_PROMPTS, build_request
from context_engine.summarize.retry import RetryPolicy
from context_engine.summarize.strands import StrandsSummarizer
from context_engine.testing import synthetic_session

pytestmark = pytest.mark.extra("strands")

SUMMARY = "<summary>The user is fixing the parser; three modules were read.</summary>"
HEADINGS = re.findall(r"^## .+$", DEFAULT_PROMPTS.summary, flags=re.MULTILINE)


class ScriptedModel(Model):
    """A Strands model provider answering each call from ``script`` (the last entry repeats).

    An exception is raised from the stream, a string is streamed as the answer's
    text, a ``(text, stop_reason)`` pair ends with that stop reason.
    """

    def __init__(self, *script: Any, model_id: str = "scripted-model") -> None:
        self.script = list(script)
        self.model_id = model_id
        self.requests: list[dict[str, Any]] = []

    def update_config(self, **model_config: Any) -> None:
        raise AssertionError("the summarizer must not reconfigure the caller's model")

    def get_config(self) -> dict[str, Any]:
        return {"model_id": self.model_id}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        self.requests.append(
            {"messages": copy.deepcopy(messages), "tools": tool_specs, "system": system_prompt}
        )
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(outcome, BaseException):
            raise outcome
        text, stop = outcome if isinstance(outcome, tuple) else (outcome, "end_turn")
        yield {"messageStart": {"role": "assistant"}}
        if text:
            yield {"contentBlockDelta": {"delta": {"text": text}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}
        usage = {"inputTokens": 900, "outputTokens": 40, "totalTokens": 940}
        yield {"metadata": {"usage": usage, "metrics": {"latencyMs": 1}}}

    def prompt_text(self, call: int) -> str:
        (message,) = self.requests[call]["messages"]
        return "".join(block["text"] for block in message["content"])


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for n in range(turns):
        messages += [Message.user(f"Question {n} about the parser."), Message.assistant(f"A{n}.")]
    return messages


def policy(waits: list[float] | None = None, **options: Any) -> RetryPolicy:
    async def no_wait(seconds: float) -> None:
        if waits is not None:
            waits.append(seconds)

    return RetryPolicy(initial_wait=0.01, jitter=0, sleep=no_wait, max_attempts=3, **options)


def test_the_model_is_sent_the_summary_prompt_and_its_answer_is_the_checkpoint() -> None:
    """The system prompt goes as ``system_prompt``, the task and data as one user message."""
    model = ScriptedModel(SUMMARY)
    request = build_request(conversation(6), instructions="keep the parser names", max_tokens=512)

    text = asyncio.run(StrandsSummarizer(model, retry=policy())(request))

    assert text == "The user is fixing the parser; three modules were read."
    (sent,) = model.requests
    assert sent["system"] == request.prompt_messages[0].text == DEFAULT_PROMPTS.system
    assert sent["tools"] is None
    assert [m["role"] for m in sent["messages"]] == ["user"]
    prompt = model.prompt_text(0)
    assert prompt == request.prompt_messages[1].text
    assert [HEADINGS[0], HEADINGS[-1]] == ["## Goal", "## Next steps"]
    assert all(heading in prompt for heading in HEADINGS)  # the sections every summarizer asks
    assert "<instructions>\nkeep the parser names\n</instructions>" in prompt
    assert "Question 5 about the parser." in prompt


def test_the_summarizer_closes_the_event_stream_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Left open, the stream is closed by the loop's finalizer, or warned about at exit."""
    from context_engine.summarize import strands as module

    real = module.process_stream
    closed: list[bool] = []

    async def recording(chunks: Any) -> AsyncIterator[Any]:
        try:
            async for event in real(chunks):
                yield event
        finally:
            closed.append(True)

    monkeypatch.setattr(module, "process_stream", recording)
    request = build_request(conversation(2), max_tokens=512)

    async def summarize() -> tuple[str, list[bool]]:
        text = await StrandsSummarizer(ScriptedModel(SUMMARY), retry=policy())(request)
        return text, list(closed)  # before the loop's own shutdown closes what is left

    text, closed_on_return = asyncio.run(summarize())
    assert text == "The user is fixing the parser; three modules were read."
    assert closed_on_return == [True]


def test_an_agent_lends_its_aux_model_and_is_left_untouched() -> None:
    """The agent is not invoked: its messages and prompt stay; ``aux_model`` beats ``model``."""
    main, aux = ScriptedModel(SUMMARY, model_id="main"), ScriptedModel(SUMMARY, model_id="aux")
    history = [{"role": "user", "content": [{"text": "Fix the parser."}]}]
    agent = Agent(
        model=main, aux_model=aux, messages=copy.deepcopy(history), system_prompt="You code."
    )
    summarizer = StrandsSummarizer(agent, retry=policy())

    assert asyncio.run(summarizer(build_request(conversation(3), max_tokens=512)))

    assert (len(aux.requests), len(main.requests)) == (1, 0)
    assert agent.messages == history
    assert agent.system_prompt == "You code."
    assert repr(summarizer) == "StrandsSummarizer(model='aux')"

    agent.aux_model = None  # read at every call: the agent's model again
    assert asyncio.run(summarizer(build_request(conversation(3), max_tokens=512)))
    assert (len(aux.requests), len(main.requests)) == (1, 1)
    assert repr(summarizer) == "StrandsSummarizer(model='main')"
    assert agent.messages == history


@pytest.mark.parametrize(
    "error",
    [ModelThrottledException("Rate exceeded"), TimeoutError("read timed out")],
    ids=["strands-throttling", "timeout"],
)
def test_throttling_is_retried_and_a_persistent_one_fails_with_the_cause(
    error: Exception,
) -> None:
    model = ScriptedModel(error, error, SUMMARY)
    request = build_request(conversation(4), max_tokens=512)
    waits: list[float] = []

    assert asyncio.run(StrandsSummarizer(model, retry=policy(waits))(request))
    assert len(model.requests) == 3
    assert len(waits) == 2  # backed off before each retry

    stuck = ScriptedModel(error)
    with pytest.raises(SummarizerError, match=r"Strands summarizer \(scripted-model\)") as raised:
        asyncio.run(StrandsSummarizer(stuck, retry=policy())(request))
    assert raised.value.__cause__ is error
    assert len(stuck.requests) == 3  # max_attempts


def test_the_summarizers_own_context_window_overflow_shrinks_the_prompt() -> None:
    model = ScriptedModel(ContextWindowOverflowException("Input is too long"), SUMMARY)
    request = build_request(conversation(20), max_tokens=512)

    assert asyncio.run(StrandsSummarizer(model, retry=policy())(request))
    first, second = model.prompt_text(0), model.prompt_text(1)
    assert "Question 0 about the parser." in first
    assert "Question 0 about the parser." not in second  # the oldest turns were dropped
    assert "Question 19 about the parser." in second
    assert all(heading in second for heading in HEADINGS)  # the same task, rebuilt


def test_an_overflow_that_shrinking_cannot_cure_fails_after_the_allowed_retries() -> None:
    model = ScriptedModel(ContextWindowOverflowException("Input is too long"))
    request = build_request(conversation(20), max_tokens=512)

    with pytest.raises(SummarizerError, match="longer than the model's window") as raised:
        asyncio.run(StrandsSummarizer(model, retry=policy(max_overflow_retries=2))(request))
    assert isinstance(raised.value.__cause__, ContextWindowOverflowException)
    assert len(model.requests) == 3  # the first prompt and two shrunk ones, no waiting retries


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        ("", "returned no text .stop_reason='end_turn'"),
        (("", "max_tokens"), "raise max_tokens in the model's config"),
        ("<analysis>thinking only</analysis>", "empty summary"),
    ],
    ids=["empty", "cut-before-any-text", "scratchpad-only"],
)
def test_an_answer_without_checkpoint_text_is_an_error(answer: Any, match: str) -> None:
    request = build_request(conversation(2), max_tokens=512)
    with pytest.raises(SummarizerError, match=match):
        asyncio.run(StrandsSummarizer(ScriptedModel(answer), retry=policy())(request))


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: StrandsSummarizer("gpt-5"), "Strands Model or Agent"),  # type: ignore[arg-type]
        (lambda: StrandsSummarizer(ScriptedModel(SUMMARY), retry=3), "RetryPolicy"),  # type: ignore[arg-type]
        (lambda: StrandsSummarizer(ScriptedModel(SUMMARY), transient=(42,)), "transient"),  # type: ignore[arg-type]
    ],
    ids=["not-a-model", "bad-retry", "bad-transient"],
)
def test_bad_configuration_fails_at_construction(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_the_engine_writes_its_checkpoint_with_the_model() -> None:
    model = ScriptedModel(SUMMARY)
    engine = ContextEngine.default(16_000, summarizer=StrandsSummarizer(model, retry=policy()))

    result = engine.compact_sync(synthetic_session(30))

    assert result.changed
    assert result.commit is not None
    assert result.messages[1].is_summary
    assert "fixing the parser" in result.messages[1].text
    assert len(model.requests) >= 1


def test_a_throttled_model_opens_the_breaker_and_the_view_still_fits() -> None:
    """One failure per projection, however many retries; open skips the model; success closes."""
    model = ScriptedModel(ModelThrottledException("Rate exceeded"))
    summarizer = StrandsSummarizer(model, retry=policy())
    engine = ContextEngine.default(8_000, summarizer=summarizer, max_consecutive_failures=2)
    session = synthetic_session(60)

    for failures in (1, 2):
        failed = engine.project_sync(session)
        assert failed.fits
        assert failed.event is not None
        (step,) = [s for s in failed.event.steps if s.name == "full_summary"]
        assert not step.applied
        assert "Strands summarizer (scripted-model) failed after 3 attempts" in (step.error or "")
        assert engine.consecutive_failures == failures
    assert engine.breaker_state == "open"

    called = len(model.requests)
    skipped = engine.project_sync(session)
    assert skipped.fits
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert len(model.requests) == called  # the open breaker spared the model
    assert engine.breaker_state == "half_open"

    model.script = [SUMMARY]
    recovered = engine.project_sync(session)
    assert recovered.strategy == "full_summary"
    assert len(model.requests) > called
    assert engine.breaker_state == "closed"


class AgentModel(ScriptedModel):
    """The agent's own model: reads one module per call, and writes checkpoints when asked."""

    def __init__(self, steps: int) -> None:
        super().__init__(SUMMARY)
        self.steps = steps
        self.agent_calls = 0

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any
    ) -> AsyncIterator[dict[str, Any]]:
        if system_prompt == DEFAULT_PROMPTS.system:
            async for event in super().stream(messages, tool_specs, system_prompt):
                yield event
            return
        assert "Write a checkpoint" not in str(messages)  # the summary prompt never leaks
        step, self.agent_calls = self.agent_calls, self.agent_calls + 1
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockDelta": {"delta": {"text": f"Module {step} read; next. " * 30}}}
        yield {"contentBlockStop": {}}
        if step < self.steps - 1:
            call = {"toolUseId": f"call_{step}", "name": "read_file"}
            yield {"contentBlockStart": {"start": {"toolUse": call}}}
            path = f'{{"path": "src/mod_{step}.py"}}'
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": path}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if step < self.steps - 1 else "end_turn"}}


@tool
def read_file(path: str) -> str:
    """Read a source file.

    Args:
        path: The file to read.
    """
    return "\n".join(f"{path}:{n}: def handler_{n}(value): return value + {n}" for n in range(40))


async def test_an_agent_loop_checkpoints_with_its_own_model() -> None:
    """The conversation manager's checkpoints are written by the model the agent runs on."""
    model = AgentModel(steps=30)
    engine = ContextEngine.default(
        8_000,
        tool_result_cap=None,
        reserve_tokens=2_000,
        summarizer=StrandsSummarizer(model, retry=policy()),
    )
    agent = Agent(
        model=model,
        tools=[read_file],
        system_prompt="You review code.",
        callback_handler=None,
        conversation_manager=ContextEngineConversationManager(engine),
    )

    result = await agent.invoke_async("Review every module in src/.")

    assert result.stop_reason == "end_turn"
    assert model.agent_calls == 30
    assert len(model.requests) >= 1  # summary requests, through the same model object
    checkpoint = from_strands(agent.messages)[0]
    assert checkpoint.is_summary
    assert "fixing the parser" in checkpoint.text
