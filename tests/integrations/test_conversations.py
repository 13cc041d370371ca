"""EnginePool backed by an archive: a second process on the same store resumes each conversation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from context_engine import ConfigurationError, ContextEngine, Message, RecallError, SummaryRequest
from context_engine.archive import MemoryArchive, SQLiteArchive, find_references, save_seed
from context_engine.integrations.conversations import EnginePool
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter
from tests.fakes import agent_session
from tests.integrations.support import recall_all

COUNTER = FixedTokenCounter()
SEED = "## Memory\n- the parser bug is in tokenize(); the fix needs a test for nested groups"


class Endpoint:
    """A summarizer endpoint that counts the calls reaching it; ``down`` makes them fail."""

    def __init__(self, *, down: bool = False) -> None:
        self.down, self.calls = down, 0
        self.inner = ExtractiveSummarizer()

    def __call__(self, request: SummaryRequest) -> str:
        self.calls += 1
        if self.down:
            raise TimeoutError("summarizer endpoint timed out")
        return self.inner(request)


Process = Callable[..., EnginePool]


@pytest.fixture
def process(archive_file: Callable[[], SQLiteArchive]) -> Process:
    """Starts one "process": its own store object on the shared file, its own pool and engines."""

    def start(summarizer: Endpoint | None = None, **options: Any) -> EnginePool:
        return EnginePool.archived(
            archive_file(),
            4_000,
            summarizer=summarizer,
            reserve_tokens=1_000,
            token_counter=COUNTER,
            **options,
        )

    return start


async def test_a_second_process_resumes_from_the_committed_checkpoint_and_recalls_its_originals(
    process: Process,
) -> None:
    first = process(Endpoint()).engine("thread-1")
    session = agent_session(12)
    projection = await first.project(session)
    assert projection.commit is not None  # a checkpoint was paid for: the runtime keeps it
    checkpoint = projection.commit[1]
    assert checkpoint.is_summary
    references = find_references(checkpoint.text)
    assert references

    endpoint = Endpoint()
    second = process(endpoint).engine("thread-1")
    resumed = await second.project([*projection.commit, Message.user("Go on.")])

    assert resumed.messages[1] == checkpoint  # the checkpoint is where the view starts again
    assert resumed.usage.tokens <= second.threshold
    assert endpoint.calls == 0  # nothing was summarized again
    replaced = {m.text for m in session if m.role == "tool"} - {m.text for m in projection.commit}
    assert replaced
    assert replaced <= await recall_all(second, [checkpoint.text])


async def test_a_second_process_does_not_see_another_conversations_originals(
    process: Process,
) -> None:
    projection = await process(Endpoint()).engine("thread-1").project(agent_session(12))
    assert projection.commit is not None
    (reference, *_) = find_references(projection.commit[1].text)

    other = process(Endpoint()).engine("thread-2")

    with pytest.raises(RecallError, match=reference):
        await other.recall(reference)


async def test_a_summarizer_breaker_opened_before_a_restart_stays_open_after_it(
    process: Process,
) -> None:
    down = Endpoint(down=True)
    first = process(down, endpoint="openai:gpt-4.1-mini").engine("thread-1")
    for calls in range(3):
        await first.project(agent_session(12 + calls))
    assert down.calls >= 3  # the endpoint failed often enough to open the shared breaker

    healthy = Endpoint()
    second = process(healthy, endpoint="openai:gpt-4.1-mini").engine("thread-2")
    projection = await second.project(agent_session(12))

    assert healthy.calls == 0  # the open breaker, read from the store, kept it from the endpoint
    assert projection.usage.tokens <= second.threshold  # the view fits all the same
    assert projection.event is not None
    (step,) = (s for s in projection.event.steps if s.name == "full_summary")
    assert step.error is not None
    assert "shared breaker" in step.error


async def test_a_seed_saved_before_a_restart_writes_the_checkpoint_after_it(
    process: Process,
) -> None:
    first = process(Endpoint(), seed_from_archive=True)
    assert first.archive is not None
    await save_seed(first.archive, "thread-1", SEED)

    endpoint = Endpoint()
    second = process(endpoint, seed_from_archive=True).engine("thread-1")
    projection = await second.project(agent_session(12))

    assert projection.strategy == "session_memory"
    assert SEED in projection.messages[1].text
    assert endpoint.calls == 0


async def test_an_archived_pool_keeps_each_conversation_under_its_own_session() -> None:
    store = MemoryArchive()
    pool = EnginePool.archived(store, 8_000, token_counter=COUNTER, max_conversations=2)

    engines = [pool.engine(conversation) for conversation in ("a", "b", "c")]

    assert [(e.archive, e.session_id) for e in engines] == [
        (store, "a"),
        (store, "b"),
        (store, "c"),
    ]
    assert list(pool) == ["b", "c"]
    assert pool.archive is store


def test_a_pool_with_an_archive_refuses_an_engine_that_keeps_the_conversation_elsewhere() -> None:
    store = MemoryArchive()
    shared_session = EnginePool(
        lambda conversation: ContextEngine(8_000, archive=store, session_id="app"), archive=store
    )
    other_store = EnginePool(
        lambda conversation: ContextEngine(8_000, archive=MemoryArchive(), session_id=conversation),
        archive=store,
    )
    no_store = EnginePool(lambda conversation: ContextEngine(8_000), archive=store)

    for pool in (shared_session, other_store, no_store):
        with pytest.raises(ConfigurationError, match="session_id='a'"):
            pool.engine("a")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"context_window": -5}, "context_window"),
        ({"session_id": "app"}, "sets session_id per conversation"),
        ({"seed_from_archive": True, "seed": lambda: "x"}, "sets seed per conversation"),
        ({"seed_from_archive": "yes"}, "seed_from_archive must be True or False"),
        ({"endpoint": "openai:gpt-4.1-mini"}, "pass summarizer= too"),
        ({"summarizer": ExtractiveSummarizer(), "endpoint": " "}, "endpoint"),
        ({"reserve_tokens": "many"}, "reserve_tokens"),
    ],
    ids=[
        "bad window",
        "a fixed session",
        "a seed and the stored seed",
        "a seed flag that is no bool",
        "an endpoint without a summarizer",
        "a blank endpoint",
        "a bad engine option",
    ],
)
def test_an_archived_pool_refuses_bad_settings_when_it_is_built(
    options: dict[str, Any], message: str
) -> None:
    settings = {"context_window": 8_000, **options}
    with pytest.raises(ConfigurationError, match=message):
        EnginePool.archived(MemoryArchive(), **settings)


def test_a_pool_archive_must_be_an_archive() -> None:
    with pytest.raises(ConfigurationError, match="archive must be an Archive"):
        EnginePool(lambda conversation: ContextEngine(8_000), archive="sqlite:x.db")  # type: ignore[arg-type]
