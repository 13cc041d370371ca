"""The shared retry driver of the provider summarizers, with plain send functions."""

from __future__ import annotations

import datetime as dt
import email.utils
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))

import anthropic
import openai

from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.messages import Message, ToolCall
from context_engine.structure import analyze
from context_engine.summarize.prompts import build_request
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.retry import (
    RetryPolicy,
    drop_oldest_turns,
    is_transient,
    retry_after_seconds,
    summarize_with_retries,
)
from tests.provider_errors import (
    anthropic_connection_error,
    anthropic_status_error,
    openai_status_error,
    openai_timeout,
)

pytestmark = pytest.mark.extra("openai", "anthropic")

OVERFLOW = "prompt is too long: 9010 tokens > 8192 maximum"


def turns(count: int) -> list[Message]:
    out = []
    for i in range(count):
        out += [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]
    return out


def tool_steps(count: int) -> list[Message]:
    out = [Message.user("fix the build")]
    for i in range(count):
        out += [
            Message.assistant(tool_calls=[ToolCall(f"c{i}", "bash", '{"cmd": "make"}')]),
            Message.tool(f"c{i}", f"output {i}"),
        ]
    return out


class Script:
    """A send function that plays outcomes in order and records the requests it got."""

    def __init__(self, *outcomes: str | BaseException) -> None:
        self.outcomes = list(outcomes)
        self.requests: list[SummaryRequest] = []
        self.sleeps: list[float] = []

    async def send(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def policy(self, **options: Any) -> RetryPolicy:
        return RetryPolicy(initial_wait=0.25, jitter=0, sleep=self.sleep, **options)

    async def run(self, request: SummaryRequest, **options: Any) -> str:
        policy = options.pop("policy", None) or self.policy()
        return await summarize_with_retries(
            self.send, request, provider="Test", model="m", policy=policy, **options
        )


# ----------------------------------------------------------------- policy


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_delay": -1}, "max_delay"),
        ({"max_wait": "5"}, "max_wait"),
        ({"max_overflow_retries": -1}, "max_overflow_retries"),
        ({"overflow_drop_fraction": 0}, "between 0 and 1"),
        ({"overflow_drop_fraction": 1.0}, "between 0 and 1"),
    ],
    ids=[
        "no-attempts",
        "bool-attempts",
        "float-attempts",
        "negative-delay",
        "str-wait",
        "negative-overflow",
        "zero-fraction",
        "whole-fraction",
    ],
)
def test_bad_policy_fails_at_construction(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RetryPolicy(**options)


# ----------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (openai_status_error(429, "Rate limit reached", kind="rate_limit_error"), True),
        (openai_status_error(500, "Server error", kind="server_error"), True),
        (anthropic_status_error(529, "Overloaded", kind="overloaded_error"), True),
        (anthropic_status_error(408, "Request timeout", kind="timeout_error"), True),
        (openai_timeout(), True),
        (anthropic_connection_error(), True),
        (TimeoutError(), True),
        (openai_status_error(400, "Invalid value for 'temperature'."), False),
        (anthropic_status_error(400, OVERFLOW), False),
        (anthropic_status_error(413, "Too large", kind="request_too_large"), False),
        (ValueError("bad"), False),
    ],
    ids=[
        "429",
        "500",
        "529",
        "408",
        "openai-timeout",
        "anthropic-connection",
        "builtin-timeout",
        "400",
        "overflow",
        "413",
        "value-error",
    ],
)
def test_only_transient_errors_are_retried(error: BaseException, transient: bool) -> None:
    classes = (openai.APIConnectionError, anthropic.APIConnectionError)
    assert is_transient(error, classes) is transient


NOW = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.05"}, 0.05),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": email.utils.format_datetime(NOW + dt.timedelta(seconds=10))}, 10.0),
        ({"retry-after": email.utils.format_datetime(NOW - dt.timedelta(seconds=10))}, 0.0),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
    ids=["seconds", "fraction", "ms-wins", "http-date", "past-date", "negative", "junk", "none"],
)
def test_retry_after_header_is_read(headers: dict[str, str], seconds: float | None) -> None:
    error = openai_status_error(429, "Rate limit", kind="rate_limit_error", headers=headers)
    assert retry_after_seconds(error, now=NOW.timestamp()) == pytest.approx(seconds)


def test_retry_after_without_a_response_is_none() -> None:
    assert retry_after_seconds(TimeoutError()) is None


# ----------------------------------------------------------------- dropping turns


@pytest.mark.parametrize(
    ("messages", "kept_from"),
    [
        (turns(10), "question 2"),
        (turns(3), "question 1"),
        (turns(2), "question 1"),
        ([Message.system("rules"), *turns(5)], "question 1"),
        ([Message.assistant("earlier"), *turns(4)], "question 0"),
    ],
    ids=["ten-turns-drop-two", "three-turns-drop-one", "two-turns", "system-kept", "lead-partial"],
)
def test_oldest_fifth_of_turns_is_dropped(messages: list[Message], kept_from: str) -> None:
    fewer = drop_oldest_turns(messages, 0.2)
    body = [m for m in fewer if m.role != "system"]
    assert body[0].text == kept_from
    assert fewer[-1] is messages[-1]
    assert [m for m in fewer if m.role == "system"] == [m for m in messages if m.role == "system"]


def test_single_turn_keeps_its_request_and_drops_whole_tool_groups() -> None:
    messages = tool_steps(10)
    fewer = drop_oldest_turns(messages, 0.2)
    assert fewer[0] is messages[0]
    assert len(messages) - len(fewer) == 4  # two tool groups of two messages
    assert fewer[1].tool_calls[0].id == "c2"
    shape = analyze(fewer)
    assert all(shape.is_safe_cut(i) for i in (1, len(fewer)))


@pytest.mark.parametrize(
    "messages",
    [[], [Message.user("only")], [Message.system("s"), Message.user("only")]],
    ids=["empty", "one-message", "system-and-one"],
)
def test_nothing_to_drop_returns_the_input(messages: list[Message]) -> None:
    assert drop_oldest_turns(messages) == tuple(messages)


# ----------------------------------------------------------------- the driver


async def test_wait_is_the_longer_of_backoff_and_retry_after_capped() -> None:
    limited = openai_status_error(429, "slow down", headers={"retry-after": "60"})
    script = Script(limited, "<summary>done</summary>")
    policy = script.policy(max_wait=5.0, max_delay=100.0)

    assert await script.run(build_request(turns(2)), policy=policy) == "done"
    assert script.sleeps == [5.0]


async def test_backoff_doubles_between_attempts() -> None:
    busy = openai_status_error(503, "busy")
    script = Script(busy, busy, busy, "ok")

    assert await script.run(build_request(turns(2))) == "ok"
    assert script.sleeps == [0.25, 0.5, 1.0]


async def test_overflow_uses_the_requests_own_rebuild() -> None:
    """A request from build_request keeps its options (previous summary) when rebuilt."""
    request = build_request(turns(10), previous_summary="## Goal\nold goal", max_tokens=300)
    script = Script(anthropic_status_error(400, OVERFLOW), "new checkpoint")

    assert await script.run(request) == "new checkpoint"
    first, second = script.requests
    assert (len(first.messages), len(second.messages)) == (20, 16)
    assert second.previous_summary == "## Goal\nold goal"
    assert "old goal" in second.prompt_messages[-1].text
    assert second.max_tokens == 300


async def test_overflow_calls_the_rebuild_hook_when_given() -> None:
    calls: list[int] = []

    def rebuild(request: SummaryRequest, fewer: tuple[Message, ...]) -> SummaryRequest:
        calls.append(len(fewer))
        return build_request(fewer, instructions="hooked")

    script = Script(openai_status_error(400, OVERFLOW), "ok")
    await script.run(build_request(turns(5)), rebuild=rebuild)

    assert calls == [8]
    assert script.requests[1].instructions == "hooked"


async def test_hand_built_request_is_rebuilt_with_the_default_prompt() -> None:
    messages = tuple(turns(5))
    request = SummaryRequest(
        messages=messages,
        prompt_messages=(Message.system("mine"), Message.user("summarize all of it")),
        instructions="keep names",
    )
    script = Script(openai_status_error(400, OVERFLOW), "ok")

    await script.run(request)

    rebuilt = script.requests[1]
    assert len(rebuilt.messages) == 8
    assert "<conversation>" in rebuilt.prompt_messages[-1].text
    assert rebuilt.instructions == "keep names"


async def test_overflow_with_nothing_left_to_drop_fails_at_once() -> None:
    script = Script(openai_status_error(400, OVERFLOW), "never")

    with pytest.raises(SummarizerError, match="even after dropping"):
        await script.run(build_request([Message.user("one huge message")]))

    assert len(script.requests) == 1


@pytest.mark.parametrize(
    "error",
    [ValueError("Streaming is required"), SummarizerError("Test returned an empty answer")],
    ids=["other-exception", "summarizer-error"],
)
async def test_other_errors_surface_after_one_attempt(error: Exception) -> None:
    script = Script(error, "never")

    with pytest.raises(SummarizerError) as caught:
        await script.run(build_request(turns(2)))

    assert len(script.requests) == 1
    assert script.sleeps == []
    if isinstance(error, ValueError):
        assert "ValueError: Streaming is required" in str(caught.value)
        assert caught.value.__cause__ is error


async def test_retry_after_past_the_deadline_surfaces_without_a_shortened_retry() -> None:
    """A server asking for 120 s against a 60 s deadline is not asked again after 5 s."""
    limited = openai_status_error(429, "slow down", headers={"retry-after": "120"})
    script = Script(limited, "<summary>never sent</summary>")
    policy = script.policy(max_wait=5.0, max_delay=60.0)

    with pytest.raises(SummarizerError, match="retry after 120 s, past the 60 s") as caught:
        await script.run(build_request(turns(2)), policy=policy)

    assert len(script.requests) == 1
    assert script.sleeps == []
    assert caught.value.__cause__ is limited


async def test_retry_after_within_the_deadline_is_still_waited_for() -> None:
    """Only a delay the deadline cannot honour ends the retries."""
    limited = openai_status_error(429, "slow down", headers={"retry-after": "2"})
    script = Script(limited, "<summary>done</summary>")

    assert await script.run(build_request(turns(2)), policy=script.policy(max_delay=60.0)) == "done"
    assert script.sleeps == [2.0]
