"""The OpenAI Agents SDK converter: Responses input items to messages and back, exactly."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("agents", reason=needs("openai-agents"))

from agents.items import ModelResponse
from agents.testing import assistant_message, function_call
from agents.usage import Usage as AgentsUsage
from openai.types.responses import ResponseReasoningItem, ResponseUsage
from openai.types.responses.response_reasoning_item import Summary
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from context_engine import (
    ContextSummary,
    ImageBlock,
    InvalidMessageError,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from context_engine.formats.openai import from_openai
from context_engine.formats.openai_agents import (
    ITEMS_KEY,
    from_openai_agents,
    group_items,
    message_from_openai_agents,
    message_to_openai_agents,
    to_openai_agents,
    usage_from_openai_agents,
    usage_to_openai_agents,
)
from context_engine.structure import CLEARED_KEY
from tests.conftest import load_corpus_dicts

pytestmark = pytest.mark.extra("openai-agents")

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"

SUMMARY = ContextSummary(
    summary="Fixed the parser; tests pass.",
    tokens_before=120_000,
    read_files=("src/parser.py",),
    modified_files=("src/parser.py",),
    timestamp=dt.datetime(2025, 3, 1, 12, 30, tzinfo=dt.timezone.utc),
)


def output_message(text: str, item_id: str = "msg_1", **extra: Any) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [part],
        **extra,
    }


def call(
    call_id: str, name: str = "read_file", arguments: str = '{"path": "a.py"}'
) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, text: str = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text, **extra}


REASONING = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "Check the parser first."}],
    "encrypted_content": "gAAAA-opaque",
}

# Items exactly as the SDK holds them, each a named situation.
ROUND_TRIPS: list[tuple[str, list[dict[str, Any]]]] = [
    ("empty history", []),
    (
        "easy messages of every role",
        [
            {"role": "system", "content": "Be terse."},
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ],
    ),
    (
        "typed user message with an image, a file and a data url",
        [
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": "https://x.test/a.png", "detail": "high"},
                    {"type": "input_file", "file_id": "file-1"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                    {"type": "input_image", "file_id": "file-2", "detail": "auto"},
                ],
            }
        ],
    ),
    (
        "a model turn: reasoning, text and parallel calls with their outputs",
        [
            {"role": "user", "content": "fix it"},
            REASONING,
            output_message("Reading both files.", phase="commentary"),
            {**call("c1"), "id": "fc_1", "status": "completed"},
            call("c2", arguments='{"path": "b.py"}'),
            output("c1", "contents of a", id="fco_1", status="completed"),
            output("c2", "contents of b", name="read_file"),
            output_message("Done.", item_id="msg_2"),
        ],
    ),
    (
        "tool output with image parts",
        [
            call("c1", "screenshot", "{}"),
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [
                    {"type": "input_text", "text": "the page"},
                    {"type": "input_image", "image_url": "https://x.test/p.png", "detail": "low"},
                ],
            },
        ],
    ),
    (
        "refusal and annotations",
        [
            {
                "id": "msg_9",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "refusal", "refusal": "I can't help with that."},
                    {
                        "type": "output_text",
                        "text": "See the docs.",
                        "annotations": [{"type": "url_citation", "url": "https://x.test"}],
                    },
                ],
            }
        ],
    ),
    (
        "custom tool call",
        [
            {"type": "custom_tool_call", "call_id": "k1", "name": "patch", "input": "*** Begin"},
            {"type": "custom_tool_call_output", "call_id": "k1", "output": "applied"},
        ],
    ),
    (
        "computer, shell, local shell and patch calls",
        [
            {
                "type": "computer_call",
                "id": "cu_1",
                "call_id": "k2",
                "action": {"type": "click", "x": 1, "y": 2},
                "pending_safety_checks": [],
                "status": "completed",
            },
            {
                "type": "computer_call_output",
                "call_id": "k2",
                "output": {"type": "computer_screenshot", "image_url": "https://x.test/s.png"},
            },
            {"type": "shell_call", "call_id": "k3", "action": {"commands": ["ls"]}},
            {
                "type": "local_shell_call",
                "id": "ls_1",
                "call_id": "k4",
                "status": "completed",
                "action": {"type": "exec", "command": ["pwd"], "env": {}},
            },
            {
                "type": "apply_patch_call",
                "call_id": "k5",
                "status": "completed",
                "operation": {"type": "delete_file", "path": "a.py"},
            },
            {
                "type": "shell_call_output",
                "call_id": "k3",
                "output": [
                    {"stdout": "a.py", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
                ],
            },
            {"type": "local_shell_call_output", "call_id": "k4", "output": "/repo"},
            {"type": "apply_patch_call_output", "call_id": "k5", "status": "completed"},
        ],
    ),
    (
        "mcp approval and hosted tool items",
        [
            {
                "type": "mcp_approval_request",
                "id": "ap_1",
                "name": "deploy",
                "arguments": "{}",
                "server_label": "ops",
            },
            {"type": "mcp_approval_response", "approval_request_id": "ap_1", "approve": True},
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {"type": "search", "query": "parser"},
            },
            {
                "type": "mcp_call",
                "id": "mc_1",
                "name": "q",
                "arguments": "{}",
                "server_label": "db",
            },
            {"type": "item_reference", "id": "msg_0"},
            {"id": "msg_x"},
            output_message("Found it."),
        ],
    ),
    (
        "redacted reasoning",
        [{"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA"}],
    ),
    (
        "reasoning text and status",
        [
            {
                "id": "rs_3",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "short"}],
                "content": [{"type": "reasoning_text", "text": "long thoughts"}],
                "status": "completed",
            }
        ],
    ),
    (
        "pending call at the end",
        [{"role": "user", "content": "go"}, call("c9")],
    ),
    (
        "stored usage",
        [
            {"role": "user", "content": "go"},
            {
                **call("c1"),
                "usage": {
                    "input_tokens": 1200,
                    "input_tokens_details": {"cached_tokens": 1000},
                    "output_tokens": 30,
                    "output_tokens_details": {"reasoning_tokens": 12},
                    "total_tokens": 1230,
                },
            },
        ],
    ),
    ("checkpoint", [{"role": "user", "content": SUMMARY.text}]),
]


@pytest.mark.parametrize(
    "items", [items for _, items in ROUND_TRIPS], ids=[n for n, _ in ROUND_TRIPS]
)
def test_items_convert_and_come_back_exactly(items: list[dict[str, Any]]) -> None:
    """runtime -> ours -> runtime gives the very items, and reading them again the same messages."""
    original = copy.deepcopy(items)
    messages = from_openai_agents(items)
    assert to_openai_agents(messages, include_usage=True) == original
    assert items == original  # nothing modified
    assert from_openai_agents(to_openai_agents(messages, include_usage=True)) == messages


OURS: list[tuple[str, list[Message]]] = [
    ("plain roles", [Message.system("s"), Message.developer("d"), Message.user("u")]),
    (
        "tool calls with usage and named results",
        [
            Message.user("go"),
            Message.assistant(
                "reading",
                [ToolCall("c1", "read_file", '{"p": 1}'), ToolCall("c2", "ls")],
                usage=Usage(1200, 30, cache_read_tokens=1000, cache_write_tokens=5),
            ),
            Message.tool("c1", "contents", name="read_file"),
            Message.tool("c2", ""),
        ],
    ),
    (
        "images by url and by data",
        [
            Message(
                "user", (TextBlock("look"), ImageBlock(url="https://x.test/a.png", detail="low"))
            ),
            Message("user", (ImageBlock(data=PNG, media_type="image/png"),)),
            Message(
                "tool",
                (TextBlock("shot"), ImageBlock(url="https://x.test/s.png")),
                tool_call_id="c",
            ),
        ],
    ),
    (
        "thinking plain, signed and redacted",
        [
            Message("assistant", (ThinkingBlock("hmm"), TextBlock("answer"))),
            Message.user("next"),
            Message("assistant", (ThinkingBlock("sig", signature="s1"), ToolCall("c", "f"))),
            Message.tool("c", "done"),
            Message("assistant", (ThinkingBlock("opaque", redacted=True),)),
        ],
    ),
    ("checkpoint", [SUMMARY, Message.user("next")]),
    (
        "empty, multi-text and interleaved assistant messages",
        [
            Message.assistant(),
            Message.user("1"),
            Message("assistant", (TextBlock("a"), TextBlock("b"))),
            Message.user("2"),
            Message("assistant", (TextBlock("a"), ToolCall("c", "f"), TextBlock("b"))),
        ],
    ),
]


@pytest.mark.parametrize("messages", [m for _, m in OURS], ids=[n for n, _ in OURS])
def test_messages_convert_and_come_back_equal(messages: list[Message]) -> None:
    """ours -> runtime -> ours gives equal messages, usage included when stored."""
    items = to_openai_agents(messages, include_usage=True)
    assert from_openai_agents(items) == messages
    assert all(ITEMS_KEY not in m.metadata for m in from_openai_agents(items))


def test_model_items_become_one_assistant_message_in_item_order() -> None:
    """Reasoning, text and calls of one response are one message; outputs answer by call id."""
    items = [
        {"role": "user", "content": "fix it"},
        REASONING,
        output_message("Reading."),
        call("c1"),
        call("c2"),
        output("c1", "a"),
        output("c2", "b"),
    ]
    messages = from_openai_agents(items)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1].content == (
        ThinkingBlock("Check the parser first.", signature="gAAAA-opaque"),
        TextBlock("Reading."),
        ToolCall("c1", "read_file", '{"path": "a.py"}'),
        ToolCall("c2", "read_file", '{"path": "a.py"}'),
    )
    assert [m.tool_call_id for m in messages[2:]] == ["c1", "c2"]
    assert [len(g) for g in group_items(items)] == [1, 4, 1, 1]


def test_client_side_calls_pair_with_their_outputs() -> None:
    """Computer, shell and approval items become calls and results the engine keeps together."""
    items = dict(ROUND_TRIPS)["computer, shell, local shell and patch calls"]
    messages = from_openai_agents(items)
    assert [c.name for c in messages[0].tool_calls] == ["computer_call"]
    assert [c.name for c in messages[2].tool_calls] == [
        "shell_call",
        "local_shell_call",
        "apply_patch_call",
    ]
    assert [m.tool_call_id for m in messages if m.role == "tool"] == ["k2", "k3", "k4", "k5"]
    assert messages[1].content == (ImageBlock(url="https://x.test/s.png"),)
    assert messages[4].text == "/repo"


def test_a_checkpoint_comes_back_as_a_context_summary() -> None:
    (message,) = from_openai_agents([{"role": "user", "content": SUMMARY.text}])
    assert isinstance(message, ContextSummary)
    assert message == SUMMARY


def test_sdk_output_objects_read_like_their_input_items() -> None:
    """``ModelResponse.output`` objects convert as ``to_input_items()`` dicts do."""
    response = ModelResponse(
        output=[
            ResponseReasoningItem(
                id="rs", type="reasoning", summary=[Summary(text="t", type="summary_text")]
            ),
            assistant_message("reading", item_id="m"),
            function_call("read_file", {"path": "a.py"}, call_id="c"),
        ],
        usage=AgentsUsage(),
        response_id=None,
    )
    assert from_openai_agents(response.output) == from_openai_agents(response.to_input_items())


def test_a_str_is_one_user_message_as_runner_reads_it() -> None:
    assert from_openai_agents("hello") == [Message.user("hello")]


# ------------------------------------------------------------------- rewritten messages


def test_a_cleared_tool_result_keeps_its_ids_and_gets_the_placeholder() -> None:
    """Microcompact's placeholder is written as the output; id, status and name stay."""
    item = output("c1", "x" * 500, id="fco_1", status="completed", name="read_file")
    (message,) = from_openai_agents([item])
    cleared = attrs.evolve(
        message, content=(TextBlock("[cleared]"),), metadata={**message.metadata, CLEARED_KEY: True}
    )
    assert message_to_openai_agents(cleared) == [{**item, "output": "[cleared]"}]


def test_a_trimmed_assistant_text_keeps_the_other_items_verbatim() -> None:
    """Only the message item whose text changed is rewritten; reasoning and calls stay as sent."""
    items = [
        REASONING,
        output_message("long " * 50, phase="commentary"),
        {**call("c1"), "id": "fc_1"},
    ]
    (message,) = from_openai_agents(items)
    blocks = list(message.content)
    blocks[1] = TextBlock("long [240 characters trimmed]")
    written = message_to_openai_agents(attrs.evolve(message, content=tuple(blocks)))
    assert written[0] == REASONING
    assert written[2] == items[2]
    assert written[1] == {
        **items[1],
        "content": [
            {"type": "output_text", "text": "long [240 characters trimmed]", "annotations": []}
        ],
    }


def test_a_trimmed_user_message_keeps_its_form_and_file_parts() -> None:
    item = {
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [
            {"type": "input_file", "file_id": "f"},
            {"type": "input_text", "text": "y" * 90},
        ],
    }
    (message,) = from_openai_agents([item])
    trimmed = attrs.evolve(message, content=(TextBlock("y [80 characters trimmed]"),))
    assert message_to_openai_agents(trimmed) == [
        {
            **item,
            "content": [
                {"type": "input_file", "file_id": "f"},
                {"type": "input_text", "text": "y [80 characters trimmed]"},
            ],
        }
    ]


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"type": "local_shell_call_output", "call_id": "k", "output": "a" * 80}, "short"),
        ({"type": "custom_tool_call_output", "call_id": "k", "output": "a" * 80}, "short"),
        (
            {
                "type": "computer_call_output",
                "call_id": "k",
                "output": {"type": "computer_screenshot", "image_url": "https://x.test/s.png"},
            },
            None,
        ),
    ],
    ids=["text output takes the text", "custom output takes the text", "screenshot kept as is"],
)
def test_rewritten_outputs_of_other_calls(item: dict[str, Any], expected: str | None) -> None:
    (message,) = from_openai_agents([item])
    written = message_to_openai_agents(attrs.evolve(message, content=(TextBlock("short"),)))
    assert written == [item if expected is None else {**item, "output": expected}]


def test_a_model_message_whose_blocks_changed_kind_is_written_fresh() -> None:
    """When the blocks no longer line up with the items, the message is written from them."""
    (message,) = from_openai_agents([output_message("a"), call("c1")])
    changed = attrs.evolve(Message.assistant("b"), metadata=message.metadata)
    assert message_to_openai_agents(changed) == [{"role": "assistant", "content": "b"}]


def test_consecutive_assistant_messages_read_back_as_one() -> None:
    """Responses items mark no boundary between model turns: the limit of the format."""
    items = to_openai_agents([Message.assistant("a"), Message.assistant("b")])
    assert from_openai_agents(items) == [
        Message("assistant", (TextBlock("a"), TextBlock("b")), metadata={ITEMS_KEY: items})
    ]


# ------------------------------------------------------------------- usage


def test_usage_is_written_only_when_asked_for() -> None:
    """The API rejects a ``usage`` key: to_openai_agents leaves it out by default."""
    items = dict(ROUND_TRIPS)["stored usage"]
    messages = from_openai_agents(items)
    assert messages[1].usage == Usage(1200, 30, cache_read_tokens=1000)
    assert all("usage" not in item for item in to_openai_agents(messages))
    replaced = attrs.evolve(messages[1], usage=Usage(50, 5))
    assert message_to_openai_agents(replaced, include_usage=True)[-1]["usage"] == {
        "input_tokens": 50,
        "output_tokens": 5,
        "total_tokens": 55,
    }


@pytest.mark.parametrize(
    "reported",
    [
        AgentsUsage(
            requests=1,
            input_tokens=900,
            output_tokens=40,
            total_tokens=940,
            input_tokens_details=InputTokensDetails(cached_tokens=600, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        ),
        ResponseUsage(
            input_tokens=900,
            output_tokens=40,
            total_tokens=940,
            input_tokens_details=InputTokensDetails(cached_tokens=600, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        ),
        {"input_tokens": 900, "output_tokens": 40, "input_tokens_details": {"cached_tokens": 600}},
    ],
    ids=["agents Usage", "Responses ResponseUsage", "dict"],
)
def test_usage_reported_by_the_sdk_is_normalised(reported: Any) -> None:
    """``input_tokens`` already holds the cached part: it is the whole prompt."""
    usage = usage_from_openai_agents(reported)
    assert usage == Usage(900, 40, cache_read_tokens=600)
    assert usage_to_openai_agents(usage) == {
        "input_tokens": 900,
        "output_tokens": 40,
        "total_tokens": 940,
        "input_tokens_details": {"cached_tokens": 600},
    }


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("items", "match"),
    [
        ([42], "item 0: an input item must be a dict"),
        ([{"role": "robot", "content": "x"}], "unknown message role 'robot'"),
        ([{"role": "user"}], "has no 'content'"),
        ([{"role": "user", "content": 5}], "content must be a str or a list of parts"),
        ([{"role": "user", "content": ["x"]}], "part 0 must be a dict"),
        ([{"role": "user", "content": [{"type": "input_text"}]}], "needs a str 'text'"),
        ([{"role": "user", "content": [{"type": "input_image", "image_url": 3}]}], "image_url"),
        ([{"type": "function_call", "name": "f", "arguments": "{}"}], "no 'call_id'"),
        ([{"type": "function_call", "call_id": "c", "arguments": "{}"}], "needs a str name"),
        ([{"type": "function_call_output", "output": "x"}], "no 'call_id'"),
        ([{"type": "function_call_output", "call_id": "c"}], "has no 'output'"),
        ([{"type": "reasoning", "summary": "x"}], "must be lists"),
        ([{"type": "reasoning", "summary": [{"text": 1}]}], "needs a str 'text'"),
        ([{"type": "reasoning", "summary": [], "encrypted_content": 1}], "encrypted_content"),
        ([{**call("c"), "usage": {"input_tokens": -1}}], "non-negative int"),
    ],
    ids=[
        "not a dict",
        "unknown role",
        "no content",
        "content of a wrong type",
        "part not a dict",
        "text part without text",
        "image url not a str",
        "call without call id",
        "call without name",
        "output without call id",
        "output without output",
        "reasoning summary not a list",
        "reasoning part without text",
        "encrypted content not a str",
        "negative usage",
    ],
)
def test_malformed_items_are_rejected_with_where_and_what(items: list[Any], match: str) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        from_openai_agents(items)


def test_wrong_containers_are_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="takes a list of input items"):
        from_openai_agents({"role": "user", "content": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="use message_to_openai_agents"):
        to_openai_agents(Message.user("x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="message 1: expected a Message"):
        to_openai_agents([Message.user("x"), "y"])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageError, match="the items of one run"):
        message_from_openai_agents(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )


def test_a_broken_items_record_falls_back_to_the_blocks() -> None:
    """Metadata that no longer reads as the message's items is ignored, not trusted."""
    message = Message("user", "hi", metadata={ITEMS_KEY: [{"role": "user"}]})
    assert message_to_openai_agents(message) == [{"role": "user", "content": "hi"}]


# ------------------------------------------------------------------- real transcripts


def test_corpus_transcripts_survive_responses_items(corpus_path: Path) -> None:
    """Real agent sessions keep roles, text, tool calls, results and usage through the items."""
    messages = from_openai(load_corpus_dicts(corpus_path))
    back = from_openai_agents(to_openai_agents(messages, include_usage=True))

    def essence(m: Message) -> tuple[Any, ...]:
        return (m.role, m.content, m.tool_call_id, m.usage, m.name if m.role == "tool" else None)

    assert [essence(m) for m in back] == [essence(m) for m in messages]
    assert sum(len(m.tool_calls) for m in back) == sum(len(m.tool_calls) for m in messages)
