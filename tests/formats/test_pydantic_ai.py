"""The pydantic-ai converter: exact round trips both ways, usage anchors, checkpoints, errors."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import importlib
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("pydantic_ai", reason=needs("pydantic-ai"))

from pydantic_ai import Agent, ModelRetry
from pydantic_ai import messages as pm
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

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
from context_engine.formats.openai import from_openai
from context_engine.formats.pydantic_ai import (
    FOLLOWERS_KEY,
    LEADERS_KEY,
    PART_KEY,
    RECORD_KEY,
    RESPONSE_KEY,
    from_pydantic_ai,
    to_pydantic_ai,
)
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY
from context_engine.testing import FixedTokenCounter, synthetic_session
from tests.conftest import load_corpus_dicts

pytestmark = pytest.mark.extra("pydantic-ai")

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ")
T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def stamped(messages: list[Message]) -> list[Message]:
    return [attrs.evolve(m, timestamp=T0) for m in messages]


def agent_history() -> list[pm.ModelMessage]:
    """A real run: instructions, an image prompt, thinking, a retried tool, feedback."""
    answers = iter(
        [
            pm.ModelResponse(
                parts=[
                    pm.ThinkingPart("plan", signature="sig", provider_name="anthropic"),
                    pm.ToolCallPart("flaky", {"x": 1}, tool_call_id="t1"),
                ]
            ),
            pm.ModelResponse(
                parts=[
                    pm.ToolCallPart("flaky", '{"x": 2}', tool_call_id="t2"),
                    pm.ToolCallPart("table", None, tool_call_id="t3"),
                ]
            ),
            pm.ModelResponse(parts=[pm.TextPart("not a number")]),
            pm.ModelResponse(parts=[pm.TextPart("42")], finish_reason="stop"),
        ]
    )

    def model(messages: list[pm.ModelMessage], info: AgentInfo) -> pm.ModelResponse:
        return next(answers)

    agent = Agent(FunctionModel(model), instructions="Answer with digits.", retries=3)

    @agent.tool_plain
    def flaky(x: int) -> str:
        if x == 1:
            raise ModelRetry("x must be 2")
        return "fine"

    @agent.tool_plain
    def table() -> dict[str, Any]:
        return {"rows": [1, 2, 3]}

    @agent.output_validator
    def digits(text: str) -> str:
        if not text.isdigit():
            raise ModelRetry("answer with digits only")
        return text

    prompt = ["Compute this", pm.ImageUrl("https://example.com/chart.png")]
    return asyncio.run(agent.run(prompt)).all_messages()


def rich_history() -> list[pm.ModelMessage]:
    """Hand-built parts that the message model has no field for, and framework-only requests."""
    usage = RequestUsage(
        input_tokens=900, output_tokens=40, cache_read_tokens=800, details={"x": 1}
    )
    return [
        pm.ModelRequest(parts=[pm.CompactionPart(content="framework only")]),
        pm.ModelRequest(
            parts=[
                pm.SystemPromptPart("You are terse.", timestamp=T0, dynamic_ref="sys"),
                pm.UserPromptPart(
                    [
                        pm.TextContent("caption", metadata={"source": "ui"}),
                        pm.ImageUrl("https://x/a.png", vendor_metadata={"detail": "low", "k": 1}),
                        pm.BinaryContent(PNG, media_type="image/png"),
                        pm.BinaryImage(PNG, media_type="image/png", identifier="img-2"),
                        pm.AudioUrl("https://x/a.mp3"),
                        pm.CachePoint(),
                    ],
                    timestamp=T0,
                ),
            ],
            timestamp=T0,
            instructions="Be brief.",
            run_id="run-1",
            metadata={"tenant": "acme"},
        ),
        pm.ModelResponse(
            parts=[
                pm.ThinkingPart("hmm", id="th_1", signature="s", provider_name="openai"),
                pm.TextPart("Looking.", id="msg_1", provider_name="openai"),
                pm.NativeToolCallPart(
                    "web_search", {"q": "x"}, tool_call_id="n1", provider_name="openai"
                ),
                pm.NativeToolReturnPart("web_search", {"hits": 2}, tool_call_id="n1", timestamp=T0),
                pm.ToolCallPart(
                    "read", {"path": "a.py"}, tool_call_id="c1", id="fc_1", provider_name="openai"
                ),
                pm.FilePart(pm.BinaryImage(PNG, media_type="image/png")),
            ],
            usage=usage,
            model_name="gpt-x",
            timestamp=T0,
            provider_name="openai",
            provider_response_id="resp_1",
            finish_reason="tool_call",
            metadata={"trace": "t-9"},
        ),
        pm.ModelRequest(
            parts=[
                pm.ToolReturnPart(
                    "read",
                    ["see", pm.ImageUrl("https://x/b.png")],
                    tool_call_id="c1",
                    timestamp=T0,
                    outcome="failed",
                    metadata={"exit": 1},
                ),
                pm.CompactionPart(content="an earlier summary"),
            ],
            timestamp=T0,
        ),
        pm.ModelRequest(parts=[], state="interrupted"),
        pm.ModelResponse(parts=[], timestamp=T0),
    ]


# ------------------------------------------------------------------ round trips


@pytest.mark.parametrize(
    "history",
    [
        agent_history,
        rich_history,
        lambda: [],
        lambda: to_pydantic_ai(stamped(synthetic_session(12))),
    ],
    ids=["real-agent-run", "parts-without-a-field", "empty", "written-by-us"],
)
def test_pydantic_ai_history_survives_the_round_trip_exactly(history: Any) -> None:
    """runtime -> messages -> runtime gives equal objects, parts the model lacks included."""
    original = history()
    messages = from_pydantic_ai(original)
    assert to_pydantic_ai(messages) == original
    assert from_pydantic_ai(to_pydantic_ai(messages)) == messages


def test_what_the_engine_sees_of_a_real_run() -> None:
    """Roles, text, images, tool calls and results with their ids, the retry feedback text."""
    messages = from_pydantic_ai(agent_history())
    assert [m.role for m in messages] == [
        "user", "assistant", "tool", "assistant", "tool", "tool", "assistant", "user", "assistant",
    ]  # fmt: skip
    prompt, plan, retried, _, fine, table, _, feedback, final = messages
    assert prompt.content == (
        TextBlock("Compute this"),
        ImageBlock(url="https://example.com/chart.png"),
    )
    assert plan.content == (
        ThinkingBlock("plan", signature="sig"),
        ToolCall("t1", "flaky", '{"x":1}'),
    )
    assert (retried.tool_call_id, retried.name, retried.text) == ("t1", "flaky", "x must be 2")
    assert (fine.tool_call_id, table.tool_call_id) == ("t2", "t3")
    assert table.text == '{"rows":[1,2,3]}'
    assert "answer with digits only" in feedback.text
    assert final.text == "42"
    assert final.stop_reason == "stop"
    assert all(m.timestamp is not None for m in messages)


def test_unchanged_history_comes_back_as_the_same_objects() -> None:
    """With reuse=, every message still equal to its original is that very object, once each."""
    original = to_pydantic_ai(synthetic_session(90))
    written = to_pydantic_ai(from_pydantic_ai(original), reuse=original)
    assert len(written) == len(original)
    assert sum(a is b for a, b in zip(written, original, strict=True)) == len(original)


def test_a_rewritten_message_is_rebuilt_and_drops_ids_tied_to_old_content() -> None:
    """A trimmed text loses its provider item id; a cleared dict result becomes the new text."""
    original = rich_history()
    messages = from_pydantic_ai(original)
    index = next(i for i, m in enumerate(messages) if m.role == "assistant" and m.content)
    reply = messages[index]
    trimmed = attrs.evolve(
        reply,
        content=tuple(
            TextBlock("Look[8 characters trimmed]") if isinstance(b, TextBlock) else b
            for b in reply.content
        ),
    )
    messages[index] = trimmed
    written = to_pydantic_ai(messages, reuse=original)
    response = written[2]
    assert isinstance(response, pm.ModelResponse)
    assert response is not original[2]
    text = next(p for p in response.parts if isinstance(p, pm.TextPart))
    thinking = next(p for p in response.parts if isinstance(p, pm.ThinkingPart))
    assert (text.content, text.id) == ("Look[8 characters trimmed]", None)
    assert (thinking.id, thinking.signature) == ("th_1", "s")  # untouched parts keep theirs
    assert sum(isinstance(p, pm.FilePart | pm.NativeToolCallPart) for p in response.parts) == 2
    assert sum(a is b for a, b in zip(written, original, strict=True)) == len(original) - 1


def test_a_cleared_structured_tool_result_is_sent_as_the_placeholder() -> None:
    history = agent_history()
    messages = from_pydantic_ai(history)
    index = next(i for i, m in enumerate(messages) if m.tool_call_id == "t3")
    messages[index] = attrs.evolve(messages[index], content=(TextBlock("[result cleared]"),))
    (part,) = [
        p
        for m in to_pydantic_ai(messages)
        if isinstance(m, pm.ModelRequest)
        for p in m.parts
        if isinstance(p, pm.ToolReturnPart) and p.tool_call_id == "t3"
    ]
    assert (part.content, part.tool_name) == ("[result cleared]", "table")


# ------------------------------------------------------------ messages -> runtime


OURS = [
    Message.system("sys"),
    Message.developer("dev"),
    Message("user", "hi", name="bob", timestamp=T0),
    Message(
        "user",
        (
            TextBlock("look"),
            ImageBlock(url="https://x/a.png", detail="high"),
            ImageBlock(data=base64.b64encode(PNG).decode(), media_type="image/png"),
        ),
    ),
    Message.assistant("ok", [ToolCall("c1", "read", '{"p": 1}'), ToolCall("c2", "grep")]),
    Message.tool("c1", "one", name="read"),
    Message("tool", "two", tool_call_id="c2", metadata={CLEARED_KEY: True}),
    ContextSummary(summary="Did the work.", read_files=("a.py",), tokens_before=5000),
    Message("user", "[3 turns truncated]", metadata={TRUNCATION_KEY: 3}),
    Message(
        "assistant",
        (
            ThinkingBlock("secret", redacted=True),
            ThinkingBlock("open", signature="s"),
            TextBlock("bye"),
        ),
        usage=Usage(1200, 30, cache_read_tokens=1000, cache_write_tokens=100),
        stop_reason="end_turn",
        metadata={"custom": [1, 2]},
    ),
    Message("user", "trimmed newest", metadata={TRIMMED_KEY: 1}),
    Message("assistant"),
]


@pytest.mark.parametrize("message", OURS, ids=lambda m: f"{m.role}:{m.text[:12] or 'blocks'}")
def test_a_message_survives_the_trip_through_pydantic_ai(message: Message) -> None:
    """messages -> runtime -> messages is the identity, metadata and markers included."""
    transcript = [Message.user("start"), Message.assistant("..."), message]
    assert from_pydantic_ai(to_pydantic_ai(transcript)) == transcript


def test_a_whole_transcript_survives_the_trip_and_groups_into_requests() -> None:
    history = to_pydantic_ai(OURS)
    assert [type(m).__name__ for m in history] == [
        "ModelRequest", "ModelResponse", "ModelRequest",
        "ModelResponse", "ModelRequest", "ModelResponse",
    ]  # fmt: skip
    assert from_pydantic_ai(history) == OURS
    first = history[0]
    assert isinstance(first, pm.ModelRequest)
    assert [p.part_kind for p in first.parts] == [
        "system-prompt", "system-prompt", "user-prompt", "user-prompt",
    ]  # fmt: skip
    tools = history[2]
    assert isinstance(tools, pm.ModelRequest)
    assert [getattr(p, "tool_name", None) for p in tools.parts[:2]] == ["read", "grep"]


def test_checkpoint_is_a_user_prompt_and_reads_back_as_a_checkpoint() -> None:
    summary = ContextSummary(summary="Parser fixed.", modified_files=("p.py",), timestamp=T0)
    (request,) = to_pydantic_ai([summary])
    assert isinstance(request, pm.ModelRequest)
    (part,) = request.parts
    assert isinstance(part, pm.UserPromptPart)
    assert part.timestamp == T0
    assert isinstance(part.content, str)
    assert part.content.startswith("<context-summary")
    (back,) = from_pydantic_ai([request])
    assert back == summary
    assert back.is_summary


def test_a_checkpoint_written_by_hand_into_a_history_is_recognised() -> None:
    text = ContextSummary(summary="Earlier work.").text
    request = pm.ModelRequest(parts=[pm.UserPromptPart(text, timestamp=T0)])
    (message,) = from_pydantic_ai([request])
    assert message.is_summary
    assert message.summary == "Earlier work."
    assert to_pydantic_ai([message]) == [request]


# ------------------------------------------------------------------------ usage


@pytest.mark.parametrize(
    ("usage", "expected", "kept"),
    [
        (
            RequestUsage(input_tokens=1500, output_tokens=20, cache_read_tokens=1024),
            Usage(1500, 20, 1024),
            False,
        ),
        (
            RequestUsage(input_tokens=700, cache_write_tokens=600),
            Usage(700, cache_write_tokens=600),
            False,
        ),
        (
            RequestUsage(input_tokens=10, output_tokens=5, output_reasoning_tokens=3),
            Usage(10, 5),
            True,
        ),
        (RequestUsage(), None, False),
        (RequestUsage(output_tokens=12), None, True),
        (RequestUsage(input_tokens=50, unmeasured_requests=1), None, True),
    ],
    ids=[
        "cached-read",
        "cache-write",
        "reasoning-detail",
        "none-reported",
        "output-only",
        "unmeasured",
    ],
)
def test_provider_usage_becomes_a_usage_anchor(
    usage: RequestUsage, expected: Usage | None, kept: bool
) -> None:
    """input_tokens already holds cached tokens; no input tokens means no anchor."""
    response = pm.ModelResponse(parts=[pm.TextPart("x")], usage=usage, timestamp=T0)
    (message,) = from_pydantic_ai([response])
    assert message.usage == expected
    assert ("usage" in message.metadata.get(RESPONSE_KEY, {})) is kept
    assert to_pydantic_ai([message]) == [response]


def test_the_engine_anchors_its_estimate_on_the_reported_usage() -> None:
    history = [
        pm.ModelRequest(parts=[pm.UserPromptPart("hello " * 50, timestamp=T0)]),
        pm.ModelResponse(
            parts=[pm.TextPart("hi")], usage=RequestUsage(input_tokens=4321), timestamp=T0
        ),
        pm.ModelRequest(parts=[pm.UserPromptPart("next", timestamp=T0)]),
    ]
    engine = ContextEngine(100_000, token_counter=FixedTokenCounter())
    estimate = engine.estimate(from_pydantic_ai(history))
    assert estimate.usage_tokens == 4321
    assert estimate.last_usage_index == 1
    assert estimate.tokens > 4321


# ------------------------------------------------------------------- edge cases


def test_a_tool_call_still_waiting_at_the_end_stays_a_call_without_result() -> None:
    history = [
        pm.ModelRequest(parts=[pm.UserPromptPart("delete it?", timestamp=T0)]),
        pm.ModelResponse(
            parts=[pm.ToolCallPart("rm", {"path": "x"}, tool_call_id="p1")], timestamp=T0
        ),
    ]
    messages = from_pydantic_ai(history)
    assert messages[-1].tool_calls == (ToolCall("p1", "rm", '{"path":"x"}'),)
    assert to_pydantic_ai(messages) == history


def test_framework_only_requests_ride_on_their_neighbours() -> None:
    """A request with nothing to read is kept whole, before or after the nearest message."""
    history = rich_history()
    messages = from_pydantic_ai(history)
    assert LEADERS_KEY in messages[0].metadata
    assert sum(FOLLOWERS_KEY in m.metadata for m in messages) == 1
    assert to_pydantic_ai(messages) == history


def test_parts_without_a_field_are_kept_in_metadata() -> None:
    messages = from_pydantic_ai(rich_history())
    system = messages[0]
    assert system.role == "system"
    assert system.metadata[PART_KEY] == {"dynamic_ref": "sys"}
    user = messages[1]
    assert [type(b).__name__ for b in user.content] == [
        "TextBlock",
        "ImageBlock",
        "ImageBlock",
        "ImageBlock",
    ]
    assert user.content[1] == ImageBlock(url="https://x/a.png", detail="low")
    assert [entry["kind"] for entry in user.metadata[PART_KEY]["items"]] == [
        "text", "image", "image", "image", "opaque", "opaque",
    ]  # fmt: skip


def test_written_history_keeps_its_records_out_of_the_model_fields() -> None:
    (request,) = to_pydantic_ai([Message("user", "x", metadata={"k": "v"}, name="ann")])
    assert isinstance(request, pm.ModelRequest)
    assert request.metadata == {
        RECORD_KEY: {
            "implicit": True,
            "slots": {"user-prompt:0": {"metadata": {"k": "v"}, "timestamp": None, "name": "ann"}},
        }
    }


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([pm.ModelRequest(parts=[]), "not a message"], "message 1: expected a ModelRequest"),
        (pm.ModelRequest(parts=[]), "takes a list"),
    ],
    ids=["stray-item", "single-message"],
)
def test_bad_runtime_input_names_the_problem(items: Any, message: str) -> None:
    with pytest.raises(InvalidMessageError, match=message):
        from_pydantic_ai(items)


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([Message.user("a"), "b"], "message 1: expected a Message"),
        ([Message("user", (ImageBlock(data="AAAA"),))], "media_type"),
        ([Message("system", (ImageBlock(url="https://x/a.png"),))], "system prompts are text"),
        ([Message("user", (ThinkingBlock("t"),))], "only assistant messages"),
        ([Message("assistant", (ImageBlock(url="https://x/a.png"),))], "assistant ImageBlock"),
    ],
    ids=[
        "not-a-message",
        "image-data-without-type",
        "image-in-system",
        "thinking-in-user",
        "assistant-image",
    ],
)
def test_messages_pydantic_ai_cannot_carry_are_refused_clearly(
    messages: list[Any], match: str
) -> None:
    with pytest.raises(InvalidMessageError, match=match):
        to_pydantic_ai(messages)


@pytest.mark.parametrize(
    "module", ["context_engine.formats.pydantic_ai", "context_engine.integrations.pydantic_ai"]
)
def test_without_pydantic_ai_the_import_error_names_the_extra(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ImportError, match=r"pip install 'context-engine\[pydantic-ai\]'"):
        importlib.import_module(module)


# ----------------------------------------------------------------------- corpus


def test_every_corpus_transcript_survives_the_trip_through_pydantic_ai(corpus_path: Path) -> None:
    messages = from_openai(load_corpus_dicts(corpus_path))
    history = to_pydantic_ai(messages)
    assert from_pydantic_ai(history) == messages
    assert to_pydantic_ai(from_pydantic_ai(history), reuse=history) == history
