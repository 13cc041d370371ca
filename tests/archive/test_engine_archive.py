"""The engine with an archive: originals kept before a view leaves, references in the view."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from context_engine import (
    CompactionError,
    ConfigurationError,
    ContextEngine,
    ContextSummary,
    ExtractiveSummarizer,
    Message,
    RecallError,
)
from context_engine.archive import ArchiveRecord, MemoryArchive, SQLiteArchive, find_references
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.strategies import HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.strategies._shorten import UNARCHIVED_NOTE
from context_engine.structure import ARCHIVED_KEY, CLEARED_KEY, TRUNCATION_KEY
from context_engine.testing import FixedTokenCounter
from tests.archive.recall_walk import assert_removed_are_recallable, references_in
from tests.conftest import load_corpus_dicts
from tests.fakes import Exploding, agent_session


class FailingArchive(MemoryArchive):
    """A store whose writes fail (a full disk, a dead Redis); reads work."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        self.writes += 1
        raise OSError("disk full")


def engine_with(archive: object, window: int = 6_000, **options: object) -> ContextEngine:
    options.setdefault("session_id", "session-a")
    options.setdefault("reserve_tokens", window // 10)
    options.setdefault("tool_result_cap", None)  # these sessions exercise checkpoints
    return ContextEngine.default(
        window,
        summarizer=ExtractiveSummarizer(),
        token_counter=FixedTokenCounter(),
        archive=archive,
        **options,  # type: ignore[arg-type]
    )


def microcompact_engine(archive: object, window: int = 6_000) -> ContextEngine:
    return ContextEngine(
        window,
        [ToolResultMicrocompact(), LightTrim(), HardTruncate()],
        reserve_tokens=500,
        token_counter=FixedTokenCounter(),
        archive=archive,  # type: ignore[arg-type]
        session_id="session-a",
    )


async def test_originals_are_archived_before_the_view_is_returned() -> None:
    """Every cleared tool result names a reference that recalls the result byte for byte."""
    archive = MemoryArchive()
    engine = microcompact_engine(archive)
    session = agent_session(40)
    result = await engine.project(session)
    cleared = [m for m in result.messages if m.metadata.get(CLEARED_KEY)]
    assert len(cleared) >= 10
    assert len(await archive.records("session-a")) == len(cleared)
    originals = {m.tool_call_id: m for m in session if m.role == "tool"}
    for message in cleared:
        (reference,) = find_references(message.text)
        assert message.metadata[ARCHIVED_KEY] == [reference]
        assert await engine.recall(reference) == (originals[message.tool_call_id],)
    assert check_view(session, result.messages) == []


async def test_placeholders_name_the_same_reference_on_every_call() -> None:
    """Idempotent placeholders: rebuilding the view from the same transcript gives the same text."""
    session = agent_session(40)
    first = await microcompact_engine(MemoryArchive()).project(session)
    second = await microcompact_engine(MemoryArchive()).project(list(session))
    assert first.messages == second.messages
    assert references_in(first.messages) == references_in(second.messages)


async def test_rewrite_event_and_summary_info_list_the_references_they_created() -> None:
    archive = MemoryArchive()
    engine = engine_with(archive, window=4_000)
    result = await engine.project(agent_session(60))
    assert result.event is not None
    assert result.event.info is not None
    stored = {record.reference for record in await archive.records("session-a")}
    assert set(result.event.references) == stored
    checkpoint = next(m for m in result.messages if isinstance(m, ContextSummary))
    assert result.event.info.references == checkpoint.references[-1:]
    assert checkpoint.references[-1] in stored


async def test_a_checkpoint_names_its_own_range_and_reaches_older_ones_through_the_previous() -> (
    None
):
    """One reference per checkpoint; recalling it returns the previous checkpoint, which names
    the older one, so every original stays reachable without the list growing."""
    engine = engine_with(MemoryArchive(), window=4_000)
    transcript = agent_session(40)
    first = await engine.project(transcript)
    assert first.commit is not None
    assert first.commit is not None
    grown = [*first.commit, *agent_session(40)[2:]]
    second = await engine.compact(grown)
    old = next(m for m in first.commit if isinstance(m, ContextSummary))
    new = next(m for m in second.messages if isinstance(m, ContextSummary))
    assert len(old.references) == len(new.references) == 1
    assert new.references != old.references
    recalled = await engine.recall(new.references[0])
    assert old in recalled  # the older checkpoint is part of the range the new one replaced
    assert [m for m in recalled if isinstance(m, ContextSummary)] == [old]
    older = await engine.recall(old.references[0])
    assert transcript[2] in older
    assert await assert_removed_are_recallable(engine, [*transcript, *grown], second.messages) > 0


async def test_recall_of_another_sessions_reference_is_refused() -> None:
    archive = MemoryArchive()
    ours = microcompact_engine(archive)
    result = await ours.project(agent_session(40))
    reference = references_in(result.messages)[0]
    theirs = ContextEngine(6_000, archive=archive, session_id="session-b")
    with pytest.raises(RecallError) as info:
        await theirs.recall(reference)
    assert info.value.reference == reference
    assert info.value.session_id == "session-b"
    with pytest.raises(LookupError):  # RecallError is a LookupError too
        await ours.recall("arc-" + "0" * 20)


def test_recall_sync_fetches_the_originals_outside_an_event_loop() -> None:
    engine = microcompact_engine(MemoryArchive())
    session = agent_session(40)
    result = engine.project_sync(session)
    reference = references_in(result.messages)[0]
    (original,) = engine.recall_sync(reference)
    assert original in session


def test_recall_without_an_archive_says_how_to_get_one() -> None:
    with pytest.raises(ConfigurationError, match="archive= and session_id="):
        ContextEngine(6_000).recall_sync("arc-" + "0" * 20)


@pytest.mark.parametrize(
    ("archive", "session_id", "problem"),
    [
        (MemoryArchive(), None, "needs session_id"),
        (MemoryArchive(), "", "non-empty str"),
        (MemoryArchive(), "two\nlines", "one line"),
        (object(), "s", "must implement"),
    ],
    ids=["archive-without-session", "empty-session", "multi-line-session", "not-an-archive"],
)
def test_bad_archive_settings_fail_at_construction(
    archive: object, session_id: str | None, problem: str
) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        ContextEngine(6_000, archive=archive, session_id=session_id)  # type: ignore[arg-type]


async def test_without_an_archive_placeholders_name_no_reference() -> None:
    engine = ContextEngine(
        6_000, [ToolResultMicrocompact()], reserve_tokens=500, token_counter=FixedTokenCounter()
    )
    result = await engine.project(agent_session(40))
    assert result.changed
    assert references_in(result.messages) == []
    assert result.event is not None
    assert result.event.references == ()


async def test_hard_truncate_marker_names_the_dropped_range() -> None:
    archive = MemoryArchive()
    engine = ContextEngine(
        3_000,
        [HardTruncate()],
        reserve_tokens=300,
        token_counter=FixedTokenCounter(),
        archive=archive,
        session_id="session-a",
    )
    session = agent_session(30)
    result = await engine.project(session)
    assert result.changed
    checked = await assert_removed_are_recallable(engine, session, result.messages)
    assert checked >= 10
    (marker,) = [m for m in result.messages if TRUNCATION_KEY in m.metadata]
    assert marker.metadata[ARCHIVED_KEY] == find_references(marker.text)
    assert len(marker.metadata[ARCHIVED_KEY]) == 1


# -- failure injection ------------------------------------------------------------


@pytest.mark.parametrize("operation", ["project", "compact", "recover_overflow"])
async def test_a_store_failing_on_write_hands_out_a_view_only_rewrite_and_commits_nothing(
    operation: str,
) -> None:
    """No error: deterministic rewrites without references fit the view; the archive step says why.

    Nothing is committed (the caller's transcript still holds every original),
    no LLM strategy paid for a checkpoint that could not be archived, and the
    breaker does not count the store's failure.
    """
    archive = FailingArchive()
    events: list[object] = []
    engine = engine_with(
        archive,
        window=4_000,
        on_project=events.append,
        on_compact=events.append,
        on_recover=events.append,
    )
    session = agent_session(40)
    run = {
        "project": lambda: engine.project(session),
        "compact": lambda: engine.compact(session),
        "recover_overflow": lambda: engine.recover_overflow(session, "prompt is too long"),
    }[operation]
    if operation == "compact":  # a /compact that cannot keep its checkpoint says so
        with pytest.raises(CompactionError, match="archive did not keep") as caught:
            await run()
        assert caught.value.commit is None
        assert caught.value.strategy == "archive"
        assert engine.estimate(caught.value.view).tokens <= engine.threshold
        assert references_in(caught.value.view) == []
        return
    result = await run()
    assert archive.writes == 1
    assert result.changed
    assert result.usage.fits
    assert result.commit is None
    assert check_view(session, result.messages) == []
    assert references_in(result.messages) == []  # no reference to an original the store lacks
    shortened = [m for m in result.messages if m not in session and m.role == "tool"]
    assert shortened  # placeholders say why their original cannot be recalled
    assert all(UNARCHIVED_NOTE in m.text for m in shortened)
    assert result.event is not None
    assert events == [result.event]
    assert result.event.references == ()
    assert not result.event.committed
    archive_step = next(step for step in result.event.steps if step.name == "archive")
    assert not archive_step.applied
    assert archive_step.error is not None
    assert "disk full" in archive_step.error
    assert not any(step.applied for step in result.event.steps if step.name == "full_summary")
    assert engine.breaker.failures == 0


async def test_a_dead_store_never_opens_the_breaker_and_every_view_fits() -> None:
    """The store's failures are not the LLM's: each call retries the store and still fits."""
    archive = FailingArchive()
    engine = engine_with(archive, window=4_000, max_consecutive_failures=2)
    session = agent_session(40)
    for call in range(1, 5):
        result = await engine.project(session)
        assert archive.writes == call
        assert result.strategy != "circuit_breaker"
        assert result.changed
        assert result.usage.fits
        assert result.commit is None
        assert check_view(session, result.messages) == []
        assert (engine.breaker_state, engine.consecutive_failures) == ("closed", 0)


@pytest.mark.parametrize(
    "metadata",
    [{1: "int key"}, {"span": (1, 2)}, {"handle": object()}],
    ids=["int-key", "tuple", "object"],
)
async def test_metadata_no_store_can_keep_still_gets_a_fitting_view_and_commits_nothing(
    metadata: dict[object, object],
) -> None:
    """The codec refuses the originals, so the strategies run without archiving and still fit."""
    archive = MemoryArchive()
    engine = microcompact_engine(archive, window=4_000)
    session = [
        Message(m.role, m.content, tool_call_id=m.tool_call_id, name=m.name, metadata=metadata)
        for m in agent_session(40)
    ]
    result = await engine.project(session)
    assert result.usage.fits
    assert result.commit is None
    assert check_view(session, result.messages) == []
    assert references_in(result.messages) == []
    assert await archive.sessions() == []
    assert result.event is not None
    archive_step = next(step for step in result.event.steps if step.name == "archive")
    assert archive_step.error is not None
    assert "metadata is not JSON" in archive_step.error


async def test_a_failing_strategy_keeps_the_cheaper_view_and_references_only_what_was_kept() -> (
    None
):
    """Microcompact's view goes out either way; it names references only when they were stored."""
    session = agent_session(40)
    for archive, keeps in ((MemoryArchive(), True), (FailingArchive(), False)):
        engine = ContextEngine(
            4_500,
            [ToolResultMicrocompact(), Exploding()],
            reserve_tokens=500,
            token_counter=FixedTokenCounter(),
            archive=archive,
            session_id="s",
        )
        result = await engine.project(session)
        assert result.strategy == "tool_result_microcompact"
        assert result.messages != tuple(session)
        assert result.commit is None
        assert check_view(session, result.messages) == []
        assert result.event is not None
        steps = {step.name: step for step in result.event.steps}
        assert steps["tool_result_microcompact"].applied
        if keeps:
            assert steps["exploding"].error is not None
            assert "summarizer endpoint is down" in steps["exploding"].error
            assert engine.consecutive_failures == 1
            assert await assert_removed_are_recallable(engine, session, result.messages) >= 10
        else:
            assert steps["archive"].error is not None
            assert references_in(result.messages) == []


# -- the dev corpus -------------------------------------------------------------------


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_every_original_removed_from_a_replayed_corpus_transcript_is_recallable(
    corpus_path: Path, store: str, tmp_path: Path
) -> None:
    """An agent loop with commits over a real transcript: walk every reference of every view.

    Through SQLite the originals come back decoded from the file, so equality
    is byte for byte through the codec, not object identity.
    """
    transcript = from_openai(load_corpus_dicts(corpus_path))
    total = ContextEngine(10_000_000, token_counter=FixedTokenCounter()).estimate(transcript)
    window = max(3_000, total.tokens // 4)
    archive = MemoryArchive() if store == "memory" else SQLiteArchive(tmp_path / "archive.db")
    engine = engine_with(archive, window=window, session_id=corpus_path.stem)
    running: list[Message] = []
    checked = rewrites = 0
    for start in range(0, len(transcript), 9):
        running += transcript[start : start + 9]
        result = await engine.project(running)
        assert check_view(running, result.messages) == []
        rewrites += result.changed
        checked += await assert_removed_are_recallable(engine, running, result.messages)
        if result.commit is not None:
            checked += await assert_removed_are_recallable(engine, running, result.commit)
            running = list(result.commit)
    await archive.close()
    assert rewrites > 0
    assert checked > 0


async def test_a_store_failing_to_refresh_costs_a_warning_not_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Keeping a session's records alive is the store's business; the call goes on."""

    class RefreshFails(MemoryArchive):
        async def refresh(self, session_id: str) -> None:
            raise OSError("connection reset")

    engine = microcompact_engine(RefreshFails(), window=4_000)
    session = agent_session(40)
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        result = await engine.project(session)
    assert result.usage.fits
    assert result.commit is not None or result.changed
    assert any("archive refresh failed" in r.getMessage() for r in caplog.records)


async def test_the_engine_refreshes_its_session_once_a_second_at_most() -> None:
    """Refreshing on every call keeps expiring records alive without a store call per call."""

    class Counting(MemoryArchive):
        def __init__(self) -> None:
            super().__init__()
            self.refreshed: list[str] = []

        async def refresh(self, session_id: str) -> None:
            self.refreshed.append(session_id)

    archive = Counting()
    engine = microcompact_engine(archive, window=100_000)
    for _ in range(5):
        result = await engine.project([Message.user("short")])
        assert result.event is None  # nothing rewritten: only the refresh touches the store
    assert archive.refreshed == ["session-a"]
