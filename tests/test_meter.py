"""The engine's meter: shared prefixes found at C speed, views counted by what changed."""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine import ImageBlock, Message, TextBlock, ToolCall
from context_engine.meter import Meter, _shared_prefix, starts_with
from context_engine.strategies.tool_result_cap import MIN_CAP_TOKENS
from context_engine.structure import analyze
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, UsageEstimate
from tests.transcripts import transcripts

POOL = tuple(Message.user(f"message {n}") for n in range(5))


def naive_shared(view: Sequence[Message], previous: Sequence[Message]) -> int:
    shared = 0
    for mine, theirs in zip(view, previous, strict=False):
        if mine is not theirs and mine != theirs:
            break
        shared += 1
    return shared


def pairs(seed: int) -> tuple[tuple[Message, ...], tuple[Message, ...], tuple[Message, ...]]:
    """A previous input, a view that shares some of it, and a prefix of the previous one."""
    rnd = random.Random(seed)
    previous = tuple(rnd.choice(POOL) for _ in range(rnd.randint(0, 300)))
    kept = rnd.choice([len(previous), max(0, len(previous) - 1), rnd.randint(0, len(previous))])
    view = list(previous[:kept]) + [rnd.choice(POOL) for _ in range(rnd.randint(0, 3))]
    if rnd.random() < 0.3:  # rebuilt from dicts: equal objects, not the same ones
        view = [Message.user(m.text) for m in view]
    known = previous[: rnd.randint(0, len(previous))] if rnd.random() < 0.6 else ()
    return tuple(view), previous, known


@pytest.mark.parametrize("seed", range(200))
def test_shared_prefix_matches_a_position_by_position_comparison(seed: int) -> None:
    view, previous, known = pairs(seed)
    shared, verified = _shared_prefix(view, previous, known)
    assert shared == naive_shared(view, previous)
    assert starts_with(view, verified)
    assert len(verified) <= shared


@pytest.mark.parametrize(
    ("view", "prefix", "expected"),
    [
        (POOL, POOL[:3], True),
        (POOL, POOL, True),
        (POOL[:3], POOL, False),
        (POOL, (), True),
        (POOL, (POOL[0], POOL[2]), False),
        (tuple(Message.user(m.text) for m in POOL), POOL[:4], True),
        ((POOL[0], "not a message", POOL[2]), POOL[:3], False),
        ((POOL[0], 7, POOL[2]), POOL[:3], False),
    ],
    ids=[
        "proper-prefix",
        "whole",
        "longer-than-view",
        "empty",
        "one-differs",
        "equal-not-identical",
        "string-item",
        "int-item",
    ],
)
def test_starts_with_compares_items_and_never_orders_them(
    view: tuple[Message, ...], prefix: tuple[Message, ...], expected: bool
) -> None:
    """Unequal messages (or a caller's stray objects) mean no prefix, never an ordering error."""
    assert starts_with(view, prefix) is expected


def test_a_replaced_last_message_is_found_without_comparing_the_history_twice() -> None:
    """The prefix the meter verified on the last call carries to the next one."""
    counter = FixedTokenCounter()
    meter = Meter(counter)
    history = [Message.system("s"), *(Message.user(f"u{n}") for n in range(50))]
    for step in range(3):
        view = (*history, Message.user(f"step {step}" * step))
        assert meter.counts(view) == Meter(counter).counts(view)
        assert len(meter._stable) >= len(history) or step == 0
    assert meter.shared(view, meter._memo[0]) == len(view)


def test_counts_reuse_any_shared_prefix_and_equal_a_fresh_count() -> None:
    """Editing a message in the middle recounts from there on, with the same totals."""
    counter = FixedTokenCounter()
    meter = Meter(counter)
    view = tuple(Message.user("x" * (n * 10)) for n in range(40))
    meter.counts(view)
    edited = (*view[:20], Message.user("changed"), *view[21:])
    cumulative, index = meter.counts(edited)
    fresh, fresh_index = Meter(counter).counts(edited)
    assert (cumulative, index) == (fresh, fresh_index)


def in_place_rewrite(view: tuple[Message, ...], every: int) -> tuple[Message, ...]:
    return tuple(
        attrs.evolve(m, content="short") if m.role == "tool" and n % every == 0 else m
        for n, m in enumerate(view)
    )


@settings(max_examples=60, deadline=None)
@given(transcripts(), st.integers(min_value=1, max_value=4), st.integers(0, 500))
def test_measure_counts_what_changed_and_equals_a_full_count(
    transcript: list[Message], every: int, overhead: int
) -> None:
    """An in-place rewrite is counted by its changes; any view gets the full count's total."""
    counter = FixedTokenCounter()
    meter = Meter(counter, overhead_tokens=overhead)
    source = tuple(transcript)
    estimate = meter.estimate(source, None)
    measure = meter.measurer(source, estimate)
    correction = estimate.tokens - meter.counted(source)
    for view in (in_place_rewrite(source, every), source[: len(source) // 2], source):
        assert measure(view) == max(0, meter.counted(view) + correction)
        assert measure(list(view)) == measure(view)


def test_prefix_tokens_of_a_measured_view_count_only_its_tail() -> None:
    counter = FixedTokenCounter()
    meter = Meter(counter, overhead_tokens=9)
    source = tuple(Message.tool(f"c{n}", "y" * 40) for n in range(10))
    estimate = UsageEstimate(meter.counted(source), 0, meter.counted(source), -1)
    view = in_place_rewrite(source, 3)
    meter.measurer(source, estimate)(view)
    expected = sum(counter.count_message(m) for m in view[:8]) + 9
    assert meter.prefix_tokens(view, 8) == expected
    assert meter.prefix_tokens(view, 2) == sum(counter.count_message(m) for m in view[:2]) + 9


def naive_floor(
    meter: Meter,
    view: tuple[Message, ...],
    estimate: UsageEstimate,
    threshold: int,
    share: float | None,
) -> int:
    shape = analyze(view)
    total = 0
    for index, message in enumerate(view):
        if not shape.is_protected(index):
            continue
        tokens = meter.counter.count_message(message)
        trimmable = any(isinstance(block, TextBlock) for block in message.content)
        if index == shape.last_user and share is not None and trimmable:
            tokens = min(tokens, int(share * threshold))
        elif message.role == "tool" and trimmable:  # the last resort caps the newest results
            tokens = min(tokens, MIN_CAP_TOKENS)
        total += tokens
    correction = estimate.tokens - meter.counts(view)[0][-1] - REQUEST_OVERHEAD_TOKENS
    return max(0, total + REQUEST_OVERHEAD_TOKENS + correction)


@settings(max_examples=80, deadline=None)
@given(transcripts(), st.sampled_from([None, 0.1, 0.5]), st.integers(100, 20_000))
def test_floor_counts_the_lead_the_newest_user_message_and_the_tail(
    transcript: list[Message], share: float | None, threshold: int
) -> None:
    """The floor is the protected messages' tokens, the newest user message capped to its share."""
    meter = Meter(FixedTokenCounter())
    view = tuple(transcript)
    estimate = meter.estimate(view, None)
    assert meter.floor_tokens(view, estimate, threshold, share) == naive_floor(
        meter, view, estimate, threshold, share
    )


def test_floor_caps_a_newest_user_message_inside_the_tail() -> None:
    """A user message after the newest tool group is in the tail; it is still capped."""
    call = ToolCall("c1", "read_file", "{}")
    view = (
        Message.system("s"),
        Message.user("first"),
        Message.assistant(tool_calls=[call]),
        Message.tool("c1", "r" * 400),
        Message.user("u" * 4000),
    )
    meter = Meter(FixedTokenCounter())
    estimate = meter.estimate(view, None)
    shape = analyze(view)
    assert shape.last_user >= shape.tail_start
    floor = meter.floor_tokens(view, estimate, 1000, 0.1)
    assert floor == naive_floor(meter, view, estimate, 1000, 0.1)
    assert floor < meter.counter.count_message(view[-1])
    assert meter.floor_tokens(view, estimate, 1000) > meter.counter.count_message(view[-1])


def test_floor_counts_an_image_only_newest_user_message_whole() -> None:
    """Only text can be trimmed, so a share does not cap a message of images alone."""
    image = ImageBlock(data="iVBORw0KGgo=" * 200, media_type="image/png")
    view = (Message.system("s"), Message("user", (image,)))
    meter = Meter(FixedTokenCounter())
    estimate = meter.estimate(view, None)
    whole = meter.floor_tokens(view, estimate, 100)
    assert meter.floor_tokens(view, estimate, 100, 0.1) == whole
    assert whole >= meter.counter.count_message(view[-1])
    with_text = (view[0], Message("user", (TextBlock("look " * 200), image)))
    estimate = meter.estimate(with_text, None)
    assert meter.floor_tokens(with_text, estimate, 100, 0.1) < meter.floor_tokens(
        with_text, estimate, 100
    )
