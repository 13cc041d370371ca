"""OpenAISummarizer and AnthropicSummarizer, driving the real clients against a loopback server."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))

import anthropic
import openai

from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.messages import Message
from context_engine.summarize.anthropic import AnthropicSummarizer
from context_engine.summarize.openai import OpenAISummarizer
from context_engine.summarize.prompts import build_request
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.retry import RetryPolicy
from tests.summarize.provider_server import (
    ProviderServer,
    Received,
    Reply,
    anthropic_error,
    anthropic_ok,
    openai_error,
    openai_ok,
)

pytestmark = pytest.mark.extra("openai", "anthropic")

SUMMARY = "## Goal\nShip the parser fix.\n## Next steps\nRun the tests."


def conversation(turns: int) -> list[Message]:
    messages = []
    for i in range(turns):
        messages += [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]
    return messages


def entries(prompt: str) -> int:
    """How many conversation messages a serialized prompt carries."""
    return prompt.count("[user]:") + prompt.count("[assistant]:")


class Harness:
    """One provider's wire format, its summarizer and the server it talks to."""

    def __init__(self, kind: str, server: ProviderServer) -> None:
        self.kind = kind
        self.server = server
        self.sleeps: list[float] = []
        self.clients: list[Any] = []
        self.errors: Any = openai if kind == "openai" else anthropic

    async def fake_sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def policy(self, **options: Any) -> RetryPolicy:
        return RetryPolicy(initial_wait=0.01, jitter=0, sleep=self.fake_sleep, **options)

    def summarizer(
        self, *, timeout: float = 5.0, url: str | None = None, **options: Any
    ) -> OpenAISummarizer | AnthropicSummarizer:
        options.setdefault("retry", self.policy())
        base = url or self.server.url
        if self.kind == "openai":
            client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="test", timeout=timeout)
            self.clients.append(client)
            return OpenAISummarizer(client, "summary-model", **options)
        claude = anthropic.AsyncAnthropic(base_url=base, api_key="test", timeout=timeout)
        self.clients.append(claude)
        return AnthropicSummarizer(claude, "claude-test", **options)

    def ok(self, text: str) -> Reply:
        return Reply(body=openai_ok(text) if self.kind == "openai" else anthropic_ok(text))

    def error(self, status: int, message: str, kind: str, **headers: str) -> Reply:
        if self.kind == "openai":
            return Reply(status, openai_error(message, kind=kind), headers)
        return Reply(status, anthropic_error(message, kind=kind), headers)

    def overflow(self) -> Reply:
        if self.kind == "openai":
            body = openai_error(
                "This model's maximum context length is 8192 tokens. However, your messages "
                "resulted in 9010 tokens. Please reduce the length of the messages.",
                code="context_length_exceeded",
            )
            return Reply(400, body)
        return Reply(400, anthropic_error("prompt is too long: 9010 tokens > 8192 maximum"))

    def prompt(self, received: Received) -> str:
        """The user prompt text the summarizer sent."""
        return str(received.body["messages"][-1]["content"])


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    provider = ProviderServer()
    with provider.running():
        yield provider


@pytest.fixture(params=["openai", "anthropic"])
async def harness(request: pytest.FixtureRequest, server: ProviderServer) -> AsyncIterator[Harness]:
    wire = Harness(request.param, server)
    yield wire
    for client in wire.clients:
        await client.close()


@pytest.fixture
def summary_request() -> SummaryRequest:
    return build_request(conversation(10), max_tokens=512)


# ----------------------------------------------------------------- success


@pytest.mark.parametrize(
    "answer",
    [
        f"<analysis>The user wants the parser fixed.</analysis>\n<summary>\n{SUMMARY}\n</summary>",
        SUMMARY,
        f"  {SUMMARY}\n\n",
    ],
    ids=["analysis-and-summary-blocks", "plain-text", "surrounding-whitespace"],
)
async def test_summarizer_returns_the_checkpoint_text(
    harness: Harness, summary_request: SummaryRequest, answer: str
) -> None:
    """The answer is parsed: the analysis scratchpad goes, the summary block's text stays."""
    harness.server.queue(harness.ok(answer))

    text = await harness.summarizer()(summary_request)

    assert text == SUMMARY
    assert len(harness.server.requests) == 1
    assert harness.sleeps == []
    assert entries(harness.prompt(harness.server.requests[0])) == 20


async def test_openai_request_carries_the_prompt_and_the_answer_budget(
    server: ProviderServer, summary_request: SummaryRequest
) -> None:
    """Chat Completions gets the system and user prompt and max_completion_tokens."""
    wire = Harness("openai", server)
    server.queue(wire.ok(SUMMARY))
    await wire.summarizer(temperature=0.0)(summary_request)
    await wire.clients[0].close()

    (received,) = server.requests
    assert received.path == "/v1/chat/completions"
    assert received.body["model"] == "summary-model"
    assert received.body["max_completion_tokens"] == 512
    assert "max_tokens" not in received.body
    assert received.body["temperature"] == 0.0
    assert [m["role"] for m in received.body["messages"]] == ["system", "user"]
    assert received.body["messages"][0]["content"] == summary_request.prompt_messages[0].text
    assert received.headers["x-stainless-retry-count"] == "0"


async def test_openai_token_parameter_and_output_ceiling(
    server: ProviderServer, summary_request: SummaryRequest
) -> None:
    """Older compatible servers get max_tokens, lowered to the summarizer's ceiling."""
    wire = Harness("openai", server)
    server.queue(wire.ok(SUMMARY))
    summarizer = wire.summarizer(token_parameter="max_tokens", max_output_tokens=100)
    await summarizer(summary_request)
    await wire.clients[0].close()

    (received,) = server.requests
    assert received.body["max_tokens"] == 100
    assert "max_completion_tokens" not in received.body


async def test_anthropic_request_puts_the_system_prompt_in_the_system_parameter(
    server: ProviderServer, summary_request: SummaryRequest
) -> None:
    """The Messages API gets system= and only the user message, with max_tokens."""
    wire = Harness("anthropic", server)
    server.queue(wire.ok(SUMMARY))
    await wire.summarizer()(summary_request)
    await wire.clients[0].close()

    (received,) = server.requests
    assert received.path == "/v1/messages"
    assert received.body["system"] == summary_request.prompt_messages[0].text
    assert [m["role"] for m in received.body["messages"]] == ["user"]
    assert received.body["max_tokens"] == 512
    assert received.body["model"] == "claude-test"


async def test_blocking_openai_client_is_accepted(
    server: ProviderServer, summary_request: SummaryRequest
) -> None:
    """A sync openai.OpenAI client works; its call runs in a worker thread."""
    server.queue(Reply(body=openai_ok(f"<summary>{SUMMARY}</summary>")))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5.0)
    try:
        text = await OpenAISummarizer(client, "summary-model")(summary_request)
    finally:
        client.close()
    assert text == SUMMARY
    assert len(server.requests) == 1


# ----------------------------------------------------------------- retries


@pytest.mark.parametrize(
    ("headers", "expected_wait"),
    [({"retry-after": "2"}, 2.0), ({"retry-after-ms": "1500"}, 1.5), ({}, 0.01)],
    ids=["retry-after-seconds", "retry-after-ms", "no-header-backoff"],
)
async def test_rate_limit_is_retried_after_the_servers_delay(
    harness: Harness,
    summary_request: SummaryRequest,
    headers: dict[str, str],
    expected_wait: float,
) -> None:
    """A 429 waits max(backoff, Retry-After), then the second attempt succeeds."""
    harness.server.queue(
        harness.error(429, "Rate limit reached", "rate_limit_error", **headers),
        harness.ok(SUMMARY),
    )

    text = await harness.summarizer()(summary_request)

    assert text == SUMMARY
    assert len(harness.server.requests) == 2
    assert harness.sleeps == [pytest.approx(expected_wait)]


@pytest.mark.parametrize(
    ("status", "kind"),
    [(500, "api_error"), (503, "api_error"), (529, "overloaded_error")],
    ids=["500", "503", "529-overloaded"],
)
async def test_server_errors_are_retried(
    harness: Harness, summary_request: SummaryRequest, status: int, kind: str
) -> None:
    """A 5xx is retried once with backoff; the client itself does not retry."""
    harness.server.queue(harness.error(status, "Internal error", kind), harness.ok(SUMMARY))

    text = await harness.summarizer()(summary_request)

    assert text == SUMMARY
    assert len(harness.server.requests) == 2
    assert len(harness.sleeps) == 1
    assert {r.headers["x-stainless-retry-count"] for r in harness.server.requests} == {"0"}


async def test_timeout_is_retried(harness: Harness, summary_request: SummaryRequest) -> None:
    """An answer slower than the client's timeout is abandoned and the call retried."""
    harness.server.queue(Reply(delay=3.0), harness.ok(SUMMARY))

    text = await harness.summarizer(timeout=0.3)(summary_request)

    assert text == SUMMARY
    assert len(harness.server.requests) == 2
    assert len(harness.sleeps) == 1


async def test_connection_refused_is_retried_then_reported(
    harness: Harness, summary_request: SummaryRequest
) -> None:
    """No server at base_url: every attempt is made, then the error says to check base_url."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    summarizer = harness.summarizer(url=dead, retry=harness.policy(max_attempts=3))

    with pytest.raises(SummarizerError, match="could not reach the server") as caught:
        await summarizer(summary_request)

    assert "after 3 attempts" in str(caught.value)
    assert isinstance(caught.value.__cause__, harness.errors.APIConnectionError)
    assert len(harness.sleeps) == 2


async def test_rate_limit_past_the_attempts_surfaces(
    harness: Harness, summary_request: SummaryRequest
) -> None:
    """Still rate limited after max_attempts: a SummarizerError naming the status."""
    limited = harness.error(429, "Rate limit reached", "rate_limit_error")
    harness.server.queue(limited, limited, harness.ok(SUMMARY))

    with pytest.raises(SummarizerError, match=r"after 2 attempts: rate limited \(HTTP 429\)"):
        await harness.summarizer(retry=harness.policy(max_attempts=2))(summary_request)

    assert len(harness.server.requests) == 2


async def test_retry_after_beyond_the_deadline_stops_at_once(
    harness: Harness, summary_request: SummaryRequest
) -> None:
    """A server delay that would end past max_delay is not waited for."""
    harness.server.queue(
        harness.error(429, "Rate limit reached", "rate_limit_error", **{"retry-after": "5"}),
        harness.ok(SUMMARY),
    )

    with pytest.raises(SummarizerError, match="HTTP 429"):
        await harness.summarizer(retry=harness.policy(max_delay=1.0, max_wait=10))(summary_request)

    assert len(harness.server.requests) == 1
    assert harness.sleeps == []


# ----------------------------------------------------------------- overflow


async def test_own_context_overflow_retries_with_the_oldest_turns_dropped(
    harness: Harness, summary_request: SummaryRequest
) -> None:
    """The summarizer's model says "too long": the oldest fifth of the turns goes, no wait."""
    harness.server.queue(harness.overflow(), harness.ok(SUMMARY))

    text = await harness.summarizer()(summary_request)

    assert text == SUMMARY
    first, second = harness.server.requests
    assert entries(harness.prompt(first)) == 20
    assert entries(harness.prompt(second)) == 16
    assert "question 0" in harness.prompt(first)
    assert "question 0" not in harness.prompt(second)
    assert "question 2" in harness.prompt(second)
    assert harness.sleeps == []


async def test_own_context_overflow_is_bounded(
    harness: Harness, summary_request: SummaryRequest
) -> None:
    """Still too long after max_overflow_retries shrinks: a SummarizerError that says what to do."""
    harness.server.queue(*[harness.overflow()] * 4)
    summarizer = harness.summarizer(retry=harness.policy(max_overflow_retries=2))

    with pytest.raises(SummarizerError, match="larger window") as caught:
        await summarizer(summary_request)

    counts = [entries(harness.prompt(r)) for r in harness.server.requests]
    assert counts == [20, 16, 12]
    assert isinstance(caught.value.__cause__, harness.errors.BadRequestError)


# ----------------------------------------------------------------- errors at once


@pytest.mark.parametrize(
    ("status", "kind", "expected"),
    [
        (400, "invalid_request_error", r"rejected \(HTTP 400\): Invalid value for 'model'\.;"),
        (401, "authentication_error", r"credentials rejected \(HTTP 401\)"),
        (404, "not_found_error", "check the model name"),
    ],
    ids=["400-bad-request", "401-bad-key", "404-unknown-model"],
)
async def test_client_errors_surface_at_once(
    harness: Harness, summary_request: SummaryRequest, status: int, kind: str, expected: str
) -> None:
    """A 4xx other than 408/429 and overflow is not retried."""
    harness.server.queue(
        harness.error(status, "Invalid value for 'model'.", kind), harness.ok(SUMMARY)
    )

    with pytest.raises(SummarizerError, match=expected) as caught:
        await harness.summarizer()(summary_request)

    assert len(harness.server.requests) == 1
    assert harness.sleeps == []
    provider = "OpenAI-compatible endpoint" if harness.kind == "openai" else "Anthropic"
    assert str(caught.value).startswith(provider)
    assert isinstance(caught.value.__cause__, harness.errors.APIStatusError)
    assert caught.value.__cause__.status_code == status


@pytest.mark.parametrize(
    "answer", ["", "<analysis>only thinking</analysis>"], ids=["empty", "analysis-only"]
)
async def test_empty_answer_raises(
    harness: Harness, summary_request: SummaryRequest, answer: str
) -> None:
    """An answer with no checkpoint text is an error, not an empty checkpoint; no retry."""
    harness.server.queue(harness.ok(answer), harness.ok(SUMMARY))

    with pytest.raises(SummarizerError, match="summarizer"):
        await harness.summarizer()(summary_request)

    assert len(harness.server.requests) == 1


async def test_openai_answer_cut_before_any_text_says_to_raise_the_budget(
    server: ProviderServer, summary_request: SummaryRequest
) -> None:
    """finish_reason=length with no content points at max_summary_tokens."""
    wire = Harness("openai", server)
    server.queue(Reply(body=openai_ok(None, finish_reason="length")))
    with pytest.raises(SummarizerError, match="max_summary_tokens"):
        await wire.summarizer()(summary_request)
    await wire.clients[0].close()


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: OpenAISummarizer(object(), "m"), "openai.AsyncOpenAI"),  # type: ignore[arg-type]
        (lambda: AnthropicSummarizer(object(), "m"), "AsyncAnthropic"),  # type: ignore[arg-type]
        (lambda: OpenAISummarizer(openai.AsyncOpenAI(api_key="k"), ""), "model name"),
        (
            lambda: OpenAISummarizer(openai.AsyncOpenAI(api_key="k"), "m", max_output_tokens=0),
            "max_output_tokens",
        ),
        (
            lambda: OpenAISummarizer(
                openai.AsyncOpenAI(api_key="k"),
                "m",
                token_parameter="max_new_tokens",  # type: ignore[arg-type]
            ),
            "token_parameter",
        ),
    ],
    ids=["openai-wrong-client", "anthropic-wrong-client", "no-model", "zero-ceiling", "bad-param"],
)
def test_bad_configuration_fails_at_construction(make: Any, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()
