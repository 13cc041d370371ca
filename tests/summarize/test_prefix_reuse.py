"""Summaries that reuse the agent's prompt cache: the exact bodies the real clients send."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))

import anthropic
import attrs
import openai

from context_engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.openai import to_openai
from context_engine.messages import ContextSummary, Message, TextBlock, ToolCall
from context_engine.strategies import FullSummary
from context_engine.strategies.microcompact import ToolResultMicrocompact
from context_engine.structure import TRIMMED_KEY
from context_engine.summarize.anthropic import AnthropicSummarizer, to_anthropic_prompt
from context_engine.summarize.openai import OpenAISummarizer
from context_engine.summarize.prompts import build_request
from context_engine.summarize.retry import RetryPolicy
from context_engine.summarize.reuse import AgentPrefix, collect_cache_usage, reusing_prompt
from tests.summarize.provider_server import ProviderServer, Reply, anthropic_ok, openai_ok

pytestmark = pytest.mark.extra("openai", "anthropic")

SUMMARY = "## Goal\nShip the parser fix.\n## Next steps\nRun the tests."
SYSTEM = "You are a coding agent."
OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]


def history(turns: int) -> list[Message]:
    messages = []
    for i in range(turns):
        messages += [Message.user(f"question {i}"), Message.assistant(f"answer {i}")]
    return messages


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    provider = ProviderServer()
    with provider.running():
        yield provider


def no_sleep_policy() -> RetryPolicy:
    async def sleep(_: float) -> None:
        return None

    return RetryPolicy(initial_wait=0.01, jitter=0, sleep=sleep)


async def send_openai(server: ProviderServer, prefix: AgentPrefix, messages: list[Message]) -> Any:
    server.queue(Reply(body=openai_ok(SUMMARY)))
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5.0)
    try:
        summarizer = OpenAISummarizer(client, "agent-model", prefix=prefix, retry=no_sleep_policy())
        assert await summarizer(build_request(messages, max_tokens=512)) == SUMMARY
    finally:
        await client.close()
    (received,) = server.requests
    return received.body


async def send_anthropic(
    server: ProviderServer, prefix: AgentPrefix, messages: list[Message], usage: Any = None
) -> Any:
    body = anthropic_ok(SUMMARY)
    if usage:
        body["usage"] = usage
    server.queue(Reply(body=body))
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", timeout=5.0)
    try:
        summarizer = AnthropicSummarizer(
            client, "agent-model", prefix=prefix, retry=no_sleep_policy()
        )
        assert await summarizer(build_request(messages, max_tokens=512)) == SUMMARY
    finally:
        await client.close()
    (received,) = server.requests
    return received.body


async def test_openai_summary_request_is_the_agents_request_with_the_instruction_appended(
    server: ProviderServer,
) -> None:
    """Same model, tools, cache key and leading messages as the agent; one user message added."""
    transcript = [Message.system(SYSTEM), *history(4)]
    agent_messages = to_openai(transcript, include_reasoning=False, include_usage=False)
    prefix = AgentPrefix(tools=OPENAI_TOOLS, cache_key="session-42")

    body = await send_openai(server, prefix, transcript)

    assert body["model"] == "agent-model"
    assert body["tools"] == OPENAI_TOOLS
    assert body["prompt_cache_key"] == "session-42"
    assert "tool_choice" not in body
    assert body["max_completion_tokens"] == 512
    assert body["messages"][:-1] == agent_messages
    instruction = body["messages"][-1]
    assert instruction["role"] == "user"
    assert "<conversation>" not in instruction["content"]
    assert "conversation above" in instruction["content"]
    assert "question 0" not in instruction["content"]  # the history is not sent twice


async def test_openai_system_prompt_from_the_prefix_leads_a_history_without_one(
    server: ProviderServer,
) -> None:
    body = await send_openai(server, AgentPrefix(system=SYSTEM), history(2))

    assert body["messages"][0] == {"role": "system", "content": SYSTEM}
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert "tools" not in body
    assert "prompt_cache_key" not in body


async def test_the_view_the_agent_last_sent_supplies_its_checkpoint_and_system_prompt(
    server: ProviderServer,
) -> None:
    """The summarized history sits after an earlier checkpoint in the agent's view:
    the request sends that view up to the history's end, checkpoint included."""
    checkpoint = ContextSummary(summary="## Goal\nEarlier work.", tokens_before=900)
    older = history(3)
    tail = [Message.user("latest question")]
    agent_view = [Message.system(SYSTEM), checkpoint, *older, *tail]
    prefix = AgentPrefix(view=lambda: agent_view)

    body = await send_openai(server, prefix, older)

    expected = to_openai(agent_view[:-1], include_reasoning=False, include_usage=False)
    assert body["messages"][:-1] == expected
    assert "Earlier work." in body["messages"][1]["content"]


async def test_anthropic_summary_request_reads_the_agents_cache_and_marks_no_new_breakpoint(
    server: ProviderServer,
) -> None:
    """The history's last block gets the one read breakpoint; the instruction gets none."""
    transcript = [Message.system(SYSTEM), *history(3)]
    agent_body = to_anthropic(transcript, request=True)

    body = await send_anthropic(server, AgentPrefix(tools=ANTHROPIC_TOOLS), transcript)

    expected = copy.deepcopy(agent_body["messages"])
    expected[-1]["content"] = [
        {"type": "text", "text": "answer 2", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["system"] == SYSTEM
    assert body["tools"] == ANTHROPIC_TOOLS
    assert body["model"] == "agent-model"
    assert body["messages"][:-1] == expected
    assert body["messages"][-1]["role"] == "user"
    assert isinstance(body["messages"][-1]["content"], str)  # no cache_control on it


async def test_anthropic_keeps_the_callers_breakpoints_and_adds_none(
    server: ProviderServer,
) -> None:
    agent_body = {
        "system": [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        "messages": to_anthropic(history(2), request=True)["messages"],
    }
    transcript = from_anthropic(agent_body)

    body = await send_anthropic(server, AgentPrefix(), transcript)

    assert body["system"] == agent_body["system"]
    assert body["messages"][:-1] == agent_body["messages"]
    assert str(body).count("cache_control") == 1


async def test_summary_info_records_the_cache_reads_and_writes_of_the_summary_request(
    server: ProviderServer,
) -> None:
    """The usage the provider reports for the summary request lands on SummaryInfo."""
    usage = {
        "input_tokens": 40,
        "output_tokens": 30,
        "cache_read_input_tokens": 900,
        "cache_creation_input_tokens": 60,
    }
    body = anthropic_ok(SUMMARY)
    body["usage"] = usage
    server.queue(Reply(body=body))
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", timeout=5.0)
    summarizer = AnthropicSummarizer(
        client, "agent-model", prefix=AgentPrefix(), retry=no_sleep_policy()
    )
    engine = ContextEngine(context_window=200_000, strategies=[FullSummary(summarizer=summarizer)])
    transcript = [Message.system(SYSTEM)]
    for i in range(12):
        transcript += [Message.user(f"question {i} " * 40), Message.assistant(f"answer {i} " * 40)]
    try:
        result = await engine.compact(transcript)
    finally:
        await client.close()

    assert result.info is not None
    assert result.info.cache_read_tokens == 900
    assert result.info.cache_write_tokens == 60
    assert len(server.requests) == 1


def test_a_prefix_of_the_wrong_type_is_refused() -> None:
    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
    with pytest.raises(ConfigurationError, match="AgentPrefix"):
        OpenAISummarizer(client, "m", prefix={"tools": []})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="tool definition"):
        AgentPrefix(tools=["read_file"])  # type: ignore[list-item]


async def test_a_retry_with_the_oldest_turns_dropped_does_not_send_them_again(
    server: ProviderServer,
) -> None:
    """The view holds the shorter history after turns it no longer asks for: no cache holds
    such a request, so it goes apart, the conversation serialized as data."""
    older = history(4)
    agent_view = [Message.system(SYSTEM), *older]
    fewer = older[2:]
    prefix = AgentPrefix(system=SYSTEM, tools=OPENAI_TOOLS, cache_key="s", view=lambda: agent_view)

    body = await send_openai(server, prefix, fewer)

    request = build_request(fewer, max_tokens=512)
    assert body["messages"] == to_openai(request.prompt_messages, include_usage=False)
    assert "question 0" not in str(body["messages"])
    assert "tools" not in body
    assert "prompt_cache_key" not in body


async def test_openai_cache_usage_of_the_summary_request_is_collected(
    server: ProviderServer,
) -> None:
    reply = openai_ok(SUMMARY)
    reply["usage"]["prompt_tokens_details"] = {"cached_tokens": 80, "cache_write_tokens": 12}
    server.queue(Reply(body=reply))
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5.0)
    summarizer = OpenAISummarizer(
        client, "agent-model", prefix=AgentPrefix(), retry=no_sleep_policy()
    )
    try:
        with collect_cache_usage() as usage:
            await summarizer(build_request(history(2), max_tokens=256))
    finally:
        await client.close()

    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (100, 80, 12)
    assert usage.requests == 1


def tool_session(steps: int) -> list[Message]:
    """A coding session: each step a read_file call and its (long) result."""
    messages = [Message.user("fix the parser")]
    for i in range(steps):
        call = ToolCall(id=f"call_{i}", name="read_file", arguments=f'{{"path": "f{i}.py"}}')
        messages += [
            Message.assistant(f"reading f{i}.py", tool_calls=[call]),
            Message.tool(f"call_{i}", f"contents of f{i}.py: line {i}\n" * 5, name="read_file"),
        ]
    messages.append(Message.assistant("the bug is in f1.py"))
    return messages


def cleared_view(transcript: list[Message], cleared: set[int]) -> list[Message]:
    """The view the agent sent: the results at ``cleared`` given microcompact's placeholder."""
    strategy = ToolResultMicrocompact()
    calls = {c.id: c for m in transcript for c in m.tool_calls}
    return [
        strategy.clear(calls[m.tool_call_id or ""], m) if i in cleared else m
        for i, m in enumerate(transcript)
    ]


async def test_openai_lead_is_the_agents_last_prompt_with_its_placeholders_and_originals_follow(
    server: ProviderServer,
) -> None:
    """The history sent is the agent's cleared view byte for byte; the summarizer still
    reads every original, after the instruction."""
    older = tool_session(3)
    transcript = [Message.system(SYSTEM), *older]
    view = [*cleared_view(transcript, {3, 5}), Message.user("now add a test")]
    agent_prompt = to_openai(view, include_reasoning=False, include_usage=False)

    body = await send_openai(server, AgentPrefix(view=lambda: view), older)

    lead = body["messages"][:-1]
    assert lead == agent_prompt[: len(transcript)]
    assert "contents of f0.py" not in str(lead)  # cleared there, as the agent sent it
    appended = body["messages"][-1]
    assert appended["role"] == "user"
    instruction, originals = appended["content"].split("<originals>\n")
    assert "conversation above" in instruction
    assert "contents of f2.py" not in appended["content"]  # the lead shows it whole: not twice
    assert originals.startswith("[message 3]\n[tool result read_file]: contents of f0.py")
    assert "[message 5]\n[tool result read_file]: contents of f1.py" in originals
    assert originals.endswith("</originals>")


async def test_anthropic_lead_is_the_agents_last_prompt_and_reads_it_at_its_last_block(
    server: ProviderServer,
) -> None:
    older = tool_session(3)
    transcript = [Message.system(SYSTEM), *older]
    view = [*cleared_view(transcript, {3}), Message.user("now add a test")]
    agent_body = to_anthropic(view, request=True)

    body = await send_anthropic(server, AgentPrefix(view=lambda: view), older)

    expected = copy.deepcopy(agent_body["messages"][:-1])
    assert expected[-1]["content"] == "the bug is in f1.py"
    expected[-1]["content"] = [
        {"type": "text", "text": "the bug is in f1.py", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["system"] == agent_body["system"]
    assert body["messages"][:-1] == expected
    appended = body["messages"][-1]["content"]
    assert isinstance(appended, str)
    assert "[message 3]\n[tool result read_file]: contents of f0.py" in appended
    assert str(body).count("cache_control") == 1


async def test_anthropic_marks_no_breakpoint_when_the_view_does_not_hold_the_history(
    server: ProviderServer,
) -> None:
    """A retry with the oldest turns dropped sends messages no cache holds: it goes apart,
    with no breakpoint, so no write is paid."""
    older = history(4)
    view = [Message.system(SYSTEM), *older]

    body = await send_anthropic(
        server, AgentPrefix(tools=ANTHROPIC_TOOLS, view=lambda: view), older[2:]
    )

    system, messages = to_anthropic_prompt(build_request(older[2:]).prompt_messages)
    assert (body["system"], body["messages"]) == (system, messages)
    assert "cache_control" not in str(body)
    assert "tools" not in body


def test_a_shortened_message_the_redactor_would_change_is_not_sent() -> None:
    """The history was redacted for the summarizer: a trimmed text still showing a secret
    in the agent's view makes the request send the redacted history instead."""
    secret = "token=SECRET-123"
    original = Message.assistant(f"I set {secret} in the config and ran it " * 3)
    shown = attrs.evolve(
        original, content=(TextBlock(f"I set {secret} [...]"),), metadata={TRIMMED_KEY: 1}
    )
    view = [Message.system(SYSTEM), Message.user("go"), shown, Message.user("next")]

    def redact(text: str) -> str:
        return text.replace("SECRET-123", "[REDACTED:token]")

    redacted = [Message.user("go"), Message.assistant(redact(original.text))]
    request = build_request(redacted, redact=redact)
    sent = reusing_prompt(AgentPrefix(view=lambda: view), request)

    assert sent is None  # sent apart, from the redacted history
    unredacted = reusing_prompt(AgentPrefix(view=lambda: view), build_request(redacted))
    assert unredacted is not None
    assert unredacted.lead == tuple(view[:3])  # without a redactor the view is sent


def test_the_early_part_of_a_turn_is_sent_after_the_request_it_answers() -> None:
    """A turn-prefix summary covers the steps after the user's request, which the agent keeps
    seeing: the view is sent with that request in it. A whole-history summary never sends a
    user turn it does not summarize."""
    session = tool_session(3)
    steps = session[1:5]
    view = [Message.system(SYSTEM), *cleared_view(session, {2}), Message.user("more")]
    prefix = AgentPrefix(view=lambda: view)

    sent = reusing_prompt(prefix, build_request(steps, kind="turn_prefix"))

    assert sent is not None
    assert sent.lead == tuple(view[:6])
    assert sent.originals == ((2, session[2]),)
    assert reusing_prompt(prefix, build_request(steps, kind="history")) is None
