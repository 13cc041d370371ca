"""Transforms rewrite the transcript before the providers, the strategies and the model see it."""

from __future__ import annotations

import pytest
import regex

from context_engine import Message
from context_engine.assembly import Assembler, CallableProvider, ProviderRequest
from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError, InvalidMessageError
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.fakes import agent_session

COUNTER = FixedTokenCounter()
SECRET = regex.compile(r"sk-[A-Za-z0-9]{8,}")


def redact(messages: tuple[Message, ...]) -> list[Message]:
    """Replace API keys in user messages (a typical redaction transform)."""
    return [
        Message.user(SECRET.sub("[key]", m.text))
        if m.role == "user" and SECRET.search(m.text)
        else m
        for m in messages
    ]


async def drop_system_notes(messages: tuple[Message, ...]) -> tuple[Message, ...]:
    """An async transform that removes messages."""
    return tuple(m for m in messages if not m.text.startswith("[note]"))


def with_secret() -> list[Message]:
    return [Message.system("You fix bugs."), Message.user("deploy with sk-abcdefgh1234 please")]


async def test_transforms_run_before_the_providers_and_the_model_sees_their_output() -> None:
    seen: list[str] = []

    def look(request: ProviderRequest) -> str:
        seen.append(request.transcript[-1].text)
        return "status: green"

    engine = ContextEngine(
        8_000,
        token_counter=COUNTER,
        transforms=[redact],
        providers=[CallableProvider(function=look, name="status")],
    )
    transcript = with_secret()
    result = await engine.project(transcript)
    assert seen == ["deploy with [key] please"]
    assert all("sk-abcdefgh1234" not in m.text for m in result.messages)
    assert transcript[-1].text == "deploy with sk-abcdefgh1234 please"  # caller's list untouched


async def test_transforms_run_in_order_and_each_change_is_a_decision() -> None:
    engine = ContextEngine(8_000, token_counter=COUNTER, transforms=[redact, drop_system_notes])
    transcript = [*with_secret(), Message.user("[note] internal"), Message.user("go on")]
    result = await engine.project(transcript)
    assert [m.text for m in result.messages] == [
        "You fix bugs.",
        "deploy with [key] please",
        "go on",
    ]
    decisions = [(d.source, d.item, d.action) for d in result.trace.decisions]
    assert decisions == [
        ("redact", "message 1", "transform"),
        ("drop_system_notes", "message 2", "transform"),
    ]


async def test_the_summarizer_sees_the_transformed_transcript_only() -> None:
    summarizer = RecordingSummarizer()
    session = agent_session(60, result_chars=400)
    session[1] = Message.user("the key is sk-abcdefgh1234, fix the tests")
    engine = ContextEngine.default(
        3_000,
        reserve_tokens=1_000,
        token_counter=COUNTER,
        summarizer=summarizer,
        transforms=[redact],
    )
    result = await engine.compact(session)
    assert summarizer.requests
    sent = " ".join(m.text for r in summarizer.requests for m in r.messages)
    assert "sk-abcdefgh1234" not in sent
    assert result.commit is not None
    assert all("sk-abcdefgh1234" not in m.text for m in result.commit)


async def test_a_transform_that_returns_no_messages_is_named_in_the_error() -> None:
    def broken(messages: tuple[Message, ...]) -> str:
        return "oops"

    engine = ContextEngine(8_000, token_counter=COUNTER, transforms=[broken])  # type: ignore[list-item]
    with pytest.raises(InvalidMessageError, match="transform 'broken'"):
        await engine.project(with_secret())


async def test_a_transform_that_raises_stops_the_call() -> None:
    def failing(messages: tuple[Message, ...]) -> list[Message]:
        raise RuntimeError("redaction service down")

    engine = ContextEngine(8_000, token_counter=COUNTER, transforms=[failing])
    with pytest.raises(RuntimeError, match="redaction service down"):
        await engine.project(with_secret())


def test_bad_transform_settings_are_refused_with_the_culprit_named() -> None:
    with pytest.raises(ConfigurationError, match="not callable"):
        ContextEngine(8_000, transforms=["redact"])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="list of functions"):
        ContextEngine(8_000, transforms=redact)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="give it the transforms"):
        ContextEngine(8_000, providers=Assembler(), transforms=[redact])


async def test_without_transforms_the_caller_messages_are_used_as_given() -> None:
    transcript = with_secret()
    result = await ContextEngine(8_000, token_counter=COUNTER).project(transcript)
    assert result.messages == tuple(transcript)
    assert result.messages[1] is transcript[1]


async def test_a_transform_that_copies_messages_unchanged_records_no_decision() -> None:
    def copy_all(messages: tuple[Message, ...]) -> list[Message]:
        return [Message(m.role, m.content, metadata=dict(m.metadata)) for m in messages]

    engine = ContextEngine(8_000, token_counter=COUNTER, transforms=[copy_all])
    result = await engine.project(with_secret())
    assert result.trace.decisions == ()
    assert result.messages == tuple(with_secret())
