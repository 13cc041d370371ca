"""State many workers share through one archive store.

`SharedSummarizerBreaker` wraps a summarizer so that its failures are counted
in the store: when the endpoint is down, the first workers to fail open the
breaker for every worker on the same store, and the others fail fast instead
of each paying timeouts and retries of their own. `stored_seed` and
`save_seed` keep a session-memory text in the store, so whichever worker
picks the session up next seeds `SessionMemory` from it.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from context_engine._validate import non_negative_seconds, positive_int
from context_engine.archive.base import Archive, check_session_id
from context_engine.errors import ArchiveError, ConfigurationError, SummarizerError
from context_engine.summarize.request import Summarizer, SummaryRequest

__all__ = ["SharedSummarizerBreaker", "save_seed", "stored_seed"]

logger = logging.getLogger(__name__)


def _endpoint(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip() or "\n" in value:
        raise ConfigurationError(
            "SharedSummarizerBreaker.endpoint must name the summarizer endpoint every worker "
            f"shares, such as 'openai:gpt-4.1-mini', got {value!r}"
        )


@attrs.frozen(kw_only=True)
class SharedSummarizerBreaker:
    """A summarizer whose circuit breaker lives in the archive store, shared by every worker.

    Closed: calls go through; each failure adds one to the shared count, and
    a success resets it. Open (the count reached ``max_failures``): calls
    raise `SummarizerError` at once, without reaching the endpoint, until
    ``cooldown_seconds`` have passed since it opened; then calls go through
    again (half-open) and the first success closes it for everyone.

    If the store itself fails, the summarizer is still called: a dead store
    must not stop summaries (the engine's archive reports that on its own).
    """

    summarizer: Summarizer = attrs.field()
    """The summarizer to guard (plain or coroutine function of a `SummaryRequest`)."""
    archive: Archive
    """The store every worker shares."""
    endpoint: str = attrs.field(validator=_endpoint)
    """The key the workers share: one breaker per endpoint, not per worker."""
    max_failures: int = attrs.field(default=3, validator=positive_int())
    """Consecutive failures, counted across workers, that open the breaker."""
    cooldown_seconds: float = attrs.field(default=60.0, validator=non_negative_seconds())
    """Seconds the breaker stays open before calls are tried again."""
    clock: Callable[[], float] = attrs.field(default=time.time, repr=False)
    """Seconds since the epoch; the same clock on every worker (wall time)."""

    @summarizer.validator
    def _check_summarizer(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if not callable(value):
            raise ConfigurationError(
                f"SharedSummarizerBreaker.summarizer must be callable, got {value!r}"
            )

    @property
    def _failures_key(self) -> str:
        return f"breaker:{self.endpoint}:failures"

    @property
    def _opened_key(self) -> str:
        return f"breaker:{self.endpoint}:opened_at"

    async def is_open(self) -> bool:
        """Whether calls are refused right now (the breaker is open and cooling down)."""
        try:
            opened = await self.archive.get_state(self._opened_key)
        except ArchiveError as exc:
            logger.warning("endpoint=<%s> | shared breaker unreadable: %s", self.endpoint, exc)
            return False
        return opened is not None and self.clock() - float(opened) < self.cooldown_seconds

    async def failures(self) -> int:
        """The shared count of consecutive failures."""
        return int(await self.archive.get_state(self._failures_key) or 0)

    async def __call__(self, request: SummaryRequest) -> str:
        """Summarize through the guarded summarizer, or fail fast while the breaker is open.

        Raises:
            SummarizerError: the breaker is open, or the summarizer failed.
        """
        if await self.is_open():
            raise SummarizerError(
                f"the shared breaker of {self.endpoint!r} is open: workers on this store saw "
                f"{self.max_failures} or more failures in a row; it is tried again "
                f"{self.cooldown_seconds:g}s after it opened"
            )
        try:
            result = self.summarizer(request)
            text = await result if inspect.isawaitable(result) else result
        except Exception:
            await self._record_failure()
            raise
        await self._record_success()
        return text

    async def _record_failure(self) -> None:
        try:
            count = await self.archive.increment_state(self._failures_key)
            if count >= self.max_failures:
                await self.archive.set_state(self._opened_key, repr(self.clock()))
                logger.warning(
                    "endpoint=<%s> failures=<%d> | shared summarizer breaker open",
                    self.endpoint,
                    count,
                )
        except ArchiveError as exc:
            logger.warning("endpoint=<%s> | shared breaker not updated: %s", self.endpoint, exc)

    async def _record_success(self) -> None:
        try:
            if await self.archive.get_state(self._failures_key) is not None:
                await self.archive.delete_state(self._failures_key)
                await self.archive.delete_state(self._opened_key)
        except ArchiveError as exc:
            logger.warning("endpoint=<%s> | shared breaker not reset: %s", self.endpoint, exc)


def _seed_key(session_id: str) -> str:
    return f"seed:{check_session_id(session_id)}"


def stored_seed(archive: Archive, session_id: str) -> Callable[[], Awaitable[str]]:
    """A `SessionMemory` seed that reads the session's memory text from the store.

    The seed returns an empty text while nothing is stored (`SessionMemory`
    then records a no-op and the next strategy runs).
    """
    key = _seed_key(session_id)

    async def seed() -> str:
        return await archive.get_state(key) or ""

    return seed


async def save_seed(archive: Archive, session_id: str, text: str) -> None:
    """Store ``text`` as the session's memory, for `stored_seed` on any worker."""
    if not isinstance(text, str):
        raise ConfigurationError(f"the session memory must be a str, got {type(text).__name__}")
    await archive.set_state(_seed_key(session_id), text)
