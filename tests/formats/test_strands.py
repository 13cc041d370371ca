"""Strands Agents messages <-> Message: exact round trips both ways."""

from __future__ import annotations

import copy
import importlib
import sys
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("strands", reason=needs("strands"))


from context_engine import ContextEngine, ContextSummary, ExtractiveSummarizer, Message, ToolCall
from context_engine.errors import InvalidMessageError
from context_engine.formats.strands import (
    JOINS_KEY,
    NEW_MESSAGE_KEY,
    STATUS_KEY,
    from_strands,
    to_strands,
    to_strands_system_prompt,
    usage_from_strands,
    usage_to_strands,
)
from context_engine.invariants import check_view
from context_engine.messages import ImageBlock, TextBlock, ThinkingBlock, Usage
from context_engine.testing import FixedTokenCounter, synthetic_session

pytestmark = pytest.mark.extra("strands")

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def user(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks), **extra}


def assistant(*blocks: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": list(blocks), **extra}


def tool_use(call_id: str, name: str = "read_file", **tool_input: Any) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": tool_input}}


def tool_result(call_id: str, *items: dict[str, Any], status: str = "success") -> dict[str, Any]:
    return {"toolResult": {"toolUseId": call_id, "status": status, "content": list(items)}}


USAGE = {"inputTokens": 1200, "outputTokens": 40, "totalTokens": 1240}
CHECKPOINT_TEXT = ContextSummary(summary="## Goal\n- fix the parser", tokens_before=900).text

SITUATIONS: list[tuple[str, list[dict[str, Any]]]] = [
    ("empty history", []),
    ("plain text turn", [user({"text": "hi"}), assistant({"text": "hello"})]),
    (
        "tool call and result",
        [
            user({"text": "read a.py"}),
            assistant({"text": "Reading."}, tool_use("t1", path="a.py")),
            user(tool_result("t1", {"text": "print(1)"})),
        ],
    ),
    (
        "several results in one message",
        [
            assistant(tool_use("t1", path="a"), tool_use("t2", path="b")),
            user(tool_result("t1", {"text": "A"}), tool_result("t2", {"text": "B"})),
        ],
    ),
    (
        "user text after tool results",
        [
            assistant(tool_use("t1")),
            user(tool_result("t1", {"text": "A"}), {"text": "and also check b.py"}),
        ],
    ),
    (
        "user text before tool results",
        [assistant(tool_use("t1")), user({"text": "note"}, tool_result("t1", {"text": "A"}))],
    ),
    (
        "reasoning with signature and tool signature",
        [
            assistant(
                {"reasoningContent": {"reasoningText": {"text": "think", "signature": "sig"}}},
                {"toolUse": {**tool_use("t1")["toolUse"], "reasoningSignature": "rs"}},
            ),
            user(tool_result("t1", {"text": "ok"})),
        ],
    ),
    ("redacted reasoning", [assistant({"reasoningContent": {"redactedContent": b"\x00\x01"}})]),
    (
        "image bytes",
        [user({"text": "what is this?"}, {"image": {"format": "png", "source": {"bytes": PNG}}})],
    ),
    (
        "image and json in a tool result",
        [
            assistant(tool_use("t1", name="screenshot")),
            user(
                tool_result(
                    "t1",
                    {"image": {"format": "jpeg", "source": {"bytes": b"\xff\xd8\xff"}}},
                    {"json": {"width": 10, "tags": ["a", "é"]}},
                )
            ),
        ],
    ),
    (
        "error status",
        [assistant(tool_use("t1")), user(tool_result("t1", {"text": "boom"}, status="error"))],
    ),
    (
        "blocks without a Block kept whole",
        [
            user(
                {"document": {"format": "txt", "name": "n", "source": {"bytes": b"doc"}}},
                {"text": "summarize the document"},
                {"cachePoint": {"type": "default"}},
            ),
            assistant({"citationsContent": {"content": [{"text": "cited"}]}}),
        ],
    ),
    (
        "cache points around tool results",
        [
            assistant(tool_use("t1"), tool_use("t2")),
            user(
                {"cachePoint": {"type": "default"}},
                tool_result("t1", {"text": "A"}),
                {"cachePoint": {"type": "default"}},
                tool_result("t2", {"text": "B"}),
                {"cachePoint": {"type": "default"}},
            ),
        ],
    ),
    (
        "tracking ids, metrics and custom metadata",
        [
            user({"text": "hi"}, tracking_id="u-1"),
            assistant(
                {"text": "hello"},
                tracking_id="a-1",
                metadata={"usage": USAGE, "metrics": {"latencyMs": 7}, "custom": {"k": 1}},
            ),
            user({"text": "more"}, metadata={"custom": {"source": "ui"}}, tracking_id="u-2"),
        ],
    ),
    (
        "usage with the cache beside the input",
        [
            assistant(
                {"text": "x"},
                metadata={
                    "usage": {
                        "inputTokens": 10,
                        "outputTokens": 5,
                        "totalTokens": 1015,
                        "cacheReadInputTokens": 600,
                        "cacheWriteInputTokens": 400,
                    }
                },
            )
        ],
    ),
    (
        "usage not reported by the provider",
        [
            assistant(
                {"text": "x"},
                metadata={
                    "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
                    "metrics": {"latencyMs": 0},
                },
            )
        ],
    ),
    ("unknown top-level keys", [user({"text": "hi"}, origin={"ui": True})]),
    (
        "metadata carried for the messages of a dict",
        [
            assistant(tool_use("t1")),
            user(
                tool_result("t1", {"text": "[cleared]"}),
                {"text": "note"},
                metadata={
                    "custom": {"app": 1, "context_engine": [{"context_engine.cleared": True}, None]}
                },
            ),
        ],
    ),
    ("consecutive user messages", [user({"text": "a"}), user({"text": "b"})]),
    (
        "consecutive tool-result messages",
        [
            assistant(tool_use("t1"), tool_use("t2")),
            user(tool_result("t1", {"text": "A"})),
            user(tool_result("t2", {"text": "B"})),
        ],
    ),
    ("consecutive assistant messages", [assistant({"text": "a"}), assistant({"text": "b"})]),
    ("empty user content", [user(), assistant({"text": "?"})]),
    ("only a cache point", [user({"cachePoint": {"type": "default"}})]),
    (
        "checkpoint then the kept tail",
        [user({"text": CHECKPOINT_TEXT}), user({"text": "go on"}), assistant({"text": "ok"})],
    ),
    (
        "pending tool call at the end",
        [user({"text": "delete it"}), assistant({"text": "Deleting."}, tool_use("t9", name="rm"))],
    ),
]


@pytest.mark.parametrize("messages", [m for _, m in SITUATIONS], ids=[n for n, _ in SITUATIONS])
def test_strands_messages_survive_a_round_trip_unchanged(messages: list[dict[str, Any]]) -> None:
    """to_strands(from_strands(x)) == x, and the input dicts are not touched."""
    original = copy.deepcopy(messages)
    ours = from_strands(messages)
    assert to_strands(ours) == original
    assert messages == original


@pytest.mark.parametrize("messages", [m for _, m in SITUATIONS], ids=[n for n, _ in SITUATIONS])
def test_messages_survive_a_round_trip_through_strands(messages: list[dict[str, Any]]) -> None:
    """from_strands(to_strands(ours)) == ours for everything read from Strands."""
    ours = from_strands(messages, system_prompt="Be brief.")
    again = from_strands(to_strands(ours), system_prompt=to_strands_system_prompt(ours))
    assert again == ours


def test_roles_tool_ids_and_arguments_are_read_as_the_model_defines_them() -> None:
    """Each toolResult becomes a tool message; tool input becomes the JSON text of arguments."""
    messages = [
        user({"text": "read both"}),
        assistant({"text": "Reading."}, tool_use("t1", path="a.py"), tool_use("t2", path="b.py")),
        user(tool_result("t1", {"text": "A"}), tool_result("t2", {"text": "B"}, status="error")),
    ]
    ours = from_strands(messages, system_prompt="sys")
    assert [m.role for m in ours] == ["system", "user", "assistant", "tool", "tool"]
    assert ours[2].tool_calls == (
        ToolCall("t1", "read_file", '{"path": "a.py"}'),
        ToolCall("t2", "read_file", '{"path": "b.py"}'),
    )
    assert [(m.tool_call_id, m.text) for m in ours[3:]] == [("t1", "A"), ("t2", "B")]
    assert STATUS_KEY not in ours[3].metadata
    assert ours[4].metadata[STATUS_KEY] == "error"
    assert check_view(ours, ours) == []


def test_images_become_base64_blocks_and_come_back_as_the_same_bytes() -> None:
    """Image bytes are base64 data with a media type; writing decodes them again."""
    ours = from_strands([user({"image": {"format": "png", "source": {"bytes": PNG}}})])
    (block,) = ours[0].content
    assert isinstance(block, ImageBlock)
    assert block.media_type == "image/png"
    assert to_strands(ours)[0]["content"][0]["image"]["source"]["bytes"] == PNG


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        (ImageBlock(data="iVBORw0KGgoAAAA="), "png"),
        (ImageBlock(data="/9j/4AAQ", media_type="image/jpg"), "jpeg"),
        (ImageBlock(url="data:image/webp;base64,UklGRgAA"), "webp"),
    ],
    ids=["format from the data", "image/jpg alias", "data URL"],
)
def test_images_built_by_hand_get_a_strands_format(image: ImageBlock, expected: str) -> None:
    written = to_strands([Message("user", (image,))])
    assert written[0]["content"][0]["image"]["format"] == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"inputTokens": 100, "outputTokens": 10, "totalTokens": 110}, Usage(100, 10)),
        (
            {
                "inputTokens": 100,
                "outputTokens": 10,
                "totalTokens": 110,
                "cacheReadInputTokens": 80,
            },
            Usage(100, 10, cache_read_tokens=80),
        ),
        (
            {
                "inputTokens": 20,
                "outputTokens": 10,
                "totalTokens": 130,
                "cacheReadInputTokens": 60,
                "cacheWriteInputTokens": 40,
            },
            Usage(120, 10, cache_read_tokens=60, cache_write_tokens=40),
        ),
    ],
    ids=["no cache", "cache inside inputTokens (OpenAI)", "cache beside inputTokens (Anthropic)"],
)
def test_usage_input_tokens_are_the_whole_prompt(raw: dict[str, int], expected: Usage) -> None:
    """Usage.input_tokens counts the cache whichever way the provider reported it."""
    assert usage_from_strands(raw) == expected
    assert usage_from_strands(usage_to_strands(expected)) == expected
    message = from_strands([assistant({"text": "x"}, metadata={"usage": raw})])[0]
    assert message.usage == expected


def test_zero_usage_is_no_usage() -> None:
    """Strands stores zeros when a provider reports nothing; that must not anchor a count."""
    zeros = {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0}
    (message,) = from_strands([assistant({"text": "x"}, metadata={"usage": zeros})])
    assert message.usage is None
    assert to_strands([message])[0]["metadata"] == {"usage": zeros}


def test_provider_usage_anchors_the_engine_estimate() -> None:
    """The usage Strands stores on an assistant message is what the engine measures from."""
    counter = FixedTokenCounter()
    messages = [
        user({"text": "hi " * 50}),
        assistant({"text": "hello"}, metadata={"usage": {**USAGE, "inputTokens": 700}}),
        user({"text": "and now?"}),
    ]
    transcript = from_strands(messages, system_prompt="sys")
    engine = ContextEngine.default(100_000, token_counter=counter)
    estimate = engine.estimate(transcript)
    assert estimate.last_usage_index == 2
    assert estimate.usage_tokens == 700 + USAGE["outputTokens"]
    assert estimate.tokens > estimate.usage_tokens


async def test_engine_views_survive_a_round_trip_through_strands() -> None:
    """A compacted view written for Strands reads back as the same view."""
    session = [attrs.evolve(m, name=None) for m in synthetic_session(80)]
    system = to_strands_system_prompt(session)
    transcript = from_strands(to_strands(session), system_prompt=system)
    assert transcript == session
    engine = ContextEngine.default(
        6_000,
        tool_result_cap=None,  # the round trip of a checkpoint is what this test is about
        reserve_tokens=1_000,
        summarizer=ExtractiveSummarizer(),
        token_counter=FixedTokenCounter(),
    )
    projection = await engine.project(transcript)
    assert projection.commit is not None
    assert projection.messages[1].is_summary
    for view in (projection.messages, projection.commit):
        assert view is not None
        assert from_strands(to_strands(view), system_prompt=system) == list(view)


def test_a_checkpoint_reads_back_as_a_checkpoint_in_a_dict_of_its_own() -> None:
    """The engine recognises its checkpoint after a commit; it never merges with the prompt."""
    summary = ContextSummary(summary="done so far", tokens_before=10, read_files=("a.py",))
    written = to_strands([summary, Message.user("next")])
    assert written == [user({"text": summary.text}), user({"text": "next"})]
    assert from_strands(written) == [summary, Message.user("next")]


def test_inserted_messages_get_their_own_dict_and_read_results_stay_together() -> None:
    """Only messages read from one dict share it again; results of one turn always do."""
    calls = [ToolCall("t1", "a"), ToolCall("t2", "b")]
    ours = [
        Message.assistant(tool_calls=calls),
        Message.tool("t1", "A"),
        Message.tool("t2", "B"),
        Message.user("[2 messages removed]"),
        Message.user("next"),
    ]
    written = to_strands(ours)
    assert [len(m["content"]) for m in written] == [2, 2, 1, 1]
    read = from_strands(written)
    assert read == ours
    joined = from_strands([user(tool_result("t1", {"text": "A"}), {"text": "note"})])
    assert [m.metadata.get(JOINS_KEY) for m in joined] == [None, True]
    apart = from_strands([user(tool_result("t1", {"text": "A"})), user(tool_result("t2"))])
    assert [m.metadata.get(NEW_MESSAGE_KEY) for m in apart] == [None, True]


def test_other_metadata_travels_in_custom_and_never_in_the_content() -> None:
    """Engine markers and caller keys survive Strands, in the part Strands never sends."""
    marked = Message(
        "tool", "[cleared]", tool_call_id="t1", metadata={"context_engine.cleared": True}
    )
    ours = [Message.assistant(tool_calls=[ToolCall("t1", "f")]), marked]
    written = to_strands(ours)
    assert written[1]["content"] == [tool_result("t1", {"text": "[cleared]"})]
    assert written[1]["metadata"] == {
        "custom": {"context_engine": [{"context_engine.cleared": True}]}
    }
    assert from_strands(written) == ours


def test_reasoning_blocks_are_thinking_blocks() -> None:
    ours = from_strands(
        [
            assistant(
                {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "s"}}},
                {"reasoningContent": {"redactedContent": b"\x01"}},
            )
        ]
    )
    assert ours[0].content == (ThinkingBlock("hmm", "s"), ThinkingBlock("AQ==", redacted=True))


def test_rewritten_blocks_drop_what_no_longer_fits() -> None:
    """A cleared json result is written as text; blocks kept whole stay in place."""
    (call, result) = from_strands(
        [
            assistant(tool_use("t1")),
            user(tool_result("t1", {"json": {"rows": list(range(50))}})),
        ]
    )
    cleared = attrs.evolve(result, content=(TextBlock("[result cleared]"),))
    written = to_strands([call, cleared])
    assert written[1]["content"][0]["toolResult"]["content"] == [{"text": "[result cleared]"}]


def test_system_prompt_forms_come_back_as_given() -> None:
    blocks = [{"text": "Be brief."}, {"cachePoint": {"type": "default"}}]
    assert to_strands_system_prompt(from_strands([], system_prompt="Be brief.")) == "Be brief."
    assert to_strands_system_prompt(from_strands([], system_prompt=blocks)) == blocks
    assert to_strands_system_prompt([Message.user("x")]) is None
    assert to_strands([Message.system("s"), Message.user("x")]) == [user({"text": "x"})]


@pytest.mark.parametrize(
    ("messages", "index", "fragment"),
    [
        ([{"role": "system", "content": [{"text": "x"}]}], 0, "role must be"),
        ([user({"text": "a"}), {"role": "user", "content": "x"}], 1, "content must be a list"),
        ([user({"toolResult": {"status": "success", "content": []}})], 0, "toolUseId"),
        ([user(tool_use("t1"))], 0, "only assistant messages may call tools"),
        ([assistant({"toolUse": {"toolUseId": "", "name": "x", "input": {}}})], 0, "non-empty"),
        ([assistant({"text": "x"}, metadata={"usage": {"inputTokens": -1}})], 0, "inputTokens"),
        (["not a dict"], 0, "expected a message dict"),
    ],
    ids=[
        "system role",
        "content not a list",
        "result without id",
        "tool use in a user message",
        "empty tool id",
        "negative usage",
        "not a dict",
    ],
)
def test_malformed_strands_messages_are_reported_with_their_index(
    messages: list[Any], index: int, fragment: str
) -> None:
    with pytest.raises(InvalidMessageError, match=fragment) as caught:
        from_strands(messages)
    assert caught.value.index == index


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        ([Message.user("a"), Message.system("late")], "after the conversation started"),
        ([Message("user", (ImageBlock(url="https://x/y.png"),))], "not URLs"),
        ([Message.assistant(tool_calls=[ToolCall("t", "f", "{not json")])], "not JSON"),
        ([Message("tool", (ThinkingBlock("x"),), tool_call_id="t")], "thinking block"),
    ],
    ids=["late system message", "image URL", "arguments not JSON", "thinking in a tool result"],
)
def test_messages_strands_cannot_hold_are_refused_clearly(
    messages: list[Message], fragment: str
) -> None:
    with pytest.raises(InvalidMessageError, match=fragment):
        to_strands(messages)


def test_a_single_dict_or_message_is_refused() -> None:
    with pytest.raises(InvalidMessageError, match="list of message dicts"):
        from_strands(user({"text": "x"}))
    with pytest.raises(InvalidMessageError, match="list of messages"):
        to_strands(Message.user("x"))  # type: ignore[arg-type]


def test_missing_strands_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without Strands installed the import error says which extra to install."""
    monkeypatch.setitem(sys.modules, "strands", None)
    monkeypatch.delitem(sys.modules, "context_engine.formats.strands")
    with pytest.raises(ImportError, match=r"pip install 'context-engine\[strands\]'"):
        importlib.import_module("context_engine.formats.strands")
