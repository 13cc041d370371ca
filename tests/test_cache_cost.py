"""Cache economics per call and per rewrite, and what the engine reports of them."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from context_engine import ContextEngine, Message, ToolCall
from context_engine.cache_cost import estimate_call, rewrite_cost
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.breakpoints import body_breakpoints
from context_engine.pricing import CACHE_PRICING
from context_engine.strategies import LightTrim, ToolResultCap, ToolResultMicrocompact
from context_engine.testing import FixedTokenCounter

ANTHROPIC = CACHE_PRICING["anthropic"]
OPENAI = CACHE_PRICING["openai"]


@pytest.mark.parametrize(
    ("tokens", "reused", "cached", "cost"),
    [
        (50_000, 40_000, 40_000, 40_000 * 0.1 + 10_000 * 1.25),
        (50_000, 900, 0, 50_000 * 1.25),
        (50_000, 0, 0, 50_000 * 1.25),
        (1_000, 5_000, 0, 1_000 * 1.25),
    ],
    ids=["warm-prefix", "prefix-below-minimum", "cold", "reuse-larger-than-prompt"],
)
def test_a_call_splits_into_cache_reads_and_writes(
    tokens: int, reused: int, cached: int, cost: float
) -> None:
    estimate = estimate_call(ANTHROPIC, tokens, reused)
    assert (estimate.cached_tokens, estimate.uncached_tokens) == (cached, tokens - cached)
    assert estimate.cost == pytest.approx(cost)
    assert estimate.dollars == pytest.approx(cost * 3.0 / 1_000_000)


def test_openai_writes_cost_like_plain_input() -> None:
    estimate = estimate_call(OPENAI, 10_000, 8_000)
    assert estimate.cost == pytest.approx(8_000 * 0.1 + 2_000)
    assert estimate.hit_share == pytest.approx(0.8)


def test_a_rewrite_that_saves_little_but_drops_much_reasoning_is_not_worth_it() -> None:
    """Reasoning to redo is priced at the output rate, so it outweighs a small saving."""
    small = rewrite_cost(
        ANTHROPIC,
        cached_before=60_000,
        reused_tokens=59_000,
        saved_tokens=900,
        reasoning_tokens_dropped=3_000,
    )
    rewritten = (1_000 - 900) * 1.25 - 1_000 * 0.1  # what is left of the invalidated part
    assert small.cost == pytest.approx(rewritten + 3_000 * 5.0)
    assert small.savings == pytest.approx(900 * 0.1 * 10)
    assert not small.worth_it
    without_reasoning = attrs.evolve(small, cost=rewritten)
    assert without_reasoning.worth_it


def test_a_rewrite_that_halves_the_prompt_pays_over_the_remaining_calls() -> None:
    big = rewrite_cost(
        OPENAI, cached_before=100_000, reused_tokens=5_000, saved_tokens=50_000, remaining_calls=20
    )
    assert big.invalidated_tokens == 95_000
    assert big.cost == pytest.approx(45_000 * 1.0 - 95_000 * 0.1)
    assert big.net == pytest.approx(50_000 * 0.1 * 20 - big.cost)
    assert big.worth_it
    assert big.dollars == pytest.approx(big.net * 1.25 / 1_000_000)


def test_the_saved_tokens_are_not_written_again_so_a_deep_cut_can_pay_at_once() -> None:
    """Removing most of what the cache held writes less than it reads: negative cost."""
    deep = rewrite_cost(
        ANTHROPIC, cached_before=40_000, reused_tokens=2_000, saved_tokens=36_000, remaining_calls=0
    )
    assert deep.cost == pytest.approx(2_000 * 1.25 - 38_000 * 0.1)
    assert deep.cost < 0
    assert deep.worth_it  # even with no call left to profit from it
    shallow = attrs.evolve(deep, cost=30_000 * 1.25 - 38_000 * 0.1)
    assert not shallow.worth_it


COUNTER = FixedTokenCounter()


def body(*, diagnostics: dict[str, Any] | None = None) -> dict[str, Any]:
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a.py"}},
        ],
    }
    answer: dict[str, Any] = {"role": "assistant", "content": "found it"}
    if diagnostics is not None:
        answer["diagnostics"] = diagnostics  # the provider's word on the call that wrote it
    return {
        "system": [
            {"type": "text", "text": "rules " * 300, "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": "fix it"},
            assistant,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "line\n" * 2_000,
                        "cache_control": {"type": "ephemeral", "ttl": "1h"},
                    }
                ],
            },
            answer,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "now fix", "cache_control": {"type": "ephemeral"}}
                ],
            },
        ],
    }


def engine(**options: Any) -> ContextEngine:
    strategy = ToolResultMicrocompact(keep_recent=0, min_result_tokens=0)
    return ContextEngine(
        3_000, [strategy], reserve_tokens=500, token_counter=COUNTER, pricing="anthropic", **options
    )


def test_usage_carries_the_cache_estimate_of_each_call() -> None:
    """The second call of a growing session reads its shared prefix from the cache."""
    agent = engine()
    small = [Message.system("rules " * 1_000), Message.user("fix it")]
    first = agent.project_sync(small)
    assert first.usage.cache is not None
    assert first.usage.cache.cached_tokens == 0
    grown = [*small, Message.assistant("ok"), Message.user("more " * 400)]
    second = agent.project_sync(grown)
    assert second.usage.cache is not None
    assert second.usage.cache.cached_tokens == second.usage.prefix_reused_tokens > 1024


def test_a_rewrite_event_carries_its_cost_and_the_providers_cache_miss() -> None:
    miss = {"type": "messages_changed", "cache_missed_input_tokens": 4_200}
    transcript = from_anthropic(body(diagnostics={"cache_miss_reason": miss}))
    result = engine().project_sync(transcript)
    assert result.event is not None
    assert result.event.changed
    assert result.event.cost is not None
    assert result.event.cost.saved_tokens == result.event.tokens_before - result.event.tokens_after
    assert result.event.cache_miss == miss


def test_without_pricing_nothing_is_estimated() -> None:
    plain = ContextEngine(
        3_000,
        [ToolResultMicrocompact(keep_recent=0, min_result_tokens=0)],
        reserve_tokens=500,
        token_counter=COUNTER,
    )
    result = plain.project_sync(from_anthropic(body()))
    assert result.usage.cache is None
    assert result.event is not None
    assert result.event.cost is None


KEEPING_STRATEGIES = {
    "tool-result-cap": [ToolResultCap(max_tokens=200)],
    "microcompact": [ToolResultMicrocompact(keep_recent=0, min_result_tokens=0)],
    "light-trim": [
        LightTrim(keep_recent=1, text_threshold=500, preserve_head=100, preserve_tail=100)
    ],
}


@pytest.mark.parametrize("name", list(KEEPING_STRATEGIES))
def test_the_callers_cache_breakpoints_survive_every_rewrite_that_keeps_their_message(
    name: str,
) -> None:
    """System, tool-result and user-text breakpoints are all in the rewritten body."""
    original = body()
    rewriting = ContextEngine(
        1_500, KEEPING_STRATEGIES[name], reserve_tokens=300, token_counter=COUNTER
    )
    result = rewriting.project_sync(from_anthropic(original))
    assert result.event is not None
    assert [s.name for s in result.event.steps if s.applied] == [KEEPING_STRATEGIES[name][0].name]
    written = to_anthropic(result.messages)
    assert written != original
    assert body_breakpoints(written) == body_breakpoints(original)


# -- the served prefix: what a breakpoint cache reads ------------------------------------------


def tool_steps(first: int, count: int, result_tokens: int = 100) -> list[Message]:
    """``count`` tool calls from number ``first``, each answered by a result of that size."""
    out: list[Message] = []
    for n in range(first, first + count):
        call = ToolCall(f"c{n}", "read_file", f'{{"path": "src/f{n}.py"}}')
        out += [
            Message.assistant(f"reading f{n}", tool_calls=[call]),
            Message.tool(f"c{n}", f"line {n}\n" * (result_tokens // 2)),
        ]
    return out


HEAD = [Message.system("rules " * 1_000), Message.user("Fix the parser. " * 50)]


def growing(family: str, **options: Any) -> ContextEngine:
    return ContextEngine(
        100_000, [ToolResultMicrocompact()], token_counter=COUNTER, pricing=family, **options
    )


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_usage_reads_from_the_cache_only_what_the_providers_rule_serves(family: str) -> None:
    """Twelve tool steps (36 blocks) after the last request's end: Anthropic's lookback misses it.

    Its cache serves only the entry after the system prompt (the breakpoint
    assumed there), not the whole prefix shared with the last request;
    OpenAI's prefix cache serves all of it.
    """
    agent = growing(family)
    first = [*HEAD, *tool_steps(0, 2)]
    agent.project_sync(first)
    grown = agent.project_sync([*first, *tool_steps(2, 12)])
    cache = grown.usage.cache
    assert cache is not None
    shared = grown.usage.prefix_reused_tokens
    assert shared == sum(map(COUNTER.count_message, first))
    if family == "anthropic":
        assert cache.cached_tokens == COUNTER.count_message(HEAD[0]) < shared
    else:
        assert cache.cached_tokens == shared


def test_with_the_engines_breakpoints_the_last_requests_entry_stays_in_reach() -> None:
    """``cache_breakpoints=True`` marks the entry the last request wrote: all of it is read."""
    agent = growing("anthropic", cache_breakpoints=True)
    first = [*HEAD, *tool_steps(0, 2)]
    agent.project_sync(first)
    grown = agent.project_sync([*first, *tool_steps(2, 12)])
    assert grown.usage.cache is not None
    assert grown.usage.cache.cached_tokens == grown.usage.prefix_reused_tokens > 1_024


@pytest.mark.parametrize("family", ["anthropic", "openai"])
def test_a_rewrite_event_counts_the_cache_its_served_prefix_gives_up(family: str) -> None:
    """Clearing c0 changes the view behind the last breakpoint.

    A prefix cache still reads up to c0; Anthropic's reads only up to the
    previous request's breakpoint before it (after the system prompt), so
    the user message and the call of c0 are invalidated too.
    """
    agent = ContextEngine(
        3_000,
        [ToolResultMicrocompact(keep_recent=0, min_result_tokens=0)],
        reserve_tokens=500,
        token_counter=COUNTER,
        pricing=family,
    )
    first = [*HEAD[:1], Message.user("Fix the parser. " * 50), *tool_steps(0, 3)]
    before = agent.project_sync(first)
    assert not before.changed
    result = agent.project_sync([*first, *tool_steps(3, 2, result_tokens=600)])
    assert result.event is not None
    assert result.event.cost is not None
    was_cached = sum(map(COUNTER.count_message, first))
    assert result.event.prefix_reused_tokens == sum(map(COUNTER.count_message, first[:3]))
    invalidated = result.event.cost.invalidated_tokens
    if family == "anthropic":
        assert invalidated == was_cached - COUNTER.count_message(first[0])
    else:
        assert invalidated == before.usage.tokens - result.event.prefix_reused_tokens
