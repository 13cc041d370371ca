"""Explicit provider compaction: OpenAI ``responses.compact``, Anthropic's ``compaction`` request.

The real clients talk to a loopback server. Shapes recorded from the
installed SDK types (openai 3.57.0: ``ResponseCompactParams``,
``CompactedResponse``, ``ResponseCompactionItem``; anthropic 2.14.0:
``BetaCompactionConfigParam``, ``BetaCompactionBlock``, the tool runner's
``compact-2026-09-04`` beta).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))
pytest.importorskip("agents", reason=needs("openai-agents"))

import anthropic
import openai

from context_engine import ContextEngine, Message, ToolCall
from context_engine.archive.memory import MemoryArchive
from context_engine.errors import CompactionError, ConfigurationError
from context_engine.formats.anthropic import message_from_anthropic, to_anthropic
from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents
from context_engine.invariants import check_view
from context_engine.native import (
    AnthropicCompactCall,
    AnthropicCompaction,
    apply_request_options,
    carries_native_checkpoint,
)
from context_engine.native.openai_compact import OpenAICompactCall
from context_engine.pipeline import BREAKER_OPEN
from context_engine.strategies import HardTruncate, ToolResultMicrocompact
from context_engine.summarize.reuse import AgentPrefix
from tests.summarize.provider_server import ProviderServer, Reply

pytestmark = pytest.mark.extra("openai", "anthropic", "openai-agents")

SYSTEM = "You are a coding agent."
TOOLS = [{"name": "read_file", "input_schema": {"type": "object"}}]
COMPACTION_ITEM = {
    "type": "compaction",
    "id": "cmp_1",
    "encrypted_content": "gAAAAB-opaque-Zm9vYmFy==",
    "created_by": "resp_compactor",
}
BLOCK = {
    "type": "compaction",
    "content": "## Goal\nShip the parser fix.\n## Done\nTests 1-20 pass.",
    "encrypted_content": "opaque-ZW5jcnlwdGVk",
    "signature": "sig-abc",
}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    provider = ProviderServer()
    with provider.running():
        yield provider


def openai_client(server: ProviderServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{server.url}/v1", api_key="test", timeout=5.0, max_retries=0
    )


def anthropic_client(server: ProviderServer) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key="test", timeout=5.0, max_retries=0)


def dumped(value: Any) -> str:
    """Key order included: the bytes a JSON body carries."""
    return json.dumps(value)


# ------------------------------------------------------------------ OpenAI wire shapes


def session_items(turns: int, seed: str = "") -> list[dict[str, Any]]:
    """A Responses history: short questions, long answers."""
    items: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(turns):
        items.append({"role": "user", "content": f"question {seed}{i}"})
        items.append({"role": "assistant", "content": f"answer {i} " * 100})
    return items


def window_items(*questions: str) -> list[dict[str, Any]]:
    users = [
        {
            "type": "message",
            "role": "user",
            "id": f"msg_u{i}",
            "status": "completed",
            "content": [{"type": "input_text", "text": text}],
        }
        for i, text in enumerate(questions)
    ]
    return [*users, dict(COMPACTION_ITEM)]


def compacted(output: list[dict[str, Any]], cached: int = 0) -> dict[str, Any]:
    """A ``CompactedResponse`` body."""
    return {
        "id": "resp_cmp_1",
        "object": "response.compaction",
        "created_at": 1_700_000_000,
        "output": output,
        "usage": {
            "input_tokens": 3000,
            "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
            "output_tokens": 400,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 3400,
        },
    }


def responses_reply(text: str) -> dict[str, Any]:
    return {
        "id": "resp_2",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-test",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_a",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 100,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 110,
        },
    }


def openai_engine(client: openai.AsyncOpenAI, **settings: Any) -> ContextEngine:
    return ContextEngine(
        12_000,
        reserve_tokens=4096,
        strategies=[OpenAICompactCall(client=client, model="gpt-test"), HardTruncate()],
        **settings,
    )


# ------------------------------------------------------------------ OpenAI


async def test_openai_compact_call_replaces_the_history_with_the_window_held_byte_for_byte(
    server: ProviderServer,
) -> None:
    """The window is sent back unchanged on every later request; what it replaced is recallable."""
    window = window_items("question 0", "question 1")
    server.queue(
        Reply(body=compacted(window, cached=2800)),
        Reply(body=responses_reply("ok")),
        Reply(body=responses_reply("done")),
    )
    items = session_items(30)
    transcript = from_openai_agents(items)
    client = openai_client(server)
    engine = openai_engine(client, archive=MemoryArchive(), session_id="s1")
    try:
        first = await engine.project(transcript)
        response = await client.responses.create(
            model="gpt-test", input=to_openai_agents(first.messages)
        )
        reply = [o.model_dump(mode="json", exclude_unset=True) for o in response.output]
        grown = [*transcript, *from_openai_agents(reply), Message.user("next")]
        second = await engine.project(grown)
        await client.responses.create(model="gpt-test", input=to_openai_agents(second.messages))
    finally:
        await client.close()

    compact_sent, first_sent, second_sent = server.requests
    assert compact_sent.path == "/v1/responses/compact"
    sent = len(compact_sent.body["input"])
    assert compact_sent.body == {"model": "gpt-test", "input": items[:sent]}
    assert 1 < sent < len(items) - 2
    # The view: the system message, the window as returned, then the kept history verbatim.
    assert dumped(first_sent.body["input"]) == dumped([items[0], *window, *items[sent:]])
    assert first.messages[1 + len(window) :] == tuple(transcript[sent:])
    assert first.fits
    assert check_view(transcript, first.messages) == []
    # The next call reuses the view: no second compaction, the window goes out unchanged.
    assert second.event is None
    assert dumped(second_sent.body["input"][: 1 + len(window)]) == dumped([items[0], *window])
    event = first.event
    assert event is not None
    assert event.info is not None
    assert [s.name for s in event.steps if s.applied] == ["openai_compact_call"]
    assert event.info.compacted_count == sent - 1
    assert event.info.cache_read_tokens == 2800
    (reference,) = event.references
    assert await engine.recall(reference) == tuple(transcript[1:sent])


async def test_a_committed_window_is_sent_again_and_folded_into_the_next_one(
    server: ProviderServer,
) -> None:
    """Incremental: the previous window goes back verbatim as the start of the next compaction."""
    first_window = window_items("question 0")
    second_window = [{**item, "id": f"{item['id']}_2"} for item in window_items("question 0")]
    server.queue(Reply(body=compacted(first_window)), Reply(body=compacted(second_window)))
    client = openai_client(server)
    engine = openai_engine(client, commit_strategies=("openai_compact_call",))
    try:
        first = await engine.project(from_openai_agents(session_items(30)))
        assert first.commit is not None
        grown = [*first.commit, *from_openai_agents(session_items(30, seed="b")[1:])]
        second = await engine.project(grown)
    finally:
        await client.close()

    second_sent = server.requests[1].body["input"]
    assert dumped(second_sent[: 1 + len(first_window)]) == dumped(
        [{"role": "system", "content": SYSTEM}, *first_window]
    )
    assert second.event is not None
    assert second.event.info is not None
    assert second.event.info.is_incremental
    sent = to_openai_agents(second.messages)
    assert dumped(sent[1 : 1 + len(second_window)]) == dumped(second_window)
    assert COMPACTION_ITEM not in sent  # the first item was replaced, not kept beside the new one
    assert second.fits


async def test_a_split_turn_keeps_its_user_message_verbatim_and_out_of_the_openai_input(
    server: ProviderServer,
) -> None:
    """One request, many tool steps: the steps are compacted, the request stays after the window."""
    server.queue(Reply(body=compacted([dict(COMPACTION_ITEM)])))
    transcript = [Message.system(SYSTEM), Message.user("Fix every failing test.")]
    for i in range(40):
        call = ToolCall(f"call_{i}", "read_file", json.dumps({"path": f"f{i}.py"}))
        transcript += [
            Message.assistant(tool_calls=[call]),
            Message.tool(f"call_{i}", f"contents of f{i}.py " * 40),
        ]
    client = openai_client(server)
    try:
        projection = await openai_engine(client).project(transcript)
    finally:
        await client.close()

    (request,) = server.requests
    sent = request.body["input"]
    assert {"role": "user", "content": "Fix every failing test."} not in sent
    assert sent[0] == {"role": "system", "content": SYSTEM}
    assert sent[1]["type"] == "function_call"
    assert projection.messages[2] == transcript[1]
    assert carries_native_checkpoint(projection.messages[1], "openai")
    assert projection.fits
    assert check_view(transcript, projection.messages) == []


async def test_a_compact_on_demand_sends_the_agent_prefix_and_the_users_instructions(
    server: ProviderServer,
) -> None:
    server.queue(Reply(body=compacted(window_items("question 0"))))
    client = openai_client(server)
    strategy = OpenAICompactCall(
        client=client,
        model="gpt-test",
        prefix=AgentPrefix(system="You are a coding agent.", cache_key="agent-7"),
    )
    transcript = from_openai_agents(session_items(6)[1:])  # the system prompt travels apart
    try:
        result = await ContextEngine(100_000, strategies=[strategy]).compact(
            transcript, instructions="Keep the failing test names."
        )
    finally:
        await client.close()

    (request,) = server.requests
    assert request.body["instructions"] == "You are a coding agent.\n\nKeep the failing test names."
    assert request.body["prompt_cache_key"] == "agent-7"
    assert set(request.body) == {"model", "input", "instructions", "prompt_cache_key"}
    assert result.commit is not None
    assert any(carries_native_checkpoint(m, "openai") for m in result.commit)


@pytest.mark.parametrize(
    "reply",
    [
        Reply(500, {"error": {"message": "overloaded", "type": "server_error"}}),
        Reply(body=compacted(window_items("question 0")[:-1])),
    ],
    ids=["server_error", "no_compaction_item"],
)
async def test_a_failed_openai_compaction_falls_through_and_the_view_still_fits(
    server: ProviderServer, reply: Reply
) -> None:
    server.queue(reply)
    client = openai_client(server)
    engine = openai_engine(client)
    try:
        projection = await engine.project(from_openai_agents(session_items(30)))
    finally:
        await client.close()

    assert projection.fits
    assert projection.event is not None
    compact_step, truncate_step = projection.event.steps
    assert not compact_step.applied
    assert compact_step.error is not None
    assert "OpenAI compaction call (gpt-test)" in compact_step.error
    assert truncate_step.name == "hard_truncate"
    assert truncate_step.applied
    assert not any(carries_native_checkpoint(m) for m in projection.messages)
    assert engine.consecutive_failures == 1


async def test_the_breaker_skips_the_compact_call_after_repeated_500s_then_tries_again(
    server: ProviderServer,
) -> None:
    error = Reply(500, {"error": {"message": "overloaded", "type": "server_error"}})
    server.queue(error, error, Reply(body=compacted(window_items("question 0"))))
    client = openai_client(server)
    engine = openai_engine(client, max_consecutive_failures=2)
    try:
        # A new session each call, so every call runs the pipeline.
        failed = [await engine.project(from_openai_agents(session_items(30, s))) for s in "ab"]
        skipped = await engine.project(from_openai_agents(session_items(30, "c")))
        requests_while_open = len(server.requests)
        retried = await engine.project(from_openai_agents(session_items(30, "d")))
    finally:
        await client.close()

    assert all(p.fits for p in (*failed, skipped, retried))
    assert requests_while_open == 2
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert skipped.event.steps[0].error == BREAKER_OPEN
    assert retried.event is not None
    assert [s.name for s in retried.event.steps if s.applied] == ["openai_compact_call"]
    assert engine.breaker_state == "closed"
    assert engine.consecutive_failures == 0


# ------------------------------------------------------------------ Anthropic


def agent_transcript(turns: int) -> list[Message]:
    messages = [Message.system(SYSTEM)]
    for i in range(turns):
        call = ToolCall(f"toolu_{i}", "read_file", json.dumps({"path": f"f{i}.py"}))
        messages += [
            Message.user(f"Look at f{i}.py"),
            Message.assistant(tool_calls=[call]),
            Message.tool(f"toolu_{i}", f"line of f{i}.py " * 60),
            Message.assistant(f"f{i}.py reviewed."),
        ]
    return messages


def compaction_reply(content: list[dict[str, Any]], **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_cmp",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "compaction",
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 300, **usage},
    }


def anthropic_reply(text: str) -> dict[str, Any]:
    return compaction_reply([{"type": "text", "text": text}]) | {"stop_reason": "end_turn"}


def anthropic_engine(client: anthropic.AsyncAnthropic, **settings: Any) -> ContextEngine:
    strategy = AnthropicCompactCall(
        client=client, model="claude-test", prefix=AgentPrefix(tools=TOOLS)
    )
    return ContextEngine(
        12_000, reserve_tokens=4096, strategies=[strategy, HardTruncate()], **settings
    )


async def test_anthropic_compact_call_sends_a_compaction_request_and_holds_the_block_byte_for_byte(
    server: ProviderServer,
) -> None:
    server.queue(
        Reply(body=compaction_reply([BLOCK], cache_read_input_tokens=5000)),
        Reply(body=anthropic_reply("ok")),
        Reply(body=anthropic_reply("done")),
    )
    transcript = agent_transcript(30)
    client = anthropic_client(server)
    engine = anthropic_engine(client, archive=MemoryArchive(), session_id="s1")
    base = {"model": "claude-test", "max_tokens": 256, "tools": TOOLS}
    try:
        first = await engine.project(transcript)
        response = await client.beta.messages.create(
            **apply_request_options(
                {**base, **to_anthropic(first.messages, request=True)},
                first.request_options,
                "anthropic",
            )
        )
        answer = {"role": "assistant", "content": [b.model_dump() for b in response.content]}
        grown = [*transcript, *message_from_anthropic(answer), Message.user("next")]
        second = await engine.project(grown)
        await client.beta.messages.create(
            **apply_request_options(
                {**base, **to_anthropic(second.messages, request=True)},
                second.request_options,
                "anthropic",
            )
        )
    finally:
        await client.close()

    compact_sent, first_sent, second_sent = server.requests
    kept = len(first.messages) - 2
    cut = len(transcript) - kept
    assert first.messages[2:] == tuple(transcript[cut:])
    assert compact_sent.path == "/v1/messages"
    assert compact_sent.headers["anthropic-beta"] == "compact-2026-09-04"
    assert compact_sent.body == {
        "max_tokens": 4096,
        "messages": to_anthropic(transcript[:cut], request=True)["messages"],
        "model": "claude-test",
        "compaction": {"type": "summarize"},
        "system": SYSTEM,
        "tools": TOOLS,
    }
    # Later requests: the block first, as the server returned it, with the beta flag.
    for sent in (first_sent, second_sent):
        assert sent.headers["anthropic-beta"] == "compact-2026-09-04"
        assert dumped(sent.body["messages"][0]) == dumped({"role": "assistant", "content": [BLOCK]})
    assert second.event is None  # the reused view: no second compaction
    assert first.fits
    assert check_view(transcript, first.messages) == []
    event = first.event
    assert event is not None
    assert event.info is not None
    assert event.info.summary_chars == len(BLOCK["content"])
    assert event.info.cache_read_tokens == 5000
    (reference,) = event.references
    assert await engine.recall(reference) == tuple(transcript[1:cut])


async def test_client_side_strategies_work_around_a_committed_block_and_never_edit_it(
    server: ProviderServer,
) -> None:
    """Later tool results are cleared client-side; the block goes out as it came, every time."""
    server.queue(Reply(body=compaction_reply([BLOCK])), Reply(body=anthropic_reply("ok")))
    client = anthropic_client(server)
    compact_call = AnthropicCompactCall(client=client, model="claude-test")
    engine = ContextEngine(
        12_000,
        reserve_tokens=4096,
        strategies=[ToolResultMicrocompact(), compact_call, HardTruncate()],
        commit_strategies=("anthropic_compact_call",),
    )
    chat = [Message.system(SYSTEM)]
    for i in range(30):
        chat += [Message.user(f"question {i}"), Message.assistant(f"answer {i} " * 100)]
    try:
        first = await engine.project(chat)
        assert first.commit is not None
        grown = [*first.commit, *agent_transcript(25)[1:]]
        second = await engine.project(grown)
        await client.beta.messages.create(
            model="claude-test",
            max_tokens=256,
            tools=TOOLS,
            **apply_request_options(
                to_anthropic(second.messages, request=True), second.request_options, "anthropic"
            ),
        )
    finally:
        await client.close()

    assert len(server.requests) == 2  # one compaction; the second view needed none
    assert second.event is not None
    assert [s.name for s in second.event.steps if s.applied] == ["tool_result_microcompact"]
    assert second.messages[1] is first.commit[1]
    assert dumped(server.requests[1].body["messages"][0]) == dumped(
        {"role": "assistant", "content": [BLOCK]}
    )
    assert second.fits


async def test_anthropic_compact_on_demand_sends_the_instructions_and_commits_the_block(
    server: ProviderServer,
) -> None:
    server.queue(Reply(body=compaction_reply([BLOCK])))
    client = anthropic_client(server)
    strategy = AnthropicCompactCall(
        client=client, model="claude-test", instructions="Summarize for a coding agent."
    )
    try:
        result = await ContextEngine(200_000, strategies=[strategy]).compact(
            agent_transcript(4), instructions="Keep the failing test names."
        )
    finally:
        await client.close()

    (request,) = server.requests
    assert request.body["compaction"] == {
        "type": "summarize",
        "instructions": "Summarize for a coding agent.\n\nKeep the failing test names.",
    }
    assert "context_management" not in request.body
    assert result.commit is not None
    assert result.commit[0] == Message.system(SYSTEM)
    assert carries_native_checkpoint(result.commit[1], "anthropic")
    assert result.info is not None
    assert result.info.compacted_count > 0


@pytest.mark.parametrize(
    "reply",
    [
        Reply(500, {"type": "error", "error": {"type": "api_error", "message": "overloaded"}}),
        Reply(body=compaction_reply([{**BLOCK, "content": None}])),
    ],
    ids=["server_error", "failed_compaction"],
)
async def test_a_failed_anthropic_compaction_falls_through_and_the_view_still_fits(
    server: ProviderServer, reply: Reply
) -> None:
    server.queue(reply)
    client = anthropic_client(server)
    engine = anthropic_engine(client)
    try:
        projection = await engine.project(agent_transcript(30))
    finally:
        await client.close()

    assert projection.fits
    assert projection.event is not None
    compact_step = projection.event.steps[0]
    assert compact_step.error is not None
    assert "Anthropic compaction call" in compact_step.error
    assert [s.name for s in projection.event.steps if s.applied] == ["hard_truncate"]
    assert engine.consecutive_failures == 1


async def test_a_manual_compact_that_the_provider_fails_raises_with_a_fitting_view(
    server: ProviderServer,
) -> None:
    server.queue(Reply(500, {"type": "error", "error": {"type": "api_error", "message": "down"}}))
    client = anthropic_client(server)
    try:
        with pytest.raises(CompactionError) as caught:
            await anthropic_engine(client).compact(agent_transcript(30))
    finally:
        await client.close()
    assert "HTTP 500" in str(caught.value.__cause__ or caught.value)


# ------------------------------------------------------------------ configuration


def test_clients_and_settings_that_cannot_work_are_refused_by_name() -> None:
    sync_openai = openai.OpenAI(api_key="test")
    with pytest.raises(ConfigurationError, match=r"responses\.with_raw_response\.compact"):
        OpenAICompactCall(client=sync_openai, model="gpt-test")
    with pytest.raises(ConfigurationError, match=r"beta\.messages\.with_raw_response\.create"):
        AnthropicCompactCall(client=object(), model="claude-test")
    client = anthropic.AsyncAnthropic(api_key="test")
    with pytest.raises(ConfigurationError, match="model"):
        AnthropicCompactCall(client=client, model=" ")
    with pytest.raises(ConfigurationError, match="max_tokens"):
        AnthropicCompactCall(client=client, model="claude-test", max_tokens=0)
    with pytest.raises(ConfigurationError, match="prefix"):
        AnthropicCompactCall(client=client, model="claude-test", prefix="system")  # type: ignore[arg-type]


async def test_anthropic_compact_call_and_the_compaction_edit_cannot_share_a_pipeline() -> None:
    client = anthropic.AsyncAnthropic(api_key="test")
    engine = ContextEngine(
        100_000,
        strategies=[
            AnthropicCompactCall(client=client, model="claude-test"),
            AnthropicCompaction(trigger_tokens=80_000),
        ],
    )
    with pytest.raises(ConfigurationError, match="cannot be used together"):
        await engine.project([Message.system(SYSTEM), Message.user("hi")])
