"""The engine's hot path: work per call follows what changed, with views exactly as before."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from context_engine import ContextEngine, InvalidMessageError, Message
from context_engine import structure as structure_module
from context_engine.archive import MemoryArchive, find_references
from context_engine.invariants import check_view
from context_engine.strategies import LightTrim, Strategy, ToolResultMicrocompact
from context_engine.structure import ARCHIVED_KEY, CLEARED_KEY, TRIMMED_KEY, Shape
from context_engine.testing import FixedTokenCounter, synthetic_session

RESERVE = 1_000


def engine_for(
    strategies: Sequence[Strategy], transcript: Sequence[Message], *, archive: bool = False
) -> ContextEngine:
    """An engine whose threshold is half of ``transcript``: every call rewrites."""
    counter = FixedTokenCounter()
    tokens = ContextEngine(1 << 40, token_counter=counter).estimate(transcript).tokens
    options: dict[str, Any] = {"archive": MemoryArchive(), "session_id": "s"} if archive else {}
    return ContextEngine(
        tokens // 2 + RESERVE, strategies, reserve_tokens=RESERVE, token_counter=counter, **options
    )


def marked(view: Sequence[Message], key: str) -> list[Message]:
    return [m for m in view if key in m.metadata]


@pytest.fixture
def analyses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every view whose shape is actually computed."""
    seen: list[int] = []
    real = structure_module._analyze

    def counting(view: Sequence[Message]) -> Shape:
        seen.append(len(view))
        return real(view)

    monkeypatch.setattr(structure_module, "_analyze", counting)
    return seen


async def test_a_rewrite_reads_the_transcript_shape_once(analyses: list[int]) -> None:
    """The floor and the strategy share one reading of the transcript's structure."""
    transcript = synthetic_session(60)
    engine = engine_for([ToolResultMicrocompact()], transcript)
    analyses.clear()
    result = await engine.project(transcript)
    assert result.changed
    assert result.event is not None
    assert [s.name for s in result.event.steps] == ["tool_result_microcompact"]
    assert analyses == [len(transcript)]
    assert check_view(transcript, result.messages) == []


async def test_each_call_reads_its_own_transcript(analyses: list[int]) -> None:
    """Nothing is remembered across calls: a new transcript is analyzed anew."""
    transcript = synthetic_session(60)
    engine = engine_for([ToolResultMicrocompact()], transcript)
    analyses.clear()
    for _ in range(3):
        await engine.project(list(transcript))
    assert analyses == [len(transcript)] * 3


@pytest.mark.parametrize(
    ("strategy", "key", "lines"),
    [(ToolResultMicrocompact(), CLEARED_KEY, 30), (LightTrim(), TRIMMED_KEY, 100)],
    ids=["microcompact", "light-trim"],
)
async def test_a_repeated_rewrite_sends_the_same_objects_as_a_fresh_engine_would(
    strategy: Strategy, key: str, lines: int
) -> None:
    """Each call replaces the last step; the shortened messages are reused, the view exact."""
    history = synthetic_session(80, result_lines=lines)[:-1]
    engine = engine_for([strategy], history)
    views = []
    for step in range(3):
        transcript = [*history, Message.user(f"step {step}")]
        result = await engine.project(transcript)
        fresh = await engine_for([strategy], history).project(transcript)
        assert result.messages == fresh.messages
        assert check_view(transcript, result.messages) == []
        views.append(result.messages)
    first, last = marked(views[0], key), marked(views[-1], key)
    assert len(first) >= 10
    assert len(last) == len(first)
    assert all(a is b for a, b in zip(first, last, strict=True))


async def test_the_reused_prefix_is_reported_when_only_the_last_message_changed() -> None:
    history = synthetic_session(80)[:-1]
    engine = engine_for([ToolResultMicrocompact()], history)
    await engine.project([*history, Message.user("one")])
    result = await engine.project([*history, Message.user("two")])
    counter = engine.counter
    assert result.usage.prefix_stable is False
    assert result.usage.prefix_reused_tokens == sum(
        counter.count_message(m) for m in result.messages[:-1]
    )


@pytest.mark.parametrize(
    ("strategy", "key", "lines"),
    [(ToolResultMicrocompact(), CLEARED_KEY, 30), (LightTrim(), TRIMMED_KEY, 100)],
    ids=["microcompact", "light-trim"],
)
async def test_shared_messages_get_archived_copies_only_from_an_archiving_engine(
    strategy: Strategy, key: str, lines: int
) -> None:
    """Two engines shortening the very same message objects: each gets the copy its mode needs."""
    transcript = synthetic_session(80, result_lines=lines)
    plain_engine = engine_for([strategy], transcript)
    archiving_engine = engine_for([strategy], transcript, archive=True)
    for _ in range(2):
        plain = await plain_engine.project(transcript)
        archived = await archiving_engine.project(transcript)
        plain_marked, archived_marked = marked(plain.messages, key), marked(archived.messages, key)
        # A copy naming its reference saves a little less: an archiving view may need more.
        assert 5 <= len(plain_marked) <= len(archived_marked)
        assert not marked(plain.messages, ARCHIVED_KEY)
        assert all(not find_references(m.text) for m in plain_marked)
        for message in archived_marked:
            (reference,) = message.metadata[ARCHIVED_KEY]
            assert find_references(message.text) == [reference]
            (original,) = await archiving_engine.recall(reference)
            assert original in transcript


async def test_a_stray_object_after_the_known_prefix_is_named_by_its_index() -> None:
    transcript = synthetic_session(20)
    engine = ContextEngine.default(1_000_000, token_counter=FixedTokenCounter())
    await engine.project(transcript)
    with pytest.raises(InvalidMessageError, match=rf"message {len(transcript)}: .*got dict"):
        await engine.project([*transcript, {"role": "tool", "content": "x"}])  # type: ignore[list-item]


async def test_a_stray_object_inside_the_known_prefix_is_still_caught() -> None:
    transcript = synthetic_session(20)
    engine = ContextEngine.default(1_000_000, token_counter=FixedTokenCounter())
    await engine.project(transcript)
    broken: list[Any] = list(transcript)
    broken[5] = {"role": "user", "content": "x"}
    with pytest.raises(InvalidMessageError, match=r"message 5: .*got dict"):
        await engine.project(broken)
