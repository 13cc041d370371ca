"""The OpenAI Chat Completions converter: exact round trips, clear errors, usage, checkpoints."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from context_engine.formats.openai import (
    CONTENT_FORM_KEY,
    EXTRA_KEY,
    PARTS_KEY,
    TOOL_CALLS_KEY,
    USAGE_KEY,
    from_openai,
    message_from_openai,
    message_to_openai,
    to_openai,
    usage_from_openai,
    usage_to_openai,
)
from tests.conftest import load_corpus_dicts

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"  # the start of a PNG file


def call(call_id: str, name: str = "bash", arguments: str = '{"cmd": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


SUMMARY = ContextSummary(
    summary="Fixed the parser; tests pass.",
    tokens_before=120_000,
    read_files=("src/parser.py",),
    modified_files=("src/parser.py", "tests/test_parser.py"),
    timestamp=dt.datetime(2025, 3, 1, 12, 30, tzinfo=dt.timezone.utc),
)

ROUND_TRIPS: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "plain system user assistant",
        [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ],
    ),
    ("developer role", [{"role": "developer", "content": "Answer in French."}]),
    (
        "participant names",
        [
            {"role": "user", "content": "hi", "name": "alice"},
            {"role": "assistant", "content": "hey", "name": "bot"},
        ],
    ),
    (
        "tool call with null content",
        [
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        ],
    ),
    (
        "tool call with empty-string content",
        [
            {"role": "assistant", "content": "", "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": ""},
        ],
    ),
    (
        "tool call with content absent",
        [
            {"role": "assistant", "tool_calls": [call("c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "name": "bash"},
        ],
    ),
    (
        "text beside parallel tool calls",
        [
            {
                "role": "assistant",
                "content": "Reading both.",
                "tool_calls": [
                    call("a", "read", '{"path": "x"}'),
                    call("b", "read", '{"path": "y"}'),
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "X"},
            {"role": "tool", "tool_call_id": "b", "content": "Y"},
        ],
    ),
    (
        "arguments kept byte for byte",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call("c1", "edit", '{ "path":"a.py",  "new": "x\\ny" }')],
            },
        ],
    ),
    ("assistant without content or calls", [{"role": "assistant"}]),
    ("null content on a plain assistant message", [{"role": "assistant", "content": None}]),
    ("empty user string", [{"role": "user", "content": ""}]),
    ("one text part in a list", [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
    ("empty part list", [{"role": "user", "content": []}]),
    ("empty text part", [{"role": "user", "content": [{"type": "text", "text": ""}]}]),
    (
        "text and images with and without detail",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What differs?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.invalid/a.png", "detail": "high"},
                    },
                    {"type": "image_url", "image_url": {"url": "https://example.invalid/b.png"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.invalid/c.png", "detail": None},
                    },
                ],
            }
        ],
    ),
    (
        "data url image",
        [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"},
                    },
                ],
            }
        ],
    ),
    (
        "extra keys on parts and inside image_url",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "long doc", "cache_control": {"type": "ephemeral"}},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.invalid/a.png", "format": "png"},
                    },
                ],
            }
        ],
    ),
    (
        "file and audio parts kept whole",
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarise the PDF and the clip."},
                    {"type": "file", "file": {"file_id": "file-abc"}},
                    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                ],
            }
        ],
    ),
    (
        "refusal part",
        [{"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't."}]}],
    ),
    (
        "refusal field beside null content",
        [
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
        ],
    ),
    (
        "sdk model_dump of a response message",
        [
            {
                "role": "assistant",
                "content": "Done.",
                "refusal": None,
                "annotations": [],
                "audio": None,
                "function_call": None,
                "tool_calls": None,
            }
        ],
    ),
    ("empty tool_calls list", [{"role": "assistant", "content": "x", "tool_calls": []}]),
    ("null name", [{"role": "user", "content": "x", "name": None}]),
    (
        "unknown keys on every role",
        [
            {"role": "system", "content": "s", "x-trace": {"id": 1}},
            {
                "role": "user",
                "content": "u",
                "timestamp": "2025-01-01T00:00:00Z",
                "tool_call_id": "odd",
            },
            {"role": "assistant", "content": None, "tool_calls": [call("c1")], "id": "msg_1"},
            {"role": "tool", "tool_call_id": "c1", "content": "r", "metadata": {"ms": 12}},
        ],
    ),
    (
        "tool call without type",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "function": {"name": "ls", "arguments": "{}"}},
                ],
            }
        ],
    ),
    (
        "extra keys on a tool call and its function",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        **call("c1"),
                        "index": 0,
                        "extra_content": {"google": {"thought_signature": "sig"}},
                    },
                    {
                        "id": "c2",
                        "type": "function",
                        "function": {"name": "ls", "arguments": "{}", "strict": True},
                    },
                ],
            }
        ],
    ),
    (
        "custom tool call",
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "custom",
                        "custom": {"name": "apply_patch", "input": "*** Begin Patch"},
                    },
                ],
            }
        ],
    ),
    (
        "tool result as text parts",
        [
            {"role": "assistant", "content": None, "tool_calls": [call("c1")]},
            {
                "role": "tool",
                "tool_call_id": "c1",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
        ],
    ),
    ("tool result without content", [{"role": "tool", "tool_call_id": "c1"}]),
    (
        "deepseek reasoning beside a tool call",
        [
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Check the tests first.",
                "tool_calls": [call("c1")],
            },
        ],
    ),
    (
        "empty and null reasoning",
        [
            {"role": "assistant", "content": "a", "reasoning_content": ""},
            {"role": "assistant", "content": "b", "reasoning_content": None},
        ],
    ),
    (
        "reasoning key on a user message is kept verbatim",
        [
            {"role": "user", "content": "u", "reasoning_content": "not mine"},
        ],
    ),
    (
        "canonical usage",
        [
            {
                "role": "assistant",
                "content": "x",
                "usage": {
                    "prompt_tokens": 900,
                    "completion_tokens": 40,
                    "total_tokens": 940,
                    "prompt_tokens_details": {"cached_tokens": 512},
                },
            }
        ],
    ),
    (
        "usage with more than the model holds",
        [
            {
                "role": "assistant",
                "content": "x",
                "usage": {
                    "prompt_tokens": 900,
                    "completion_tokens": 40,
                    "total_tokens": 940,
                    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                    "completion_tokens_details": {"reasoning_tokens": 12},
                },
            }
        ],
    ),
    (
        "deepseek usage",
        [
            {
                "role": "assistant",
                "content": "x",
                "usage": {
                    "prompt_tokens": 70,
                    "completion_tokens": 5,
                    "total_tokens": 75,
                    "prompt_cache_hit_tokens": 64,
                    "prompt_cache_miss_tokens": 6,
                },
            }
        ],
    ),
    (
        "usage without total",
        [
            {
                "role": "assistant",
                "content": "x",
                "usage": {"prompt_tokens": 7, "completion_tokens": 1},
            }
        ],
    ),
    ("null usage", [{"role": "assistant", "content": "x", "usage": None}]),
    (
        "usage on a user message is kept verbatim",
        [
            {"role": "user", "content": "u", "usage": {"anything": True}},
        ],
    ),
    ("unicode and cjk text", [{"role": "user", "content": "修复这个错误 — café ✓ \U0001f600"}]),
    ("checkpoint as a string", [{"role": "user", "content": SUMMARY.text}]),
    (
        "checkpoint as one text part",
        [{"role": "user", "content": [{"type": "text", "text": SUMMARY.text}]}],
    ),
    ("checkpoint with a name", [{"role": "user", "content": SUMMARY.text, "name": "compactor"}]),
    (
        "checkpoint look-alike that is not canonical",
        [
            {
                "role": "user",
                "content": '<context-summary tokens-before="007">\nx\n</context-summary>',
            },
        ],
    ),
]


@pytest.mark.parametrize(
    "dicts", [case for _, case in ROUND_TRIPS], ids=[n for n, _ in ROUND_TRIPS]
)
def test_round_trip_gives_back_every_key_and_value(dicts: list[dict[str, Any]]) -> None:
    """to_openai(from_openai(x)) == x, and the input is left untouched."""
    before = copy.deepcopy(dicts)
    messages = from_openai(dicts)
    assert len(messages) == len(dicts)
    assert to_openai(messages) == before
    assert dicts == before


@pytest.mark.parametrize(
    "dicts", [case for _, case in ROUND_TRIPS], ids=[n for n, _ in ROUND_TRIPS]
)
def test_messages_share_no_mutable_data_with_dicts(dicts: list[dict[str, Any]]) -> None:
    """Mutating the input or the output afterwards never changes the messages."""
    dicts = copy.deepcopy(dicts)
    messages = from_openai(dicts)
    expected = copy.deepcopy(dicts)
    _scribble(dicts)
    _scribble(to_openai(messages))
    assert to_openai(messages) == expected


def _scribble(value: Any) -> None:
    if isinstance(value, dict):
        for key in list(value):
            _scribble(value[key])
        value["scribbled"] = True
    elif isinstance(value, list):
        for item in value:
            _scribble(item)
        value.append("scribbled")


def test_plain_dicts_equal_the_short_constructors() -> None:
    """Common dicts carry no converter metadata, so they equal hand-built messages."""
    messages = from_openai(
        [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": None, "tool_calls": [call("c1", "ls", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": "out", "name": "ls"},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert messages == [
        Message.system("s"),
        Message.user("u"),
        Message.assistant(tool_calls=[ToolCall("c1", "ls", "{}")]),
        Message.tool("c1", "out", name="ls"),
        Message.assistant("done"),
    ]
    assert [m.metadata for m in messages] == [{}] * 5


def test_blocks_come_out_in_reading_order() -> None:
    """Reasoning first, then text and images, then tool calls."""
    (message,) = from_openai(
        [
            {
                "role": "assistant",
                "reasoning_content": "think",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "u", "detail": "low"}},
                ],
                "tool_calls": [call("c1")],
            }
        ]
    )
    assert message.content == (
        ThinkingBlock("think"),
        TextBlock("look"),
        ImageBlock(url="u", detail="low"),
        ToolCall("c1", "bash", '{"cmd": "ls"}'),
    )


@pytest.mark.parametrize(
    ("dicts", "key", "value"),
    [
        (
            [{"role": "assistant", "content": "", "tool_calls": [call("c")]}],
            CONTENT_FORM_KEY,
            "string",
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "x"}]}], CONTENT_FORM_KEY, "parts"),
        ([{"role": "user", "content": "x", "id": 3}], EXTRA_KEY, {"id": 3}),
        (
            [{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}],
            PARTS_KEY,
            [{"type": "refusal"}],
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": ""}}],
                }
            ],
            TOOL_CALLS_KEY,
            [{"type": None, "id": "c"}],
        ),
        (
            [{"role": "assistant", "content": "x", "usage": {"prompt_tokens": 1}}],
            USAGE_KEY,
            {"prompt_tokens": 1},
        ),
    ],
    ids=[
        "content form",
        "parts form",
        "extra keys",
        "refusal part",
        "call without type",
        "raw usage",
    ],
)
def test_what_the_model_cannot_hold_is_kept_under_namespaced_metadata(
    dicts: list[dict[str, Any]], key: str, value: Any
) -> None:
    """Each kind of format detail lands under its documented ``openai.*`` key."""
    (message,) = from_openai(dicts)
    assert message.metadata[key] == value


def test_hand_built_messages_convert_to_default_forms() -> None:
    """Without converter metadata the common Chat Completions shapes come out."""
    png = ImageBlock(data=PNG)
    dicts = to_openai(
        [
            Message.assistant(tool_calls=[ToolCall("c1", "ls")]),
            Message("user", (TextBlock("a"), TextBlock("b"))),
            Message("user", (TextBlock("see"), png)),
            Message(
                "assistant",
                (ThinkingBlock("hm"), ThinkingBlock("x", redacted=True), TextBlock("ok")),
            ),
            Message("user", ()),
        ]
    )
    assert dicts == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            ],
        },
        {"role": "assistant", "content": "ok", "reasoning_content": "hm"},
        {"role": "user", "content": ""},
    ]


def test_hand_built_messages_survive_the_reverse_trip() -> None:
    """Messages the format can express come back equal from their dicts."""
    messages = [
        Message.system("s"),
        Message.user("u"),
        Message(
            "user", (TextBlock("a"), ImageBlock(url="https://example.invalid/i.png", detail="auto"))
        ),
        Message(
            "assistant",
            (ThinkingBlock("why"), TextBlock("t"), ToolCall("c", "f", "{}")),
            usage=Usage(100, 5, cache_read_tokens=60),
        ),
        Message.tool("c", "r"),
        SUMMARY,
    ]
    assert from_openai(to_openai(messages)) == messages


def test_reasoning_and_usage_can_be_left_out_for_api_requests() -> None:
    """include_reasoning / include_usage drop the keys some APIs reject."""
    message = Message("assistant", (ThinkingBlock("why"), TextBlock("t")), usage=Usage(10, 2))
    assert to_openai([message]) == [
        {
            "role": "assistant",
            "content": "t",
            "reasoning_content": "why",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }
    ]
    assert to_openai([message], include_reasoning=False, include_usage=False) == [
        {"role": "assistant", "content": "t"}
    ]


def test_rewritten_messages_keep_the_details_that_still_fit() -> None:
    """A trimmed text keeps its part's extra keys; a tool call renamed by id loses its overlay."""
    (message,) = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "long " * 50, "cache_control": {"type": "ephemeral"}}
                ],
            }
        ]
    )
    trimmed = attrs.evolve(message, content=(TextBlock("long [240 characters trimmed]"),))
    assert to_openai([trimmed]) == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "long [240 characters trimmed]",
                    "cache_control": {"type": "ephemeral"},
                },
            ],
        }
    ]
    (assistant,) = from_openai(
        [{"role": "assistant", "content": None, "tool_calls": [{**call("c1"), "index": 0}]}]
    )
    renamed = attrs.evolve(assistant, content=(ToolCall("c9", "bash", "{}"),))
    assert to_openai([renamed])[0]["tool_calls"] == [call("c9", "bash", "{}")]


def test_details_that_no_longer_fit_fall_back_to_the_default_form() -> None:
    """Content that changed shape is written in the default form instead of failing."""
    (message,) = from_openai(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "a", "x": 1},
                    {"type": "file", "file": {"file_id": "f"}},
                ],
            }
        ]
    )
    replaced = attrs.evolve(message, content=(TextBlock("a"), TextBlock("[image removed]")))
    assert to_openai([replaced])[0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "[image removed]"},
    ]
    (null,) = from_openai([{"role": "assistant", "content": None}])
    assert (
        to_openai([attrs.evolve(null, content=(TextBlock("now text"),))])[0]["content"]
        == "now text"
    )


def test_changed_usage_is_rendered_from_the_new_value() -> None:
    """A stored raw usage dict is only put back while it still describes message.usage."""
    (message,) = from_openai(
        [
            {
                "role": "assistant",
                "content": "x",
                "usage": {"prompt_tokens": 9, "completion_tokens": 1, "extra": 1},
            }
        ]
    )
    changed = attrs.evolve(message, usage=Usage(20, 2))
    assert to_openai([changed])[0]["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 2,
        "total_tokens": 22,
    }


# ----------------------------------------------------------------------- usage

USAGE_CASES = [
    (
        "prompt includes cached tokens",
        {
            "prompt_tokens": 1000,
            "completion_tokens": 50,
            "total_tokens": 1050,
            "prompt_tokens_details": {"cached_tokens": 800},
        },
        Usage(1000, 50, 800, 0),
    ),
    ("no details", {"prompt_tokens": 10, "completion_tokens": 2}, Usage(10, 2)),
    (
        "null details and counts",
        {"prompt_tokens": 10, "completion_tokens": None, "prompt_tokens_details": None},
        Usage(10, 0),
    ),
    (
        "null cached count",
        {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": None}},
        Usage(10),
    ),
    (
        "deepseek cache hits",
        {
            "prompt_tokens": 70,
            "completion_tokens": 5,
            "prompt_cache_hit_tokens": 64,
            "prompt_cache_miss_tokens": 6,
        },
        Usage(70, 5, 64, 0),
    ),
    (
        "cache writes",
        {
            "prompt_tokens": 500,
            "completion_tokens": 9,
            "prompt_tokens_details": {"cached_tokens": 100, "cache_write_tokens": 300},
        },
        Usage(500, 9, 100, 300),
    ),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in USAGE_CASES], ids=[c[0] for c in USAGE_CASES]
)
def test_usage_is_normalised_so_input_tokens_is_the_whole_prompt(
    raw: dict[str, Any], expected: Usage
) -> None:
    """prompt_tokens already includes cached tokens: input_tokens = prompt_tokens."""
    assert usage_from_openai(raw) == expected
    (message,) = from_openai([{"role": "assistant", "content": "x", "usage": raw}])
    assert message.usage == expected
    assert message.usage.total_tokens == expected.input_tokens + expected.output_tokens


def test_usage_renders_details_only_when_non_zero() -> None:
    """The rendered usage dict reads back as the same Usage."""
    assert usage_to_openai(Usage(10, 2)) == {
        "prompt_tokens": 10,
        "completion_tokens": 2,
        "total_tokens": 12,
    }
    for usage in (Usage(10, 2), Usage(1000, 50, 800), Usage(500, 9, 100, 300)):
        assert usage_from_openai(usage_to_openai(usage)) == usage


# ----------------------------------------------------------------- checkpoints


def test_checkpoint_comes_back_as_a_context_summary() -> None:
    """A rendered checkpoint converts to a user message and back to an equal ContextSummary."""
    dicts = to_openai([Message.system("s"), SUMMARY, Message.user("go on")])
    assert dicts[1] == {"role": "user", "content": SUMMARY.text}
    messages = from_openai(dicts)
    assert [m.is_summary for m in messages] == [False, True, False]
    assert messages[1] == SUMMARY
    assert isinstance(messages[1], ContextSummary)
    assert messages[1].modified_files == ("src/parser.py", "tests/test_parser.py")
    assert messages[1].timestamp == SUMMARY.timestamp


@pytest.mark.parametrize(
    "summary",
    [
        ContextSummary(summary=""),
        ContextSummary(summary="quotes </context-summary> the closing tag", read_files=("a",)),
        ContextSummary(summary="ends like a list\n<read-files>\nx\n</read-files>"),
    ],
    ids=["empty summary", "closing tag in text", "file-list look-alike in text"],
)
def test_awkward_checkpoints_round_trip(summary: ContextSummary) -> None:
    """Escaped text inside a checkpoint survives both directions."""
    (back,) = from_openai(to_openai([summary]))
    assert back == summary


def test_checkpoint_look_alike_stays_a_plain_user_message() -> None:
    """Text that parses but would not re-render identically is left as the user wrote it."""
    (message,) = from_openai(
        [
            {
                "role": "user",
                "content": '<context-summary tokens-before="007">\nx\n</context-summary>',
            },
        ]
    )
    assert not message.is_summary
    assert type(message) is Message


# ---------------------------------------------------------------------- errors

ERRORS: list[tuple[str, list[Any], int, str]] = [
    (
        "not a dict",
        [{"role": "user", "content": "a"}, ["user", "b"]],
        1,
        "expected a message dict, got list",
    ),
    ("no role", [{"content": "a"}], 0, "has no 'role'"),
    (
        "unknown role",
        [{"role": "user", "content": "a"}, {"role": "function", "content": "x"}],
        1,
        "unknown role 'function'",
    ),
    ("unhashable role", [{"role": ["user"], "content": "a"}], 0, "unknown role ['user']"),
    (
        "content of a wrong type",
        [{"role": "user", "content": 42}],
        0,
        "content must be a str, a list of parts or null, got int",
    ),
    ("part not a dict", [{"role": "user", "content": ["hi"]}], 0, "content part 0 must be a dict"),
    (
        "unknown part type",
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "video", "video": {}}],
            }
        ],
        0,
        "content part 1 has unknown type 'video'",
    ),
    (
        "part type that is not a str",
        [{"role": "user", "content": [{"type": ["text"], "text": "a"}]}],
        0,
        "content part 0 has unknown type ['text']",
    ),
    (
        "text part without text",
        [{"role": "user", "content": [{"type": "text"}]}],
        0,
        "content part 0 (text) needs a str 'text'",
    ),
    (
        "refusal from the user",
        [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}],
        0,
        "only assistant messages may refuse",
    ),
    (
        "image without url",
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        0,
        "needs an image_url object with a str 'url'",
    ),
    (
        "image_url as a bare string",
        [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}],
        0,
        "needs an image_url object",
    ),
    (
        "image detail not a str",
        [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "u", "detail": 1}}],
            }
        ],
        0,
        "image_url.detail must be a str",
    ),
    (
        "tool_calls not a list",
        [{"role": "assistant", "tool_calls": {"id": "c"}}],
        0,
        "tool_calls must be a list, got dict",
    ),
    (
        "tool calls on a user message",
        [{"role": "user", "content": "a", "tool_calls": [call("c")]}],
        0,
        "only assistant messages may call tools",
    ),
    (
        "tool call not a dict",
        [{"role": "assistant", "tool_calls": ["c1"]}],
        0,
        "tool call 0 must be a dict",
    ),
    (
        "tool call without id",
        [
            {
                "role": "assistant",
                "tool_calls": [
                    call("c0"),
                    {"type": "function", "function": {"name": "f", "arguments": "{}"}},
                ],
            }
        ],
        0,
        "tool call 1 has no id",
    ),
    (
        "tool call with empty id",
        [{"role": "assistant", "tool_calls": [call("")]}],
        0,
        "tool call 0 has no id",
    ),
    (
        "tool call without function",
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}],
        0,
        "tool call 'c' has no 'function' object",
    ),
    (
        "tool call without name",
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}],
            }
        ],
        0,
        "has no function.name",
    ),
    (
        "arguments as a dict",
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"a": 1}},
                    }
                ],
            }
        ],
        0,
        "function.arguments must be the raw JSON text (a str), got dict",
    ),
    (
        "arguments missing",
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}],
            }
        ],
        0,
        "function.arguments must be the raw JSON text (a str), got NoneType",
    ),
    (
        "unknown tool call type",
        [
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "web_search", "web_search": {}}],
            }
        ],
        0,
        "unknown type 'web_search'",
    ),
    (
        "tool message without tool_call_id",
        [{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}],
        1,
        "tool message without tool_call_id",
    ),
    (
        "tool message with null tool_call_id",
        [{"role": "tool", "tool_call_id": None, "content": "r"}],
        0,
        "tool message without tool_call_id",
    ),
    (
        "tool_call_id not a str",
        [{"role": "tool", "tool_call_id": 7, "content": "r"}],
        0,
        "tool_call_id must be a non-empty str, got 7",
    ),
    (
        "name not a str",
        [{"role": "user", "content": "a", "name": 3}],
        0,
        "name must be a str, got int",
    ),
    (
        "reasoning not a str",
        [{"role": "assistant", "content": "a", "reasoning_content": ["x"]}],
        0,
        "reasoning_content must be a str, got list",
    ),
    (
        "usage not a dict",
        [{"role": "assistant", "content": "a", "usage": 12}],
        0,
        "usage must be a dict",
    ),
    (
        "usage without prompt_tokens",
        [{"role": "assistant", "content": "a", "usage": {"completion_tokens": 1}}],
        0,
        "usage.prompt_tokens must be a non-negative int, got None",
    ),
    (
        "negative completion tokens",
        [
            {
                "role": "assistant",
                "content": "a",
                "usage": {"prompt_tokens": 1, "completion_tokens": -1},
            }
        ],
        0,
        "usage.completion_tokens must be a non-negative int, got -1",
    ),
    (
        "cached tokens as a str",
        [
            {
                "role": "assistant",
                "content": "a",
                "usage": {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": "3"}},
            }
        ],
        0,
        "usage.prompt_tokens_details.cached_tokens must be a non-negative int",
    ),
    (
        "prompt tokens as a bool",
        [{"role": "assistant", "content": "a", "usage": {"prompt_tokens": True}}],
        0,
        "usage.prompt_tokens must be a non-negative int, got True",
    ),
    (
        "details not a dict",
        [
            {
                "role": "assistant",
                "content": "a",
                "usage": {"prompt_tokens": 1, "prompt_tokens_details": [1]},
            }
        ],
        0,
        "prompt_tokens_details must be a dict",
    ),
]


@pytest.mark.parametrize(
    ("dicts", "index", "problem"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_malformed_dicts_raise_with_index_and_problem(
    dicts: list[Any], index: int, problem: str
) -> None:
    """The error names the offending message and what is wrong with it."""
    with pytest.raises(InvalidMessageError) as info:
        from_openai(dicts)
    assert info.value.index == index
    assert str(info.value).startswith(f"message {index}: ")
    assert problem in str(info.value)
    assert isinstance(info.value, ValueError)


def test_single_message_helpers_name_no_index_unless_given() -> None:
    """message_from_openai / message_to_openai quote the index only when told it."""
    with pytest.raises(InvalidMessageError, match=r"^unknown role 'x'") as info:
        message_from_openai({"role": "x"})
    assert info.value.index is None
    with pytest.raises(InvalidMessageError, match=r"^message 4: unknown role 'x'"):
        message_from_openai({"role": "x"}, index=4)
    assert message_to_openai(Message.user("hi")) == {"role": "user", "content": "hi"}
    assert message_from_openai({"role": "user", "content": "hi"}) == Message.user("hi")


def test_passing_one_item_instead_of_a_list_is_explained() -> None:
    """A bare dict or Message is rejected with a pointer to the single-message helper."""
    with pytest.raises(InvalidMessageError, match="use message_from_openai"):
        from_openai({"role": "user", "content": "hi"})  # type: ignore[dict-item]
    with pytest.raises(InvalidMessageError, match="use message_to_openai"):
        to_openai(Message.user("hi"))  # type: ignore[arg-type]


def test_to_openai_errors_name_the_index() -> None:
    """Non-messages and images that cannot be written name their position."""
    with pytest.raises(InvalidMessageError, match=r"^message 1: expected a Message, got dict"):
        to_openai([Message.user("a"), {"role": "user"}])  # type: ignore[list-item]
    unknown = Message("user", (ImageBlock(data="AAAA"),))
    with pytest.raises(
        InvalidMessageError, match=r"^message 2: .*set ImageBlock.media_type"
    ) as info:
        to_openai([Message.user("a"), Message.user("b"), unknown])
    assert info.value.index == 2
    typed = attrs.evolve(unknown, content=(ImageBlock(data="AAAA", media_type="image/bmp"),))
    assert to_openai([typed])[0]["content"][0]["image_url"]["url"] == "data:image/bmp;base64,AAAA"


# ---------------------------------------------------------------------- corpus


def test_every_corpus_transcript_round_trips_exactly(corpus_path: Path) -> None:
    """Real agent transcripts come back key for key, with every tool call read."""
    dicts = load_corpus_dicts(corpus_path)
    messages = from_openai(dicts)
    assert to_openai(messages) == dicts
    assert len(messages) == len(dicts)
    listed = [d.get("tool_calls") for d in dicts]
    calls = sum(len(found) for found in listed if isinstance(found, list))
    assert sum(len(m.tool_calls) for m in messages) == calls
    assert calls > 0
    reasoning = sum(1 for d in dicts if isinstance(d.get("reasoning_content"), str))
    assert sum(isinstance(b, ThinkingBlock) for m in messages for b in m.content) == reasoning
    for message, raw in zip(messages, dicts, strict=True):
        assert (EXTRA_KEY in message.metadata) == bool(set(raw) - _PLAIN_KEYS)


_PLAIN_KEYS = {
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "usage",
}


# ------------------------------------------------------------------ properties

_SCALARS = st.none() | st.booleans() | st.integers(-1, 3) | st.sampled_from(["", "x", "c1", "{}"])
_EXTRA = st.dictionaries(
    st.sampled_from(["x", "index", "cache_control", "detail"]), _SCALARS, max_size=2
)
_FUNCTION: st.SearchStrategy[dict[str, Any]] = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["f", "", None, 3]),
        "arguments": st.sampled_from(["{}", "", None, {}]),
        "input": st.sampled_from(["raw", None]),
        "strict": st.booleans(),
    },
)
_CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from(["c1", "c2", "", None]),
        "type": st.sampled_from(["function", "custom", None, "x"]),
        "function": _FUNCTION,
        "custom": _FUNCTION,
        "index": st.integers(0, 2),
    },
)
_IMAGE = st.fixed_dictionaries(
    {},
    optional={
        "url": st.sampled_from(["u", "", None]),
        "detail": st.sampled_from(["low", None, 1]),
        "format": _SCALARS,
    },
)
_PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "refusal", "file", "input_audio", "video"])},
    optional={
        "text": st.sampled_from(["t", "", None]),
        "refusal": st.sampled_from(["no", None]),
        "image_url": _IMAGE,
        "file": _EXTRA,
        "cache_control": _EXTRA,
    },
)
_CONTENT = (
    st.none()
    | st.sampled_from(["", "hello", SUMMARY.text, SUMMARY.text.replace('="120000"', '="0120000"')])
    | st.lists(_PART, max_size=3)
    | st.integers()
)
_DETAILS = st.fixed_dictionaries(
    {},
    optional={"cached_tokens": _SCALARS, "cache_write_tokens": _SCALARS, "audio_tokens": _SCALARS},
)
_USAGE = st.fixed_dictionaries(
    {},
    optional={
        "prompt_tokens": _SCALARS,
        "completion_tokens": _SCALARS,
        "total_tokens": _SCALARS,
        "prompt_tokens_details": _DETAILS | _SCALARS,
        "prompt_cache_hit_tokens": _SCALARS,
    },
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": _CONTENT,
        "tool_calls": st.lists(_CALL, max_size=2) | _SCALARS,
        "tool_call_id": st.sampled_from(["c1", "", None, 2]),
        "name": st.sampled_from(["n", None, 1]),
        "usage": _USAGE | _SCALARS,
        "reasoning_content": st.sampled_from(["r", "", None, 1]),
        "refusal": _SCALARS,
        "x-extra": _EXTRA,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE | _SCALARS, max_size=3))
def test_any_input_round_trips_or_raises_invalid_message_error(dicts: list[Any]) -> None:
    """Near-valid dicts either convert and come back equal, or raise InvalidMessageError."""
    try:
        messages = from_openai(dicts)
    except InvalidMessageError as exc:
        index = exc.index
    else:
        assert to_openai(messages) == dicts
        return
    assert index is not None
    assert 0 <= index < len(dicts)
