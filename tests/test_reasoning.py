"""Reasoning bound to its prefix: dropped whole after a rewritten prefix, never edited."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError
from context_engine.formats.anthropic import BLOCKS_KEY, from_anthropic, to_anthropic
from context_engine.invariants import check_view
from context_engine.messages import TextBlock, ThinkingBlock, ToolCall
from context_engine.reasoning import drop_unbound_reasoning, first_change
from context_engine.strategies import ToolResultMicrocompact
from context_engine.structure import analyze
from context_engine.testing import FixedTokenCounter
from tests.transcripts import transcripts

COUNTER = FixedTokenCounter()
EARLY = ThinkingBlock("look at the logs first", signature="sig-early")
LATER = ThinkingBlock("the logs say the disk is full", signature="sig-later")
NOW = ThinkingBlock("RW5jcnlwdGVk", redacted=True)
TRANSCRIPT = (
    Message.system("you operate servers"),
    Message.user("why is the service down?"),
    Message("assistant", (EARLY, ToolCall("a", "bash", '{"cmd": "journalctl"}'))),
    Message.tool("a", "log line\n" * 800),
    Message("assistant", (LATER, TextBlock("the disk is full"))),
    Message.user("free some space"),
    Message("assistant", (NOW, ToolCall("b", "bash", '{"cmd": "df -h"}'))),
    Message.tool("b", "/ 100%"),
)


def thinking_in(messages: tuple[Message, ...] | list[Message]) -> list[ThinkingBlock]:
    return [b for m in messages for b in m.content if isinstance(b, ThinkingBlock)]


def engine(**options: Any) -> ContextEngine:
    strategy = ToolResultMicrocompact(keep_recent=1, min_result_tokens=0)
    return ContextEngine(1_500, [strategy], reserve_tokens=200, token_counter=COUNTER, **options)


def test_a_rewrite_drops_the_reasoning_after_the_change_and_reports_its_tokens() -> None:
    """Reasoning before the change and in the current turn stays; in between it goes."""
    result = engine().project_sync(TRANSCRIPT)
    assert result.event is not None
    assert result.event.strategy == "tool_result_microcompact"
    assert thinking_in(result.messages) == [EARLY, NOW]
    # The test counter counts a thinking block's text, not its opaque signature.
    assert result.event.reasoning_tokens_dropped == COUNTER.count_text(LATER.thinking)
    assert check_view(TRANSCRIPT, result.messages) == []


def test_the_keep_policy_sends_every_reasoning_block_unchanged() -> None:
    """With ``reasoning="keep"`` the rewrite runs and no thinking block is dropped."""
    result = engine(reasoning="keep").project_sync(TRANSCRIPT)
    assert result.changed
    assert thinking_in(result.messages) == [EARLY, LATER, NOW]
    assert result.event is not None
    assert result.event.reasoning_tokens_dropped == 0


def test_a_committed_view_is_the_view_sent_without_the_unbound_reasoning() -> None:
    """What the caller commits matches what the provider was sent."""
    compacting = ContextEngine(
        1_500,
        [ToolResultMicrocompact(keep_recent=1, min_result_tokens=0)],
        reserve_tokens=200,
        token_counter=COUNTER,
        commit_strategies=("tool_result_microcompact",),
    )
    result = compacting.project_sync(TRANSCRIPT)
    assert result.commit is not None
    assert thinking_in(result.commit) == [EARLY, NOW]


def test_an_unknown_reasoning_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(ConfigurationError, match=r"'drop'.*'keep'"):
        ContextEngine(1_000, reasoning="discard")  # type: ignore[arg-type]


def test_a_message_left_with_only_reasoning_goes_whole() -> None:
    """An assistant turn that was nothing but reasoning leaves no empty message behind."""
    alone = Message("assistant", (LATER,))
    transcript = (*TRANSCRIPT[:4], alone, *TRANSCRIPT[5:])
    view = (*transcript[:3], Message.tool("a", "[cleared]"), *transcript[4:])
    out, dropped = drop_unbound_reasoning(transcript, view, COUNTER)
    assert alone not in out
    assert len(out) == len(view) - 1
    assert dropped == COUNTER.count_message(alone)


def test_a_cache_breakpoint_beside_dropped_reasoning_is_written_back() -> None:
    """Dropping a thinking block keeps the caller's ``cache_control`` on the blocks that stay."""
    body = {
        "system": "you operate servers",
        "messages": [
            {"role": "user", "content": "why?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "sig"},
                    {"type": "text", "text": "full", "cache_control": {"type": "ephemeral"}},
                ],
            },
            {"role": "user", "content": "fix it"},
        ],
    }
    transcript = tuple(from_anthropic(body))
    assert BLOCKS_KEY in transcript[2].metadata
    view = (transcript[0], Message.user("why? (shortened)"), *transcript[2:])
    out, dropped = drop_unbound_reasoning(transcript, view, COUNTER)
    assert dropped > 0
    written = to_anthropic(out)["messages"][1]["content"]
    assert written == [{"type": "text", "text": "full", "cache_control": {"type": "ephemeral"}}]


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(transcript=transcripts(max_turns=5, max_steps=4), window=st.integers(600, 40_000))
def test_no_view_edits_or_orphans_reasoning_and_none_survives_a_changed_prefix(
    transcript: list[Message], window: int
) -> None:
    """Every view: reasoning whole and beside its calls; none between the change and the turn."""
    default = ContextEngine.default(window, token_counter=COUNTER)
    result = default.project_sync(transcript)
    view = tuple(result.messages)
    assert check_view(transcript, view) == []
    known = set(thinking_in(transcript))
    assert set(thinking_in(view)) <= known
    if result.changed:
        start, end = first_change(transcript, view), analyze(view).last_user
        assert thinking_in(view[start:end]) == []
        dropped = result.event.reasoning_tokens_dropped if result.event else 0
        if dropped:
            assert len(thinking_in(view)) < len(thinking_in(transcript))
