"""Property tests over random pipelines, reserves and agent loops.

tests/test_engine_properties.py checks the recommended pipeline on generated
transcripts. These go further: the pipeline itself is drawn (any subset of the
bundled strategies, in any order, with random settings), the reserve may be
absent, zero or larger than the window, fixed overhead may be declared, and a
whole agent loop (append, project, commit, compact, recover, sync) is replayed
on two engines. Every result keeps every invariant; `project` and
`recover_overflow` never raise, and a manual compaction that wrote no
checkpoint is a `CompactionError` whose view keeps them too and commits
nothing; the same input and configuration give the same view.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from context_engine import CompactionError, CompactResult, ContextEngine, Message
from context_engine.strategies import (
    FullSummary,
    HardTruncate,
    LightTrim,
    SessionMemory,
    ToolResultMicrocompact,
)
from context_engine.strategies.base import Strategy
from tests.reliability.support import COUNTER, echo_summarizer, examples, frozen_copy, valid
from tests.test_engine_properties import assert_lands_or_says_why
from tests.transcripts import transcripts


def memory() -> str:
    return "## Memory\n- the user wants the parser fixed\n- tests live in tests/\n" * 3


def no_memory() -> str:
    raise OSError("no MEMORY.md yet")


STRATEGY_NAMES = ("microcompact", "light_trim", "session_memory", "full_summary", "hard_truncate")


@st.composite
def pipelines(draw: st.DrawFn) -> list[Strategy]:
    """Any subset of the bundled strategies, in any order, with random settings."""
    makers: dict[str, Callable[[], Strategy]] = {
        "microcompact": lambda: ToolResultMicrocompact(
            keep_recent=draw(st.integers(0, 6)),
            min_result_tokens=draw(st.sampled_from((0, 16, 64))),
        ),
        "light_trim": lambda: LightTrim(
            keep_recent=draw(st.integers(0, 6)),
            text_threshold=draw(st.sampled_from((300, 1_000, 4_000))),
            preserve_head=100,
            preserve_tail=100,
        ),
        "session_memory": lambda: SessionMemory(
            seed=draw(st.sampled_from((memory, no_memory))),
            keep_recent_tokens=draw(st.sampled_from((0, 500, 8_000))),
        ),
        "full_summary": lambda: FullSummary(
            summarizer=echo_summarizer,
            keep_recent_tokens=draw(st.none() | st.integers(1, 5_000)),
            summarizer_window=draw(st.sampled_from((None, 1_000_000))),
        ),
        "hard_truncate": HardTruncate,
    }
    names = draw(st.lists(st.sampled_from(STRATEGY_NAMES), unique=True, max_size=5))
    if draw(st.integers(0, 3)) and "hard_truncate" not in names:
        names.append("hard_truncate")  # most real pipelines end with the last resort
    if draw(st.booleans()):
        names = draw(st.permutations(names))  # any order must keep the invariants too
    return [makers[name]() for name in names]


@st.composite
def configurations(draw: st.DrawFn, transcript: list[Message]) -> dict[str, Any]:
    """Window (around the transcript's size), reserve (None, 0, a share, more than the
    window), overhead and pipeline."""
    tokens = sum(map(COUNTER.count_message, transcript))
    window = max(300, int(tokens * draw(st.floats(0.05, 1.5))))
    kind = draw(st.sampled_from(("share",) * 6 + ("default", "default", "zero", "over", "over")))
    reserve = {
        "share": lambda: draw(st.integers(1, max(1, window // 3))),
        "default": lambda: None,
        "zero": lambda: 0,
        "over": lambda: draw(st.integers(window, 2 * window)),
    }[kind]()
    return {
        "context_window": window,
        "strategies": draw(pipelines()),
        "reserve_tokens": reserve,
        "overhead_tokens": draw(st.sampled_from((0, 0, 100, 2_000))),
        "max_user_share": draw(st.sampled_from((0.1, 0.5, 1.0))),
    }


def build(config: dict[str, Any]) -> ContextEngine:
    return ContextEngine(token_counter=COUNTER, **config)


def compact(
    engine: ContextEngine, messages: list[Message], instructions: str | None = None
) -> CompactResult | tuple[Message, ...]:
    """The result of ``/compact``, or the view of the CompactionError it raised.

    Only a manual compaction that wrote no checkpoint raises; its error commits nothing.
    """
    failure: CompactionError | None = None
    try:
        return engine.compact_sync(messages, instructions=instructions)
    except CompactionError as error:
        failure = error
    assert failure is not None
    assert str(failure).startswith("manual compaction wrote no checkpoint: ")
    assert failure.commit is None
    return failure.view


def project(engine: ContextEngine, messages: list[Message]) -> tuple[Any, ...]:
    """The view ``project`` returns (it never raises), checked."""
    result = engine.project_sync(messages)
    event(f"project: {'rewritten' if result.changed else 'unchanged'}")
    event(f"project: {'fits' if result.fits else 'flagged over the threshold'}")
    if result.event is not None and result.event.futile:
        event("project: futile (floor above the threshold)")
    valid(messages, result.messages)
    assert result.fits == (result.usage.tokens <= engine.threshold)
    if not result.fits:
        assert result.event is not None  # never silently over the threshold
    rewrite = result.event
    if rewrite is not None:
        assert rewrite.view == result.messages
        assert rewrite.changed == result.changed
        assert rewrite.tokens_after == result.usage.tokens
        applied = [step.name for step in rewrite.steps if step.applied]
        assert result.strategy == (applied[-1] if applied else None)
        assert (result.commit is not None) == ("full_summary" in applied)
    if any(s.name == "hard_truncate" for s in engine.strategies):
        assert_lands_or_says_why(engine, result)
    return result.messages


@examples(200)
@given(transcript=transcripts(max_turns=5, max_steps=4), data=st.data())
def test_random_pipelines_keep_every_invariant_and_are_deterministic(
    transcript: list[Message], data: st.DataObject
) -> None:
    config = data.draw(configurations(transcript))
    engine = build(config)
    before = frozen_copy(transcript)
    identities = [id(m) for m in transcript]
    view = project(engine, transcript)
    assert project(build(config), list(transcript)) == view
    compacted = compact(engine, transcript, instructions="keep file names")
    valid(transcript, compacted.messages if isinstance(compacted, CompactResult) else compacted)
    recovered = engine.recover_overflow_sync(transcript, "prompt is too long")
    valid(transcript, recovered.messages)
    assert frozen_copy(transcript) == before
    assert [id(m) for m in transcript] == identities


ACTIONS = st.sampled_from(("project", "project", "project", "compact", "recover", "sync"))


def replay(config: dict[str, Any], chunks: list[list[Message]], actions: list[str]) -> list[Any]:
    """An agent loop: append a chunk, act, commit what the engine says to commit.

    Returns every view handed back, for a determinism check across engines.
    """
    engine = build(config)
    held: list[Message] = []
    views: list[Any] = []
    for chunk, action in zip(chunks, actions, strict=True):
        held = held + chunk
        before = frozen_copy(held)
        if action == "project":
            result: Any = engine.project_sync(held)
            commit = result.commit
        elif action == "compact":
            result = compact(engine, held)
            if not isinstance(result, CompactResult):
                event("loop: compact raised CompactionError")
                valid(held, result)
                views.append(("error", result))
                continue
            commit = result.commit
        elif action == "recover":
            result = engine.recover_overflow_sync(held, "context_length_exceeded")
            commit = result.commit
        else:
            engine.reset(held)
            views.append("synced")
            continue
        event(f"loop: {action} {'rewrote' if result.changed else 'kept'} the view")
        valid(held, result.messages)
        assert frozen_copy(held) == before
        snapshot = engine.snapshot()
        if result.changed or action == "project":
            assert snapshot is not None
            assert snapshot.messages == result.messages
        views.append(result.messages)
        if commit is not None:
            held = list(commit)
    return views


@examples(60)
@given(
    transcript=transcripts(min_turns=2, max_turns=6, max_steps=4),
    data=st.data(),
)
def test_an_agent_loop_with_commits_keeps_every_invariant_and_replays_identically(
    transcript: list[Message], data: st.DataObject
) -> None:
    config = data.draw(configurations(transcript))
    cuts = sorted(
        data.draw(st.lists(st.integers(1, len(transcript)), min_size=1, max_size=6, unique=True))
    )
    if cuts[-1] != len(transcript):
        cuts.append(len(transcript))
    chunks = [transcript[a:b] for a, b in zip([0, *cuts], cuts, strict=False)]
    actions = data.draw(st.lists(ACTIONS, min_size=len(chunks), max_size=len(chunks)))
    assert replay(config, chunks, actions) == replay(config, chunks, actions)
