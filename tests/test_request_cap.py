"""The per-request cap: at most N LLM rewrites between two user messages (seed 001)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from context_engine import ConfigurationError, ContextSummary, Message, ToolCall
from context_engine.engine import ContextEngine
from context_engine.invariants import check_view
from context_engine.past_cap import DIGEST_NAME
from context_engine.pipeline import is_deliberate_skip
from context_engine.request_cap import RequestCap, cap_reached
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.fakes import Checkpointer, Exploding, agent_session


def capped_engine(checkpointer: Checkpointer, **options: Any) -> ContextEngine:
    return ContextEngine(
        3000,
        [checkpointer, HardTruncate()],
        reserve_tokens=1000,
        token_counter=FixedTokenCounter(),
        **options,
    )


def grown(messages: list[Message], step: int, steps: int = 12) -> list[Message]:
    """``messages`` plus ``steps`` more tool rounds of the same request."""
    out = list(messages)
    for i in range(steps):
        call = ToolCall(f"more_{step}_{i}", "read_file", f'{{"path": "b/{step}_{i}.py"}}')
        out.append(Message.assistant(f"Reading {step}/{i}.", tool_calls=[call]))
        out.append(Message.tool(call.id, f"body {step} {i}\n" * 50))
    return out


async def test_a_fourth_llm_rewrite_in_one_request_is_skipped_and_the_view_still_fits() -> None:
    checkpointer = Checkpointer()
    engine = capped_engine(checkpointer)
    messages = agent_session(20, result_chars=400)
    for step in range(3):
        messages = grown(messages, step)
        result = await engine.project(messages)
        assert result.strategy == "full_summary"
    assert checkpointer.calls == 3
    messages = grown(messages, 3)
    fourth = await engine.project(messages)
    assert checkpointer.calls == 3
    assert fourth.fits
    assert fourth.strategy == "hard_truncate"
    assert fourth.event is not None
    assert [(s.name, s.error) for s in fourth.event.steps if s.error] == [
        ("full_summary", cap_reached(3))
    ]
    assert check_view(messages, fourth.messages) == []


async def test_a_new_user_message_resets_the_count() -> None:
    checkpointer = Checkpointer()
    engine = capped_engine(checkpointer, max_llm_rewrites_per_request=1)
    messages = grown(agent_session(20, result_chars=400), 0)
    await engine.project(messages)
    skipped = await engine.project(grown(messages, 1))
    assert checkpointer.calls == 1
    assert skipped.strategy == "hard_truncate"
    messages = grown([*grown(messages, 1), Message.user("Now fix the lexer too")], 2)
    again = await engine.project(messages)
    assert checkpointer.calls == 2
    assert again.strategy == "full_summary"


async def test_recovery_is_counted_but_never_refused() -> None:
    checkpointer = Checkpointer()
    engine = capped_engine(checkpointer, max_llm_rewrites_per_request=1)
    messages = grown(agent_session(20, result_chars=400), 0)
    await engine.recover_overflow(messages, "prompt is too long")
    assert checkpointer.calls == 1
    again = await engine.recover_overflow(grown(messages, 1), "prompt is too long")
    assert checkpointer.calls == 2
    assert again.commit is not None
    capped = await engine.project(grown(messages, 2))
    assert checkpointer.calls == 2
    assert capped.strategy == "hard_truncate"


async def test_manual_compact_is_neither_capped_nor_counted() -> None:
    checkpointer = Checkpointer()
    engine = capped_engine(checkpointer, max_llm_rewrites_per_request=1)
    messages = grown(agent_session(20, result_chars=400), 0)
    for step in range(2):
        messages = grown(messages, step + 1)
        await engine.compact(messages)
    assert checkpointer.calls == 2
    result = await engine.project(grown(messages, 5))
    assert result.strategy == "full_summary"


async def test_no_cap_when_the_setting_is_none() -> None:
    checkpointer = Checkpointer()
    engine = capped_engine(checkpointer, max_llm_rewrites_per_request=None)
    messages = agent_session(20, result_chars=400)
    for step in range(5):
        messages = grown(messages, step)
        await engine.project(messages)
    assert checkpointer.calls == 5


@pytest.mark.parametrize("value", [-1, 1.5, True, "3"], ids=["negative", "float", "bool", "str"])
def test_a_bad_cap_names_the_setting(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_llm_rewrites_per_request"):
        capped_engine(Checkpointer(), max_llm_rewrites_per_request=value)


def test_the_count_starts_again_when_the_newest_user_message_changes() -> None:
    cap = RequestCap()
    first = [Message.user("one")]
    cap.record(first, 2)
    assert cap.refusal(first, 2) == cap_reached(2)
    assert cap.refusal([*first, Message.assistant("ok"), Message.user("two")], 2) is None
    cap.record([*first, Message.user("two")], 1)
    assert cap.count == 1


async def test_past_the_cap_the_summary_checkpoint_is_extracted_without_a_model() -> None:
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        3000,
        [FullSummary(summarizer=summarizer, keep_recent_tokens=600), HardTruncate()],
        reserve_tokens=1000,
        token_counter=FixedTokenCounter(),
        max_llm_rewrites_per_request=1,
    )
    messages = grown(agent_session(20, result_chars=400), 0)
    first = await engine.project(messages)
    assert first.strategy == "full_summary"
    calls = summarizer.calls
    messages = grown(first.commit or messages, 1)
    capped = await engine.project(messages)
    assert summarizer.calls == calls
    assert capped.strategy == DIGEST_NAME
    assert capped.usage.tokens <= engine.threshold
    assert capped.commit is None  # the transcript keeps the originals for the next model summary
    assert isinstance(capped.messages[1], ContextSummary)
    assert check_view(messages, capped.messages) == []


@pytest.mark.parametrize(
    ("error", "deliberate"),
    [(cap_reached(3), True), ("circuit breaker open", True), ("RuntimeError: down", False)],
    ids=["cap", "breaker", "failure"],
)
def test_reports_tell_a_cap_skip_from_a_failure(error: str, deliberate: bool) -> None:
    assert is_deliberate_skip(error) is deliberate


async def test_a_call_past_the_cap_is_logged_as_information_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every call of a long request past the cap skips the summary; that is no failure."""
    engine = capped_engine(Checkpointer(), max_llm_rewrites_per_request=0)
    with caplog.at_level(logging.INFO, logger="context_engine"):
        result = await engine.project(grown(agent_session(20, result_chars=400), 0))
    assert result.event is not None
    assert [s.error for s in result.event.steps if s.error] == [cap_reached(0)]
    (record,) = [r for r in caplog.records if "view rewritten" in r.getMessage()]
    assert record.levelno == logging.INFO
    assert cap_reached(0) in record.getMessage()


async def test_a_strategy_failure_is_still_logged_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = ContextEngine(
        3000,
        [Exploding(), Checkpointer(), HardTruncate()],
        reserve_tokens=1000,
        token_counter=FixedTokenCounter(),
        max_llm_rewrites_per_request=None,
    )
    with caplog.at_level(logging.INFO, logger="context_engine"):
        await engine.project(grown(agent_session(20, result_chars=400), 0))
    (record,) = [r for r in caplog.records if "view rewritten" in r.getMessage()]
    assert record.levelno == logging.WARNING
