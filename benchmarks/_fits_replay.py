"""Call-by-call replay of one transcript for `fits.py`, in one condition, at one window.

Each assistant message of the recorded session is one LLM call: the messages
before it (on top of whatever the agent committed so far) are projected; a
commit replaces the running transcript, as an agent loop does. A view above
the threshold is treated as rejected by the provider (an Anthropic-style
"input + max_tokens > limit" error, the answer's reserve as ``max_tokens``) and
``recover_overflow`` is called on the running transcript; its commit is kept
too. Every view is measured with `_fits_floor.measure` and compared with the
witness of `_fits_floor.witness` on the same input.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from _economics_ledger import call_points
from _fits_floor import measure, witness

from context_engine import ContextEngine, Message, SummaryRequest
from context_engine.archive import ArchiveRecord, MemoryArchive
from context_engine.errors import ArchiveError
from context_engine.invariants import check_view
from context_engine.summarize import ExtractiveSummarizer
from context_engine.tokens import TokenCounter

__all__ = [
    "CONDITIONS",
    "DownArchive",
    "Tally",
    "build_engine",
    "committed",
    "down_summarizer",
    "replay",
]

CONDITIONS = ("healthy", "summarizer_down", "summarizer_and_archive_down", "no_summarizer")
"""(a) the offline extractive summarizer, (b) a summarizer raising on every call, (c) the
same with an archive whose writes fail, (d) `ContextEngine.default` without a summarizer."""

SESSION_ID = "fits-replay"


def down_summarizer(request: SummaryRequest) -> str:
    """A summarizer whose endpoint is unreachable."""
    raise ConnectionError("summarizer endpoint unreachable")


class DownArchive(MemoryArchive):
    """An archive store that refuses every write (reads find nothing)."""

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Fail the way a dead store does."""
        raise ArchiveError("archive store unreachable")


def build_engine(
    condition: str, window: int, counter: TokenCounter, **options: Any
) -> ContextEngine:
    """`ContextEngine.default` at ``window`` in ``condition`` (one of `CONDITIONS`).

    ``options`` go to the constructor of the healthy engine (``pricing=``,
    ``cost_aware=``); the other conditions take none.
    """
    if condition == "healthy":
        return ContextEngine.default(
            window, summarizer=ExtractiveSummarizer(), token_counter=counter, **options
        )
    if options:
        raise ValueError(f"condition {condition!r} takes no engine options, got {options}")
    if condition == "summarizer_down":
        return ContextEngine.default(window, summarizer=down_summarizer, token_counter=counter)
    if condition == "summarizer_and_archive_down":
        return ContextEngine.default(
            window,
            summarizer=down_summarizer,
            token_counter=counter,
            archive=DownArchive(),
            session_id=SESSION_ID,
        )
    if condition == "no_summarizer":
        return ContextEngine.default(window, token_counter=counter)
    raise ValueError(f"unknown condition {condition!r}; expected one of {', '.join(CONDITIONS)}")


def committed(result: Any) -> tuple[Message, ...] | None:
    """The transcript ``result`` asks the caller to keep, or None.

    Works with ``.commit`` (a tuple or None on every result) and with the older
    ``should_commit`` / ``commit_messages`` pair.
    """
    if hasattr(result, "commit"):
        commit = result.commit
        return None if commit is None else tuple(commit)
    if getattr(result, "should_commit", False):
        return tuple(result.commit_messages)
    return None


@dataclass
class Tally:
    """What the replay of one condition at one window counted."""

    calls: int = 0
    above: int = 0
    above_fitting: int = 0
    errors: int = 0
    recoveries: int = 0
    recoveries_above: int = 0
    recoveries_above_fitting: int = 0
    recovery_errors: int = 0
    invariant_violations: int = 0
    commits: int = 0
    floor_fits: int = 0
    max_view_tokens: int = 0

    def add(self, other: Tally) -> None:
        """Add ``other``'s counts to this one (the maximum for `max_view_tokens`)."""
        for key, value in asdict(other).items():
            mine = getattr(self, key)
            setattr(self, key, max(mine, value) if key == "max_view_tokens" else mine + value)

    @property
    def headline(self) -> int:
        """Views above the threshold where a fitting view existed, projections and recoveries."""
        return self.above_fitting + self.recoveries_above_fitting


def rejection(tokens: int, engine: ContextEngine) -> str:
    """The error a provider reserving ``engine.reserve_tokens`` for the answer would return."""
    return (
        f"input length and `max_tokens` exceed context limit: {tokens} + "
        f"{engine.reserve_tokens} > {engine.context_window}, decrease input length or "
        "`max_tokens` and try again"
    )


class _Replay:
    """One engine, its running transcript and its tally."""

    def __init__(self, engine: ContextEngine, counter: TokenCounter) -> None:
        self.engine = engine
        self.counter = counter
        self.tally = Tally()
        self.transcript: list[Message] = []

    def _look(self, given: Sequence[Message], view: Sequence[Message]) -> tuple[bool, bool]:
        """Measure ``view``: (above the threshold, a fitting view existed)."""
        tokens = measure(view, self.counter, self.engine.overhead_tokens)
        self.tally.max_view_tokens = max(self.tally.max_view_tokens, tokens)
        if check_view(given, view):
            self.tally.invariant_violations += 1
        return tokens > self.engine.threshold, self._floor_fits(given)

    def _floor_fits(self, given: Sequence[Message]) -> bool:
        floor = measure(witness(given, self.counter), self.counter, self.engine.overhead_tokens)
        return floor <= self.engine.threshold

    async def call(self) -> None:
        """One LLM call on the running transcript: project, and recover when rejected."""
        given = tuple(self.transcript)
        tally = self.tally
        tally.calls += 1
        fits = self._floor_fits(given)
        tally.floor_fits += fits
        try:
            result = await self.engine.project(given)
        except Exception:
            tally.errors += 1
            tally.above += 1
            tally.above_fitting += fits
            return
        above, _ = self._look(given, result.messages)
        self._keep(result)
        if above:
            tally.above += 1
            tally.above_fitting += fits
            await self._recover(result.messages)

    async def _recover(self, rejected: Sequence[Message]) -> None:
        given = tuple(self.transcript)
        tally = self.tally
        tally.recoveries += 1
        tokens = measure(rejected, self.counter, self.engine.overhead_tokens)
        try:
            result = await self.engine.recover_overflow(given, rejection(tokens, self.engine))
        except Exception:
            tally.recovery_errors += 1
            tally.recoveries_above += 1
            tally.recoveries_above_fitting += self._floor_fits(given)
            return
        above, fits = self._look(given, result.messages)
        self._keep(result)
        if above:
            tally.recoveries_above += 1
            tally.recoveries_above_fitting += fits

    def _keep(self, result: Any) -> None:
        commit = committed(result)
        if commit is not None:
            self.tally.commits += 1
            self.transcript = list(commit)


async def replay(
    messages: Sequence[Message],
    engine: ContextEngine,
    counter: TokenCounter,
    *,
    max_calls: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Tally:
    """Replay ``messages`` call by call through ``engine``; the counts of what happened.

    Args:
        messages: The recorded session.
        engine: A fresh engine (it remembers the previous call's view).
        counter: The counter every view and witness is measured with.
        max_calls: Stop after this many calls (None: every call of the session).
        progress: Called with the number of calls made after each one.
    """
    run = _Replay(engine, counter)
    consumed = 0
    for point in call_points(messages)[:max_calls]:
        run.transcript.extend(messages[consumed:point])
        consumed = point
        await run.call()
        if progress is not None:
            progress(run.tally.calls)
    return run.tally
