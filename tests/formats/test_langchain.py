"""The LangChain converter: exact round trips both ways, usage, images, checkpoints, errors."""

from __future__ import annotations

import copy
import datetime as dt
import importlib
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("langchain_core", reason=needs("langchain"))

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from context_engine import (
    ContextEngine,
    ContextSummary,
    ImageBlock,
    InvalidMessageError,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from context_engine.formats.langchain import (
    CONTENT_KEY,
    ENGINE_KEY,
    INVALID_CALLS_KEY,
    MESSAGE_KEY,
    USAGE_KEY,
    from_langchain,
    message_from_langchain,
    message_to_langchain,
    to_langchain,
    usage_from_langchain,
    usage_to_langchain,
)
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts

pytestmark = pytest.mark.extra("langchain")

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"  # the start of a PNG file

SUMMARY = ContextSummary(
    summary="Fixed the parser; tests pass.",
    tokens_before=12_000,
    read_files=("src/parser.py",),
    modified_files=("src/parser.py",),
    timestamp=dt.datetime(2025, 3, 1, 12, 30, tzinfo=dt.timezone.utc),
)


def call(call_id: str, name: str = "bash", **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args or {"cmd": "ls"}, "id": call_id, "type": "tool_call"}


LANGCHAIN_ROUND_TRIPS: list[tuple[str, list[BaseMessage]]] = [
    ("empty history", []),
    (
        "plain system user ai",
        [SystemMessage("You are terse."), HumanMessage("hi"), AIMessage("hello")],
    ),
    (
        "ids names and provider fields",
        [
            HumanMessage("hi", id="h1", name="ana"),
            AIMessage(
                "hello",
                id="run-1",
                additional_kwargs={"refusal": None},
                response_metadata={"model_name": "m", "finish_reason": "stop", "logprobs": None},
            ),
        ],
    ),
    (
        "developer role",
        [SystemMessage("Be brief.", additional_kwargs={"__openai_role__": "developer"})],
    ),
    (
        "tool calls and results",
        [
            HumanMessage("run it"),
            AIMessage("", tool_calls=[call("c1"), call("c2", "read", path="a.py")]),
            ToolMessage("ok", tool_call_id="c1", name="bash"),
            ToolMessage("no such file", tool_call_id="c2", status="error", artifact={"code": 2}),
            AIMessage("done"),
        ],
    ),
    (
        "invalid tool call answered by LangChain",
        [
            HumanMessage("go"),
            AIMessage(
                "",
                invalid_tool_calls=[
                    {"name": "bash", "args": "{oops", "id": "c9", "error": "bad JSON"},
                    {"name": None, "args": "x", "id": None, "error": "no name"},
                ],
            ),
            ToolMessage("Error: bad JSON", tool_call_id="c9", status="error"),
        ],
    ),
    (
        "pending tool call at the end",
        [HumanMessage("go"), AIMessage("Checking.", tool_calls=[call("c1")])],
    ),
    (
        "images in every dialect",
        [
            HumanMessage(
                [
                    {"type": "text", "text": "what differs?"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
                    {"type": "image_url", "image_url": "https://x/b.png"},
                    {"type": "image", "url": "https://x/c.png"},
                    {"type": "image", "base64": PNG, "mime_type": "image/png", "id": "i1"},
                    {
                        "type": "image",
                        "source_type": "base64",
                        "data": PNG,
                        "mime_type": "image/png",
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                        "cache_control": {"type": "ephemeral"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://x/d.png"}},
                    {"type": "image", "file_id": "file-1"},
                ]
            )
        ],
    ),
    (
        "reasoning and opaque parts",
        [
            HumanMessage("think"),
            AIMessage(
                [
                    {"type": "thinking", "thinking": "Look first.", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque=="},
                    {"type": "reasoning", "reasoning": "Then act.", "id": "rs_1"},
                    {"type": "text", "text": "Reading.", "annotations": []},
                    {"type": "tool_use", "id": "c1", "name": "bash", "input": {"cmd": "ls"}},
                ],
                tool_calls=[call("c1")],
            ),
            ToolMessage([{"type": "text", "text": "a.py"}, "b.py"], tool_call_id="c1"),
        ],
    ),
    (
        "usage with cache and extra details",
        [
            HumanMessage("hi"),
            AIMessage(
                "hello",
                usage_metadata={
                    "input_tokens": 1200,
                    "output_tokens": 40,
                    "total_tokens": 1240,
                    "input_token_details": {"cache_read": 1024, "cache_creation": 100},
                },
            ),
            HumanMessage("more"),
            AIMessage(
                "sure",
                usage_metadata={
                    "input_tokens": 1300,
                    "output_tokens": 50,
                    "total_tokens": 1350,
                    "output_token_details": {"reasoning": 20},
                },
            ),
        ],
    ),
    (
        "list content forms",
        [HumanMessage(["just a str part"]), HumanMessage([]), AIMessage("")],
    ),
    ("rendered checkpoint", [HumanMessage(SUMMARY.text, id="sum-1"), HumanMessage("go on")]),
]


@pytest.mark.parametrize(
    "messages", [m for _, m in LANGCHAIN_ROUND_TRIPS], ids=[n for n, _ in LANGCHAIN_ROUND_TRIPS]
)
def test_langchain_messages_survive_a_round_trip_unchanged(messages: list[BaseMessage]) -> None:
    original = copy.deepcopy(messages)
    ours = from_langchain(messages)
    back = to_langchain(ours)
    assert back == original
    assert [type(m) for m in back] == [type(m) for m in original]
    assert messages == original  # the input is not touched
    assert from_langchain(back) == ours


OURS_ROUND_TRIPS: list[tuple[str, list[Message]]] = [
    ("empty history", []),
    (
        "roles and text",
        [
            Message.system("sys"),
            Message.developer("dev"),
            Message.user("hi"),
            Message.assistant("hello"),
        ],
    ),
    (
        "tool calls and results with ids",
        [
            Message.user("run"),
            Message.assistant(
                "Running.",
                tool_calls=[ToolCall("c1", "bash", '{"cmd": "ls"}'), ToolCall("c2", "read", "{}")],
                usage=Usage(input_tokens=900, output_tokens=30, cache_read_tokens=512),
            ),
            Message.tool("c1", "a.py", name="bash"),
            Message.tool("c2", "text"),
        ],
    ),
    (
        "argument text as the model wrote it",
        [
            Message.user("run"),
            Message.assistant(tool_calls=[ToolCall("c1", "bash", '{ "cmd":"ls" }')]),
            Message.tool("c1", "a.py"),
        ],
    ),
    (
        "images and thinking",
        [
            Message(
                "user",
                (
                    TextBlock("look"),
                    ImageBlock(url="https://x/a.png", detail="high"),
                    ImageBlock(url="https://x/b.png", media_type="image/png"),
                    ImageBlock(data=PNG, media_type="image/png"),
                    ImageBlock(data=PNG),
                ),
            ),
            Message(
                "assistant",
                (
                    ThinkingBlock("hmm", signature="sig"),
                    ThinkingBlock("secret", redacted=True),
                    TextBlock("It is a cat."),
                ),
                stop_reason="end_turn",
            ),
        ],
    ),
    (
        "engine markers timestamps and checkpoints",
        [
            SUMMARY,
            Message(
                "tool",
                "[cleared]",
                tool_call_id="c1",
                metadata={CLEARED_KEY: True},
                timestamp=dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
            ),
            Message("user", "long ... [9 characters trimmed] ...", metadata={TRIMMED_KEY: 1}),
        ],
    ),
]


@pytest.mark.parametrize(
    "messages", [m for _, m in OURS_ROUND_TRIPS], ids=[n for n, _ in OURS_ROUND_TRIPS]
)
def test_messages_survive_a_round_trip_through_langchain(messages: list[Message]) -> None:
    assert from_langchain(to_langchain(messages)) == messages


def test_roles_text_tool_calls_and_results_map_to_the_message_model() -> None:
    ours = from_langchain(
        [
            SystemMessage("sys"),
            SystemMessage("dev", additional_kwargs={"__openai_role__": "developer"}),
            HumanMessage("hi"),
            AIMessage("", tool_calls=[call("c1", "read", path="é.py")]),
            ToolMessage("body", tool_call_id="c1"),
        ]
    )
    assert [m.role for m in ours] == ["system", "developer", "user", "assistant", "tool"]
    assert ours[3].tool_calls == (ToolCall("c1", "read", '{"path": "é.py"}'),)
    assert ours[3].content == ours[3].tool_calls  # no empty text block
    assert (ours[4].tool_call_id, ours[4].text) == ("c1", "body")
    assert all(not m.metadata for m in ours)  # nothing beyond the defaults to keep


def test_usage_metadata_becomes_usage_with_cached_tokens_inside_input_tokens() -> None:
    raw = {
        "input_tokens": 1200,
        "output_tokens": 40,
        "total_tokens": 1240,
        "input_token_details": {"cache_read": 1024, "cache_creation": 100, "audio": 0},
    }
    (message,) = from_langchain([AIMessage("x", usage_metadata=raw)])
    assert message.usage == Usage(1200, 40, cache_read_tokens=1024, cache_write_tokens=100)
    assert message.metadata[USAGE_KEY] == raw  # the audio detail is kept for the way back
    assert usage_to_langchain(Usage(10, 2)) == {
        "input_tokens": 10,
        "output_tokens": 2,
        "total_tokens": 12,
    }
    assert usage_from_langchain(usage_to_langchain(message.usage)) == message.usage


def test_usage_anchors_the_engine_estimate(counter: FixedTokenCounter) -> None:
    messages = [
        HumanMessage("hi " * 50),
        AIMessage(
            "hello", usage_metadata={"input_tokens": 700, "output_tokens": 5, "total_tokens": 705}
        ),
        HumanMessage("next"),
    ]
    engine = ContextEngine(10_000, token_counter=counter)
    estimate = engine.estimate(from_langchain(messages))
    assert estimate.last_usage_index == 1
    assert estimate.usage_tokens == 705
    assert estimate.tokens == 705 + estimate.trailing_tokens


def test_images_become_image_blocks() -> None:
    (message,) = from_langchain(dict(LANGCHAIN_ROUND_TRIPS)["images in every dialect"])
    images = [b for b in message.content if isinstance(b, ImageBlock)]
    assert images == [
        ImageBlock(url="https://x/a.png", detail="low"),
        ImageBlock(url="https://x/b.png"),
        ImageBlock(url="https://x/c.png"),
        ImageBlock(data=PNG, media_type="image/png"),
        ImageBlock(data=PNG, media_type="image/png"),
        ImageBlock(data=PNG, media_type="image/png"),
        ImageBlock(url="https://x/d.png"),
    ]
    assert message.metadata[CONTENT_KEY][-1] == {"opaque": {"type": "image", "file_id": "file-1"}}


def test_a_rendered_checkpoint_comes_back_as_a_checkpoint() -> None:
    (sent,) = to_langchain([SUMMARY])
    assert isinstance(sent, HumanMessage)
    assert sent.content == SUMMARY.text
    sent.id = "assigned-by-langgraph"
    (back,) = from_langchain([sent])
    assert isinstance(back, ContextSummary)
    assert back.summary == SUMMARY.summary
    assert back.read_files == SUMMARY.read_files
    assert back.metadata == {MESSAGE_KEY: {"id": "assigned-by-langgraph"}}


def test_engine_markers_travel_in_response_metadata_not_in_the_prompt() -> None:
    cleared = Message("tool", "[cleared]", tool_call_id="c1", metadata={CLEARED_KEY: True})
    (written,) = to_langchain([cleared])
    assert written.response_metadata == {ENGINE_KEY: {"metadata": {CLEARED_KEY: True}}}
    assert written.additional_kwargs == {}
    assert from_langchain([written]) == [cleared]


def test_rewritten_blocks_keep_their_dialect_while_it_fits() -> None:
    original = HumanMessage(
        [
            {"type": "text", "text": "x" * 50, "annotations": ["a"]},
            {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
            {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        ]
    )
    (ours,) = from_langchain([original])
    trimmed = attrs.evolve(ours, content=(TextBlock("x ... trimmed"), *ours.content[1:]))
    (written,) = to_langchain([trimmed])
    assert written.content == [
        {"type": "text", "text": "x ... trimmed", "annotations": ["a"]},
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}},
        {"type": "tool_use", "id": "t", "name": "n", "input": {}},
    ]
    cleared = attrs.evolve(ours, content=(TextBlock("[cleared]"),))
    assert to_langchain([cleared])[0].content == "[cleared]"  # the layout no longer fits


def test_tool_call_arguments_that_are_not_an_object_become_an_invalid_call() -> None:
    message = Message.assistant(tool_calls=[ToolCall("c1", "bash", "ls -la")])
    (written,) = to_langchain([message])
    assert isinstance(written, AIMessage)
    assert written.tool_calls == []
    assert [(c["id"], c["args"]) for c in written.invalid_tool_calls] == [("c1", "ls -la")]
    (back,) = from_langchain([written])
    assert back.tool_calls == message.tool_calls
    assert INVALID_CALLS_KEY in back.metadata


def test_a_pending_tool_call_stays_in_the_engine_view(counter: FixedTokenCounter) -> None:
    history = [SystemMessage("sys")]
    for n in range(12):
        history += [
            HumanMessage(f"question {n} " + "words " * 60),
            AIMessage(f"answer {n} " + "words " * 60),
        ]
    history.append(AIMessage("Checking.", tool_calls=[call("late")]))
    transcript = from_langchain(history)
    engine = ContextEngine.default(2_000, token_counter=counter, reserve_tokens=500)
    view = engine.project_sync(transcript).messages
    assert check_view(transcript, view) == []
    assert view[-1] == transcript[-1]
    assert to_langchain(view)[-1] == history[-1]


BAD_INPUT: list[tuple[str, Any, str]] = [
    ("chat message", [ChatMessage(role="user", content="x")], "message 0: expected a"),
    ("a dict", [{"role": "user", "content": "x"}], "convert_to_messages"),
    (
        "tool call without id",
        [HumanMessage("x"), AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": None}])],
        "message 1: tool call 'f' has no id",
    ),
    (
        "negative usage",
        [AIMessage("", usage_metadata={"input_tokens": -1, "output_tokens": 0, "total_tokens": 0})],
        "input_tokens must be a non-negative int",
    ),
    ("text part without text", [HumanMessage([{"type": "text"}])], "content part 0: text part"),
    ("one message, not a list", HumanMessage("x"), "message_from_langchain"),
]


@pytest.mark.parametrize(
    ("messages", "expected"),
    [(m, e) for _, m, e in BAD_INPUT],
    ids=[n for n, _, _ in BAD_INPUT],
)
def test_unreadable_input_raises_a_clear_error(messages: Any, expected: str) -> None:
    with pytest.raises(InvalidMessageError, match=expected):
        from_langchain(messages)


def test_writing_needs_messages() -> None:
    with pytest.raises(InvalidMessageError, match="message_to_langchain"):
        to_langchain(Message.user("x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError, match="message 0: expected a Message"):
        to_langchain(["x"])  # type: ignore[list-item]
    assert message_to_langchain(Message.user("x")) == HumanMessage("x")
    assert message_from_langchain(HumanMessage("x")) == Message.user("x")


@pytest.mark.parametrize(
    ("module", "hidden"),
    [
        ("context_engine.formats.langchain", "langchain_core.messages"),
        ("context_engine.integrations.langchain", "langchain.agents.middleware"),
    ],
    ids=["converter", "middleware"],
)
def test_a_missing_runtime_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, module: str, hidden: str
) -> None:
    monkeypatch.setitem(sys.modules, hidden, None)
    for name in ("context_engine.formats.langchain", "context_engine.integrations.langchain"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(ImportError, match=r"pip install 'context-engine\[langchain\]'"):
        importlib.import_module(module)


def test_corpus_transcripts_survive_langchain(corpus_path: Path) -> None:
    ours = from_openai(load_corpus_dicts(corpus_path))
    written = to_langchain(ours)
    assert from_langchain(written) == ours
    assert to_langchain(from_langchain(written)) == written
