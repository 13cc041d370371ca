"""Shared state through one store: a summarizer breaker for every worker, a stored seed."""

from __future__ import annotations

import pytest

from context_engine import (
    ArchiveError,
    ConfigurationError,
    ContextEngine,
    ContextSummary,
    Message,
    SummaryRequest,
)
from context_engine.archive import MemoryArchive
from context_engine.archive.shared import SharedSummarizerBreaker, save_seed, stored_seed
from context_engine.strategies import FullSummary, SessionMemory
from context_engine.testing import FixedTokenCounter
from tests.archive.conftest import StoreFactory
from tests.fakes import agent_session


class DeadEndpoint:
    """A summarizer endpoint that times out on every call; counts the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: SummaryRequest) -> str:
        self.calls += 1
        raise TimeoutError("summarizer endpoint timed out")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def failed_summary(engine: ContextEngine, session: list[Message]) -> str:
    """Project ``session`` and return the error the summary step recorded (it must have one).

    A failing summarizer no longer raises: the step records it and the engine counts it.
    """
    result = await engine.project(session)
    assert result.event is not None
    (step,) = (step for step in result.event.steps if step.name == "full_summary")
    assert not step.applied
    assert step.error is not None
    assert result.commit is None
    assert engine.consecutive_failures == 1
    return step.error


def worker(summarizer: object) -> ContextEngine:
    return ContextEngine(
        4_000,
        [FullSummary(summarizer=summarizer)],  # type: ignore[arg-type]
        reserve_tokens=400,
        token_counter=FixedTokenCounter(),
        max_consecutive_failures=100,
    )


async def test_one_dead_endpoint_trips_every_worker_on_the_store() -> None:
    """Three failures in all open the breaker: the other workers never reach the endpoint."""
    store, endpoint, clock = MemoryArchive(), DeadEndpoint(), Clock()
    guarded = [
        SharedSummarizerBreaker(
            summarizer=endpoint, archive=store, endpoint="openai:mini", clock=clock
        )
        for _ in range(6)
    ]
    session = agent_session(40)
    errors = [await failed_summary(worker(breaker), session) for breaker in guarded]
    assert all(error.startswith("SummarizerError: ") for error in errors)
    assert all("timed out" in error for error in errors[:3])
    assert all("shared breaker of 'openai:mini' is open" in error for error in errors[3:])
    assert endpoint.calls == 3  # not 6 workers x their own 3 failures
    assert await guarded[-1].is_open()
    assert await guarded[0].failures() == 3


async def test_the_shared_breaker_half_opens_after_the_cooldown_and_closes_on_success() -> None:
    store, clock = MemoryArchive(), Clock()
    state = {"down": True, "calls": 0}

    async def flaky(request: SummaryRequest) -> str:
        state["calls"] += 1
        if state["down"]:
            raise TimeoutError("down")
        return "## Goal\n- fixed"

    breaker = SharedSummarizerBreaker(
        summarizer=flaky,
        archive=store,
        endpoint="e",
        max_failures=2,
        cooldown_seconds=30,
        clock=clock,
    )
    session = agent_session(40)
    for _ in range(2):
        assert "TimeoutError: down" in await failed_summary(worker(breaker), session)
    assert await breaker.is_open()
    # still open: fails fast, the summarizer is not called
    assert "is open" in await failed_summary(worker(breaker), session)
    assert state["calls"] == 2
    clock.now += 31
    state["down"] = False
    assert not await breaker.is_open()
    result = await worker(breaker).project(session)
    assert result.strategy == "full_summary"
    assert await breaker.failures() == 0
    assert not await breaker.is_open()


async def test_a_failing_store_never_stops_the_summarizer() -> None:
    class DownStore(MemoryArchive):
        async def get_state(self, key: str) -> str | None:
            raise ArchiveError("store down")

        async def increment_state(self, key: str) -> int:
            raise ArchiveError("store down")

    calls = []

    def summarize(request: SummaryRequest) -> str:
        calls.append(request)
        return "## Goal\n- keep going"

    breaker = SharedSummarizerBreaker(summarizer=summarize, archive=DownStore(), endpoint="e")
    result = await worker(breaker).project(agent_session(40))
    assert result.strategy == "full_summary"
    assert calls


async def test_a_session_memory_seed_read_from_the_store_becomes_the_checkpoint() -> None:
    store = MemoryArchive()
    await save_seed(store, "session-7", "## Memory\n- the parser bug is in tokenize()")
    engine = ContextEngine(
        4_000,
        [SessionMemory(seed=stored_seed(store, "session-7"))],
        reserve_tokens=400,
        token_counter=FixedTokenCounter(),
    )
    result = await engine.project(agent_session(40))
    checkpoint = next(m for m in result.messages if isinstance(m, ContextSummary))
    assert "tokenize()" in checkpoint.summary


async def test_a_missing_stored_seed_is_a_recorded_no_op() -> None:
    engine = ContextEngine(
        4_000,
        [SessionMemory(seed=stored_seed(MemoryArchive(), "nobody"))],
        reserve_tokens=400,
        token_counter=FixedTokenCounter(),
    )
    result = await engine.project(agent_session(40))
    assert not result.changed
    assert result.event is not None
    assert "empty" in (result.event.steps[0].error or "")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"endpoint": ""}, "endpoint"),
        ({"endpoint": "e", "max_failures": 0}, "max_failures"),
        ({"endpoint": "e", "cooldown_seconds": -1}, "cooldown_seconds"),
        ({"endpoint": "e", "summarizer": "not callable"}, "summarizer"),
    ],
    ids=["empty-endpoint", "zero-failures", "negative-cooldown", "summarizer-not-callable"],
)
def test_bad_shared_breaker_settings_fail_at_construction(
    options: dict[str, object], field: str
) -> None:
    options.setdefault("summarizer", DeadEndpoint())
    with pytest.raises(ConfigurationError, match=field):
        SharedSummarizerBreaker(archive=MemoryArchive(), **options)  # type: ignore[arg-type]


async def test_workers_with_their_own_connections_share_the_breaker_and_the_seed(
    make_store: StoreFactory,
) -> None:
    """Each worker opens the store itself (its own SQLite connection, its own Redis client)."""
    endpoint, clock = DeadEndpoint(), Clock()
    session = agent_session(40)
    for _ in range(5):
        breaker = SharedSummarizerBreaker(
            summarizer=endpoint, archive=await make_store(), endpoint="shared", clock=clock
        )
        await failed_summary(worker(breaker), session)
    assert endpoint.calls == 3
    await save_seed(await make_store(), "s-9", "## Memory\n- seeded by another worker")
    assert await stored_seed(await make_store(), "s-9")() == "## Memory\n- seeded by another worker"
