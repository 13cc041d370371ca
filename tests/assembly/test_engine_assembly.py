"""Providers inside the engine: budgeted with the transcript, placed at the exit, never kept."""

from __future__ import annotations

from typing import Any

import pytest

from context_engine import Message
from context_engine.archive.memory import MemoryArchive
from context_engine.assembly import (
    CallableProvider,
    ProviderRequest,
    StaticProvider,
    is_provided,
    replay,
    strip_provided,
)
from context_engine.engine import ContextEngine
from context_engine.invariants import check_view
from context_engine.strategies import ToolResultMicrocompact
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS
from tests.fakes import agent_session

COUNTER = FixedTokenCounter()
SNAPSHOT = "CRM account: ACME, plan gold, renewal 2027-01. " * 16  # ~200 tokens
STATUS = "status: deploy 41 green"


def sent_tokens(view: tuple[Message, ...]) -> int:
    """What the model is sent, counted message by message (no estimate involved)."""
    return sum(map(COUNTER.count_message, view)) + REQUEST_OVERHEAD_TOKENS


def nine_k_transcript() -> list[Message]:
    messages = agent_session(60, result_chars=560)
    while sent_tokens(tuple(messages)) > 9_000:
        messages.pop(-2)
    assert sent_tokens(tuple(messages)) > 8_500
    return messages


def snapshot_provider() -> StaticProvider:
    return StaticProvider(text=SNAPSHOT, name="crm_snapshot", priority=5)


def status_provider() -> CallableProvider:
    return CallableProvider(function=lambda request: STATUS, name="status")


def engine(**options: Any) -> ContextEngine:
    options.setdefault("reserve_tokens", 1_024)
    options.setdefault("token_counter", COUNTER)
    return ContextEngine.default(8_000, **options)


async def test_a_200_token_snapshot_with_a_9k_transcript_fits_an_8k_window() -> None:
    transcript = nine_k_transcript()
    subject = engine(providers=[snapshot_provider()])
    result = await subject.project(transcript)
    assert result.changed
    assert sent_tokens(result.messages) <= subject.threshold
    assert result.usage.tokens <= subject.threshold
    assert result.messages[1].text == SNAPSHOT  # right after the system prompt
    assert check_view(transcript, strip_provided(result.messages)) == []
    assert result.trace.provided_tokens == COUNTER.count_message(result.messages[1])


async def test_provider_output_is_budgeted_with_the_transcript() -> None:
    transcript = agent_session(8, result_chars=800)
    alone = sent_tokens(tuple(transcript))
    big = StaticProvider(text="x" * 4 * 800, name="big")  # ~800 tokens
    subject = engine(reserve_tokens=8_000 - alone - 400, providers=[big])
    assert alone <= subject.threshold  # the transcript alone would go through untouched
    result = await subject.project(transcript)
    assert result.changed
    assert sent_tokens(result.messages) <= subject.threshold


async def test_a_raising_provider_is_recorded_others_inject_and_the_breaker_is_unchanged() -> None:
    def broken(request: ProviderRequest) -> str:
        raise ConnectionError("CRM unreachable")

    subject = engine(
        providers=[
            CallableProvider(function=broken, name="crm", priority=5),
            status_provider(),
        ]
    )
    result = await subject.project(agent_session(2))
    failed = result.trace.by_action("fail")
    assert [(d.source, d.reason) for d in failed] == [("crm", "ConnectionError: CRM unreachable")]
    assert [m.text for m in result.messages if is_provided(m)] == [STATUS]
    assert (subject.breaker.failures, subject.breaker_state) == (0, "closed")


async def test_no_injected_message_reaches_a_commit_the_archive_or_a_summary() -> None:
    archive, summarizer = MemoryArchive(), RecordingSummarizer()
    subject = engine(
        providers=[snapshot_provider(), status_provider()],
        summarizer=summarizer,
        archive=archive,
        session_id="s1",
    )
    transcript = nine_k_transcript()
    results = [
        await subject.project(transcript),
        await subject.compact(transcript),
        await subject.recover_overflow(transcript, "prompt is too long"),
    ]
    assert summarizer.calls >= 1
    assert all(r.commit is not None for r in results[1:])
    provided = (SNAPSHOT, STATUS)
    for result in results:
        assert sum(map(is_provided, result.messages)) == 2  # the view has them
        for message in result.commit or ():
            assert not is_provided(message)
            assert message.text not in provided
    records = await archive.records("s1")
    assert records
    for record in records:
        assert not any(is_provided(m) or m.text in provided for m in record.messages)
    for request in summarizer.requests:
        assert not any(is_provided(m) or m.text in provided for m in request.messages)


async def test_providers_run_on_every_call_the_synthesis_call_too() -> None:
    calls: list[str] = []

    def count(request: ProviderRequest) -> str:
        calls.append(request.operation)
        return STATUS

    subject = engine(summarizer=RecordingSummarizer())
    subject.add_provider(CallableProvider(function=count, name="status"))
    transcript = agent_session(2)
    await subject.project(transcript)
    await subject.project(transcript)
    await subject.compact(transcript)
    await subject.recover_overflow(transcript)
    assert calls == ["project", "project", "compact", "recover_overflow"]


async def test_every_cleared_result_has_a_decision_with_its_reference() -> None:
    subject = ContextEngine(
        8_000,
        [ToolResultMicrocompact()],
        reserve_tokens=1_024,
        token_counter=COUNTER,
        archive=MemoryArchive(),
        session_id="s1",
        providers=[status_provider()],
    )
    result = await subject.project(agent_session(20, result_chars=2_000))
    assert result.event is not None
    cleared = result.trace.by_action("clear")
    assert len(cleared) >= 2
    assert all(d.reference for d in cleared)
    assert {d.reference for d in cleared} == set(result.event.references)
    assert result.event.trace == result.trace


async def test_a_rewrite_without_providers_still_has_its_trace() -> None:
    subject = ContextEngine(
        8_000, [ToolResultMicrocompact()], reserve_tokens=1_024, token_counter=COUNTER
    )
    result = await subject.project(agent_session(20, result_chars=2_000))
    assert result.trace.by_action("clear")
    assert all(d.source == "transcript" for d in result.trace.decisions)


async def test_replaying_a_trace_reproduces_the_view() -> None:
    hits = [("kb1", "alpha", 0.9), ("kb2", "bravo", 0.4)]
    from context_engine.assembly import Item

    items = [Item(id=i, text=t, relevance=r) for i, t, r in hits]
    subject = engine(
        providers=[
            snapshot_provider(),
            status_provider(),
            CallableProvider(function=lambda r: items, name="kb", max_tokens=3),
        ]
    )
    result = await subject.project(nine_k_transcript())
    outputs = {"crm_snapshot": [Item(id="crm_snapshot", text=SNAPSHOT)], "kb": items}
    outputs["status"] = [Item(id="status", text=STATUS)]
    again = type(result.trace).from_json(result.trace.to_json())
    assert replay(again, strip_provided(result.messages), outputs) == result.messages


async def test_a_volatile_provider_never_moves_the_prefix() -> None:
    ticks = iter(range(100))

    def status(request: ProviderRequest) -> str:
        return f"status: tick {next(ticks)}"

    transcript = [Message.system("You are a coder."), *agent_session(3)[1:], Message.user("next?")]
    reused = {}
    for placement in ("volatile", "stable"):
        subject = engine(
            providers=[
                CallableProvider(function=status, name="status", placement=placement, role="user")
            ]
        )
        await subject.project(transcript)
        transcript2 = [*transcript, Message.assistant("done"), Message.user("and now?")]
        second = await subject.project(transcript2)
        reused[placement] = (second.trace.delta, second.trace.reused_tokens)
    assert reused["stable"] == ("full_rebuild", COUNTER.count_message(transcript[0]))
    assert reused["volatile"][0] == "history_only"
    assert reused["volatile"][1] > sent_tokens(tuple(transcript)) // 2


def test_a_bad_provider_is_refused_at_construction_and_when_added() -> None:
    from context_engine.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="not a ContextProvider"):
        engine(providers=["not a provider"])
    subject = engine()
    with pytest.raises(ConfigurationError, match="name must be a non-empty string"):
        subject.add_provider(StaticProvider(text="x", name=""))
    assert subject.providers == ()
