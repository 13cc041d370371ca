"""Concurrency: many sessions on one event loop, blocking twins on many threads.

One engine per session is the documented model; what sessions share is the
token counter (`resolve_counter` hands every engine the same one, with its
content cache), often the summarizer, and the process-wide telemetry context.
Each test runs the sessions concurrently and again one by one with private
counters, and requires the same views, events and summarizer requests.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import weakref
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import regex

from context_engine import ContextEngine, Message, SummaryRequest, ToolCall
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.telemetry import current_telemetry
from context_engine.tokens import HeuristicCounter, TiktokenCounter, TokenCounter, resolve_counter
from tests.reliability.support import valid

SESSIONS = 300
THREAD_SESSIONS = 48
STEPS = 8
WINDOW = 2_400
RESERVE = 400

SHARED_SYSTEM = Message.system("You are a coding agent. Work carefully and run the tests.")
"""One message object every session holds: its per-message count cache is shared too."""


def step(session: int, number: int) -> list[Message]:
    """One agent step of ``session``: a call and its (session-tagged) result."""
    call = ToolCall(f"s{session}_c{number}", "read_file", f'{{"path": "s{session}/f{number}.py"}}')
    body = f"session {session} file {number}\n" + f"line of session {session}\n" * 25
    return [
        Message.assistant(
            f"session {session} reads file {number}. " + f"plan of session {session}; " * 20,
            tool_calls=[call],
        ),
        Message.tool(call.id, body, name="read_file"),
    ]


def opening(session: int) -> list[Message]:
    return [SHARED_SYSTEM, Message.user(f"session {session}: fix the failing test")]


def belongs_to(message: Message, session: int) -> bool:
    """Whether ``message`` can only have come from ``session`` (or is shared/synthetic)."""
    if message is SHARED_SYSTEM or message.metadata:
        return True  # the shared prompt, or a marker / placeholder a strategy wrote
    if message.is_summary:
        return f"[session {session}]" in message.summary
    text = message.text + "".join(c.id for c in message.tool_calls) + (message.tool_call_id or "")
    return f"session {session}" in text or f"s{session}_" in text


class SharedSummarizer:
    """One async summarizer for every session, as a shared LLM client would be.

    It yields to the loop while "thinking", records which sessions each request
    held and which telemetry context it ran in.
    """

    def __init__(self) -> None:
        self.requests: dict[int, list[int]] = defaultdict(list)
        self.contexts: dict[int, set[int]] = defaultdict(set)
        self.lock = threading.Lock()

    def _session(self, request: SummaryRequest) -> int:
        tags = {c.id.split("_")[0] for m in request.messages for c in m.tool_calls}
        tags |= {m.tool_call_id.split("_")[0] for m in request.messages if m.tool_call_id}
        assert len(tags) <= 1, f"one request mixed sessions {tags}"
        if tags:
            return int(tags.pop()[1:])
        # No tool ids: a user message names its session, or the previous checkpoint does.
        text = " ".join(m.text for m in request.messages) + (request.previous_summary or "")
        found = regex.findall(r"session (\d+)", text)
        assert len(set(found)) == 1, f"cannot tell the session of {text!r}"
        return int(found[0])

    async def __call__(self, request: SummaryRequest) -> str:
        session = self._session(request)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        telemetry = current_telemetry()
        with self.lock:
            self.requests[session].append(len(request.messages))
            self.contexts[session].add(id(telemetry))
        return f"<summary>[session {session}] {len(request.messages)} messages.</summary>"


def private_counter() -> TokenCounter:
    """A counter of the same kind as the shared one, with caches of its own."""
    shared = resolve_counter()
    if isinstance(shared, TiktokenCounter):
        return TiktokenCounter(shared.encoding)
    return HeuristicCounter()


def engine_for(summarizer: Any, counter: TokenCounter | None, events: list[Any]) -> ContextEngine:
    """The recommended pipeline, sized for a small window; the default counter unless given."""
    strategies = [
        ToolResultMicrocompact(),
        LightTrim(),
        FullSummary(summarizer=summarizer, keep_recent_tokens=600),
        HardTruncate(),
    ]
    options: dict[str, Any] = {"on_project": events.append, "reserve_tokens": RESERVE}
    if counter is not None:
        options["token_counter"] = counter
    return ContextEngine(WINDOW, strategies, **options)


async def run_session(
    session: int, summarizer: Any, counter: TokenCounter | None
) -> dict[str, Any]:
    """An agent loop of STEPS steps, committing checkpoints; returns what it saw."""
    events: list[Any] = []
    engine = engine_for(summarizer, counter, events)
    held = opening(session)
    views, reported = [], []
    for number in range(STEPS):
        held = held + step(session, number)
        result = await engine.project(held)
        valid(held, result.messages)
        assert all(belongs_to(m, session) for m in result.messages)
        views.append(result.messages)
        if result.event is not None:
            reported.append(result.event)
        if result.commit is not None:
            held = list(result.commit or ())
    assert events == reported  # this engine's hook saw exactly this engine's events
    return {"views": views, "events": len(events), "engine": engine}


def sequential_reference(sessions: range) -> tuple[dict[int, Any], SharedSummarizer]:
    """Every session alone, one after the other, each with a private counter."""
    summarizer = SharedSummarizer()

    async def one_by_one() -> dict[int, Any]:
        return {s: await run_session(s, summarizer, private_counter()) for s in sessions}

    return asyncio.run(one_by_one()), summarizer


@pytest.fixture(scope="module")
def reference() -> tuple[dict[int, Any], SharedSummarizer]:
    return sequential_reference(range(SESSIONS))


def test_hundreds_of_sessions_on_one_loop_get_their_own_views_and_events(
    reference: tuple[dict[int, Any], SharedSummarizer],
) -> None:
    """300 engines sharing one counter and one summarizer, interleaved on one loop."""
    expected, expected_summarizer = reference
    summarizer = SharedSummarizer()

    async def everyone() -> list[dict[str, Any]]:
        return await asyncio.gather(
            *(run_session(session, summarizer, None) for session in range(SESSIONS))
        )

    results = asyncio.run(everyone())
    assert len({id(r["engine"].counter) for r in results}) == 1  # really shared
    for session, result in enumerate(results):
        assert result["views"] == expected[session]["views"]
        assert result["events"] == expected[session]["events"]
    assert summarizer.requests == expected_summarizer.requests
    assert sum(len(calls) for calls in summarizer.requests.values()) >= SESSIONS
    # Each session's summarizer calls ran in that session's own telemetry context.
    contexts = [summarizer.contexts[s] for s in range(SESSIONS)]
    assert all(len(c) == 1 for c in contexts)
    assert len(set().union(*contexts)) == SESSIONS


def test_blocking_twins_on_many_threads_share_a_counter_safely(
    reference: tuple[dict[int, Any], SharedSummarizer],
) -> None:
    """project_sync from 8 threads at once (a private event loop each), one shared counter."""
    expected, _ = reference
    summarizer = SharedSummarizer()
    sessions = range(THREAD_SESSIONS)

    def blocking_session(session: int) -> list[Any]:
        engine = engine_for(summarizer, None, [])
        held = opening(session)
        views = []
        for number in range(STEPS):
            held = held + step(session, number)
            result = engine.project_sync(held)
            valid(held, result.messages)
            views.append(result.messages)
            if result.commit is not None:
                held = list(result.commit or ())
        return views

    with ThreadPoolExecutor(max_workers=8) as pool:
        views = list(pool.map(blocking_session, sessions))
    for session in sessions:
        assert views[session] == expected[session]["views"]


def test_a_shared_counter_counts_exactly_under_thread_contention() -> None:
    """Eight threads count equal-but-distinct messages that die as soon as they are counted."""
    shared, private = private_counter(), private_counter()
    texts = [f"message {n} " + "word " * (n % 50) + "混合 🎉" * (n % 7) for n in range(600)]
    expected = [private.count_message(Message.user(text)) for text in texts]
    barrier = threading.Barrier(8)
    counted: list[weakref.ref[Message]] = []

    def count_one(text: str) -> int:
        message = Message.user(text)
        counted.append(weakref.ref(message))
        return shared.count_message(message)

    def count_all(offset: int) -> list[int]:
        barrier.wait()
        order = texts[offset:] + texts[:offset]
        counts = [count_one(text) for text in order]
        return counts[-offset:] + counts[:-offset] if offset else counts

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(count_all, range(0, 600, 75)))
    assert all(counts == expected for counts in results)
    gc.collect()
    assert len(counted) == 8 * 600
    assert all(ref() is None for ref in counted)  # the shared cache kept none alive
