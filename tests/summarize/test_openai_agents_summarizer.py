"""OpenAIAgentsSummarizer with the SDK's ScriptedModel: prompts, retries, own overflow, breaker."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("agents", reason=needs("openai-agents"))

import httpx2
import openai
from agents import (
    Agent,
    ModelProvider,
    ModelSettings,
    RunConfig,
    Runner,
    Usage,
    function_tool,
)
from agents.items import ModelResponse, TResponseInputItem, TResponseOutputItem
from agents.models._retry_runtime import should_disable_provider_managed_retries
from agents.models.interface import Model, ModelTracing
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal

from context_engine import ContextEngine, Message, RewriteEvent
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.formats.openai_agents import from_openai_agents
from context_engine.integrations.openai_agents import ContextEngineInputFilter, ContextEngineModel
from context_engine.summarize.openai_agents import OpenAIAgentsSummarizer
from context_engine.summarize.prompts import DEFAULT_PROMPTS, build_request
from context_engine.summarize.retry import RetryPolicy
from context_engine.testing import synthetic_session

pytestmark = pytest.mark.extra("openai-agents")

SUMMARY = "<summary>The user is fixing the parser; three modules were read.</summary>"
HEADINGS = re.findall(r"^## .+$", DEFAULT_PROMPTS.summary, flags=re.MULTILINE)


def answer(text: str = SUMMARY) -> ModelStep:
    return ModelStep(output=[assistant_message(text)], usage=Usage(input_tokens=900))


def openai_error(
    status: int, message: str, *, code: str | None = None, headers: dict[str, str] | None = None
) -> openai.APIStatusError:
    """An error as the ``openai`` client under the SDK's models raises it."""
    body = {"message": message, "type": "invalid_request_error", "param": None, "code": code}
    request = httpx2.Request("POST", "https://api.openai.com/v1/responses")
    response = httpx2.Response(status, json={"error": body}, headers=headers, request=request)
    cls = {400: openai.BadRequestError, 429: openai.RateLimitError}[status]
    return cls(f"Error code: {status} - {message}", response=response, body=body)


def rate_limited(retry_after: str | None = None) -> openai.RateLimitError:
    headers = {"retry-after": retry_after} if retry_after else None
    error = openai_error(429, "Rate limit reached for requests", headers=headers)
    assert isinstance(error, openai.RateLimitError)
    return error


def too_long() -> openai.APIStatusError:
    return openai_error(
        400,
        "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9100 tokens.",
        code="context_length_exceeded",
    )


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


def prompt_of(call: ModelCall) -> str:
    (item,) = call.input
    assert item["role"] == "user"
    return str(item["content"])


def test_the_model_is_sent_the_summary_prompt_and_the_budget() -> None:
    """Instructions carry the system prompt, one user item the task and data; no tools."""
    model = ScriptedModel([answer()])
    request = build_request(conversation(6), instructions="keep the parser names", max_tokens=512)
    summarizer = OpenAIAgentsSummarizer(
        model,
        model_settings=ModelSettings(temperature=0.0),
        max_output_tokens=300,
        retry=policy(),
    )

    text = asyncio.run(summarizer(request))

    assert text == "The user is fixing the parser; three modules were read."
    (call,) = model.calls
    assert call.system_instructions == request.prompt_messages[0].text == DEFAULT_PROMPTS.system
    prompt = prompt_of(call)
    assert prompt == request.prompt_messages[1].text
    assert [HEADINGS[0], HEADINGS[-1]] == ["## Goal", "## Next steps"]
    assert all(heading in prompt for heading in HEADINGS)  # the sections every summarizer asks
    assert "<instructions>\nkeep the parser names\n</instructions>" in prompt
    assert "Question 5 about the parser." in prompt
    assert (call.tools, call.handoffs, call.output_schema) == ([], [], None)
    assert call.model_settings.max_tokens == 300  # the request's 512, lowered to the ceiling
    assert call.model_settings.temperature == 0.0  # the caller's settings are kept
    assert call.tracing is ModelTracing.ENABLED_WITHOUT_DATA
    assert (call.previous_response_id, call.conversation_id, call.prompt) == (None, None, None)
    assert summarizer.model_settings == ModelSettings(temperature=0.0)  # not mutated


def test_the_models_own_client_retries_are_off_during_the_call() -> None:
    """The SDK models read the runner's switch; the summarizer sets it for its call only."""
    seen: list[bool] = []

    def respond(call: ModelCall) -> list[TResponseOutputItem]:
        seen.append(should_disable_provider_managed_retries())
        return [assistant_message(SUMMARY)]

    model = ScriptedModel([ModelStep.respond(respond)])
    assert asyncio.run(OpenAIAgentsSummarizer(model)(build_request(conversation(2))))
    assert seen == [True]
    assert should_disable_provider_managed_retries() is False


@pytest.mark.parametrize(
    "error",
    [
        rate_limited(),
        openai.APITimeoutError(request=httpx2.Request("POST", "https://api.openai.com/v1")),
        openai.APIConnectionError(request=httpx2.Request("POST", "https://api.openai.com/v1")),
    ],
    ids=["rate-limit-429", "timeout", "connection"],
)
def test_transient_errors_are_retried(error: Exception) -> None:
    model = ScriptedModel([error, error, answer()])
    waits: list[float] = []

    assert asyncio.run(OpenAIAgentsSummarizer(model, retry=policy(waits))(build_request([])))
    assert len(model.calls) == 3
    assert len(waits) == 2


def test_a_rate_limit_waits_as_the_server_asks_and_a_persistent_one_fails_with_the_cause() -> None:
    waits: list[float] = []
    model = ScriptedModel([rate_limited(retry_after="7"), answer()])
    request = build_request(conversation(4), max_tokens=512)

    assert asyncio.run(OpenAIAgentsSummarizer(model, retry=policy(waits))(request))
    assert waits == [7.0]  # the server's Retry-After, longer than the backoff

    stuck = ScriptedModel([rate_limited() for _ in range(3)])
    with pytest.raises(SummarizerError, match=r"rate limited \(HTTP 429\)") as raised:
        asyncio.run(OpenAIAgentsSummarizer(stuck, retry=policy())(request))
    assert isinstance(raised.value.__cause__, openai.RateLimitError)
    assert len(stuck.calls) == 3  # max_attempts
    stuck.assert_complete()


def test_the_summarizers_own_context_length_error_shrinks_the_prompt() -> None:
    model = ScriptedModel([too_long(), answer()])
    request = build_request(conversation(20), max_tokens=512)

    assert asyncio.run(OpenAIAgentsSummarizer(model, retry=policy())(request))
    first, second = (prompt_of(call) for call in model.calls)
    assert "Question 0 about the parser." in first
    assert "Question 0 about the parser." not in second  # the oldest turns were dropped
    assert "Question 19 about the parser." in second
    assert all(heading in second for heading in HEADINGS)  # the same task, rebuilt


def test_an_overflow_that_shrinking_cannot_cure_fails_after_the_allowed_retries() -> None:
    model = ScriptedModel([too_long() for _ in range(3)])
    request = build_request(conversation(20), max_tokens=512)
    summarizer = OpenAIAgentsSummarizer(model, retry=policy(max_overflow_retries=2))

    with pytest.raises(SummarizerError, match="longer than the model's window") as raised:
        asyncio.run(summarizer(request))
    assert isinstance(raised.value.__cause__, openai.BadRequestError)
    model.assert_complete()  # the first prompt and two shrunk ones, no waiting retries


class NamedModels(ModelProvider):
    """Resolves every name to one scripted model, counting the look-ups."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.names: list[str | None] = []

    def get_model(self, model_name: str | None) -> Model:
        self.names.append(model_name)
        return self.model


def test_a_model_name_is_resolved_by_the_provider_once() -> None:
    provider = NamedModels(ScriptedModel([answer(), answer()]))
    summarizer = OpenAIAgentsSummarizer("gpt-5-mini", provider=provider, retry=policy())

    for _ in range(2):
        assert asyncio.run(summarizer(build_request(conversation(2))))
    assert provider.names == ["gpt-5-mini"]
    assert repr(summarizer) == "OpenAIAgentsSummarizer(model='gpt-5-mini')"


def test_the_agents_wrapped_model_is_called_without_the_wrapper() -> None:
    """``ContextEngineModel`` recovers the agent's overflows; the summarizer shrinks its own."""
    recoveries: list[RewriteEvent] = []
    engine = ContextEngine.default(16_000, on_recover=recoveries.append)
    inner = ScriptedModel([too_long(), answer()])
    wrapped = ContextEngineModel(inner, ContextEngineInputFilter(engine))
    summarizer = OpenAIAgentsSummarizer(wrapped, retry=policy())

    assert asyncio.run(summarizer(build_request(conversation(20))))
    first, second = (prompt_of(call) for call in inner.calls)
    assert "Question 0 about the parser." in first
    assert "Question 0 about the parser." not in second  # shrunk by the summarizer
    assert recoveries == []  # the agent's engine never took the summary prompt for its history
    assert summarizer.name == "ScriptedModel"


def refusal() -> ResponseOutputMessage:
    part = ResponseOutputRefusal(refusal="I can't help with that.", type="refusal")
    return ResponseOutputMessage(
        id="m", type="message", role="assistant", status="completed", content=[part]
    )


@pytest.mark.parametrize(
    ("output", "match"),
    [
        ([assistant_message("")], "returned no text .output items: \\['message'\\]"),
        ([], "returned no text .output items: none"),
        ([refusal()], "refused to summarize: I can't help with that."),
        ([assistant_message("<analysis>thinking only</analysis>")], "empty summary"),
    ],
    ids=["empty-text", "no-output", "refusal", "scratchpad-only"],
)
def test_an_answer_without_checkpoint_text_is_an_error(
    output: list[TResponseOutputItem], match: str
) -> None:
    summarizer = OpenAIAgentsSummarizer(ScriptedModel([output]), retry=policy())
    with pytest.raises(SummarizerError, match=match):
        asyncio.run(summarizer(build_request(conversation(2))))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"model": 42}, "Model or model name"),
        ({"model": ""}, "needs a model name"),
        ({"model": ScriptedModel(), "provider": NamedModels(ScriptedModel())}, "model name"),
        ({"model": "gpt-5", "provider": "openai"}, "ModelProvider"),
        ({"model": "gpt-5", "model_settings": {"temperature": 0}}, "agents.ModelSettings"),
        ({"model": "gpt-5", "max_output_tokens": 0}, "max_output_tokens"),
        ({"model": "gpt-5", "tracing": True}, "ModelTracing"),
        ({"model": "gpt-5", "retry": 3}, "RetryPolicy"),
    ],
    ids=[
        "not-a-model",
        "empty-name",
        "provider-with-a-model",
        "bad-provider",
        "settings-as-dict",
        "zero-ceiling",
        "bad-tracing",
        "bad-retry",
    ],
)
def test_bad_configuration_fails_at_construction(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        OpenAIAgentsSummarizer(**options)


def test_the_engine_writes_its_checkpoint_with_the_model() -> None:
    model = ScriptedModel([answer() for _ in range(4)])  # a split turn takes two requests
    engine = ContextEngine.default(16_000, summarizer=OpenAIAgentsSummarizer(model))

    result = engine.compact_sync(synthetic_session(30))

    assert result.changed
    assert result.commit is not None
    assert result.messages[1].is_summary
    assert "fixing the parser" in result.messages[1].text
    assert len(model.calls) >= 1


def test_a_rate_limited_model_opens_the_breaker_and_the_view_still_fits() -> None:
    """One failure per projection, however many retries; open skips the model; success closes."""
    model = ScriptedModel([rate_limited() for _ in range(6)])
    summarizer = OpenAIAgentsSummarizer(model, retry=policy())
    engine = ContextEngine.default(8_000, summarizer=summarizer, max_consecutive_failures=2)
    session = synthetic_session(60)

    for failures in (1, 2):
        failed = engine.project_sync(session)
        assert failed.fits
        assert failed.event is not None
        (step,) = [s for s in failed.event.steps if s.name == "full_summary"]
        assert not step.applied
        assert "failed after 3 attempts: rate limited (HTTP 429)" in (step.error or "")
        assert engine.consecutive_failures == failures
    assert engine.breaker_state == "open"
    model.assert_complete()  # three attempts per projection, nothing more

    skipped = engine.project_sync(session)  # an open breaker calls no model: none is scripted
    assert skipped.fits
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert engine.breaker_state == "half_open"

    model.extend([answer() for _ in range(20)])  # one request per chunk and split turn
    recovered = engine.project_sync(session)
    assert recovered.strategy == "full_summary"
    assert len(model.calls) > 6
    assert engine.breaker_state == "closed"


class AgentModel(Model):
    """The agent's own model: its turns come from a script, and it writes checkpoints when asked."""

    def __init__(self, turns: list[list[TResponseOutputItem]]) -> None:
        self.turns = ScriptedModel(turns)
        self.summaries = 0

    async def get_response(
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        if system_instructions == DEFAULT_PROMPTS.system:
            self.summaries += 1
            return ModelResponse(
                output=[assistant_message(SUMMARY)], usage=Usage(), response_id=None
            )
        assert "Write a checkpoint" not in str(input)  # the summary prompt never leaks
        return await self.turns.get_response(system_instructions, input, *args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def read_file(path: str) -> str:
    """Read a source file."""
    return f"# {path}\n" + "\n".join(f"VALUE_{n} = {n} * 2" for n in range(30))


def read(n: int) -> list[TResponseOutputItem]:
    return [
        assistant_message(f"Module {n} imports the next one, so I read it too. " * 6),
        function_call("read_file", {"path": f"src/module_{n}.py"}, call_id=f"call_{n}"),
    ]


async def test_an_agent_run_checkpoints_with_its_own_model() -> None:
    """The input filter's checkpoints are written by the model the agent runs on."""
    model = AgentModel([read(n) for n in range(40)] + [[assistant_message("Done.")]])
    engine = ContextEngine.default(
        6_000, reserve_tokens=1_000, summarizer=OpenAIAgentsSummarizer(model, retry=policy())
    )
    input_filter = ContextEngineInputFilter(engine)
    agent = Agent(
        name="reader",
        instructions="You read a code base.",
        model=ContextEngineModel(model, input_filter),
        tools=[read_file],
    )
    config = RunConfig(call_model_input_filter=input_filter, tracing_disabled=True)

    result = await Runner.run(agent, "Read every module.", run_config=config, max_turns=60)

    assert result.final_output == "Done."
    assert model.summaries >= 1
    last: list[TResponseInputItem] = list(model.turns.calls[-1].input)
    checkpoint = from_openai_agents(last)[0]
    assert checkpoint.is_summary
    assert "fixing the parser" in checkpoint.text
