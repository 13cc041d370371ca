"""Engine-placed Anthropic breakpoints (``cache_breakpoints=True``), checked on `to_anthropic`."""

from __future__ import annotations

import typing
from typing import Any

import pytest

from context_engine import ContextEngine, Message
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.breakpoints import (
    ENGINE_BREAKPOINT_KEY,
    body_breakpoints,
    place_breakpoints,
)
from context_engine.messages import ContextSummary, TextBlock, ThinkingBlock, ToolCall
from context_engine.strategies import FullSummary, ToolResultMicrocompact
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter

COUNTER = FixedTokenCounter()  # 4 characters a token
RULES = "Follow the house rules. " * 300  # about 1,800 tokens: above Anthropic's 1,024 minimum
EPHEMERAL = {"type": "ephemeral"}


def session(*, checkpoint: bool = False) -> list[Message]:
    call = ToolCall("t1", "read_file", '{"path": "a.py"}')
    head = [Message.system(RULES)]
    if checkpoint:
        head.append(ContextSummary(summary="The agent read a.py.", tokens_before=9_000))
    return [
        *head,
        Message.user("Fix the bug in a.py."),
        Message.assistant("reading", tool_calls=[call]),
        Message.tool("t1", "code\n" * 200),
    ]


def engine(**options: Any) -> ContextEngine:
    options.setdefault("cache_breakpoints", True)
    return ContextEngine(100_000, [ToolResultMicrocompact()], token_counter=COUNTER, **options)


def test_the_engine_places_a_breakpoint_after_the_system_prompt_and_one_at_the_end() -> None:
    """And one on the clearing frontier: the message before the result a clearing may rewrite."""
    messages = session()
    body = to_anthropic(engine().project_sync(messages).messages, request=True)
    assert body_breakpoints(body) == [EPHEMERAL, EPHEMERAL, EPHEMERAL]
    assert body["system"][-1]["cache_control"] == EPHEMERAL
    assert body["messages"][1]["content"][-1]["cache_control"] == EPHEMERAL  # its tool_use
    last_block = body["messages"][-1]["content"][-1]
    assert last_block["type"] == "tool_result"
    assert last_block["cache_control"] == EPHEMERAL
    assert messages == session()  # the caller's messages are not touched


def test_the_stable_prefix_ends_at_the_checkpoint() -> None:
    body = to_anthropic(engine().project_sync(session(checkpoint=True)).messages, request=True)
    assert "cache_control" not in str(body["system"])
    first = body["messages"][0]["content"]
    assert first[0]["text"].startswith("<context-summary")
    assert first[0]["cache_control"] == EPHEMERAL  # the checkpoint's block, not the task's
    assert len(body_breakpoints(body)) == 3  # and the clearing frontier, and the end


def test_without_the_setting_no_breakpoint_is_added() -> None:
    body = to_anthropic(engine(cache_breakpoints=False).project_sync(session()).messages)
    assert body_breakpoints(body) == []


def callers_body(breakpoints: int) -> dict[str, Any]:
    """A body whose first ``breakpoints`` user messages carry the caller's own breakpoint."""
    messages: list[dict[str, Any]] = []
    for n in range(5):
        text: dict[str, Any] = {"type": "text", "text": f"step {n} " * 200}
        if n < breakpoints:
            text["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
        messages += [
            {"role": "user", "content": [text]},
            {"role": "assistant", "content": f"done {n}"},
        ]
    messages.append({"role": "user", "content": "next"})
    return {"system": RULES, "messages": messages}


def test_the_callers_breakpoints_stay_and_count_against_the_four() -> None:
    """Three of the caller's leave room for one: the last message's."""
    for own, added in ((0, 2), (2, 2), (3, 1), (4, 0)):
        original = callers_body(own)
        body = to_anthropic(engine().project_sync(from_anthropic(original)).messages)
        found = body_breakpoints(body)
        assert len(found) == own + added
        assert found.count({"type": "ephemeral", "ttl": "1h"}) == own
        assert len(found) <= 4
        if added == 1:
            assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL


def test_a_prefix_shorter_than_the_cacheable_minimum_gets_no_breakpoint() -> None:
    short = [Message.system("Be brief."), Message.user("hi")]  # far below 1,024 tokens
    assert body_breakpoints(to_anthropic(engine().project_sync(short).messages)) == []
    long_end = [Message.system("Be brief."), Message.user("details " * 800)]
    body = to_anthropic(engine().project_sync(long_end).messages)
    assert body_breakpoints(body) == [EPHEMERAL]  # the whole prompt is long enough; the system not


def test_a_message_ending_in_thinking_gets_no_breakpoint() -> None:
    thinking = Message("assistant", (TextBlock("x" * 8_000), ThinkingBlock("hmm", signature="s")))
    view = place_breakpoints([Message.system(RULES), Message.user("go"), thinking], lambda i: 5_000)
    assert ENGINE_BREAKPOINT_KEY not in view[-1].metadata
    assert ENGINE_BREAKPOINT_KEY in view[0].metadata


def test_a_view_passed_back_as_the_transcript_moves_the_engines_breakpoints() -> None:
    """An agent that keeps the views it sent still gets three breakpoints, the newest at the end."""
    agent = engine()
    sent = list(agent.project_sync(session()).messages)
    grown = [*sent, Message.assistant("fixed"), Message.user("thanks, now run the tests")]
    body = to_anthropic(agent.project_sync(grown).messages)
    assert body_breakpoints(body) == [EPHEMERAL, EPHEMERAL, EPHEMERAL]
    assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL


def test_a_commit_never_carries_the_engines_breakpoints() -> None:
    calls = [ToolCall(f"t{n}", "read_file", f'{{"path": "f{n}.py"}}') for n in range(12)]
    messages = [Message.system(RULES), Message.user("Read every file.")]
    for call in calls:
        messages += [
            Message.assistant("reading", tool_calls=[call]),
            Message.tool(call.id, "x" * 4_000),
        ]
    summarizing = ContextEngine(
        12_000,
        [FullSummary(summarizer=ExtractiveSummarizer())],
        token_counter=COUNTER,
        cache_breakpoints=True,
    )
    result = summarizing.project_sync(messages)
    assert result.commit is not None
    assert body_breakpoints(to_anthropic(result.commit)) == []
    assert all(ENGINE_BREAKPOINT_KEY not in m.metadata for m in result.commit)
    assert len(body_breakpoints(to_anthropic(result.messages))) == 2


def test_the_blocks_the_engine_marks_take_cache_control_in_the_sdk_types() -> None:
    """Text, tool_result and tool_use blocks take a breakpoint; thinking blocks do not."""
    types = pytest.importorskip("anthropic.types")
    for marked in ("TextBlockParam", "ToolResultBlockParam", "ToolUseBlockParam"):
        assert "cache_control" in typing.get_type_hints(getattr(types, marked))
    for thinking in ("ThinkingBlockParam", "RedactedThinkingBlockParam"):
        assert "cache_control" not in typing.get_type_hints(getattr(types, thinking))
