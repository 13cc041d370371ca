"""The Anthropic Messages API converter: exact round trips, usage, errors, other formats."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

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
from context_engine.formats.anthropic import (
    BLOCKS_KEY,
    CONTENT_FORM_KEY,
    EXTRA_KEY,
    IS_ERROR_KEY,
    NEW_MESSAGE_KEY,
    TOOL_RESULT_KEY,
    USAGE_KEY,
    from_anthropic,
    message_from_anthropic,
    to_anthropic,
    usage_from_anthropic,
    usage_to_anthropic,
)
from context_engine.formats.openai import from_openai, to_openai
from tests.conftest import load_corpus_dicts

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"  # the start of a PNG file
EPHEMERAL = {"type": "ephemeral"}

SUMMARY = ContextSummary(
    summary="Fixed the parser; tests pass.",
    tokens_before=120_000,
    read_files=("src/parser.py",),
    modified_files=("src/parser.py",),
    timestamp=dt.datetime(2025, 3, 1, 12, 30, tzinfo=dt.timezone.utc),
)


def use(call_id: str, name: str = "bash", **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments or {"cmd": "ls"}}


def result(call_id: str, content: Any = "ok", **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def user(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": content, **extra}


def assistant(content: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, **extra}


ROUND_TRIPS: list[tuple[str, dict[str, Any]]] = [
    ("plain strings", {"messages": [user("hi"), assistant("hello")]}),
    ("system string", {"system": "Be terse.", "messages": [user("hi")]}),
    ("empty system string", {"system": "", "messages": [user("hi")]}),
    (
        "system blocks with cache_control",
        {
            "system": [
                {"type": "text", "text": "You are a coding agent."},
                {"type": "text", "text": "Repo rules.", "cache_control": EPHEMERAL},
            ],
            "messages": [user("hi")],
        },
    ),
    ("system as one plain block", {"system": [{"type": "text", "text": "x"}], "messages": []}),
    ("empty content string", {"messages": [user(""), assistant("")]}),
    ("empty content list", {"messages": [user([]), assistant([])]}),
    ("one text block as a list", {"messages": [user([{"type": "text", "text": "hi"}])]}),
    (
        "text with cache_control and citations",
        {
            "messages": [
                user([{"type": "text", "text": "hi", "cache_control": EPHEMERAL}]),
                assistant([{"type": "text", "text": "x", "citations": [{"cited_text": "a"}]}]),
            ]
        },
    ),
    (
        "thinking with signature, redacted thinking, unsigned and null signature",
        {
            "messages": [
                user("why?"),
                assistant(
                    [
                        {"type": "thinking", "thinking": "hmm", "signature": "sig=="},
                        {"type": "redacted_thinking", "data": "EncryptedPayload"},
                        {"type": "thinking", "thinking": "more"},
                        {"type": "thinking", "thinking": "again", "signature": None},
                        {"type": "text", "text": "because"},
                    ]
                ),
            ]
        },
    ),
    (
        "tool use and a string result",
        {"messages": [user("ls"), assistant([use("t1")]), user([result("t1", "a.txt")])]},
    ),
    (
        "parallel results then user text in one message",
        {
            "messages": [
                assistant([{"type": "text", "text": "Two calls."}, use("t1"), use("t2")]),
                user([result("t1"), result("t2", "b"), {"type": "text", "text": "go on"}]),
            ]
        },
    ),
    (
        "user text before a tool result",
        {"messages": [assistant([use("t1")]), user([{"type": "text", "text": "x"}, result("t1")])]},
    ),
    (
        "result with blocks and an image",
        {
            "messages": [
                assistant([use("t1", "screenshot")]),
                user(
                    [
                        result(
                            "t1",
                            [
                                {"type": "text", "text": "page"},
                                {
                                    "type": "image",
                                    "source": {
                                        "type": "base64",
                                        "media_type": "image/png",
                                        "data": PNG,
                                    },
                                },
                            ],
                        )
                    ]
                ),
            ]
        },
    ),
    (
        "result flags and forms",
        {
            "messages": [
                assistant([use("t1"), use("t2"), use("t3"), use("t4"), use("t5")]),
                user(
                    [
                        result("t1", "boom", is_error=True),
                        result("t2", "fine", is_error=False),
                        {"type": "tool_result", "tool_use_id": "t3"},
                        result("t4", ""),
                        result("t5", [{"type": "text", "text": "x"}], cache_control=EPHEMERAL),
                    ]
                ),
            ]
        },
    ),
    (
        "response object with usage and stop reason",
        {
            "messages": [
                user("hi"),
                assistant(
                    [{"type": "text", "text": "hello"}],
                    id="msg_01",
                    type="message",
                    model="claude-sonnet-4-5",
                    stop_reason="end_turn",
                    stop_sequence=None,
                    usage={
                        "input_tokens": 12,
                        "output_tokens": 5,
                        "cache_read_input_tokens": 1000,
                        "cache_creation_input_tokens": 0,
                        "service_tier": "standard",
                    },
                ),
            ]
        },
    ),
    (
        "rendered usage, null usage and null stop reason",
        {
            "messages": [
                assistant("a", usage={"input_tokens": 3, "output_tokens": 1}),
                user("b"),
                assistant("c", usage=None, stop_reason=None),
            ]
        },
    ),
    (
        "consecutive messages of one role",
        {"messages": [user("one"), user("two"), assistant("three"), assistant("four")]},
    ),
    (
        "images by base64, url and file",
        {
            "messages": [
                user(
                    [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
                        {"type": "image", "source": {"type": "file", "file_id": "file_01"}},
                        {"type": "text", "text": "what is this?"},
                    ]
                )
            ]
        },
    ),
    (
        "blocks kept whole",
        {
            "messages": [
                user([{"type": "document", "source": {"type": "text", "data": "doc"}}]),
                assistant(
                    [
                        {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": {}},
                        {"type": "web_search_tool_result", "tool_use_id": "s1", "content": []},
                        {"type": "text", "text": "found"},
                    ]
                ),
            ]
        },
    ),
    (
        "tool input with unicode and nesting",
        {"messages": [assistant([use("t1", "edit", path="ü.py", ops=[{"a": 1.5, "b": None}])])]},
    ),
    ("tool input its JSON text cannot reproduce", {"messages": [assistant([use("t1", t=(1, 2))])]}),
    ("extra keys on a user message", {"messages": [user("hi", metadata={"trace": "x"})]}),
    ("checkpoint as a string", {"messages": [user(SUMMARY.text), assistant("ok")]}),
    (
        "checkpoint between results and text",
        {
            "messages": [
                assistant([use("t1")]),
                user(
                    [
                        result("t1"),
                        {"type": "text", "text": SUMMARY.text, "cache_control": EPHEMERAL},
                        {"type": "text", "text": "continue"},
                    ]
                ),
            ]
        },
    ),
]


@pytest.mark.parametrize(("name", "body"), ROUND_TRIPS, ids=[n for n, _ in ROUND_TRIPS])
def test_round_trip_is_exact_and_leaves_the_input_alone(name: str, body: dict[str, Any]) -> None:
    original = copy.deepcopy(body)
    messages = from_anthropic(body)
    assert body == original
    assert to_anthropic(messages) == original


def test_plain_dicts_convert_to_messages_without_metadata() -> None:
    messages = from_anthropic(
        {
            "system": "Be terse.",
            "messages": [user("hi"), assistant([use("t1")]), user([result("t1")])],
        }
    )
    assert messages == [
        Message.system("Be terse."),
        Message.user("hi"),
        Message.assistant(tool_calls=[ToolCall("t1", "bash", '{"cmd": "ls"}')]),
        Message.tool("t1", "ok"),
    ]


def test_system_may_be_passed_beside_a_message_list() -> None:
    blocks = [{"type": "text", "text": "rules", "cache_control": EPHEMERAL}]
    messages = from_anthropic([user("hi")], system=blocks)
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].metadata[BLOCKS_KEY] == [{"extra": {"cache_control": EPHEMERAL}}]
    assert to_anthropic(messages) == {"system": blocks, "messages": [user("hi")]}


def test_a_user_message_with_results_becomes_tool_messages_in_block_order() -> None:
    pieces = message_from_anthropic(
        user(
            [
                result("t1", "a", is_error=True),
                result("t2", [{"type": "text", "text": "b"}]),
                {"type": "text", "text": "next"},
            ]
        )
    )
    assert [(m.role, m.tool_call_id, m.text) for m in pieces] == [
        ("tool", "t1", "a"),
        ("tool", "t2", "b"),
        ("user", None, "next"),
    ]
    assert pieces[0].metadata == {IS_ERROR_KEY: True}
    assert pieces[1].metadata == {CONTENT_FORM_KEY: "blocks"}


def test_metadata_keys_hold_what_the_model_has_no_field_for() -> None:
    (message,) = message_from_anthropic(
        assistant(
            [{"type": "text", "text": "x", "cache_control": EPHEMERAL}, use("t1", t=(1,))],
            id="msg_1",
            usage={"input_tokens": 1, "output_tokens": 2, "service_tier": "standard"},
        )
    )
    assert message.metadata == {
        EXTRA_KEY: {"id": "msg_1"},
        BLOCKS_KEY: [{"extra": {"cache_control": EPHEMERAL}}, {"input": {"t": (1,)}}],
        USAGE_KEY: {"input_tokens": 1, "output_tokens": 2, "service_tier": "standard"},
    }
    (tool,) = message_from_anthropic(user([result("t1", "x", cache_control=EPHEMERAL)]))
    assert tool.metadata == {TOOL_RESULT_KEY: {"cache_control": EPHEMERAL}}


def test_only_a_repeated_role_is_marked_as_a_new_message() -> None:
    messages = from_anthropic([user("a"), assistant("b"), assistant("c")])
    assert [NEW_MESSAGE_KEY in m.metadata for m in messages] == [False, False, True]


def test_blocks_come_back_as_blocks() -> None:
    (message,) = message_from_anthropic(
        user(
            [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                },
                {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
            ]
        )
    )
    assert message.content == (
        ImageBlock(data=PNG, media_type="image/png"),
        ImageBlock(url="https://x.test/a.png"),
    )
    (reply,) = message_from_anthropic(
        assistant(
            [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "redacted_thinking", "data": "r"},
            ]
        )
    )
    assert reply.content == (ThinkingBlock("t", signature="s"), ThinkingBlock("r", redacted=True))


# --------------------------------------------------------------------- usage

USAGES = [
    ("no cache", {"input_tokens": 100, "output_tokens": 7}, Usage(100, 7)),
    (
        "cache read and write add to the prompt",
        {
            "input_tokens": 4,
            "output_tokens": 9,
            "cache_read_input_tokens": 13_000,
            "cache_creation_input_tokens": 1_200,
        },
        Usage(14_204, 9, cache_read_tokens=13_000, cache_write_tokens=1_200),
    ),
    (
        "null cache counts are zero",
        {
            "input_tokens": 5,
            "output_tokens": 1,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": None,
        },
        Usage(5, 1),
    ),
]


@pytest.mark.parametrize(("name", "raw", "expected"), USAGES, ids=[u[0] for u in USAGES])
def test_usage_input_tokens_include_the_cached_prompt(
    name: str, raw: dict[str, Any], expected: Usage
) -> None:
    assert usage_from_anthropic(raw) == expected
    assert usage_from_anthropic(usage_to_anthropic(expected)) == expected


def test_usage_renders_the_uncached_part_and_never_goes_below_zero() -> None:
    assert usage_to_anthropic(Usage(1_200, 40, cache_read_tokens=1_024)) == {
        "input_tokens": 176,
        "output_tokens": 40,
        "cache_read_input_tokens": 1_024,
    }
    assert (
        usage_to_anthropic(Usage(10, cache_read_tokens=8, cache_write_tokens=8))["input_tokens"]
        == 0
    )


def test_a_rewritten_usage_is_rendered_instead_of_the_stored_dict() -> None:
    (message,) = message_from_anthropic(
        assistant("x", usage={"input_tokens": 1, "output_tokens": 2, "service_tier": "standard"})
    )
    changed = attrs.evolve(message, usage=Usage(50, 2))
    assert to_anthropic([changed])["messages"][0]["usage"] == {
        "input_tokens": 50,
        "output_tokens": 2,
    }


# --------------------------------------------------------------------- errors

READ_ERRORS = [
    ("not a dict", [user("a"), "hello"], 1, "expected a message dict, got str"),
    ("system role", [{"role": "system", "content": "x"}], 0, "pass system text as system="),
    ("unknown role", [user("a"), {"role": "tool", "content": "x"}], 1, "'user' or 'assistant'"),
    ("no content", [user("a"), assistant("b"), {"role": "user"}], 2, "has no 'content'"),
    ("content of a bad type", [user(5)], 0, "content must be a str or a list"),
    ("block not a dict", [user(["text"])], 0, "content block 0 must be a dict"),
    ("block without type", [user([{"text": "x"}])], 0, "content block 0 has no 'type'"),
    ("text without text", [user([{"type": "text"}])], 0, "content block 0 (text) needs a str"),
    (
        "tool use without id",
        [assistant([{"type": "tool_use", "name": "x", "input": {}}])],
        0,
        "content block 0 (tool_use) needs a non-empty str 'id'",
    ),
    (
        "tool use input not an object",
        [assistant([use("t1") | {"input": "ls"}])],
        0,
        "needs an 'input' object",
    ),
    (
        "tool use input not JSON",
        [assistant([use("t1") | {"input": {"f": object()}}])],
        0,
        "not JSON data",
    ),
    ("tool use from the user", [user([use("t1")])], 0, "cannot appear in a user message"),
    (
        "tool result from the assistant",
        [assistant([result("t1")])],
        0,
        "cannot appear in an assistant message",
    ),
    (
        "tool result without id",
        [user([{"type": "tool_result", "content": "x"}])],
        0,
        "content block 0 (tool_result) needs a non-empty str 'tool_use_id'",
    ),
    (
        "tool result content of a bad type",
        [user([result("t1", 5)])],
        0,
        "content must be a str or a list",
    ),
    (
        "tool use inside a tool result",
        [user([result("t1", [use("t2")])])],
        0,
        "cannot appear in a tool_result",
    ),
    ("image without source", [user([{"type": "image"}])], 0, "needs a 'source' object"),
    (
        "base64 image without media type",
        [user([{"type": "image", "source": {"type": "base64", "data": PNG}}])],
        0,
        "needs a str 'media_type'",
    ),
    (
        "thinking with a bad signature",
        [assistant([{"type": "thinking", "thinking": "x", "signature": 5}])],
        0,
        "signature must be a str",
    ),
    (
        "usage count negative",
        [assistant("x", usage={"input_tokens": -1})],
        0,
        "usage.input_tokens must be a non-negative int",
    ),
    (
        "usage without input tokens",
        [assistant("x", usage={"output_tokens": 1})],
        0,
        "usage.input_tokens must be a non-negative int, got None",
    ),
]


@pytest.mark.parametrize(
    ("name", "messages", "index", "problem"), READ_ERRORS, ids=[e[0] for e in READ_ERRORS]
)
def test_malformed_dicts_name_the_message_and_the_problem(
    name: str, messages: list[Any], index: int, problem: str
) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        from_anthropic(messages)
    assert caught.value.index == index
    assert str(caught.value).startswith(f"message {index}: ")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"system": "x"}, "needs a 'messages' list"),
        ({"messages": "hi"}, "messages must be a list"),
        ("hi", "messages must be a list"),
        ({"system": 5, "messages": []}, "system must be a str or a list of text blocks"),
        ({"system": [use("t1")], "messages": []}, "cannot appear in the system parameter"),
    ],
    ids=["no messages", "messages not a list", "a str", "system of a bad type", "system tool use"],
)
def test_malformed_bodies_say_what_is_wrong(value: Any, problem: str) -> None:
    with pytest.raises(InvalidMessageError, match=problem):
        from_anthropic(value)


def test_system_given_twice_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="pass one"):
        from_anthropic({"system": "a", "messages": []}, system="b")


WRITE_ERRORS = [
    ("not a message", [Message.user("a"), {"role": "user"}], 1, "expected a Message"),
    ("system after the start", [Message.user("a"), Message.system("b")], 1, "move it to the front"),
    (
        "arguments not JSON",
        [Message.assistant(tool_calls=[ToolCall("t1", "x", "{oops")])],
        0,
        "arguments are not valid JSON",
    ),
    (
        "arguments a JSON list",
        [Message.assistant(tool_calls=[ToolCall("t1", "x", "[1]")])],
        0,
        "arguments are a JSON list, not an object",
    ),
    (
        "image of unknown format",
        [Message("user", [ImageBlock(data="AAAA")])],
        0,
        "set ImageBlock.media_type",
    ),
    (
        "image in the system prompt",
        [Message("system", [ImageBlock(url="https://x.test/a.png")])],
        0,
        "system parameter takes only text",
    ),
    (
        "thinking in a tool result",
        [Message("tool", [ThinkingBlock("x")], tool_call_id="t1")],
        0,
        "Anthropic has none",
    ),
]


@pytest.mark.parametrize(
    ("name", "messages", "index", "problem"), WRITE_ERRORS, ids=[e[0] for e in WRITE_ERRORS]
)
def test_messages_that_cannot_be_written_name_the_message(
    name: str, messages: list[Any], index: int, problem: str
) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        to_anthropic(messages)
    assert caught.value.index == index
    assert problem in str(caught.value)


def test_one_message_instead_of_a_list_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="takes a list of messages"):
        to_anthropic(Message.user("a"))  # type: ignore[arg-type]


# --------------------------------------------------------------------- writing


def test_request_mode_writes_only_what_the_api_accepts() -> None:
    messages = from_anthropic(
        [
            user("hi"),
            assistant(
                [
                    {"type": "thinking", "thinking": "a", "signature": "s"},
                    {"type": "thinking", "thinking": "unsigned"},
                    {"type": "redacted_thinking", "data": "r"},
                    {"type": "text", "text": "x"},
                ],
                id="msg_1",
                stop_reason="end_turn",
                usage={"input_tokens": 1, "output_tokens": 1},
            ),
        ]
    )
    body = to_anthropic(messages, request=True)
    assert body["messages"][1] == assistant(
        [
            {"type": "thinking", "thinking": "a", "signature": "s"},
            {"type": "redacted_thinking", "data": "r"},
            {"type": "text", "text": "x"},
        ]
    )


def test_a_trimmed_text_keeps_its_cache_control() -> None:
    (message,) = message_from_anthropic(
        user([{"type": "text", "text": "long text", "cache_control": EPHEMERAL}])
    )
    trimmed = attrs.evolve(message, content=(TextBlock("long…"),))
    assert to_anthropic([trimmed])["messages"] == [
        user([{"type": "text", "text": "long…", "cache_control": EPHEMERAL}])
    ]


def test_a_cleared_tool_result_is_written_plainly() -> None:
    (tool,) = message_from_anthropic(
        user([result("t1", [{"type": "text", "text": "a"}, {"type": "document", "source": {}}])])
    )
    cleared = attrs.evolve(tool, content=(TextBlock("[cleared]"), TextBlock("more")))
    assert to_anthropic([cleared])["messages"] == [
        user(
            [
                result(
                    "t1", [{"type": "text", "text": "[cleared]"}, {"type": "text", "text": "more"}]
                )
            ]
        )
    ]


def test_a_changed_arguments_text_drops_the_stored_input() -> None:
    (message,) = message_from_anthropic(assistant([use("t1", t=(1, 2))]))
    changed = attrs.evolve(message, content=(ToolCall("t1", "bash", '{"t": [3]}'),))
    assert to_anthropic([changed])["messages"][0]["content"] == [use("t1", t=[3])]


def test_empty_arguments_are_an_empty_input() -> None:
    body = to_anthropic([Message.assistant(tool_calls=[ToolCall("t1", "now", "")])])
    assert body["messages"][0]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "now", "input": {}}
    ]


def test_a_checkpoint_is_a_user_text_message_and_comes_back() -> None:
    body = to_anthropic([SUMMARY, Message.assistant("ok")])
    assert body["messages"][0] == user(SUMMARY.text)
    assert body["messages"][0]["content"].startswith("<context-summary")
    assert from_anthropic(body) == [SUMMARY, Message.assistant("ok")]


def test_a_checkpoint_merged_with_the_next_user_message_comes_back_alone() -> None:
    body = to_anthropic([SUMMARY, Message.user("go on")])
    assert body["messages"] == [
        user([{"type": "text", "text": SUMMARY.text}, {"type": "text", "text": "go on"}])
    ]
    assert from_anthropic(body) == [SUMMARY, Message.user("go on")]


# --------------------------------------------------------------------- other formats

OPENAI_CHAT: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "developer", "content": "Prefer small diffs."},
    {"role": "user", "content": "Why does test_parse fail?"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "Run it first.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "pytest"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "read", "arguments": '{"path": "p.py"}'},
            },
        ],
        "usage": {
            "prompt_tokens": 1200,
            "completion_tokens": 40,
            "total_tokens": 1240,
            "prompt_tokens_details": {"cached_tokens": 1024},
        },
    },
    {"role": "tool", "tool_call_id": "c1", "content": "1 failed"},
    {
        "role": "tool",
        "tool_call_id": "c2",
        "content": [
            {"type": "text", "text": "def parse(): ..."},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    },
    {"role": "user", "content": "Fix it."},
    {"role": "user", "content": "Keep the API."},
    {"role": "assistant", "content": "Done."},
]

ANTHROPIC_BODY: dict[str, Any] = {
    "system": [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Prefer small diffs."},
    ],
    "messages": [
        user("Why does test_parse fail?"),
        assistant(
            [
                {"type": "thinking", "thinking": "Run it first."},
                {"type": "text", "text": "Let me look."},
                use("c1", cmd="pytest"),
                use("c2", "read", path="p.py"),
            ],
            usage={"input_tokens": 176, "output_tokens": 40, "cache_read_input_tokens": 1024},
        ),
        user(
            [
                result("c1", "1 failed"),
                result(
                    "c2",
                    [
                        {"type": "text", "text": "def parse(): ..."},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        },
                    ],
                ),
                {"type": "text", "text": "Fix it."},
                {"type": "text", "text": "Keep the API."},
            ]
        ),
        assistant("Done."),
    ],
}


def test_an_openai_chat_converts_to_a_messages_api_body() -> None:
    assert to_anthropic(from_openai(OPENAI_CHAT)) == ANTHROPIC_BODY


def test_a_messages_api_body_converts_to_openai_dicts() -> None:
    dicts = to_openai(from_anthropic(ANTHROPIC_BODY))
    roles = ["system", "user", "assistant", "tool", "tool", "user", "assistant"]
    assert [d["role"] for d in dicts] == roles
    assert dicts[0]["content"] == [
        {"type": "text", "text": "You are a coding agent."},
        {"type": "text", "text": "Prefer small diffs."},
    ]
    assert dicts[2]["tool_calls"] == OPENAI_CHAT[3]["tool_calls"]
    assert dicts[2]["reasoning_content"] == "Run it first."
    assert dicts[2]["usage"] == OPENAI_CHAT[3]["usage"]
    assert dicts[4]["content"] == OPENAI_CHAT[5]["content"]
    assert dicts[5]["content"] == [
        {"type": "text", "text": "Fix it."},
        {"type": "text", "text": "Keep the API."},
    ]


def test_anthropic_usage_becomes_openai_usage_with_the_same_whole_prompt() -> None:
    (message,) = message_from_anthropic(
        assistant(
            "x",
            usage={
                "input_tokens": 10,
                "output_tokens": 3,
                "cache_read_input_tokens": 90,
                "cache_creation_input_tokens": 20,
            },
        )
    )
    assert to_openai([message])[0]["usage"] == {
        "prompt_tokens": 120,
        "completion_tokens": 3,
        "total_tokens": 123,
        "prompt_tokens_details": {"cached_tokens": 90, "cache_write_tokens": 20},
    }


def _flatten(messages: list[Message]) -> list[tuple[Any, ...]]:
    """What the model sees, block by block: role, kind and payload."""
    items: list[tuple[Any, ...]] = []
    for message in messages:
        role = "system" if message.role == "developer" else message.role
        for block in message.content:
            if isinstance(block, TextBlock):
                items.append((role, message.tool_call_id, "text", block.text))
            elif isinstance(block, ToolCall):
                items.append((role, "call", block.id, block.name, json.loads(block.arguments)))
        if message.role == "tool" and not message.content:
            items.append((role, message.tool_call_id, "text", ""))
    return items


def test_corpus_transcripts_survive_a_trip_through_anthropic(corpus_path: Path) -> None:
    messages = from_openai(load_corpus_dicts(corpus_path))
    body = to_anthropic(messages)
    back = from_openai(to_openai(from_anthropic(body)))
    assert to_anthropic(from_anthropic(body)) == body
    assert _flatten(back) == _flatten(messages)
    calls = [c for m in messages for c in m.tool_calls]
    back_calls = [c for m in back for c in m.tool_calls]
    assert [(c.id, c.name) for c in back_calls] == [(c.id, c.name) for c in calls]
    results = [(m.tool_call_id, m.text) for m in messages if m.role == "tool"]
    assert [(m.tool_call_id, m.text) for m in back if m.role == "tool"] == results
    # Only runs of same-side messages merge: one message per run comes back.
    runs = [
        m.role
        for i, m in enumerate(messages)
        if i == 0 or m.role == "tool" or messages[i - 1].role != m.role
    ]
    assert [m.role for m in back] == runs


def test_a_checkpoint_among_tool_results_is_recognised() -> None:
    body = dict(ROUND_TRIPS[-1][1])
    messages = from_anthropic(body)
    assert [m.role for m in messages] == ["assistant", "tool", "user", "user"]
    assert [m.is_summary for m in messages] == [False, False, True, False]
    assert messages[2] == attrs.evolve(SUMMARY, metadata=messages[2].metadata)
    assert messages[2].metadata == {BLOCKS_KEY: [{"extra": {"cache_control": EPHEMERAL}}]}
