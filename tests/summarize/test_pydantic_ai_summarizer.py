"""PydanticAISummarizer against pydantic-ai's FunctionModel: prompts, retries, its own overflow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("pydantic_ai", reason=needs("pydantic-ai"))

from pydantic_ai import messages as pm
from pydantic_ai.exceptions import (
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRateLimitError,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.summarize.prompts import build_request
from context_engine.summarize.pydantic_ai import PydanticAISummarizer
from context_engine.summarize.retry import RetryPolicy
from context_engine.testing import synthetic_session

pytestmark = pytest.mark.extra("pydantic-ai")

SUMMARY = "<summary>The user is fixing the parser; three modules were read.</summary>"


class Script:
    """A FunctionModel body answering each call from ``outcomes`` (the last repeats)."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.prompts: list[list[pm.ModelMessage]] = []
        self.settings: list[Any] = []

    def __call__(self, messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        self.prompts.append(messages)
        self.settings.append(info.model_settings)
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return pm.ModelResponse(parts=[pm.TextPart(outcome)])


def text_of(messages: list[pm.ModelMessage]) -> str:
    return "\n".join(
        str(part.content)
        for message in messages
        for part in message.parts
        if hasattr(part, "content")
    )


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for n in range(turns):
        messages += [Message.user(f"Question {n} about the parser."), Message.assistant(f"A{n}.")]
    return messages


def policy() -> RetryPolicy:
    async def no_wait(seconds: float) -> None:
        return None

    return RetryPolicy(initial_wait=0.01, jitter=0, sleep=no_wait, max_attempts=3)


def overflow() -> ModelHTTPError:
    return ModelHTTPError.for_category(
        ModelContextWindowExceededError,
        status_code=400,
        model_name="function",
        body={"error": {"message": "prompt is too long", "code": "context_length_exceeded"}},
    )


def test_the_model_is_sent_the_summary_prompt_and_the_budget() -> None:
    script = Script(SUMMARY)
    request = build_request(conversation(6), max_tokens=512)
    summarizer = PydanticAISummarizer(FunctionModel(script), max_output_tokens=300, retry=policy())

    text = asyncio.run(summarizer(request))

    assert text == "The user is fixing the parser; three modules were read."
    (prompt,) = script.prompts
    assert isinstance(prompt[0].parts[0], pm.SystemPromptPart)
    assert prompt[0].parts[0].content == request.prompt_messages[0].text
    assert "Question 5 about the parser." in text_of(prompt)
    assert script.settings[0]["max_tokens"] == 300  # the request's 512, lowered to the ceiling


def test_rate_limits_are_retried_with_or_without_an_http_status() -> None:
    limited = ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="f")
    script = Script(limited, ModelRateLimitError("f", "slow down"), SUMMARY)
    request = build_request(conversation(4), max_tokens=512)

    assert asyncio.run(PydanticAISummarizer(FunctionModel(script), retry=policy())(request))
    assert len(script.prompts) == 3

    stuck = Script(ModelRateLimitError("f", "slow down"))
    with pytest.raises(SummarizerError) as raised:
        asyncio.run(PydanticAISummarizer(FunctionModel(stuck), retry=policy())(request))
    assert isinstance(raised.value.__cause__, ModelRateLimitError)
    assert len(stuck.prompts) == 3  # max_attempts


def test_the_summarizers_own_context_length_error_shrinks_the_prompt() -> None:
    script = Script(overflow(), SUMMARY)
    request = build_request(conversation(20), max_tokens=512)

    assert asyncio.run(PydanticAISummarizer(FunctionModel(script), retry=policy())(request))
    first, second = (text_of(prompt) for prompt in script.prompts)
    assert "Question 0 about the parser." in first
    assert "Question 0 about the parser." not in second  # the oldest turns were dropped


def test_an_empty_answer_and_a_wrong_model_are_refused() -> None:
    request = build_request(conversation(2), max_tokens=512)
    empty = PydanticAISummarizer(FunctionModel(Script("")), retry=policy())
    with pytest.raises(SummarizerError, match="returned no text"):
        asyncio.run(empty(request))
    with pytest.raises(ConfigurationError, match="Model or model name"):
        PydanticAISummarizer(42)  # type: ignore[arg-type]


def test_the_engine_writes_its_checkpoint_with_the_model() -> None:
    script = Script(SUMMARY)
    summarizer = PydanticAISummarizer(FunctionModel(script), retry=policy())
    engine = ContextEngine.default(16_000, summarizer=summarizer)

    result = engine.compact_sync(synthetic_session(30))

    assert result.changed
    assert result.messages[1].is_summary
    assert "fixing the parser" in result.messages[1].text
