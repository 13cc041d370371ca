"""ToolResultCap: every tool result, the newest included, fits its cap; a turn's results too."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_engine import ContextEngine, ImageBlock, Message, TextBlock, ToolCall
from context_engine.archive import MemoryArchive, find_references
from context_engine.errors import ConfigurationError, InvalidMessageError
from context_engine.invariants import check_view
from context_engine.strategies import (
    Budget,
    HardTruncate,
    LightTrim,
    Strategy,
    StrategyResult,
    ToolResultCap,
    ToolResultMicrocompact,
)
from context_engine.strategies._shorten import reference_note
from context_engine.strategies.tool_result_cap import MIN_CAP_TOKENS, cap_tool_result
from context_engine.structure import ARCHIVED_KEY, CAPPED_KEY, CLEARED_KEY, analyze
from context_engine.testing import FixedTokenCounter
from tests.transcripts import transcripts

THRESHOLD = 4_000  # per result: 1,000 tokens; per round: 2,000 tokens


def grep_output(lines: int, *, error_at: int | None = None) -> str:
    """A ``grep -rn`` over a big repository: ``lines`` matches, one of them a traceback line."""
    out = [f"src/pkg_{n // 40}/mod_{n}.py:{n % 300}: value = compute(x, y)" for n in range(lines)]
    if error_at is not None:
        out[error_at] = "src/app.py:12: ValueError: invalid literal for int() with base 10"
    return "\n".join(out) + "\n"


def call(call_id: str, name: str = "grep") -> Message:
    return Message.assistant(tool_calls=[ToolCall(call_id, name, '{"pattern": "compute"}')])


def result(call_id: str, tokens: int, name: str = "grep") -> Message:
    """A tool result of about ``tokens`` tokens with the fixed 4-characters counter."""
    return Message.tool(call_id, grep_output(max(1, tokens * 4 // 44)), name=name)


def session(*sizes: int) -> list[Message]:
    """A system prompt, one user turn, one call + result per size (oldest first)."""
    messages = [Message.system("You are a coding agent."), Message.user("Find compute().")]
    for n, size in enumerate(sizes):
        messages += [call(f"c{n}"), result(f"c{n}", size)]
    return messages


def measure_with(counter: FixedTokenCounter) -> Any:
    return lambda messages: sum(counter.count_message(m) for m in messages)


def budget_for(
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int = THRESHOLD,
    *,
    archiving: bool = False,
) -> Budget:
    measure = measure_with(counter)
    return Budget(
        tokens=measure(view),
        window=threshold * 2,
        threshold=threshold,
        counter=counter,
        measure=measure,
        archiving=archiving,
    )


async def run(
    strategy: ToolResultCap,
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int = THRESHOLD,
    *,
    archiving: bool = False,
) -> StrategyResult:
    """Apply, and check what every run must keep: invariants, pairing, bookkeeping."""
    before = copy.deepcopy(list(view))
    result = await strategy.apply(
        view, view, budget_for(view, counter, threshold, archiving=archiving)
    )
    assert list(view) == before, "input mutated"
    assert check_view(view, result.messages) == []
    assert len(result.messages) == len(view), "a message was removed"
    measure = measure_with(counter)
    assert result.tokens_saved == measure(view) - measure(result.messages)
    changed = [m for m, new in zip(view, result.messages, strict=True) if m is not new]
    assert list(result.replaced) == changed
    assert result.applied == bool(changed)
    for old, new in zip(view, result.messages, strict=True):
        assert (old.role, old.tool_call_id, old.name) == (new.role, new.tool_call_id, new.name)
        if new is not old:
            assert new.role == "tool"
            assert CAPPED_KEY in new.metadata
    return result


def capped(view: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(view) if CAPPED_KEY in m.metadata]


def test_is_a_deterministic_strategy_named_tool_result_cap() -> None:
    strategy = ToolResultCap()
    assert isinstance(strategy, Strategy)
    assert strategy.name == "tool_result_cap"
    assert strategy.uses_llm is False


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [(3_904, 976), (110_000, 20_000), (200, MIN_CAP_TOKENS)],
    ids=["8k-window", "ceiling", "floor"],
)
def test_the_cap_is_a_share_of_the_threshold_or_the_ceiling(threshold: int, expected: int) -> None:
    """A quarter of the threshold, at most 20,000 tokens, at least MIN_CAP_TOKENS."""
    assert ToolResultCap().limit(threshold) == expected


async def test_the_newest_result_is_capped_with_head_tail_and_error_lines(
    counter: FixedTokenCounter,
) -> None:
    """The newest group is protected elsewhere; its oversized result is capped here."""
    text = grep_output(3_000, error_at=1_500)
    view = [*session(), call("c9"), Message.tool("c9", text, name="grep")]
    result = await run(ToolResultCap(), view, counter)
    assert capped(result.messages) == [3]
    preview = result.messages[3]
    assert counter.count_message(preview) <= 1_000
    body = preview.text
    lines = text.splitlines(keepends=True)
    assert body.startswith("".join(lines[:5]))
    assert body.endswith("".join(lines[-5:]))
    assert f"[line 1501] {lines[1500].rstrip()}" in body
    tokens = counter.count_message(view[3])
    assert f"in full it is {tokens:,} tokens, 3,000 lines, {len(text):,} characters" in body
    assert preview.metadata[CAPPED_KEY] == {
        "tokens": tokens,
        "lines": 3_000,
        "characters": len(text),
    }
    assert not find_references(body)  # no archive: no reference named


async def test_with_an_archive_the_marker_names_the_originals_reference(
    counter: FixedTokenCounter,
) -> None:
    """The reference the original is stored under is on the preview, within the cap."""
    view = session(5_000)
    result = await run(ToolResultCap(), view, counter, archiving=True)
    (removal,) = result.removed
    assert removal.originals == (view[3],)
    assert removal.kind == "tool_result"
    preview = result.messages[3]
    assert preview.content[-1] == TextBlock(reference_note(removal.reference))
    assert preview.metadata[ARCHIVED_KEY] == [removal.reference]
    assert counter.count_message(preview) <= 1_000


async def test_results_under_their_cap_stay_the_same_objects(counter: FixedTokenCounter) -> None:
    """Nothing above its cap: not applied, the view handed on as it was."""
    view = session(300, 900, 500)
    result = await run(ToolResultCap(), view, counter)
    assert not result.applied
    assert all(a is b for a, b in zip(view, result.messages, strict=True))


async def test_capping_a_capped_view_changes_nothing(counter: FixedTokenCounter) -> None:
    """Idempotent: a second run over its own output applies nothing."""
    view = session(3_000, 200, 8_000)
    first = await run(ToolResultCap(), view, counter, archiving=True)
    assert capped(first.messages) == [3, 7]
    again = await run(ToolResultCap(), first.messages, counter, archiving=True)
    assert not again.applied
    assert again.messages == first.messages


async def test_the_same_result_always_gets_the_same_preview_object(
    counter: FixedTokenCounter,
) -> None:
    """Memoized per result: a later call (one more step in the session) reuses the copy."""
    view = session(3_000)
    first = await run(ToolResultCap(), view, counter, archiving=True)
    grown = [*view, call("c1"), result("c1", 100)]
    second = await run(ToolResultCap(), grown, counter, archiving=True)
    assert second.messages[3] is first.messages[3]
    fresh = await run(ToolResultCap(), copy.deepcopy(view), counter, archiving=True)
    assert fresh.messages[3] == first.messages[3]


def parallel_round(*sizes: int) -> list[Message]:
    """A system prompt, one user turn and one assistant message whose calls return ``sizes``."""
    calls = [ToolCall(f"p{n}", "grep", '{"pattern": "compute"}') for n in range(len(sizes))]
    messages = [
        Message.system("You are a coding agent."),
        Message.user("Find compute()."),
        Message.assistant(tool_calls=calls),
    ]
    return messages + [result(f"p{n}", size) for n, size in enumerate(sizes)]


async def test_a_rounds_results_together_are_capped_largest_first(
    counter: FixedTokenCounter,
) -> None:
    """Four parallel results under the per-result cap but over the per-round room: the big
    two shrink."""
    view = parallel_round(900, 100, 900, 200)
    sizes = [counter.count_message(view[i]) for i in (3, 4, 5, 6)]
    assert all(size <= 1_000 for size in sizes)
    assert sum(sizes) > 2_000
    result = await run(ToolResultCap(), view, counter)
    assert capped(result.messages) == [3, 5]
    assert result.messages[4] is view[4]
    assert result.messages[6] is view[6]
    round_tokens = sum(counter.count_message(result.messages[i]) for i in (3, 4, 5, 6))
    assert round_tokens <= 2_000


async def test_sequential_steps_of_one_turn_are_not_capped_together(
    counter: FixedTokenCounter,
) -> None:
    """A long agent turn keeps its results whole while each is under the cap: clearing old
    results is microcompact's job, not the cap's."""
    view = session(900, 100, 900, 200)
    result = await run(ToolResultCap(), view, counter)
    assert capped(result.messages) == []


async def test_the_turn_cap_is_per_turn(counter: FixedTokenCounter) -> None:
    """Two turns of 1,800 tokens each: each fits its own room, nothing is capped."""
    first = session(900, 900)
    view = [*first, Message.assistant("Found it."), Message.user("And the tests?")]
    view += [call("d0"), result("d0", 900), call("d1"), result("d1", 900)]
    result_ = await run(ToolResultCap(), view, counter)
    assert not result_.applied


async def test_results_of_pending_calls_stay_verbatim(counter: FixedTokenCounter) -> None:
    """Calls still waiting at the end keep their results as they are (invariant)."""
    waiting = Message.assistant(
        tool_calls=[ToolCall("p0", "cat", "{}"), ToolCall("p1", "cat", "{}")]
    )
    view = [*session(), waiting, result("p0", 5_000, name="cat")]
    assert analyze(view).pending_start == 2
    outcome = await run(ToolResultCap(), view, counter)
    assert not outcome.applied


async def test_images_stay_and_image_only_results_are_left_alone(
    counter: FixedTokenCounter,
) -> None:
    """Only text is capped; image blocks follow the preview, image-only results stay whole."""
    image = ImageBlock(url="https://example.invalid/screenshot.png")
    big = Message("tool", (TextBlock(grep_output(500)), image), tool_call_id="c0", name="shot")
    images_only = Message("tool", (image,) * 20, tool_call_id="c1", name="shot")
    view = [*session(), call("c0"), big, call("c1"), images_only]
    result = await run(ToolResultCap(), view, counter)
    assert capped(result.messages) == [3]
    assert result.messages[3].content[-1] == image
    assert result.messages[5] is images_only


async def test_cleared_results_are_not_capped_again(counter: FixedTokenCounter) -> None:
    """Another strategy's rewrite is final here too."""
    view = session(5_000)
    view[3] = Message(
        "tool", view[3].content, tool_call_id="c0", name="grep", metadata={CLEARED_KEY: True}
    )
    assert not (await run(ToolResultCap(), view, counter)).applied


def test_cap_tool_result_at_write_time(counter: FixedTokenCounter) -> None:
    """The pure function an engine calls when a result arrives: preview + removal, or as is."""
    big = result("c0", 30_000)
    shorter, removal = cap_tool_result(big, max_tokens=2_000, counter=counter, archiving=True)
    assert removal is not None
    assert removal.originals == (big,)
    assert counter.count_message(shorter) <= 2_000
    assert find_references(shorter.text) == [removal.reference]
    assert (shorter.tool_call_id, shorter.name, shorter.role) == ("c0", "grep", "tool")
    assert cap_tool_result(shorter, max_tokens=500, counter=counter) == (shorter, None)
    small = result("c1", 100)
    kept, none = cap_tool_result(small, max_tokens=2_000, counter=counter)
    assert kept is small
    assert none is None
    user = Message.user("x" * 100_000)
    assert cap_tool_result(user, max_tokens=2_000, counter=counter)[0] is user


@pytest.mark.parametrize(
    ("message", "max_tokens", "error", "match"),
    [
        ("not a message", 1_000, InvalidMessageError, "takes a Message"),
        (Message.tool("c", "x"), True, ConfigurationError, "must be an int"),
        (Message.tool("c", "x"), 10, ConfigurationError, "must be >= 128"),
    ],
    ids=["not-a-message", "bool-cap", "tiny-cap"],
)
def test_cap_tool_result_rejects_bad_input(
    message: Any, max_tokens: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        cap_tool_result(message, max_tokens=max_tokens, counter=FixedTokenCounter())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_share": 0}, r"max_share must be a number in \(0, 1\]"),
        ({"max_share": 1.5}, "max_share"),
        ({"max_round_share": True}, "max_round_share"),
        ({"max_tokens": 100}, "max_tokens must be an int >= 128"),
        ({"max_tokens": 2.5}, "max_tokens"),
    ],
    ids=["zero-share", "share-above-one", "bool-turn-share", "tiny-ceiling", "float-ceiling"],
)
def test_bad_configuration_fails_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ToolResultCap(**kwargs)


# -- through the engine --------------------------------------------------------------


def huge_grep_session() -> list[Message]:
    """A 60k-token ``grep`` output as the newest tool result, with an error line inside."""
    text = grep_output(60_000 * 4 // 44, error_at=3_000)
    return [
        Message.system("You are a coding agent."),
        Message.user("Where is compute() called with bad input?"),
        call("c0"),
        Message.tool("c0", text, name="grep"),
    ]


def pipeline() -> list[Strategy]:
    return [ToolResultCap(), ToolResultMicrocompact(), LightTrim(), HardTruncate()]


async def test_a_60k_token_result_fits_an_8k_window_and_comes_back_from_the_archive() -> None:
    """The view fits; the preview keeps the error; recall returns the original byte for byte."""
    transcript = huge_grep_session()
    counter = FixedTokenCounter()
    engine = ContextEngine(
        8_000, pipeline(), token_counter=counter, archive=MemoryArchive(), session_id="s1"
    )
    assert engine.estimate(transcript).tokens > 60_000
    projection = await engine.project(transcript)
    assert projection.usage.tokens <= engine.threshold
    assert projection.event is not None
    assert [s.name for s in projection.event.steps if s.applied] == ["tool_result_cap"]
    assert check_view(transcript, projection.messages) == []
    preview = projection.messages[3]
    assert "[line 3001] src/app.py:12: ValueError" in preview.text
    (reference,) = find_references(preview.text)
    (original,) = await engine.recall(reference)
    assert original == transcript[3]
    assert original.text.encode() == transcript[3].text.encode()
    again = await engine.project(transcript)
    assert again.messages[3] is preview


async def test_without_an_archive_the_view_fits_too() -> None:
    transcript = huge_grep_session()
    engine = ContextEngine(8_000, pipeline(), token_counter=FixedTokenCounter())
    projection = await engine.project(transcript)
    assert projection.usage.tokens <= engine.threshold
    assert not find_references(projection.messages[3].text)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts(max_turns=3, max_steps=4), st.integers(600, 40_000))
def test_generated_sessions_keep_the_invariants_and_every_cap(
    transcript: list[Message], threshold: int
) -> None:
    """Any session: invariants hold, every cappable result fits, a second run is a no-op."""
    counter = FixedTokenCounter()
    strategy = ToolResultCap()
    view = tuple(transcript)
    result = strategy.rewrite(view, budget_for(view, counter, threshold, archiving=True))
    assert check_view(view, result.messages) == []
    assert len(result.messages) == len(view)
    pending = analyze(view).pending_start
    limit = strategy.limit(threshold)
    for index, (old, new) in enumerate(zip(view, result.messages, strict=True)):
        # Images stay as they are: only results made of text are held to the cap.
        text_only = all(isinstance(b, TextBlock) for b in old.content)
        if index >= pending or old.role != "tool":
            assert new is old
        elif CAPPED_KEY in new.metadata:
            assert new.content[-1] == TextBlock(reference_note(find_references(new.text)[-1]))
            assert counter.count_message(new) <= (
                limit if text_only else counter.count_message(old)
            )
        else:
            assert new is old
            if CLEARED_KEY not in old.metadata and old.content and text_only:
                assert counter.count_message(old) <= limit
    again = strategy.rewrite(
        result.messages, budget_for(result.messages, counter, threshold, archiving=True)
    )
    assert not again.applied


async def test_a_long_session_builds_each_preview_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rewrites on later calls reuse the previews made before: only new results cost work."""
    from context_engine.strategies import tool_result_cap as module

    built: list[int] = []
    real = module.preview

    def counting(text: str, *, max_chars: int, size: str) -> str:
        built.append(len(text))
        return real(text, max_chars=max_chars, size=size)

    monkeypatch.setattr(module, "preview", counting)
    counter = FixedTokenCounter()
    transcript = [Message.system("You are a coding agent.")]
    for turn in range(40):
        transcript += [Message.user(f"Step {turn}."), call(f"c{turn}"), result(f"c{turn}", 3_000)]
        transcript.append(Message.assistant(f"Done with step {turn}."))
    strategy = ToolResultCap()
    first = strategy.rewrite(transcript, budget_for(transcript, counter, 8_000))
    assert len(first.removed) == 40
    made = len(built)
    assert made >= 40
    grown = [*transcript, Message.user("One more."), call("x"), result("x", 3_000)]
    second = strategy.rewrite(grown, budget_for(grown, counter, 8_000))
    assert len(second.removed) == 41
    kept = second.messages[: len(transcript)]
    assert all(a is b for a, b in zip(first.messages, kept, strict=True))
    assert len(built) - made == made // 40  # the new result's preview, nothing else


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transcripts(max_turns=3, max_steps=4), st.integers(5_000, 40_000))
def test_generated_sessions_through_the_engine_keep_the_invariants(
    transcript: list[Message], window: int
) -> None:
    """First in a pipeline with an archive: every view keeps the invariants of DESIGN.md."""
    engine = ContextEngine(
        window,
        [ToolResultCap(), HardTruncate()],
        token_counter=FixedTokenCounter(),
        archive=MemoryArchive(),
        session_id="generated",
    )
    projection = engine.project_sync(transcript)
    assert check_view(transcript, projection.messages) == []
    for reference in find_references("\n".join(m.text for m in projection.messages)):
        assert engine.recall_sync(reference)


async def test_engine_cap_tool_result_archives_the_original_and_stores_a_preview() -> None:
    """`engine.cap_tool_result` keeps the transcript small and the original recallable."""
    from context_engine.testing import FixedTokenCounter

    engine = ContextEngine.default(
        8_000, archive=MemoryArchive(), session_id="s1", token_counter=FixedTokenCounter()
    )
    huge = Message.tool("call_1", "\n".join(f"match {i}: src/x.py" for i in range(20_000)))
    capped = await engine.cap_tool_result(huge)
    assert engine.counter.count_message(capped) < engine.threshold // 3
    reference = capped.metadata["context_engine.archived"][0]
    assert await engine.recall(reference) == (huge,)
    small = Message.tool("call_2", "ok")
    assert await engine.cap_tool_result(small) is small


def test_engine_cap_tool_result_sync_is_the_blocking_twin() -> None:
    """`cap_tool_result_sync` gives the same preview, archives the original, refuses a loop."""
    from context_engine.errors import BlockingCallInEventLoopError
    from context_engine.testing import FixedTokenCounter

    engine = ContextEngine.default(
        8_000, archive=MemoryArchive(), session_id="s1", token_counter=FixedTokenCounter()
    )
    huge = Message.tool("call_1", "\n".join(f"match {i}: src/x.py" for i in range(20_000)))
    capped = engine.cap_tool_result_sync(huge)
    assert capped.text == asyncio.run(engine.cap_tool_result(huge)).text
    (reference,) = capped.metadata["context_engine.archived"]
    assert engine.recall_sync(reference) == (huge,)

    async def inside_a_loop() -> None:
        with pytest.raises(BlockingCallInEventLoopError, match=r"await engine\.cap_tool_result"):
            engine.cap_tool_result_sync(huge)

    asyncio.run(inside_a_loop())


def test_the_default_pipeline_caps_tool_results_first() -> None:
    """`ContextEngine.default` puts `ToolResultCap` before every other strategy."""
    names = [s.name for s in ContextEngine.default(8_000).strategies]
    assert names[0] == "tool_result_cap"
