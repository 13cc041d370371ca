"""`replay`: the agent loop it simulates, what it counts, and the corpus at three windows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from context_engine import Message, SummarizerError
from context_engine.cli._present import session_rows
from context_engine.cli.replay import ReplayReport, RewriteRecord, replay
from context_engine.formats.readers import read_transcript
from context_engine.invariants import check_view
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import SummaryRequest
from context_engine.testing import RecordingSummarizer, synthetic_session

PIPELINE = ("tool_result_microcompact", "light_trim", "full_summary", "hard_truncate")


class ViewChecker:
    """Checks every view the replay produced against the engine input it came from."""

    def __init__(self) -> None:
        self.views = 0
        self.problems: list[str] = []

    def __call__(self, given: Sequence[Message], view: Sequence[Message]) -> None:
        self.views += 1
        self.problems.extend(check_view(given, view))


def assert_totals_match_rows(report: ReplayReport) -> None:
    calls, rewrites, totals = report.calls, report.rewrites, report.totals
    assert totals.calls == len(calls)
    assert totals.tokens == sum(c.tokens for c in calls)
    assert totals.tokens_without == sum(c.tokens_without for c in calls)
    assert totals.max_tokens == max((c.tokens for c in calls), default=0)
    assert totals.prefix_reused == sum(c.prefix_reused for c in calls)
    assert totals.overflows == sum(c.overflow for c in calls)
    assert totals.over_window == sum(c.tokens > report.window for c in calls)
    assert totals.rewrites == sum(r.changed for r in rewrites)
    assert totals.commits == sum(r.committed for r in rewrites)
    assert totals.breaker_trips == sum(r.reason == "circuit_breaker" for r in rewrites)
    assert [c.call for c in calls] == list(range(1, len(calls) + 1))


@pytest.mark.parametrize("window", [16_000, 32_000, 128_000], ids=["16k", "32k", "128k"])
def test_corpus_replay_keeps_invariants_and_every_call_fits(corpus_path: Path, window: int) -> None:
    messages = read_transcript(corpus_path).messages
    checker = ViewChecker()
    report = replay(
        messages,
        window=window,
        strategies=PIPELINE,
        summarizer=ExtractiveSummarizer(),
        check=checker,
    )
    assert report.problems == ()
    assert checker.problems == []
    assert checker.views >= report.totals.calls
    assert report.totals.calls == sum(1 for m in messages[1:] if m.role == "assistant")
    assert all(call.tokens <= window for call in report.calls)
    assert_totals_match_rows(report)
    assert report.totals.tokens <= report.totals.tokens_without


def test_a_session_that_fits_is_sent_whole_and_always_extends_the_previous_prompt() -> None:
    session = synthetic_session(20)
    report = replay(session, window=128_000)
    assert report.rewrites == ()
    assert report.totals.tokens == report.totals.tokens_without
    assert report.totals.prefix_reused == report.totals.calls - 1
    assert report.totals.prefix_reuse_share == 1.0
    assert [c.messages for c in report.calls] == [c.step for c in report.calls]


def test_checkpoints_are_committed_and_the_summarizer_calls_counted() -> None:
    summarizer = RecordingSummarizer()
    report = replay(
        synthetic_session(120),
        window=8_192,
        strategies=PIPELINE,
        summarizer=summarizer,
        summarizer_label="recording",
    )
    commits = [r for r in report.rewrites if r.committed]
    assert len(commits) >= 3
    assert all(r.strategy == "full_summary" for r in commits)
    assert report.totals.summarizer_calls == summarizer.calls >= len(commits)
    assert report.summarizer == "recording"
    assert report.problems == ()
    after_commit = [c for c in report.calls if c.call - 1 in {r.call for r in commits}]
    assert after_commit
    assert all(c.messages < c.step for c in after_commit)
    assert_totals_match_rows(report)


class FailsThenWorks:
    """A summarizer down for its first ``failures`` calls."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self, request: SummaryRequest) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise SummarizerError("the summary model is down")
        return ExtractiveSummarizer()(request)


def test_a_failing_summarizer_trips_the_breaker_and_overflow_recovery_commits() -> None:
    report = replay(
        synthetic_session(30, result_lines=80),
        window=8_192,
        strategies=("full_summary",),
        summarizer=FailsThenWorks(3),
    )
    assert report.totals.failures == 3
    assert sum("strategy 'full_summary' failed" in p for p in report.problems) == 3
    (trip,) = [r for r in report.rewrites if r.reason == "circuit_breaker"]
    assert not trip.changed
    # The skipped call's view is the whole transcript, above the window: recovered at once.
    (recovered,) = [r for r in report.rewrites if r.reason == "overflow"]
    assert (recovered.call, recovered.committed) == (trip.call, True)
    assert report.totals.overflows == 1
    assert report.totals.over_window == 0
    assert report.calls[trip.call - 1].overflow
    assert_totals_match_rows(report)


def test_views_a_pipeline_cannot_fit_are_reported_as_problems() -> None:
    report = replay(synthetic_session(60), window=6_000, strategies=("light_trim",))
    assert report.totals.over_window >= 1
    assert sum("above the 6000 window" in p for p in report.problems) == report.totals.over_window
    assert report.summarizer == "none"
    assert report.totals.summarizer_calls == 0
    assert_totals_match_rows(report)


def record(
    call: int, strategy: str, *, committed: bool = False, reason: str = "threshold"
) -> RewriteRecord:
    return RewriteRecord(
        call=call,
        step=2 * call,
        reason=reason,
        strategy=strategy,
        changed=True,
        committed=committed,
        tokens_before=1000 + call,
        tokens_after=500 + call,
    )


def test_session_rows_group_consecutive_light_rewrites_only() -> None:
    rows = session_rows(
        [
            record(1, "tool_result_microcompact"),
            record(2, "tool_result_microcompact"),
            record(3, "tool_result_microcompact"),
            record(4, "full_summary", committed=True),
            record(5, "tool_result_microcompact"),
            record(7, "tool_result_microcompact"),
            record(7, "tool_result_microcompact", reason="overflow", committed=True),
            record(8, "light_trim"),
        ]
    )
    assert [(r.calls, r.count, r.strategy) for r in rows] == [
        ("1-3", 3, "tool_result_microcompact"),
        ("4", 1, "full_summary"),
        ("5", 1, "tool_result_microcompact"),
        ("7", 1, "tool_result_microcompact"),
        ("7", 1, "tool_result_microcompact"),
        ("8", 1, "light_trim"),
    ]
    assert (rows[0].tokens_before, rows[0].tokens_after) == (1003, 503)
