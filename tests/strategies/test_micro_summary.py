"""`MicroSummary`, the micro tier, and the proactive triggers (seed 001's checks)."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import ConfigurationError, ContextSummary, Message, ToolCall
from context_engine.engine import ContextEngine
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate, MicroSummary
from context_engine.structure import analyze
from context_engine.summarize.micro_cut import micro_cut
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

ROUND_CHARS = 7_600  # about 2,000 tokens per API round with FixedTokenCounter(4)


def agent_loop(rounds: int, *, extra_chars: int = 0) -> list[Message]:
    """One user request and ``rounds`` tool rounds of about 2,000 tokens each."""
    messages = [Message.system("You are a coder."), Message.user("Fix the parser; keep the API.")]
    for i in range(rounds):
        call = ToolCall(f"call_{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
        body = f"m{i} " + "x" * (ROUND_CHARS + (extra_chars if i == 0 else 0))
        messages += [Message.assistant(f"Reading m{i}.", tool_calls=[call])]
        messages += [Message.tool(call.id, body)]
    return messages


def sized(tokens: int, engine: ContextEngine) -> list[Message]:
    """An agent loop the engine estimates at ``tokens`` (within a few tokens)."""
    base = agent_loop(1)
    per_round = engine.estimate(agent_loop(2)).tokens - engine.estimate(base).tokens
    rounds = (tokens - engine.estimate(base).tokens) // per_round + 1
    messages = agent_loop(rounds)
    short = tokens - engine.estimate(messages).tokens
    messages = agent_loop(rounds, extra_chars=4 * short)
    assert abs(engine.estimate(messages).tokens - tokens) <= 4
    return messages


class Tiers:
    def __init__(self, window: int = 100_000, **options: Any) -> None:
        self.micro = RecordingSummarizer()
        self.full = RecordingSummarizer()
        self.events: list[Any] = []
        self.engine = ContextEngine(
            window,
            [
                MicroSummary(summarizer=self.micro),
                FullSummary(summarizer=self.full),
                HardTruncate(),
            ],
            token_counter=FixedTokenCounter(),
            on_project=self.events.append,
            **options,
        )


async def test_below_the_micro_trigger_nothing_runs() -> None:
    tiers = Tiers(reserve_tokens=1)  # reserve 0 restores the default; 1 is the closest
    result = await tiers.engine.project(sized(84_000, tiers.engine))
    assert not result.changed
    assert (tiers.micro.calls, tiers.full.calls, tiers.events) == (0, 0, [])


async def test_between_the_triggers_only_the_micro_tier_runs() -> None:
    tiers = Tiers(reserve_tokens=1)
    messages = sized(86_000, tiers.engine)
    result = await tiers.engine.project(messages)
    assert result.strategy == "micro_summary"
    assert tiers.micro.calls >= 1
    assert tiers.full.calls == 0
    assert [s.name for s in tiers.events[0].steps] == ["micro_summary"]
    assert result.commit == result.messages
    assert result.usage.tokens < tiers.engine.estimate(messages).tokens
    assert check_view(messages, result.messages) == []
    # The current request and the last two rounds stay verbatim.
    assert result.messages[2] == messages[1]
    assert result.messages[-4:] == tuple(messages[-4:])
    assert {r.reason for r in tiers.micro.requests} == {"reactive_micro"}


async def test_above_the_full_trigger_the_full_summary_runs() -> None:
    tiers = Tiers(reserve_tokens=1)
    messages = sized(93_000, tiers.engine)
    result = await tiers.engine.project(messages)
    assert result.strategy == "full_summary"
    assert tiers.micro.calls == 0
    assert tiers.full.calls >= 1
    assert [(s.name, s.applied) for s in tiers.events[0].steps] == [
        ("micro_summary", False),
        ("full_summary", True),
    ]


async def test_a_second_micro_run_folds_into_the_existing_checkpoint() -> None:
    tiers = Tiers(reserve_tokens=1)
    first = await tiers.engine.project(sized(86_000, tiers.engine))
    assert first.commit is not None
    grown = list(first.commit)
    while tiers.engine.estimate(grown).tokens < 86_000:
        call = ToolCall(f"more_{len(grown)}", "read_file", '{"path": "src/more.py"}')
        grown += [Message.assistant("More.", tool_calls=[call]), Message.tool(call.id, "y" * 7600)]
    second = await tiers.engine.project(grown)
    assert second.strategy == "micro_summary"
    summaries = [m for m in second.messages if isinstance(m, ContextSummary)]
    assert len(summaries) == 1
    assert tiers.micro.requests[-1].previous_summary is not None


async def test_above_the_threshold_micro_runs_first_in_the_pipeline() -> None:
    """At 16k the threshold (11,904) is below the micro trigger (13,600): it governs."""
    tiers = Tiers(window=16_000)
    assert tiers.engine.threshold == 11_904
    messages = sized(12_600, tiers.engine)
    result = await tiers.engine.project(messages)
    assert result.usage.tokens <= tiers.engine.threshold
    assert result.strategy == "micro_summary"
    assert tiers.full.calls == 0


async def test_the_open_per_request_cap_leaves_a_fitting_view_alone() -> None:
    tiers = Tiers(reserve_tokens=1, max_llm_rewrites_per_request=0)
    result = await tiers.engine.project(sized(86_000, tiers.engine))
    assert not result.changed
    assert (tiers.micro.calls, tiers.full.calls, tiers.events) == (0, 0, [])


def test_the_micro_cut_keeps_recent_rounds_and_the_request() -> None:
    view = agent_loop(10)
    cut = micro_cut(
        view, analyze(view), FixedTokenCounter(), batch_groups=2, preserve_recent_rounds=2
    )
    assert cut is not None
    assert cut.is_split_turn
    assert cut.turn_start == 1
    assert cut.index == 2 + 2 * 2  # after the user message and two rounds


def test_too_few_rounds_give_no_micro_cut() -> None:
    view = agent_loop(2)
    assert (
        micro_cut(
            view, analyze(view), FixedTokenCounter(), batch_groups=2, preserve_recent_rounds=2
        )
        is None
    )


def test_the_full_trigger_may_not_be_below_the_micro_trigger() -> None:
    with pytest.raises(ConfigurationError, match="full_trigger"):
        MicroSummary(summarizer=RecordingSummarizer(), micro_trigger=0.9, full_trigger=0.8)
