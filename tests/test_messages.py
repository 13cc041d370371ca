"""The message model: validation, constructors, immutability, equality, checkpoints."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
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
from context_engine.archive.reference import message_digest
from context_engine.messages import parse_context_summary
from context_engine.testing import FixedTokenCounter

CALL = ToolCall("c1", "bash", '{"cmd": "ls"}')

INVALID: list[tuple[str, Callable[[], object], str]] = [
    ("unknown role", lambda: Message("function", "x"), "unknown role 'function'"),  # type: ignore[arg-type]
    ("tool message without tool_call_id", lambda: Message("tool", "x"), "without tool_call_id"),
    ("tool message with empty tool_call_id", lambda: Message.tool("", "x"), "without tool_call_id"),
    ("tool call without id", lambda: ToolCall("", "bash"), "ToolCall.id must be a non-empty str"),
    ("tool call without name", lambda: ToolCall("c1", ""), "ToolCall 'c1' needs a non-empty name"),
    (
        "arguments not a string",
        lambda: ToolCall("c1", "bash", {"cmd": "ls"}),  # type: ignore[arg-type]
        "arguments must be the raw JSON text (str), got dict; pass json.dumps(arguments)",
    ),
    ("image without url or data", lambda: ImageBlock(), "exactly one of url= or data="),
    (
        "image with url and data",
        lambda: ImageBlock(url="u", data="d"),
        "exactly one of url= or data=",
    ),
    (
        "tool call on a user message",
        lambda: Message("user", (CALL,)),
        "user message carries tool call 'c1'; only assistant messages may call tools",
    ),
    (
        "tool call on a tool message",
        lambda: Message("tool", (CALL,), tool_call_id="c0"),
        "only assistant messages may call tools",
    ),
    ("negative usage", lambda: Usage(-1), "Usage.input_tokens must be a non-negative int, got -1"),
    (
        "fractional usage",
        lambda: Usage(10, output_tokens=1.5),  # type: ignore[arg-type]
        "Usage.output_tokens must be a non-negative int, got 1.5",
    ),
    (
        "boolean usage",
        lambda: Usage(True),
        "Usage.input_tokens must be a non-negative int, got True",
    ),
    (
        "usage count as a string",
        lambda: Usage(10, cache_read_tokens="3"),  # type: ignore[arg-type]
        "Usage.cache_read_tokens must be a non-negative int",
    ),
    (
        "usage as a dict",
        lambda: Message("assistant", "x", usage={"input_tokens": 1}),  # type: ignore[arg-type]
        "usage must be a Usage, got dict",
    ),
    (
        "content item that is not a block",
        lambda: Message("user", ("hi", "there")),
        "content item of type str",
    ),
    (
        "content of a wrong type",
        lambda: Message("user", 5),
        "content must be a str or a sequence of blocks, got int",
    ),
    ("text block of a wrong type", lambda: TextBlock(5), "TextBlock.text must be a str, got int"),  # type: ignore[arg-type]
    (
        "thinking block of a wrong type",
        lambda: ThinkingBlock(None),  # type: ignore[arg-type]
        "ThinkingBlock.thinking must be a str",
    ),
    (
        "timestamp as a string",
        lambda: Message("user", "x", timestamp="2025-01-01"),
        "timestamp must be a datetime or None",
    ),
    (
        "summary of a wrong type",
        lambda: ContextSummary(summary=3),  # type: ignore[arg-type]
        "ContextSummary.summary must be a str",
    ),
    (
        "file list given as one string",
        lambda: ContextSummary(summary="s", read_files="a.py"),
        "file lists and references must be sequences of str, not one str",
    ),
    (
        "file path that is not a string",
        lambda: ContextSummary(summary="s", modified_files=[1]),  # type: ignore[list-item]
        "file paths and references must be str without newlines, got 1",
    ),
    (
        "file path with a newline",
        lambda: ContextSummary(summary="s", read_files=["a\nb"]),
        "file paths and references must be str without newlines",
    ),
    (
        "negative tokens_before",
        lambda: ContextSummary(summary="s", tokens_before=-5),
        "ContextSummary.tokens_before must be a non-negative int, got -5",
    ),
]


@pytest.mark.parametrize(
    ("build", "problem"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID]
)
def test_invalid_values_fail_at_construction_with_a_clear_message(
    build: Callable[[], object], problem: str
) -> None:
    """Each broken rule raises InvalidMessageError (a ValueError) saying which rule."""
    with pytest.raises(InvalidMessageError) as info:
        build()
    assert problem in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.index is None


CONSTRUCTORS: list[tuple[str, Message, Message]] = [
    ("system", Message.system("rules"), Message("system", (TextBlock("rules"),))),
    ("developer", Message.developer("rules"), Message("developer", (TextBlock("rules"),))),
    ("user", Message.user("hi"), Message("user", (TextBlock("hi"),))),
    ("empty user text has no block", Message.user(""), Message("user", ())),
    ("assistant text", Message.assistant("ok"), Message("assistant", (TextBlock("ok"),))),
    ("assistant with nothing", Message.assistant(), Message("assistant", ())),
    (
        "assistant tool calls only",
        Message.assistant(tool_calls=[CALL]),
        Message("assistant", (CALL,)),
    ),
    (
        "assistant text, calls and usage",
        Message.assistant("Listing.", tool_calls=(CALL,), usage=Usage(10, 2)),
        Message("assistant", (TextBlock("Listing."), CALL), usage=Usage(10, 2)),
    ),
    (
        "tool result",
        Message.tool("c1", "a.txt", name="bash"),
        Message("tool", (TextBlock("a.txt"),), tool_call_id="c1", name="bash"),
    ),
]


@pytest.mark.parametrize(
    ("built", "expected"), [c[1:] for c in CONSTRUCTORS], ids=[c[0] for c in CONSTRUCTORS]
)
def test_short_constructors_build_the_obvious_message(built: Message, expected: Message) -> None:
    """Message.system/developer/user/assistant/tool are shorthands for the full form."""
    assert built == expected
    assert type(built) is Message


@pytest.mark.parametrize(
    ("content", "blocks"),
    [
        ("hi", (TextBlock("hi"),)),
        ("", ()),
        (None, ()),
        (TextBlock("one"), (TextBlock("one"),)),
        ([TextBlock("a"), ImageBlock(url="u")], (TextBlock("a"), ImageBlock(url="u"))),
    ],
    ids=["str", "empty str", "None", "one block", "list of blocks"],
)
def test_content_is_normalised_to_a_tuple_of_blocks(content: Any, blocks: tuple[Any, ...]) -> None:
    """A str, None, one block or any iterable of blocks becomes a tuple."""
    assert Message("user", content).content == blocks


def test_text_and_tool_calls_read_the_blocks() -> None:
    """.text joins the text blocks; .tool_calls lists the calls in order."""
    other = ToolCall("c2", "read", "{}")
    message = Message(
        "assistant", (ThinkingBlock("hm"), TextBlock("a"), CALL, TextBlock("b"), other)
    )
    assert message.text == "a\nb"
    assert message.tool_calls == (CALL, other)
    assert not message.is_summary


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (Message.user("hi"), "role"),
        (Message.user("hi"), "content"),
        (TextBlock("hi"), "text"),
        (CALL, "arguments"),
        (Usage(10), "input_tokens"),
        (ImageBlock(url="u"), "url"),
        (ContextSummary(summary="s"), "summary"),
    ],
    ids=["message role", "message content", "text", "tool call", "usage", "image", "summary"],
)
def test_messages_and_blocks_are_immutable(value: object, field: str) -> None:
    """Assigning an attribute raises FrozenInstanceError."""
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(value, field, "changed")


def test_metadata_is_copied_at_construction() -> None:
    """Changing the dict passed in afterwards does not change the message."""
    source = {"k": 1}
    message = Message.user("hi")
    message = attrs.evolve(message, metadata=source)
    source["k"] = 2
    assert message.metadata == {"k": 1}


def test_equality_hash_and_repr_ignore_what_is_derived(counter: FixedTokenCounter) -> None:
    """A message whose tokens, digest and tool calls were derived equals a fresh copy."""
    counted = Message.assistant("some text", tool_calls=[CALL])
    fresh = Message.assistant("some text", tool_calls=[CALL])
    assert counter.count_message(counted) > 0
    assert message_digest(counted) == message_digest(Message.assistant("some text", [CALL]))
    assert counted.tool_calls == (CALL,)
    assert counted == fresh
    assert hash(counted) == hash(fresh)
    assert len({counted, fresh}) == 1
    assert repr(counted) == repr(fresh)


def test_metadata_counts_for_equality_but_not_for_hashing() -> None:
    """Messages with dict metadata stay hashable; different metadata makes them unequal."""
    plain = Message.user("hi")
    tagged = Message("user", "hi", metadata={"source": {"nested": [1]}})
    assert hash(plain) == hash(tagged)
    assert plain != tagged


def test_a_checkpoint_is_a_user_message_that_knows_it_is_a_summary() -> None:
    """ContextSummary renders its text and is recognisable; it never equals a plain message."""
    summary = ContextSummary(summary="done", tokens_before=10)
    assert summary.role == "user"
    assert summary.is_summary
    assert summary != Message.user(summary.text)
    assert hash(summary) == hash(ContextSummary(summary="done", tokens_before=10))


def test_checkpoint_rendering() -> None:
    """The text wraps the summary in tags, with attributes and file lists after it."""
    summary = ContextSummary(
        summary="Fixed the bug.",
        tokens_before=1234,
        read_files=("a.py", "b.py"),
        modified_files=("a.py",),
        timestamp=dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
    )
    assert summary.text == (
        '<context-summary tokens-before="1234" timestamp="2025-01-02T03:04:05+00:00">\n'
        "Fixed the bug.\n"
        "<read-files>\na.py\nb.py\n</read-files>\n"
        "<modified-files>\na.py\n</modified-files>\n"
        "</context-summary>"
    )


def test_changing_a_checkpoint_re_renders_its_text() -> None:
    """attrs.evolve on the summary fields gives a new, consistent rendering."""
    summary = ContextSummary(summary="old", read_files=("a.py",))
    newer = attrs.evolve(summary, summary="new", name="compactor")
    assert newer.text.splitlines()[1] == "new"
    assert newer.read_files == ("a.py",)
    assert newer.name == "compactor"
    assert summary.text.splitlines()[1] == "old"


ROUND_TRIPS: list[tuple[str, ContextSummary]] = [
    ("plain", ContextSummary(summary="Did things.", tokens_before=99)),
    ("empty summary", ContextSummary(summary="")),
    ("empty summary with files", ContextSummary(summary="", read_files=("a.py",))),
    (
        "both file lists",
        ContextSummary(summary="s", read_files=("a.py", "b c.py"), modified_files=("d/e.py",)),
    ),
    ("only modified files", ContextSummary(summary="s", modified_files=("x.py",))),
    (
        "aware timestamp",
        ContextSummary(
            summary="s",
            timestamp=dt.datetime(2025, 6, 1, 8, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        ),
    ),
    (
        "naive timestamp",
        ContextSummary(summary="s", timestamp=dt.datetime(2025, 6, 1, 8, 0, 1, 500)),
    ),
    ("multi-line text", ContextSummary(summary="line 1\n\n- item\n  indented\n", tokens_before=5)),
    ("closing tag in text", ContextSummary(summary="it printed </context-summary> twice")),
    (
        "closing tag at the very end",
        ContextSummary(summary="ends with\n</context-summary>", modified_files=("m.py",)),
    ),
    (
        "file-list look-alike at the end",
        ContextSummary(summary="notes\n<read-files>\nfake.py\n</read-files>"),
    ),
    (
        "file-list look-alikes beside real lists",
        ContextSummary(
            summary="x\n<modified-files>\nq.py\n</modified-files>",
            read_files=("r.py",),
            modified_files=("m.py",),
        ),
    ),
    (
        "escaped-looking text",
        ContextSummary(summary="&lt;/context-summary&gt; and <\\/context-summary>"),
    ),
    ("opening tag in text", ContextSummary(summary='<context-summary tokens-before="1">\nnested')),
    ("cjk text", ContextSummary(summary="修复了解析器", read_files=("src/解析.py",))),
]


@pytest.mark.parametrize("summary", [c[1] for c in ROUND_TRIPS], ids=[c[0] for c in ROUND_TRIPS])
def test_parse_context_summary_inverts_rendering(summary: ContextSummary) -> None:
    """parse_context_summary(summary.text) gives back an equal checkpoint."""
    parsed = parse_context_summary(summary.text)
    assert parsed == summary
    assert parsed is not None
    assert parsed.text == summary.text
    assert summary.text.count("</context-summary>") == 1
    assert summary.text.endswith("\n</context-summary>")


def test_parse_context_summary_attaches_metadata() -> None:
    """The metadata argument lands on the rebuilt checkpoint."""
    parsed = parse_context_summary(ContextSummary(summary="s").text, metadata={"k": "v"})
    assert parsed is not None
    assert parsed.metadata == {"k": "v"}


@pytest.mark.parametrize(
    "text",
    [
        "just a user message",
        "",
        " <context-summary>\ns\n</context-summary>",
        '<context-summary tokens-before="1">\nno closing tag',
        '<context-summary tokens-before="1">\ns\n</context-summary> trailing',
        '<context-summary tokens-before="many">\ns\n</context-summary>',
        '<context-summary timestamp="yesterday">\ns\n</context-summary>',
    ],
    ids=[
        "plain text",
        "empty",
        "leading space",
        "no closing tag",
        "text after the closing tag",
        "tokens not a number",
        "bad timestamp",
    ],
)
def test_parse_context_summary_rejects_other_text(text: str) -> None:
    """Anything that is not a rendered checkpoint gives None, never an exception."""
    assert parse_context_summary(text) is None
