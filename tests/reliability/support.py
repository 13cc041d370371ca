"""Shared pieces of the reliability suite: example budgets, engines, faulty collaborators."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, settings

from context_engine import ContextEngine, Message, SummaryRequest
from context_engine.archive import ArchiveRecord, MemoryArchive
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.testing import FixedTokenCounter

SCALE = max(1, settings.default.max_examples // 100)
"""1 under the default profile; 20 under ``--hypothesis-profile=soak`` (``make soak``)."""

COUNTER = FixedTokenCounter()


def examples(count: int) -> settings:
    """Hypothesis settings running ``count`` examples (times `SCALE`), without deadlines."""
    return settings(
        max_examples=count * SCALE,
        deadline=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
        ],
    )


def valid(transcript: Sequence[Message], view: Sequence[Message]) -> None:
    """Assert ``view`` keeps every invariant against ``transcript``."""
    assert check_view(transcript, view) == []


def frozen_copy(messages: Sequence[Message]) -> list[tuple[Any, ...]]:
    """Everything about ``messages`` that a mutation could change."""
    return [
        (m.role, m.content, m.tool_call_id, m.name, m.usage, dict(m.metadata), m.timestamp)
        for m in messages
    ]


def echo_summarizer(request: SummaryRequest) -> str:
    """A deterministic summarizer: names the kind and the size of what it was given."""
    first = request.messages[0].text[:40] if request.messages else ""
    return (
        f"<summary>Checkpoint ({request.kind}) of {len(request.messages)} messages, "
        f"starting {first!r}.</summary>"
    )


def turns(count: int, *, chars: int = 1500, tag: str = "s") -> list[Message]:
    """A system prompt and ``count`` user/assistant turns of about ``chars`` characters each.

    With `summary_engine` one compaction is one summarizer call (no chunks, no turn prefix
    call), which makes call-counting tests exact.
    """
    messages = [Message.system(f"You are the assistant of session {tag}.")]
    for index in range(count):
        messages.append(Message.user(f"{tag} request {index} " + "u" * chars))
        messages.append(Message.assistant(f"{tag} answer {index} " + "a" * chars))
    return messages


def summary_engine(summarizer: Any, *, window: int = 8_000, **options: Any) -> ContextEngine:
    """An engine whose only strategy is `FullSummary` (one call per compaction on `turns`)."""
    summary = FullSummary(
        summarizer=summarizer,
        keep_recent_tokens=1_000,
        summarizer_window=1_000_000,
        timeout_seconds=options.pop("timeout_seconds", 5.0),
        **{k: options.pop(k) for k in ("redactor", "post_summary_hooks") if k in options},
    )
    return ContextEngine(window, [summary], token_counter=COUNTER, **options)


def full_engine(summarizer: Any, *, window: int = 8_000, **options: Any) -> ContextEngine:
    """Microcompact, light trim, `FullSummary`, hard truncate: the recommended pipeline."""
    timeout = options.pop("timeout_seconds", 5.0)
    strategies = [
        ToolResultMicrocompact(),
        LightTrim(),
        FullSummary(summarizer=summarizer, summarizer_window=1_000_000, timeout_seconds=timeout),
        HardTruncate(),
    ]
    return ContextEngine(window, strategies, token_counter=COUNTER, **options)


class Switchable:
    """A summarizer whose behaviour the test switches: ``ok``, ``raise``, or ``wait``.

    ``wait`` awaits `release` (an `asyncio.Event`) after setting `entered`, so a test
    can cancel the call while it is in flight. Every call is counted.
    """

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.calls = 0
        self.cancelled = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: SummaryRequest) -> str:
        """Answer, fail or wait according to `mode`."""
        self.calls += 1
        if self.mode == "raise":
            raise ConnectionError("summarizer endpoint unreachable")
        if self.mode == "wait":
            self.entered.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return echo_summarizer(request)


class FlakySummarizer:
    """Fails about one request in two, at random but reproducibly from ``seed``.

    Every request is counted in `calls`, every failure in `failures`.
    """

    def __init__(self, seed: int, *, rate: float = 0.5) -> None:
        self.random = random.Random(seed)
        self.rate = rate
        self.calls = 0
        self.failures = 0

    def __call__(self, request: SummaryRequest) -> str:
        """Answer like `echo_summarizer`, or raise `ConnectionError`."""
        self.calls += 1
        if self.random.random() < self.rate:
            self.failures += 1
            raise ConnectionError("summarizer endpoint reset the connection")
        return echo_summarizer(request)


async def hanging_summarizer(request: SummaryRequest) -> str:
    """Never answers: only a timeout ends the request."""
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


class SlowArchive(MemoryArchive):
    """An archive whose writes succeed after ``delay`` seconds (a busy or distant store)."""

    def __init__(self, delay: float = 0.01) -> None:
        super().__init__()
        self.delay = delay

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Wait, then store."""
        await asyncio.sleep(self.delay)
        await super().put(session_id, records)
