"""The compaction tool's schemas are what the installed OpenAI and Anthropic SDKs take."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.extras import needs

openai = pytest.importorskip("openai", reason=needs("openai"))
anthropic = pytest.importorskip("anthropic", reason=needs("anthropic"))

import pydantic  # noqa: E402  (installed with both SDKs)
from anthropic.types import ToolParam  # noqa: E402
from openai.types.chat import ChatCompletionFunctionToolParam  # noqa: E402
from openai.types.responses import FunctionToolParam  # noqa: E402
from openai.types.shared_params import FunctionDefinition  # noqa: E402

from context_engine import CompactTool, ContextEngine, Message  # noqa: E402
from context_engine.compact_tool import COMPACT_TOOL_NAME  # noqa: E402
from context_engine.formats.openai import from_openai, to_openai  # noqa: E402
from context_engine.strategies import FullSummary, HardTruncate  # noqa: E402
from context_engine.testing import FixedTokenCounter, RecordingSummarizer  # noqa: E402
from tests.fakes import agent_session  # noqa: E402
from tests.summarize.provider_server import ProviderServer, Reply, openai_ok  # noqa: E402

pytestmark = pytest.mark.extra("openai", "anthropic")


def tool() -> CompactTool:
    engine = ContextEngine(
        40_000,
        [FullSummary(summarizer=RecordingSummarizer()), HardTruncate()],
        reserve_tokens=2_000,
        token_counter=FixedTokenCounter(),
    )
    return CompactTool(engine=engine)


def keys_fit(typed_dict: Any, value: dict[str, Any]) -> None:
    """Every key ``value`` has is one the SDK type declares, and every required one is there."""
    declared = typed_dict.__required_keys__ | typed_dict.__optional_keys__
    assert typed_dict.__required_keys__ <= set(value), typed_dict.__name__
    assert set(value) <= declared, (typed_dict.__name__, set(value) - declared)
    pydantic.TypeAdapter(typed_dict).validate_python(value)


def test_the_chat_completions_schema_is_a_function_tool_param() -> None:
    schema = tool().openai_schema
    keys_fit(ChatCompletionFunctionToolParam, schema)
    keys_fit(FunctionDefinition, schema["function"])


def test_the_responses_schema_is_a_responses_function_tool_param() -> None:
    schema = tool().responses_schema
    keys_fit(FunctionToolParam, schema)
    assert schema["strict"] is False  # strict would make focus required


def test_the_anthropic_schema_is_a_messages_tool_param() -> None:
    schema = tool().anthropic_schema
    keys_fit(ToolParam, schema)
    assert schema["input_schema"]["type"] == "object"


def tool_call_reply(call_id: str, arguments: dict[str, Any]) -> dict[str, Any]:
    body = openai_ok(None, finish_reason="tool_calls")
    body["choices"][0]["message"]["tool_calls"] = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": COMPACT_TOOL_NAME, "arguments": json.dumps(arguments)},
        }
    ]
    return body


async def test_a_chat_completions_model_calls_the_tool_through_the_sdk() -> None:
    """The real client sends the schema, the model's call reaches the handler, the next
    request carries the checkpoint and the tool's answer."""
    compact = tool()
    server = ProviderServer()
    server.queue(
        Reply(body=tool_call_reply("call_c", {"focus": "the parser fix"})),
        Reply(body=openai_ok("Done.")),
    )
    transcript: list[Message] = agent_session(20)
    with server.running():
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", timeout=5)
        for _ in range(2):
            completion = await client.chat.completions.create(
                model="agent-model",
                messages=to_openai(transcript),  # type: ignore[arg-type]
                tools=[compact.openai_schema],  # type: ignore[list-item]
            )
            reply = from_openai([completion.choices[0].message.model_dump(exclude_none=True)])
            transcript += reply
            for call in reply[0].tool_calls:
                answer = await compact(call.arguments, transcript)
                transcript = list(answer.transcript(transcript, call.id))
        await client.close()

    first, second = (r.body for r in server.requests)
    assert first["tools"] == [compact.openai_schema]
    sent = second["messages"]
    assert sent[0]["role"] == "system"
    assert sent[1]["content"].startswith("<context-summary")
    assert {"role": "user", "content": "Fix the failing test in parser.py"} in sent
    assert sent[-2]["tool_calls"][0]["id"] == "call_c"
    assert (sent[-1]["role"], sent[-1]["tool_call_id"]) == ("tool", "call_c")
    assert sent[-1]["content"].startswith("Checkpoint written with the focus you gave")
    assert len(sent) < len(first["messages"])
    assert transcript[-1].text == "Done."
