"""Summaries split over several requests: answers kept across failures, a summary-wide deadline."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from context_engine import Message, SummarizerError, SummaryRequest, SummaryTimeoutError, ToolCall
from context_engine.strategies import FullSummary
from context_engine.strategies.base import Budget
from context_engine.summarize.memo import SummaryMemo, request_key
from context_engine.summarize.prompts import build_request
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter()


def measure(messages: Any) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


def history(turns: int) -> list[Message]:
    """Whole turns of ~2.5k tokens each, then a long final request kept verbatim."""
    out = [Message.system("You are a coding agent.")]
    for n in range(turns):
        out.append(Message.user(f"request {n}: fix module {n}"))
        for step in range(3):
            call = ToolCall(f"c{n}_{step}", "read_file", f'{{"path": "src/m{n}_{step}.py"}}')
            out += [Message.assistant(f"step {step}", [call]), Message.tool(call.id, "x" * 3000)]
        out.append(Message.assistant(f"done with request {n}"))
    return [*out, Message.user("final request: " + "z" * 4000), Message.assistant("on it")]


def budget(view: list[Message]) -> Budget:
    return Budget(
        tokens=measure(view), window=200_000, threshold=1500, counter=COUNTER, measure=measure
    )


def chunked(summarizer: Any, **options: Any) -> FullSummary:
    """A strategy whose small summarizer window needs several requests even at the
    tightest clip of tool results."""
    options.setdefault("summary_timeout_seconds", None)
    return FullSummary(
        summarizer=summarizer,
        keep_recent_tokens=800,
        summarizer_window=3000,
        max_summary_tokens=500,
        **options,
    )


class FailsOnce(RecordingSummarizer):
    """Answers like `RecordingSummarizer`, but the ``fail_at``-th request raises once."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    def __call__(self, request: SummaryRequest) -> str:
        if len(self.requests) + 1 == self.fail_at:
            self.requests.append(request)
            raise ConnectionError("endpoint reset")
        return super().__call__(request)


async def test_a_failed_chunk_raises_and_the_next_attempt_sends_only_the_missing_requests() -> None:
    view = history(8)
    healthy = RecordingSummarizer()
    await chunked(healthy).apply(view, view, budget(view))
    chunks = healthy.calls
    assert chunks >= 4

    summarizer = FailsOnce(fail_at=3)
    strategy = chunked(summarizer)
    with pytest.raises(SummarizerError, match="endpoint reset"):
        await strategy.apply(view, view, budget(view))
    assert summarizer.calls == 3
    result = await strategy.apply(view, view, budget(view))
    assert result.applied
    resumed = summarizer.requests[3:]
    assert len(resumed) == chunks - 2  # the third chunk again, then the rest; never 1 and 2
    assert resumed[0].messages == summarizer.requests[2].messages
    assert resumed[0].previous_summary == summarizer.requests[2].previous_summary
    assert [r.messages for r in resumed] == [r.messages for r in healthy.requests[2:]]


async def test_a_failed_turn_prefix_keeps_the_history_summary_paid_for() -> None:
    view = [Message.system("sys"), *history(2)[1:-2]]
    view += [Message.user("one long request")]
    for step in range(40):
        call = ToolCall(f"p{step}", "read_file", f'{{"path": "src/p{step}.py"}}')
        view += [Message.assistant(f"step {step}", [call]), Message.tool(call.id, "y" * 800)]
    summarizer = FailsOnce(fail_at=2)
    strategy = FullSummary(summarizer=summarizer, keep_recent_tokens=1500)
    with pytest.raises(SummarizerError):
        await strategy.apply(view, view, budget(view))
    assert [r.kind for r in summarizer.requests] == ["history", "turn_prefix"]
    result = await strategy.apply(view, view, budget(view))
    assert result.applied
    assert [r.kind for r in summarizer.requests] == ["history", "turn_prefix", "turn_prefix"]


async def test_the_summary_wide_deadline_raises_a_timeout_that_keeps_what_finished() -> None:
    """Regression: a 38-chunk summary took 11.5 s under a per-request timeout of 0.5 s."""
    answered: list[SummaryRequest] = []

    async def slow(request: SummaryRequest) -> str:
        await asyncio.sleep(0.03)
        answered.append(request)
        return f"summary after {len(answered)} requests"

    view = history(12)
    strategy = chunked(slow, timeout_seconds=0.5, summary_timeout_seconds=0.1)
    started = time.perf_counter()
    with pytest.raises(SummaryTimeoutError) as caught:
        await strategy.apply(view, view, budget(view))
    elapsed = time.perf_counter() - started
    assert elapsed < 0.35
    assert isinstance(caught.value, SummarizerError)
    assert caught.value.seconds == 0.1
    assert caught.value.finished == len(answered) >= 1
    assert "summary_timeout_seconds" in str(caught.value)

    attempts = 1
    while True:  # each attempt resumes where the last one stopped
        attempts += 1
        assert attempts < 20
        try:
            result = await strategy.apply(view, view, budget(view))
        except SummaryTimeoutError:
            continue
        break
    assert result.applied
    chunks = len({tuple(r.messages) for r in answered})
    assert len(answered) == chunks  # no chunk was paid for twice


async def test_a_blocking_summarizer_is_stopped_between_requests() -> None:
    calls = 0

    def blocking(request: SummaryRequest) -> str:
        nonlocal calls
        calls += 1
        time.sleep(0.04)
        return "<summary>so far</summary>"

    view = history(12)
    with pytest.raises(SummaryTimeoutError) as caught:
        await chunked(blocking, summary_timeout_seconds=0.1).apply(view, view, budget(view))
    assert 2 <= calls <= 4
    assert caught.value.finished == calls


async def test_the_per_request_timeout_still_names_itself() -> None:
    async def hangs(request: SummaryRequest) -> str:
        await asyncio.sleep(1)
        return "late"

    view = history(4)
    strategy = chunked(hangs, timeout_seconds=0.05, summary_timeout_seconds=5)
    with pytest.raises(SummarizerError, match=r"did not answer within 0\.05 s") as caught:
        await strategy.apply(view, view, budget(view))
    assert not isinstance(caught.value, SummaryTimeoutError)


def test_the_memo_keeps_the_most_recently_used_answers_only() -> None:
    memo = SummaryMemo(size=2)
    memo.put("a", "A")
    memo.put("b", "B")
    assert memo.get("a") == "A"  # now the most recent
    memo.put("c", "C")
    assert (memo.get("a"), memo.get("b"), memo.get("c")) == ("A", None, "C")
    assert len(memo) == 2
    memo.put(None, "ignored")
    assert memo.get(None) is None
    with pytest.raises(ValueError, match="at least one"):
        SummaryMemo(size=0)


@pytest.mark.parametrize(
    "change",
    [
        {"previous_summary": "other"},
        {"kind": "turn_prefix"},
        {"max_tokens": 100},
        {"instructions": "focus"},
        {"messages": [Message.user("b")]},
    ],
    ids=["previous", "kind", "budget", "instructions", "messages"],
)
def test_a_request_key_changes_with_everything_the_answer_depends_on(change: Any) -> None:
    base: dict[str, Any] = {"messages": [Message.user("a")], "previous_summary": "s"}
    key = request_key(build_request(**base))
    assert key == request_key(build_request(**base))
    assert request_key(build_request(**{**base, **change})) != key


def test_a_message_with_unencodable_metadata_is_not_memoized() -> None:
    request = build_request([Message("user", "a", metadata={"handle": object()})])
    assert request_key(request) is None
