"""LangChainSummarizer against a LangChain chat model: prompts, retries, its own overflow."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("langchain_core", reason=needs("langchain"))

from langchain_core.exceptions import ContextOverflowError
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.summarize.langchain import LangChainSummarizer
from context_engine.summarize.prompts import build_request
from context_engine.summarize.retry import RetryPolicy
from context_engine.testing import synthetic_session

pytestmark = pytest.mark.extra("langchain")

SUMMARY = "<summary>The user is fixing the parser; three modules were read.</summary>"


class RateLimited(Exception):
    """What a provider package raises for HTTP 429 (it carries the status)."""

    status_code = 429


class ScriptedChat(BaseChatModel):
    """Answers each call from ``script``: an exception is raised, a string answered."""

    script: list[Any] = Field(default_factory=list)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        self.prompts.append(list(messages))
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return ChatResult(generations=[ChatGeneration(message=AIMessage(outcome))])


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = []
    for n in range(turns):
        messages += [Message.user(f"Question {n} about the parser."), Message.assistant(f"A{n}.")]
    return messages


def policy() -> RetryPolicy:
    async def no_wait(seconds: float) -> None:
        return None

    return RetryPolicy(initial_wait=0.01, jitter=0, sleep=no_wait, max_attempts=3)


def test_the_model_is_sent_the_summary_prompt_and_its_answer_is_the_checkpoint() -> None:
    model = ScriptedChat(script=[SUMMARY])
    request = build_request(conversation(6), max_tokens=512)

    text = asyncio.run(LangChainSummarizer(model, retry=policy())(request))

    assert text == "The user is fixing the parser; three modules were read."
    (prompt,) = model.prompts
    assert isinstance(prompt[0], SystemMessage)
    assert prompt[0].content == request.prompt_messages[0].text
    assert "Question 5 about the parser." in str(prompt[-1].content)


def test_rate_limits_are_retried_and_a_persistent_one_fails_with_the_cause() -> None:
    model = ScriptedChat(script=[RateLimited("slow down"), RateLimited("slow down"), SUMMARY])
    request = build_request(conversation(4), max_tokens=512)

    assert asyncio.run(LangChainSummarizer(model, retry=policy())(request))
    assert len(model.prompts) == 3

    stuck = ScriptedChat(script=[RateLimited("slow down")])
    with pytest.raises(SummarizerError, match="rate limited") as raised:
        asyncio.run(LangChainSummarizer(stuck, retry=policy())(request))
    assert isinstance(raised.value.__cause__, RateLimited)
    assert len(stuck.prompts) == 3  # max_attempts


def test_the_summarizers_own_context_length_error_shrinks_the_prompt() -> None:
    model = ScriptedChat(script=[ContextOverflowError("prompt is too long"), SUMMARY])
    request = build_request(conversation(20), max_tokens=512)

    assert asyncio.run(LangChainSummarizer(model, retry=policy())(request))
    first, second = (str(prompt[-1].content) for prompt in model.prompts)
    assert "Question 0 about the parser." in first
    assert "Question 0 about the parser." not in second  # the oldest turns were dropped
    assert len(second) < len(first)


def test_an_empty_answer_and_a_non_runnable_are_refused() -> None:
    request = build_request(conversation(2), max_tokens=512)
    with pytest.raises(SummarizerError, match="empty answer"):
        asyncio.run(LangChainSummarizer(ScriptedChat(script=["  "]), retry=policy())(request))
    with pytest.raises(ConfigurationError, match="chat model or runnable"):
        LangChainSummarizer("gpt-5")  # type: ignore[arg-type]


def test_the_engine_writes_its_checkpoint_with_the_chat_model() -> None:
    model = ScriptedChat(script=[SUMMARY])
    engine = ContextEngine.default(16_000, summarizer=LangChainSummarizer(model, retry=policy()))

    result = engine.compact_sync(synthetic_session(30))

    assert result.changed
    assert result.messages[1].is_summary
    assert "fixing the parser" in result.messages[1].text
    assert len(model.prompts) >= 1
