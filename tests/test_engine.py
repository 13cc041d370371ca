"""ContextEngine: the pipeline loop, commits, hooks, measuring, and the blocking twins."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import attrs
import pytest

from context_engine import (
    BlockingCallInEventLoopError,
    CompactionError,
    ConfigurationError,
    InvalidMessageError,
    Message,
    RewriteEvent,
    ToolCall,
    Usage,
)
from context_engine.engine import ContextEngine, default_reserve
from context_engine.invariants import check_view
from context_engine.strategies import HardTruncate, Strategy
from context_engine.testing import FixedTokenCounter, RecordingSummarizer, synthetic_session
from tests.fakes import Checkpointer, Exploding, ShrinkToolResults, agent_session


def engine_with(*strategies: Any, window: int = 20_000, **options: Any) -> ContextEngine:
    return ContextEngine(
        window,
        strategies,
        reserve_tokens=options.pop("reserve_tokens", 4096),
        token_counter=FixedTokenCounter(),
        **options,
    )


# -- thresholds and settings ------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "reserve"),
    [(8_000, 4096), (128_000, 16_384), (64_000, 8320), (1_000_000, 16_384)],
    ids=["small-window-floor", "large-window-cap", "proportional", "huge-window-cap"],
)
def test_default_reserve_is_thirteen_percent_clamped(window: int, reserve: int) -> None:
    assert default_reserve(window) == reserve
    engine = ContextEngine(window, token_counter=FixedTokenCounter())
    assert engine.reserve_tokens == reserve
    assert engine.threshold == max(0, window - reserve)


def test_reserve_is_settable_and_none_or_zero_restores_default() -> None:
    engine = ContextEngine(128_000, token_counter=FixedTokenCounter())
    engine.reserve_tokens = 1000
    assert engine.threshold == 127_000
    engine.reserve_tokens = None
    assert engine.reserve_tokens == 16_384
    engine.reserve_tokens = 2000
    engine.reserve_tokens = 0
    assert engine.reserve_tokens == 16_384


def test_context_window_is_settable_and_moves_the_threshold() -> None:
    engine = ContextEngine(128_000, token_counter=FixedTokenCounter())
    engine.context_window = 200_000
    assert engine.threshold == 200_000 - 16_384


def test_threshold_is_never_negative_when_reserve_exceeds_window() -> None:
    engine = ContextEngine(1000, reserve_tokens=5000, token_counter=FixedTokenCounter())
    assert engine.threshold == 0


@pytest.mark.parametrize("window", [0, -5, 1.5, "128k", True], ids=str)
def test_bad_context_window_names_the_setting(window: Any) -> None:
    with pytest.raises(ConfigurationError, match="context_window"):
        ContextEngine(window, token_counter=FixedTokenCounter())


def test_negative_reserve_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="reserve_tokens"):
        ContextEngine(1000, reserve_tokens=-1, token_counter=FixedTokenCounter())


def test_an_object_that_is_not_a_strategy_is_rejected() -> None:
    with pytest.raises(ConfigurationError, match="not a strategy"):
        ContextEngine(1000, [object()], token_counter=FixedTokenCounter())  # type: ignore[list-item]


# -- project ----------------------------------------------------------------------


async def test_project_below_threshold_returns_input_unchanged() -> None:
    shrink = ShrinkToolResults()
    engine = engine_with(shrink)
    messages = agent_session(3)
    result = await engine.project(messages)
    assert result.messages == tuple(messages)
    assert all(a is b for a, b in zip(result.messages, messages, strict=True))
    assert not result.changed
    assert result.event is None
    assert result.commit is None
    assert shrink.calls == 0
    assert engine.snapshot().scope == "baseline"  # type: ignore[union-attr]


async def test_project_above_threshold_runs_strategies_until_the_view_fits() -> None:
    shrink, summary = ShrinkToolResults(), Checkpointer()
    engine = engine_with(shrink, summary)
    messages = agent_session(40)
    result = await engine.project(messages)
    assert result.changed
    assert result.usage.tokens <= engine.threshold
    assert shrink.calls == 1
    assert summary.calls == 0
    assert result.event is not None
    assert [s.name for s in result.event.steps] == ["shrink"]
    assert result.event.tokens_before > result.event.tokens_after == result.usage.tokens
    assert check_view(messages, result.messages) == []


async def test_project_runs_the_next_strategy_when_the_first_is_not_enough() -> None:
    shrink, summary = ShrinkToolResults(), Checkpointer()
    engine = engine_with(shrink, summary, window=3000, reserve_tokens=1000)
    messages = agent_session(120, result_chars=400)
    result = await engine.project(messages)
    assert (shrink.calls, summary.calls) == (1, 1)
    assert [s.name for s in result.event.steps] == ["shrink", "full_summary"]  # type: ignore[union-attr]
    assert result.commit is not None
    assert result.commit == result.messages
    assert result.event.committed  # type: ignore[union-attr]
    assert engine.snapshot().scope == "committed"  # type: ignore[union-attr]
    assert check_view(messages, result.messages) == []


async def test_project_does_not_commit_strategies_outside_commit_strategies() -> None:
    engine = engine_with(ShrinkToolResults())
    result = await engine.project(agent_session(40))
    assert result.changed
    assert result.commit is None
    assert result.commit is None
    assert engine.snapshot().scope == "projected"  # type: ignore[union-attr]


async def test_project_never_mutates_the_callers_list_or_messages() -> None:
    engine = engine_with(ShrinkToolResults(), Checkpointer(), window=3000, reserve_tokens=1000)
    messages = agent_session(120, result_chars=400)
    before = list(messages)
    copies = [Message(m.role, m.content, m.tool_call_id, m.name) for m in messages]
    await engine.project(messages)
    assert messages == before
    assert all(a is b for a, b in zip(messages, before, strict=True))
    assert [(m.role, m.content) for m in messages] == [(c.role, c.content) for c in copies]


async def test_same_input_and_configuration_give_the_same_view() -> None:
    messages = agent_session(60)
    first = await engine_with(ShrinkToolResults(), Checkpointer()).project(messages)
    second = await engine_with(ShrinkToolResults(), Checkpointer()).project(messages)
    assert first.messages == second.messages


async def test_project_rejects_provider_dicts_with_a_hint() -> None:
    engine = engine_with()
    with pytest.raises(
        InvalidMessageError, match=r"message 1: expected a Message, got dict.*from_openai"
    ):
        await engine.project([Message.user("hi"), {"role": "user", "content": "x"}])  # type: ignore[list-item]


async def test_project_rejects_a_single_message_instead_of_a_list() -> None:
    with pytest.raises(InvalidMessageError, match="sequence of Message"):
        await engine_with().project(Message.user("hi"))  # type: ignore[arg-type]


async def test_overhead_tokens_count_in_the_budget() -> None:
    messages = agent_session(3)
    plain = await engine_with().project(messages)
    heavy = engine_with(overhead_tokens=5000)
    loaded = await heavy.project(messages)
    assert loaded.usage.tokens == plain.usage.tokens + 5000


# -- failures and the breaker -----------------------------------------------------


async def test_a_failing_llm_strategy_is_recorded_and_the_next_strategies_make_the_view_fit() -> (
    None
):
    engine = engine_with(
        Exploding(), ShrinkToolResults(), HardTruncate(), window=3000, reserve_tokens=1000
    )
    messages = agent_session(120, result_chars=400)
    result = await engine.project(messages)
    assert result.fits
    assert result.event is not None
    failed = [step for step in result.event.steps if step.error]
    assert [(s.name, s.applied) for s in failed] == [("exploding", False)]
    assert "summarizer endpoint is down" in (failed[0].error or "")
    assert result.event.failures == 1
    assert result.commit is None
    assert check_view(messages, result.messages) == []
    assert engine.consecutive_failures == 1


async def test_breaker_skips_one_call_after_max_failures_then_half_opens() -> None:
    events: list[RewriteEvent] = []
    exploding = Exploding()
    engine = engine_with(
        exploding,
        window=3000,
        reserve_tokens=1000,
        max_consecutive_failures=2,
        on_project=events.append,
    )
    messages = agent_session(60, result_chars=400)
    for _ in range(2):
        failed = await engine.project(messages)
        assert failed.event is not None
        assert failed.event.steps[0].error is not None
    assert engine.breaker_state == "open"
    skipped = await engine.project(messages)
    assert skipped.messages == tuple(messages)
    assert not skipped.changed
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert skipped.event.strategy == "circuit_breaker"
    assert skipped.event.failures == 2
    assert [(s.name, s.error) for s in skipped.event.steps] == [
        ("exploding", "circuit breaker open")
    ]
    assert events[-1] == skipped.event
    assert len(events) == 3
    assert engine.snapshot().scope == "skipped"  # type: ignore[union-attr]
    assert engine.breaker_state == "half_open"
    assert engine.consecutive_failures == 1
    assert exploding.calls == 2
    await engine.project(messages)
    assert exploding.calls == 3
    assert engine.breaker_state == "open"


async def test_the_open_breaker_skips_only_the_llm_strategies_and_the_view_still_fits() -> None:
    engine = engine_with(
        Exploding(),
        ShrinkToolResults(),
        HardTruncate(),
        window=3000,
        reserve_tokens=1000,
        max_consecutive_failures=1,
    )
    messages = agent_session(60, result_chars=400)
    await engine.project(messages)
    assert engine.breaker_state == "open"
    skipped = await engine.project(messages)
    assert skipped.fits
    assert skipped.changed
    assert skipped.event is not None
    assert skipped.event.reason == "circuit_breaker"
    assert "shrink" in [s.name for s in skipped.event.steps if s.applied]


def use_strategies(engine: ContextEngine, *strategies: Strategy) -> None:
    """Swap the pipeline of a live engine (its breaker and session stay)."""
    engine._settings = attrs.evolve(engine._settings, strategies=strategies)


async def test_successful_rewrite_closes_the_breaker() -> None:
    flaky = Exploding(name="flaky", uses_llm=True)
    engine = engine_with(flaky, window=3000, reserve_tokens=1000, max_consecutive_failures=2)
    messages = agent_session(60, result_chars=400)
    for _ in range(2):
        await engine.project(messages)
    assert engine.breaker_state == "open"
    await engine.project(messages)  # skipped
    use_strategies(engine, Checkpointer())
    result = await engine.project(messages)
    assert result.changed
    assert engine.breaker_state == "closed"
    assert engine.consecutive_failures == 0


async def test_a_failing_deterministic_strategy_never_counts_on_the_breaker() -> None:
    engine = engine_with(Exploding(name="buggy", uses_llm=False), window=3000, reserve_tokens=1000)
    result = await engine.project(agent_session(60, result_chars=400))
    assert result.event is not None
    assert result.event.steps[0].error is not None
    assert engine.consecutive_failures == 0


async def test_successful_overflow_recovery_closes_the_breaker() -> None:
    engine = engine_with(
        Exploding(name="bad", uses_llm=False),
        ShrinkToolResults(),
        window=3000,
        reserve_tokens=1000,
        max_consecutive_failures=1,
    )
    messages = agent_session(60, result_chars=400)
    use_strategies(engine, Exploding())
    await engine.project(messages)
    assert engine.breaker_state == "open"
    use_strategies(engine, ShrinkToolResults())
    recovered = await engine.recover_overflow(messages, "prompt is too long")
    assert recovered.changed
    assert engine.breaker_state == "closed"


# -- futility and loops -----------------------------------------------------------


async def test_system_prompt_above_threshold_never_pays_for_a_summary() -> None:
    summary = Checkpointer()
    events: list[RewriteEvent] = []
    engine = engine_with(
        ShrinkToolResults(), summary, window=3000, reserve_tokens=1000, on_project=events.append
    )
    messages = agent_session(4, system="rules " * 6000)
    for step in range(3):
        result = await engine.project(messages)
        messages = [*messages, Message.user(f"and now step {step}")]
    assert summary.calls == 0
    assert events
    assert all(e.futile and e.floor_tokens > engine.threshold for e in events)
    assert not result.fits


async def test_llm_strategy_that_cannot_fit_is_not_retried_until_the_transcript_grows() -> None:
    class Useless(Checkpointer):
        async def apply(self, transcript: Any, view: Any, budget: Any) -> Any:
            self.calls += 1
            from context_engine.strategies.base import StrategyResult

            return StrategyResult.unchanged(view)

    useless = Useless()
    engine = engine_with(useless, window=3000, reserve_tokens=1000)
    messages = agent_session(60, result_chars=400)
    await engine.project(messages)
    await engine.project(messages)
    await engine.project([Message(m.role, m.content, m.tool_call_id, m.name) for m in messages])
    assert useless.calls == 1  # equal messages rebuilt by a converter are no growth either
    await engine.project([*messages, Message.user("more")])
    assert useless.calls == 1  # a few tokens more is not growth worth paying for
    await engine.project([*messages, Message.user("more " * 400)])
    assert useless.calls == 2


# -- hooks ------------------------------------------------------------------------


async def test_on_strategy_brackets_each_run_and_finish_runs_on_failure_too() -> None:
    log: list[str] = []

    def on_strategy(name: str) -> Any:
        log.append(f"start {name}")
        return lambda: log.append(f"end {name}")

    engine = engine_with(
        ShrinkToolResults(), Exploding(), window=3000, reserve_tokens=1000, on_strategy=on_strategy
    )
    await engine.project(agent_session(120, result_chars=400))
    assert log == ["start shrink", "end shrink", "start exploding", "end exploding"]


async def test_async_hooks_are_awaited() -> None:
    seen: list[str] = []

    async def on_project(event: RewriteEvent) -> None:
        await asyncio.sleep(0)
        seen.append(event.strategy)

    async def on_strategy(name: str) -> Any:
        async def finish() -> None:
            seen.append(f"finished {name}")

        return finish

    engine = engine_with(ShrinkToolResults(), on_project=on_project, on_strategy=on_strategy)
    await engine.project(agent_session(40))
    assert seen == ["finished shrink", "shrink"]


async def test_a_hook_that_raises_is_logged_and_the_call_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(event: RewriteEvent) -> None:
        raise ValueError("dashboard is down")

    engine = engine_with(ShrinkToolResults(), on_project=broken)
    with caplog.at_level(logging.ERROR, logger="context_engine"):
        result = await engine.project(agent_session(40))
    assert result.changed
    assert any("on_project" in r.getMessage() and r.exc_info for r in caplog.records)


# -- compact and recover ------------------------------------------------------------


async def test_compact_runs_force_strategies_from_the_full_transcript_with_instructions() -> None:
    summary = Checkpointer()
    compacted: list[RewriteEvent] = []
    engine = engine_with(ShrinkToolResults(), summary, on_compact=compacted.append)
    messages = agent_session(5)
    result = await engine.compact(messages, instructions="keep the failing test names")
    assert result.changed
    assert summary.instructions == ["keep the failing test names"]
    assert result.messages[1].is_summary
    assert compacted
    assert compacted[0].reason == "manual"
    assert compacted[0].committed
    assert engine.snapshot().scope == "committed"  # type: ignore[union-attr]
    assert check_view(messages, result.messages) == []


async def test_compact_without_a_force_strategy_changes_nothing() -> None:
    engine = engine_with(ShrinkToolResults())
    result = await engine.compact(agent_session(40))
    assert not result.changed
    assert result.event is None


async def test_compact_failure_raises_but_does_not_count_toward_the_breaker() -> None:
    engine = engine_with(Exploding())
    with pytest.raises(CompactionError, match="manual compaction wrote no checkpoint") as caught:
        await engine.compact(agent_session(3))
    assert caught.value.commit is None
    assert caught.value.strategy == "exploding"
    assert engine.consecutive_failures == 0


async def test_a_failed_compact_still_hands_out_a_view_that_fits() -> None:
    engine = engine_with(
        Exploding(), ShrinkToolResults(), HardTruncate(), window=3000, reserve_tokens=1000
    )
    messages = agent_session(60, result_chars=400)
    with pytest.raises(CompactionError) as caught:
        await engine.compact(messages)
    assert engine.estimate(caught.value.view).tokens <= engine.threshold
    assert check_view(messages, caught.value.view) == []
    assert caught.value.commit is None


async def test_recover_overflow_shrinks_below_the_scaled_target_and_asks_to_commit() -> None:
    recovered: list[RewriteEvent] = []
    engine = engine_with(ShrinkToolResults(), on_recover=recovered.append)
    messages = agent_session(8, result_chars=2000)
    estimate = engine.estimate(messages).tokens
    result = await engine.recover_overflow(
        messages, f"prompt is too long: {estimate * 2} tokens > 20000 maximum"
    )
    assert result.changed
    assert result.commit is not None
    assert result.commit == result.messages
    assert (
        result.usage.tokens <= engine.threshold * estimate // (estimate * 2) + 1
        or result.usage.tokens < estimate
    )
    assert recovered
    assert recovered[0].reason == "overflow"
    assert engine.snapshot().scope == "recovered"  # type: ignore[union-attr]


# -- measuring --------------------------------------------------------------------


async def test_usage_anchor_after_the_engines_own_view_is_trusted() -> None:
    engine = engine_with()
    messages = agent_session(2)
    await engine.project(messages)
    reply = Message.assistant("done", usage=Usage(input_tokens=900, output_tokens=10))
    grown = [*messages, reply, Message.user("thanks")]
    estimate = engine.estimate(grown)
    assert estimate.last_usage_index == len(messages)
    assert estimate.usage_tokens == 910
    assert estimate.tokens == 910 + FixedTokenCounter().count_message(grown[-1])


async def test_usage_anchor_is_trusted_when_the_caller_rebuilds_equal_messages() -> None:
    """Runtime adapters convert their history afresh on every call: equal is enough."""
    engine = engine_with()
    messages = agent_session(2)
    await engine.project(messages)
    rebuilt = [attrs.evolve(m) for m in messages]
    assert all(a == b and a is not b for a, b in zip(rebuilt, messages, strict=True))
    reply = Message.assistant("done", usage=Usage(input_tokens=900, output_tokens=10))
    estimate = engine.estimate([*rebuilt, reply, Message.user("thanks")])
    assert estimate.usage_tokens == 910


async def test_usage_and_snapshot_describe_the_last_view() -> None:
    engine = engine_with(ShrinkToolResults())
    assert engine.usage is None
    assert engine.snapshot() is None
    result = await engine.project(agent_session(40))
    usage = engine.usage
    assert usage is not None
    assert usage == result.usage
    assert usage.context_window == 20_000
    snap = engine.snapshot()
    assert snap is not None
    assert snap.last_strategy == "shrink"
    assert snap.message_count == len(result.messages)


async def test_sync_records_a_new_baseline() -> None:
    engine = engine_with(ShrinkToolResults())
    await engine.project(agent_session(40))
    fresh = agent_session(2)
    engine.reset(fresh)
    snap = engine.snapshot()
    assert snap is not None
    assert snap.scope == "baseline"
    assert snap.messages == tuple(fresh)


# -- blocking twins ---------------------------------------------------------------


def test_blocking_twins_run_the_same_pipeline() -> None:
    engine = engine_with(ShrinkToolResults(), Checkpointer())
    messages = agent_session(40)
    assert engine.project_sync(messages).changed
    assert engine.compact_sync(messages, "keep names").changed
    assert engine.recover_overflow_sync(messages, "too long").changed


@pytest.mark.parametrize("method", ["project", "compact", "recover_overflow"])
async def test_blocking_twin_inside_a_running_loop_names_the_async_method(method: str) -> None:
    engine = engine_with()
    with pytest.raises(BlockingCallInEventLoopError, match=rf"await engine\.{method}\("):
        getattr(engine, f"{method}_sync")(agent_session(1))


def test_tool_call_pending_at_the_end_survives_projection() -> None:
    engine = engine_with(ShrinkToolResults(), Checkpointer(), window=3000, reserve_tokens=1000)
    messages = agent_session(60, result_chars=400)
    pending = Message.assistant("approve?", tool_calls=[ToolCall("call_wait", "deploy", "{}")])
    messages.append(pending)
    result = engine.project_sync(messages)
    assert result.messages[-1] is pending
    assert check_view(messages, result.messages) == []


async def test_usage_left_on_a_kept_message_after_a_commit_does_not_cause_another_compaction() -> (
    None
):
    """A usage anchor billed for the long prompt before a checkpoint is stale afterwards."""
    summary = Checkpointer()
    engine = engine_with(ShrinkToolResults(), summary, window=3000, reserve_tokens=1000)
    messages = agent_session(120, result_chars=400)
    messages[-2] = attrs.evolve(messages[-2], usage=Usage(input_tokens=9_000, output_tokens=5))
    first = await engine.project(messages)
    assert first.commit is not None
    assert summary.calls == 1
    assert first.commit is not None
    assert first.commit[-2].usage is not None
    committed = [*first.commit, Message.user("next")]
    second = await engine.project(committed)
    assert summary.calls == 1
    assert not second.changed
    assert second.usage.tokens <= engine.threshold


def test_a_fresh_engine_ignores_an_anchor_behind_a_checkpoint() -> None:
    """Loaded from disk after a compaction, the old usage may predate the checkpoint."""
    engine = engine_with()
    from context_engine import ContextSummary

    view = [
        Message.system("sys"),
        ContextSummary(summary="earlier work", tokens_before=50_000),
        Message.user("continue"),
        Message.assistant("ok", usage=Usage(input_tokens=48_000, output_tokens=20)),
    ]
    estimate = engine.estimate(view)
    assert estimate.last_usage_index == -1
    assert estimate.tokens < 1_000


def test_a_fresh_engine_trusts_a_plausible_anchor_on_an_untouched_transcript() -> None:
    engine = engine_with()
    view = [
        Message.user("hello " * 100),
        Message.assistant("ok", usage=Usage(input_tokens=400, output_tokens=5)),
    ]
    assert engine.estimate(view).usage_tokens == 405


# -- review findings: one scale per call, recovery targets, repeated work ------------


async def test_a_provider_that_bills_less_than_we_count_does_not_push_the_pipeline_further() -> (
    None
):
    """Usage and counting are one scale: what microcompact saves is what the budget sees."""
    shrink, summary = ShrinkToolResults(), Checkpointer()
    engine = engine_with(shrink, summary, window=10_000, reserve_tokens=1000)
    messages = agent_session(50, result_chars=800)
    counted = engine.estimate(messages).tokens
    anchor = len(messages) - 2
    billed = int(counted * 0.92)
    messages[anchor] = attrs.evolve(messages[anchor], usage=Usage(input_tokens=billed))
    result = await engine.project(messages)
    assert result.event is not None
    assert [s.name for s in result.event.steps if s.applied] == ["shrink"]
    assert summary.calls == 0
    assert result.fits


async def test_recover_overflow_aims_below_the_view_that_was_rejected() -> None:
    from context_engine.strategies import ToolResultMicrocompact

    engine = engine_with(ToolResultMicrocompact(keep_recent=1), HardTruncate(), window=20_000)
    messages = agent_session(60, result_chars=2000)
    sent = await engine.project(messages)
    error = f"prompt is too long: {int(sent.usage.tokens * 1.5)} tokens > 20000 maximum"
    recovered = await engine.recover_overflow(messages, error)
    assert recovered.changed
    assert recovered.usage.tokens < sent.usage.tokens


async def test_recover_overflow_does_not_pay_for_a_summary_that_cannot_help() -> None:
    summary = Checkpointer()
    engine = engine_with(ShrinkToolResults(), summary, window=3000, reserve_tokens=1000)
    messages = agent_session(4, system="rules " * 3000)
    result = await engine.recover_overflow(messages, "prompt is too long")
    assert summary.calls == 0
    assert result.event is not None
    assert result.event.futile


async def test_recovery_does_not_run_the_same_summary_twice() -> None:
    summary = Checkpointer()
    engine = engine_with(summary, window=3000, reserve_tokens=1000)
    await engine.recover_overflow(agent_session(120, result_chars=400), "prompt is too long")
    assert summary.calls == 1


async def test_a_checkpoint_paid_for_before_a_later_failure_is_committed() -> None:
    engine = engine_with(
        Checkpointer(uses_llm=False),
        Exploding(name="later", uses_llm=False),
        window=3000,
        reserve_tokens=500,
    )
    messages = agent_session(120, result_chars=400, system="s " * 5000)
    result = await engine.project(messages)
    assert result.event is not None
    assert [s.name for s in result.event.steps if s.error] == ["later"]
    assert result.commit is not None
    assert result.commit == result.messages
    assert any(m.is_summary for m in result.commit)


async def test_projecting_the_same_anchored_transcript_twice_gives_the_same_view() -> None:
    engine = engine_with(ShrinkToolResults(), window=12_000, reserve_tokens=1000)
    messages = agent_session(50, result_chars=800)
    anchor = len(messages) - 2
    billed = int(engine.estimate(messages).tokens * 0.95)
    messages[anchor] = attrs.evolve(messages[anchor], usage=Usage(input_tokens=billed))
    first = await engine.project(messages)
    second = await engine.project(messages)
    assert first.messages == second.messages
    assert first.usage.tokens == second.usage.tokens
    assert second.usage.prefix_stable is True


def test_overhead_tokens_is_settable_and_counts_at_once() -> None:
    engine = engine_with()
    messages = agent_session(2)
    before = engine.estimate(messages).tokens
    engine.overhead_tokens = 5000
    assert engine.estimate(messages).tokens == before + 5000
    with pytest.raises(ConfigurationError, match="overhead_tokens"):
        engine.overhead_tokens = -1


async def test_a_no_op_pipeline_with_a_strategy_error_is_still_reported() -> None:
    from context_engine.strategies import SessionMemory

    def broken_seed() -> str:
        raise OSError("memory file missing")

    events: list[RewriteEvent] = []
    engine = engine_with(
        SessionMemory(seed=broken_seed), window=3000, reserve_tokens=1000, on_project=events.append
    )
    result = await engine.project(agent_session(60, result_chars=400))
    assert not result.changed
    assert not result.fits
    assert len(events) == 1
    assert events[0].steps[0].error is not None
    assert "memory file missing" in events[0].steps[0].error


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"strategies": None}, "strategies must be a list"),
        ({"strategies": ShrinkToolResults()}, "wrap a single strategy"),
        ({"commit_strategies": None}, "commit_strategies"),
        ({"token_counter": "cl100k_base"}, "token_counter"),
        ({"max_consecutive_failures": 0}, "max_consecutive_failures"),
        ({"overhead_tokens": True}, "overhead_tokens"),
        ({"reserve_tokens": False}, "reserve_tokens"),
        ({"on_project": "print"}, "on_project must be callable"),
    ],
    ids=[
        "no-strategies",
        "single-strategy",
        "commit-none",
        "counter-str",
        "zero-failures",
        "bool-overhead",
        "bool-reserve",
        "hook-not-callable",
    ],
)
def test_bad_configuration_names_the_setting(options: dict[str, Any], problem: str) -> None:
    strategies = options.pop("strategies", ())
    options.setdefault("token_counter", FixedTokenCounter())
    with pytest.raises(ConfigurationError, match=problem):
        ContextEngine(1000, strategies, **options)


async def test_a_strategy_returning_garbage_is_recorded_and_its_view_ignored() -> None:
    from context_engine.strategies.base import StrategyResult

    class Garbage:
        name = "garbage"
        uses_llm = False

        async def apply(self, transcript: Any, view: Any, budget: Any) -> Any:
            return StrategyResult(messages=[{"role": "user"}], applied=True)  # type: ignore[list-item]

    engine = engine_with(Garbage(), window=3000, reserve_tokens=1000)
    messages = agent_session(60, result_chars=400)
    result = await engine.project(messages)
    assert result.messages == tuple(messages)
    assert result.event is not None
    assert "garbage" in (result.event.steps[0].error or "")
    assert "not a Message" in (result.event.steps[0].error or "")
    assert engine.consecutive_failures == 0


async def test_recover_overflow_reads_provider_errors_and_warns_on_unrelated_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = engine_with(ShrinkToolResults())
    messages = agent_session(40)
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        await engine.recover_overflow(messages, "prompt is too long: 30000 tokens > 20000 maximum")
    assert not any("does not look like" in r.getMessage() for r in caplog.records)
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        result = await engine.recover_overflow(messages, ConnectionResetError("peer reset"))
    assert result.changed
    assert any(
        "does not look like a context-length error" in r.getMessage() for r in caplog.records
    )


class CountingCounter(FixedTokenCounter):
    """Counts how many messages the engine asks about (cache hits included)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def count_message(self, message: Message) -> int:
        self.asked += 1
        return super().count_message(message)


@pytest.mark.parametrize("rebuilt", [False, True], ids=["same-objects", "rebuilt-equal-objects"])
def test_appending_one_message_to_a_long_history_only_counts_that_message(rebuilt: bool) -> None:
    counter = CountingCounter()
    engine = ContextEngine(10_000_000, token_counter=counter)
    history = agent_session(500)
    engine.project_sync(history)
    grown = [*history, Message.user("one more thing")]
    if rebuilt:
        grown = [Message(m.role, m.content, m.tool_call_id, m.name) for m in grown]
    counter.asked = 0
    result = engine.project_sync(grown)
    assert counter.asked == 1
    assert (
        result.usage.tokens
        == FixedTokenCounter().count_message(grown[-1]) + engine.estimate(history).tokens
    )


async def test_a_growing_transcript_reuses_the_last_view_while_it_still_fits() -> None:
    """The previous view plus the new messages: same prompt prefix, no strategy run."""
    shrink = ShrinkToolResults()
    events: list[RewriteEvent] = []
    engine = engine_with(shrink, window=3000, reserve_tokens=1000, on_project=events.append)
    transcript = agent_session(40, result_chars=400)
    first = await engine.project(transcript)
    assert first.changed
    assert shrink.calls == 1
    assert len(events) == 1
    view = first.messages
    for step in range(3):
        transcript = [*transcript, Message.user(f"and also step {step}")]
        result = await engine.project(transcript)
        assert result.messages[: len(view)] == view
        assert result.messages[-1] is transcript[-1]
        assert result.usage.prefix_stable is True
        assert result.event is None
        assert check_view(transcript, result.messages) == []
        view = result.messages
    assert shrink.calls == 1
    assert len(events) == 1


async def test_the_pipeline_runs_again_once_the_extended_view_no_longer_fits() -> None:
    shrink = ShrinkToolResults()
    engine = engine_with(shrink, window=3000, reserve_tokens=1000)
    transcript = agent_session(40, result_chars=400)
    await engine.project(transcript)
    grown = transcript + agent_session(40, result_chars=400)[2:]
    result = await engine.project(grown)
    assert shrink.calls == 2
    assert result.event is not None
    assert check_view(grown, result.messages) == []


async def test_a_huge_fresh_tool_result_is_capped_and_the_view_is_not_called_futile() -> None:
    """The floor is measured on the view as the cap left it: a 60k-token result in the
    protected tail counts capped, so the call is neither futile nor above the threshold."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine.default(8_000, summarizer=summarizer, token_counter=FixedTokenCounter())
    call = ToolCall("call_grep", "bash", '{"command": "grep -rn TODO ."}')
    grep = "".join(f"src/mod_{i}.py:{i}: # TODO tidy this module up\n" for i in range(6_000))
    messages = [
        Message.system("You are a coding agent."),
        Message.user("Find the TODOs."),
        Message.assistant(tool_calls=[call]),
        Message.tool(call.id, grep),
    ]
    assert engine.estimate(messages).tokens > 7 * engine.threshold
    result = await engine.project(messages)
    assert result.fits
    assert result.event is not None
    assert not result.event.futile
    assert result.event.strategy == "tool_result_cap"
    assert check_view(messages, result.messages) == []
    assert summarizer.requests == []  # the cap alone made it fit


def test_a_usage_far_below_the_count_is_not_trusted_even_for_the_view_it_answers() -> None:
    """A model that reports a fixed 50 input tokens (a fake, a broken proxy) cannot
    let the views grow past the window: the engine counts instead of trusting it."""
    counter = FixedTokenCounter()
    engine = ContextEngine.default(8_000, token_counter=counter)
    transcript: list[Message] = []
    for message in synthetic_session(60):
        if message.role == "assistant":
            if transcript:
                view = engine.project_sync(transcript).messages
                assert sum(map(counter.count_message, view)) <= engine.threshold
            message = attrs.evolve(message, usage=Usage(input_tokens=50, output_tokens=5))
        transcript.append(message)
    final = engine.project_sync(transcript)
    assert final.usage.tokens <= engine.threshold
    assert sum(map(counter.count_message, final.messages)) <= engine.threshold
