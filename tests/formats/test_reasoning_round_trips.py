"""Reasoning round-trips byte for byte through every converter, rewrites around it included.

Each converter reads a history whose model turns carry signed and encrypted
reasoning (Anthropic ``thinking``/``redacted_thinking`` with signatures,
OpenAI Responses ``reasoning`` items with ``encrypted_content``, DeepSeek's
``reasoning_content``, LangChain, Strands and pydantic-ai reasoning parts), and writes it
back: as read, after a strategy shortened another message, and after the
engine dropped the reasoning whole (the items around it keep their fields).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest

from tests.extras import needs

# Every converter round-trips reasoning here, so the module needs every runtime's extra.
pytestmark = pytest.mark.extra("langchain", "pydantic-ai")
pytest.importorskip("langchain_core", reason=needs("langchain"))
pytest.importorskip("pydantic_ai", reason=needs("pydantic-ai"))

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402

from context_engine.formats.anthropic import from_anthropic, to_anthropic  # noqa: E402
from context_engine.formats.langchain import from_langchain, to_langchain  # noqa: E402
from context_engine.formats.openai import from_openai, to_openai  # noqa: E402
from context_engine.formats.openai_agents import (  # noqa: E402
    from_openai_agents,
    to_openai_agents,
)
from context_engine.formats.pydantic_ai import from_pydantic_ai, to_pydantic_ai  # noqa: E402
from context_engine.formats.strands import from_strands, to_strands  # noqa: E402
from context_engine.messages import Message, ThinkingBlock  # noqa: E402
from context_engine.reasoning import without_reasoning  # noqa: E402

# Signatures and payloads as providers send them: long base64 with padding and slashes.
SIGNATURE = "EqQBCkYIBxgCKkDl3w+/9f0pAa==" * 8
ENCRYPTED = "gAAAAABo" + "x9_-Zq/+=" * 40
THOUGHT = "Read the parser first.\n  Then the tests — 解析器, ✅"

ANTHROPIC = {
    "system": [{"type": "text", "text": "be careful", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": "fix the parser"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": ENCRYPTED},
                {"type": "text", "text": "Reading it."},
                {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": "a.py"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x = 1\n" * 50},
                {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ],
}
RESPONSES = [
    {"role": "user", "content": "fix the parser"},
    {
        "id": "rs_1",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": THOUGHT}],
        "encrypted_content": ENCRYPTED,
        "status": "completed",
    },
    {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": SIGNATURE},
    {
        "id": "fc_1",
        "type": "function_call",
        "call_id": "call_1",
        "name": "read",
        "arguments": '{"p": "a.py"}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "x = 1\n" * 50},
    {"role": "user", "content": "and now?"},
]
CHAT = [
    {"role": "user", "content": "fix the parser"},
    {
        "role": "assistant",
        "content": None,
        "reasoning_content": THOUGHT,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read", "arguments": '{"p": "a.py"}'},
            }
        ],
    },
    {"role": "tool", "content": "x = 1\n" * 50, "tool_call_id": "call_1"},
    {"role": "user", "content": "and now?"},
]
STRANDS = [
    {"role": "user", "content": [{"text": "fix the parser"}]},
    {
        "role": "assistant",
        "content": [
            {"reasoningContent": {"reasoningText": {"text": THOUGHT, "signature": SIGNATURE}}},
            {"reasoningContent": {"redactedContent": b"\x00\xffopaque\x10"}},
            {"toolUse": {"toolUseId": "t1", "name": "read", "input": {"p": "a.py"}}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "toolResult": {
                    "toolUseId": "t1",
                    "status": "success",
                    "content": [{"text": "x = 1\n" * 50}],
                }
            }
        ],
    },
    {"role": "user", "content": [{"text": "and now?"}]},
]


def langchain_history() -> list[Any]:
    return [
        HumanMessage("fix the parser"),
        AIMessage(
            [
                {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE},
                {"type": "redacted_thinking", "data": ENCRYPTED},
                {"type": "reasoning", "reasoning": "then act", "id": "rs_1"},
                {"type": "tool_use", "id": "c1", "name": "read", "input": {"p": "a.py"}},
            ],
            tool_calls=[{"id": "c1", "name": "read", "args": {"p": "a.py"}}],
        ),
        ToolMessage("x = 1\n" * 50, tool_call_id="c1"),
        HumanMessage("and now?"),
    ]


def pydantic_ai_history() -> Any:
    """A pydantic-ai history as its JSON form (what a caller stores), signed reasoning included."""
    return copy.deepcopy(_pydantic_ai_stored())


@functools.cache
def _pydantic_ai_stored() -> Any:
    """Built once: each part is stamped with the time it was made."""
    pm = pytest.importorskip("pydantic_ai.messages")
    history = [
        pm.ModelRequest(parts=[pm.UserPromptPart("fix the parser")]),
        pm.ModelResponse(
            parts=[
                pm.ThinkingPart(THOUGHT, id="rs_1", signature=SIGNATURE, provider_name="openai"),
                pm.ThinkingPart("", id="rs_2", signature=ENCRYPTED, provider_name="openai"),
                pm.ToolCallPart("read", '{"p": "a.py"}', tool_call_id="call_1"),
            ],
            model_name="gpt-5",
        ),
        pm.ModelRequest(
            parts=[
                pm.ToolReturnPart("read", "x = 1\n" * 50, tool_call_id="call_1"),
                pm.UserPromptPart("and now?"),
            ]
        ),
    ]
    return json.loads(pm.ModelMessagesTypeAdapter.dump_json(history))


def from_pydantic_ai_json(stored: Any) -> list[Message]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return from_pydantic_ai(ModelMessagesTypeAdapter.validate_python(stored))


def to_pydantic_ai_json(messages: list[Message]) -> Any:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return json.loads(ModelMessagesTypeAdapter.dump_json(to_pydantic_ai(messages)))


def dump(value: Any) -> bytes:
    """Bytes that differ whenever any key, value or key order differs."""
    if isinstance(value, list) and value and hasattr(value[0], "model_dump"):
        value = [m.model_dump() for m in value]
    return json.dumps(value, ensure_ascii=False, default=repr).encode()


Case = tuple[Callable[[], Any], Callable[[Any], list[Message]], Callable[[list[Message]], Any]]
CASES: dict[str, Case] = {
    "anthropic": (lambda: ANTHROPIC, from_anthropic, to_anthropic),
    "openai-responses": (lambda: RESPONSES, from_openai_agents, to_openai_agents),
    "openai-chat": (lambda: CHAT, from_openai, to_openai),
    "langchain": (langchain_history, from_langchain, to_langchain),
    "strands": (lambda: STRANDS, from_strands, to_strands),
    "pydantic-ai": (pydantic_ai_history, from_pydantic_ai_json, to_pydantic_ai_json),
}


def reasoning_blocks(messages: Sequence[Message]) -> list[ThinkingBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ThinkingBlock)]


@pytest.mark.parametrize("name", list(CASES))
def test_reasoning_round_trips_byte_for_byte(name: str) -> None:
    """Read then write gives the same bytes, signatures and encrypted payloads included."""
    source, read, write = CASES[name]
    messages = read(source())
    assert reasoning_blocks(messages)
    assert dump(write(messages)) == dump(source())


@pytest.mark.parametrize("name", list(CASES))
def test_reasoning_is_written_unchanged_when_another_message_was_rewritten(name: str) -> None:
    """A tool result shortened by a strategy leaves the reasoning turn's bytes as they were."""
    source, read, write = CASES[name]
    messages = read(source())
    index = next(i for i, m in enumerate(messages) if m.role == "tool")
    shortened = attrs.evolve(messages[index], content="[cleared: 50 lines]")
    written = write([*messages[:index], shortened, *messages[index + 1 :]])
    turn = next(i for i, m in enumerate(messages) if reasoning_blocks([m]))
    assert dump(write(messages[: turn + 1])) == dump(write([*messages[:turn], messages[turn]]))
    assert dump(written) != dump(source())
    assert reasoning_blocks(read(written)) == reasoning_blocks(messages)


@pytest.mark.parametrize("name", list(CASES))
def test_reasoning_dropped_whole_leaves_the_rest_of_the_turn_as_sent(name: str) -> None:
    """Without its reasoning, a turn keeps its text, calls and their ids."""
    source, read, write = CASES[name]
    messages = read(source())
    turn = next(i for i, m in enumerate(messages) if reasoning_blocks([m]))
    kept = without_reasoning(messages[turn])
    assert kept is not None
    again = read(write([*messages[:turn], kept, *messages[turn + 1 :]]))
    assert reasoning_blocks(again) == []
    assert [m.tool_calls for m in again] == [m.tool_calls for m in messages]


def test_responses_items_around_dropped_reasoning_keep_their_ids_and_status() -> None:
    """The function call item is written as sent, not re-rendered without its id."""
    messages = from_openai_agents(RESPONSES)
    kept = without_reasoning(messages[1])
    assert kept is not None
    items = to_openai_agents([messages[0], kept, *messages[2:]])
    assert items == [RESPONSES[0], *RESPONSES[3:]]


def test_anthropic_breakpoints_survive_a_rewrite_of_the_message_holding_them() -> None:
    """Shortening the tool result keeps the caller's ``cache_control`` on the user text."""
    messages = from_anthropic(ANTHROPIC)
    index = next(i for i, m in enumerate(messages) if m.role == "tool")
    shortened = attrs.evolve(messages[index], content="[cleared]")
    body = to_anthropic([*messages[:index], shortened, *messages[index + 1 :]])
    assert body["system"] == ANTHROPIC["system"]
    last = body["messages"][-1]["content"]
    assert last[0]["content"] == "[cleared]"
    assert last[1] == {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}}
