"""Native backends: the provider's own directives, sent by the real clients to a loopback server.

Shapes recorded from the installed SDK types (anthropic 2.14.0:
``BetaContextManagementConfigParam``, ``BetaCompactionBlock``; openai 3.57.0:
``response_create_params.ContextManagement``, ``ResponseCompactionItem``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))

import anthropic
import openai

from context_engine import ContextEngine, Message, ToolCall
from context_engine.archive.memory import MemoryArchive
from context_engine.errors import ConfigurationError
from context_engine.formats.anthropic import message_from_anthropic, to_anthropic
from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents
from context_engine.native import (
    AnthropicClearThinking,
    AnthropicClearToolUses,
    AnthropicCompaction,
    OpenAICompaction,
    RequestOptions,
    apply_request_options,
)
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.summarize.extractive import ExtractiveSummarizer
from tests.summarize.provider_server import ProviderServer, Reply

pytestmark = pytest.mark.extra("openai", "anthropic")

SYSTEM = "You are a coding agent."


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    provider = ProviderServer()
    with provider.running():
        yield provider


def chat(turns: int, size: int = 1) -> list[Message]:
    messages = [Message.system(SYSTEM)]
    for i in range(turns):
        messages += [
            Message.user(f"question {i} " * size),
            Message.assistant(f"answer {i} " * size),
        ]
    return messages


def anthropic_reply(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
        **extra,
    }


def responses_reply(output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-test",
        "status": "completed",
        "output": output,
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


# ------------------------------------------------------------ the projection


async def test_every_projection_carries_the_native_strategies_request_options() -> None:
    """Below the threshold too: the provider applies them past its own trigger."""
    engine = ContextEngine(
        100_000,
        strategies=[
            AnthropicClearToolUses(
                trigger_tokens=30_000, keep_tool_uses=3, clear_at_least_tokens=5_000
            ),
            AnthropicClearThinking(keep_turns=2),
            OpenAICompaction(compact_threshold=80_000),
        ],
    )
    projection = await engine.project(chat(2))

    assert not projection.changed
    anthropic_options, openai_options = projection.request_options
    assert anthropic_options == RequestOptions(
        provider="anthropic",
        edits=(
            {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
            {
                "type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": 30_000},
                "keep": {"type": "tool_uses", "value": 3},
                "clear_at_least": {"type": "input_tokens", "value": 5_000},
            },
        ),
        betas=("context-management-2025-06-27",),
    )
    assert openai_options.arguments() == {
        "context_management": [{"type": "compaction", "compact_threshold": 80_000}]
    }


async def test_a_pipeline_without_native_strategies_has_no_request_options() -> None:
    projection = await ContextEngine(100_000).project(chat(2))
    assert projection.request_options == ()


async def test_mixed_pipeline_clears_client_side_and_sends_directives_to_their_provider() -> None:
    """Tool results are cleared client-side; the Anthropic directive reaches Anthropic only."""
    transcript = [Message.system(SYSTEM)]
    for i in range(8):
        transcript += [
            Message.user(f"step {i}"),
            Message.assistant(tool_calls=[_call(i)]),
            Message.tool(f"call_{i}", " ".join(f"line{j} of file {i}" for j in range(400))),
        ]
    transcript.append(Message.user("go on"))
    engine = ContextEngine(
        12_000,
        reserve_tokens=4096,
        strategies=[
            ToolResultMicrocompact(),
            AnthropicClearToolUses(keep_tool_uses=2),
            HardTruncate(),
        ],
    )
    projection = await engine.project(transcript)

    assert projection.changed
    assert projection.event is not None
    assert projection.event.steps[0].name == "tool_result_microcompact"
    assert projection.event.steps[0].applied
    for_anthropic = apply_request_options({"model": "m"}, projection.request_options, "anthropic")
    for_openai = apply_request_options({"model": "m"}, projection.request_options, "openai")
    assert for_anthropic["context_management"]["edits"][0]["type"] == "clear_tool_uses_20250919"
    assert for_openai == {"model": "m"}


def _call(i: int) -> ToolCall:
    return ToolCall(f"call_{i}", "read_file", '{"path": "a.py"}')


def test_the_callers_own_options_are_kept_and_a_repeated_edit_is_refused() -> None:
    options = (AnthropicCompaction(trigger_tokens=90_000).request_options(()),)
    mine = {
        "model": "m",
        "betas": ["interleaved-thinking-2025-05-14"],
        "context_management": {"edits": [{"type": "clear_thinking_20251015"}]},
    }
    merged = apply_request_options(mine, options, "anthropic")

    assert merged["betas"] == ["interleaved-thinking-2025-05-14", "compact-2026-01-12"]
    assert merged["context_management"] == {
        "edits": [
            {"type": "clear_thinking_20251015"},
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 90_000}},
        ]
    }
    assert mine["betas"] == ["interleaved-thinking-2025-05-14"]  # not mutated
    twice = {"context_management": {"edits": [{"type": "compact_20260112"}]}}
    with pytest.raises(ConfigurationError, match="compact_20260112"):
        apply_request_options(twice, options, "anthropic")


def test_bad_settings_are_refused_with_the_setting_named() -> None:
    with pytest.raises(ConfigurationError, match="keep_turns"):
        AnthropicClearThinking(keep_turns=0)
    with pytest.raises(ConfigurationError, match="not both"):
        AnthropicClearToolUses(trigger_tokens=1, trigger_tool_uses=1)
    with pytest.raises(ConfigurationError, match="exclude_tools"):
        AnthropicClearToolUses(exclude_tools="bash")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="provider"):
        apply_request_options({}, (), "gemini")  # type: ignore[arg-type]


# ------------------------------------------------------------ Anthropic on the wire


async def test_anthropic_context_editing_body_and_beta_header_as_sent_by_the_sdk(
    server: ProviderServer,
) -> None:
    server.queue(
        Reply(
            body=anthropic_reply(
                [{"type": "text", "text": "ok"}],
                context_management={
                    "applied_edits": [
                        {
                            "type": "clear_tool_uses_20250919",
                            "cleared_input_tokens": 5200,
                            "cleared_tool_uses": 4,
                        }
                    ]
                },
            )
        )
    )
    engine = ContextEngine(
        100_000,
        strategies=[
            AnthropicClearToolUses(
                trigger_tokens=30_000,
                keep_tool_uses=3,
                clear_at_least_tokens=5_000,
                exclude_tools=["memory"],
                clear_tool_inputs=True,
            ),
            AnthropicClearThinking(keep_turns="all"),
        ],
    )
    projection = await engine.project(chat(2))
    request = {
        "model": "claude-test",
        "max_tokens": 256,
        **to_anthropic(projection.messages, request=True),
    }
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", timeout=5.0)
    try:
        response = await client.beta.messages.create(
            **apply_request_options(request, projection.request_options, "anthropic")
        )
    finally:
        await client.close()

    (received,) = server.requests
    assert received.path == "/v1/messages"
    assert received.headers["anthropic-beta"] == "context-management-2025-06-27"
    assert received.body == {
        "max_tokens": 256,
        "messages": to_anthropic(chat(2), request=True)["messages"],
        "model": "claude-test",
        "context_management": {
            "edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "all"}},
                {
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": 30_000},
                    "keep": {"type": "tool_uses", "value": 3},
                    "clear_at_least": {"type": "input_tokens", "value": 5_000},
                    "exclude_tools": ["memory"],
                    "clear_tool_inputs": True,
                },
            ]
        },
        "system": SYSTEM,
    }
    assert response.context_management is not None
    assert response.context_management.applied_edits[0].cleared_input_tokens == 5200


async def test_anthropic_compaction_block_is_kept_byte_for_byte_and_the_history_before_it_archived(
    server: ProviderServer,
) -> None:
    """The returned block rides in the transcript untouched; the view starts at it."""
    block = {
        "type": "compaction",
        "content": "## Goal\nShip the parser fix.",
        "encrypted_content": "opaque-Zm9vYmFy",
    }
    server.queue(Reply(body=anthropic_reply([block, {"type": "text", "text": "Continuing."}])))
    server.queue(Reply(body=anthropic_reply([{"type": "text", "text": "Done."}])))
    archive = MemoryArchive()
    engine = ContextEngine(
        12_000,
        reserve_tokens=4096,
        strategies=[AnthropicCompaction(trigger_tokens=50_000), HardTruncate()],
        archive=archive,
        session_id="s1",
    )
    transcript = [*chat(30, size=60), Message.user("continue")]
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", timeout=5.0)
    try:
        first = await engine.project(transcript[:3])
        base = {"model": "claude-test", "max_tokens": 256}
        response = await client.beta.messages.create(
            **apply_request_options(
                {**base, **to_anthropic(first.messages, request=True)},
                first.request_options,
                "anthropic",
            )
        )
        returned = {
            "role": "assistant",
            "content": [b.model_dump(mode="json", exclude_none=True) for b in response.content],
        }
        assert returned["content"][0] == block
        transcript = [*transcript, *message_from_anthropic(returned), Message.user("next")]
        second = await engine.project(transcript)
        await client.beta.messages.create(
            **apply_request_options(
                {**base, **to_anthropic(second.messages, request=True)},
                second.request_options,
                "anthropic",
            )
        )
    finally:
        await client.close()

    assert second.event is not None
    assert second.event.steps[0].name == "anthropic_compaction"
    assert second.event.steps[0].applied
    sent = server.requests[1]
    assert sent.headers["anthropic-beta"] == "compact-2026-01-12"
    assert sent.body["context_management"] == {
        "edits": [
            {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 50_000}}
        ]
    }
    assert sent.body["messages"] == [returned, {"role": "user", "content": "next"}]
    assert sent.body["system"] == SYSTEM
    (reference,) = second.event.references
    assert await engine.recall(reference) == tuple(transcript[1:-2])


# ------------------------------------------------------------ OpenAI Responses on the wire


async def test_openai_compaction_directive_and_item_through_the_responses_client(
    server: ProviderServer,
) -> None:
    item = {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA-encrypted"}
    server.queue(
        Reply(
            body=responses_reply(
                [
                    item,
                    {
                        "type": "message",
                        "id": "msg_1",
                        "role": "assistant",
                        "status": "completed",
                        "content": [
                            {"type": "output_text", "text": "Continuing.", "annotations": []}
                        ],
                    },
                ]
            )
        ),
        Reply(body=responses_reply([])),
    )
    engine = ContextEngine(
        12_000,
        reserve_tokens=4096,
        strategies=[OpenAICompaction(compact_threshold=40_000), HardTruncate()],
    )
    history = [{"role": "user", "content": f"question {i} " * 120} for i in range(30)]
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5.0)
    try:
        first = await engine.project(from_openai_agents(history[:1]))
        response = await client.responses.create(
            **apply_request_options(
                {"model": "gpt-test", "input": to_openai_agents(first.messages)},
                first.request_options,
                "openai",
            )
        )
        output = [o.model_dump(mode="json", exclude_none=True) for o in response.output]
        assert output[0] == item
        items = [*history, *output, {"role": "user", "content": "next"}]
        second = await engine.project(from_openai_agents(items))
        await client.responses.create(
            **apply_request_options(
                {"model": "gpt-test", "input": to_openai_agents(second.messages)},
                second.request_options,
                "openai",
            )
        )
    finally:
        await client.close()

    first_sent, second_sent = server.requests
    assert first_sent.path == "/v1/responses"
    assert first_sent.body == {
        "model": "gpt-test",
        "input": history[:1],
        "context_management": [{"type": "compaction", "compact_threshold": 40_000}],
    }
    assert second_sent.body["input"] == [*output, {"role": "user", "content": "next"}]
    assert second_sent.body["context_management"] == first_sent.body["context_management"]


async def test_client_side_strategies_after_the_cut_never_rewrite_the_compaction_checkpoint() -> (
    None
):
    """Trimming and summarizing work around the provider's checkpoint, never on it."""
    block = {"type": "compaction", "content": "## Goal\nShip.", "encrypted_content": "opaque"}
    words = " ".join(f"word{j}" for j in range(600))
    (checkpoint,) = message_from_anthropic(
        {"role": "assistant", "content": [block, {"type": "text", "text": words}]}
    )
    transcript = chat(10, size=300)
    transcript += [Message.user("continue"), checkpoint]
    for i in range(10):
        transcript += [Message.user(f"r{i} " + words), Message.assistant(f"b{i} " + words)]
    transcript.append(Message.user("go"))
    engine = ContextEngine(
        16_000,
        reserve_tokens=4096,
        strategies=[
            AnthropicCompaction(),
            LightTrim(),
            FullSummary(summarizer=ExtractiveSummarizer()),
            HardTruncate(),
        ],
    )
    projection = await engine.project(transcript)

    assert projection.fits
    assert projection.event is not None
    applied = [step.name for step in projection.event.steps if step.applied]
    assert applied[0] == "anthropic_compaction"
    assert {"light_trim", "full_summary"} & set(applied[1:])
    assert projection.messages[1] is checkpoint
    sent = to_anthropic(projection.messages, request=True)["messages"]
    assert sent[0]["content"][0] == block
