"""Keeping the originals a rewrite removed, and fetching them back, through an `Archive`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from context_engine._settings import Settings
from context_engine.archive.base import Archive, ArchiveRecord
from context_engine.errors import ArchiveError, ConfigurationError, RecallError
from context_engine.messages import Message
from context_engine.strategies.base import Removal
from context_engine.strategies.tool_result_cap import ToolResultCap, cap_tool_result
from context_engine.tokens import TokenCounter

__all__ = [
    "KeepAlive",
    "capped_on_arrival",
    "keep_alive",
    "keep_originals",
    "keep_within",
    "recall_in",
    "recall_originals",
    "recall_tool_result",
]

logger = logging.getLogger(__name__)


async def keep_originals(archive: Archive, session_id: str, removed: Sequence[Removal]) -> None:
    """Store every removal's originals under its reference, in one write.

    Raises:
        ArchiveError: the store failed; the cause is chained.
    """
    if not removed:
        return
    records: dict[str, ArchiveRecord] = {}
    for removal in removed:
        reference = removal.reference
        if reference not in records:
            records[reference] = ArchiveRecord(
                reference=reference, kind=removal.kind, messages=removal.originals
            )
    try:
        await archive.put(session_id, list(records.values()))
    except ArchiveError:
        raise
    except Exception as exc:  # a third-party store: any failure means "not kept"
        raise ArchiveError(f"the archive failed to store the originals: {exc!r}") from exc
    logger.debug("session=<%s> records=<%d> | originals archived", session_id, len(records))


async def keep_within(
    archive: Archive, session_id: str, removed: Sequence[Removal], timeout: float
) -> str | None:
    """`keep_originals` within ``timeout`` seconds; None when kept, else what went wrong.

    A locked or frozen store must not block the call it serves: past the
    deadline the write is abandoned (idempotent writes make a late one harmless).
    """
    try:
        await asyncio.wait_for(keep_originals(archive, session_id, removed), timeout)
    except asyncio.TimeoutError:
        return f"no answer within {timeout:g} s"
    except ArchiveError as exc:
        return str(exc) or type(exc).__name__
    return None


class KeepAlive:
    """Tells the store a session is in use, at most once per ``every`` seconds.

    The engine asks on every call; the check is one clock read, so a call
    that needs nothing from the store does not pay for a coroutine or a
    timeout when the session was refreshed less than a second ago.
    """

    def __init__(
        self, archive: Archive, session_id: str, timeout: float, every: float = 1.0
    ) -> None:
        self._archive, self._session_id, self._timeout = archive, session_id, timeout
        self._every = every
        self._next = 0.0

    def due(self) -> bool:
        """Whether a refresh is due (and, if so, the next one ``every`` seconds later)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self._every
        return True

    async def refresh(self) -> None:
        """`keep_alive` of the session."""
        await keep_alive(self._archive, self._session_id, self._timeout)


async def keep_alive(archive: Archive, session_id: str, timeout: float) -> None:
    """`Archive.refresh` within ``timeout`` seconds; a failure is logged, never raised.

    The call it serves needs nothing from the store, so a slow or dead store
    costs at most ``timeout`` and a warning.
    """
    try:
        await asyncio.wait_for(archive.refresh(session_id), timeout)
    except asyncio.TimeoutError:
        logger.warning(
            "session=<%s> | archive refresh got no answer within %g s", session_id, timeout
        )
    except Exception as exc:  # a third-party store too: the call goes on without it
        logger.warning("session=<%s> | archive refresh failed: %s", session_id, exc)


async def recall_originals(
    archive: Archive, session_id: str, reference: str
) -> tuple[Message, ...]:
    """The originals ``reference`` names in ``session_id``.

    Raises:
        RecallError: the session's archive has no such reference.
        ArchiveError: the store failed.
    """
    if not isinstance(reference, str):
        raise RecallError(repr(reference), session_id)
    return await _originals_of(
        lambda: archive.get(session_id, reference.strip()),
        reference,
        session_id,
        f"read {reference!r}",
    )


async def recall_tool_result(
    archive: Archive, session_id: str, tool_call_id: str
) -> tuple[Message, ...]:
    """The originals of the newest archived result of the call ``tool_call_id``.

    Raises:
        RecallError: the session's archive holds no result of that call.
        ArchiveError: the store failed.
    """
    return await _originals_of(
        lambda: archive.find_tool_result(session_id, tool_call_id),
        tool_call_id,
        session_id,
        "look up a tool call",
    )


async def _originals_of(
    read: Callable[[], Awaitable[ArchiveRecord | None]], wanted: str, session_id: str, what: str
) -> tuple[Message, ...]:
    """The messages of the record ``read`` returns; any store failure is an `ArchiveError`."""
    try:
        record = await read()
    except ArchiveError:
        raise
    except Exception as exc:  # a third-party store: any failure means "cannot read"
        raise ArchiveError(f"the archive failed to {what}: {exc!r}") from exc
    if record is None:
        raise RecallError(wanted, session_id)
    return record.messages


async def capped_on_arrival(message: Message, settings: Settings, counter: TokenCounter) -> Message:
    """``message`` capped by `ToolResultCap`'s default limit, its original archived first.

    When the store fails, ``message`` comes back whole: the transcript must
    keep what could not be archived.
    """
    limit = ToolResultCap().limit(settings.threshold)
    capped, removal = cap_tool_result(
        message, max_tokens=limit, counter=counter, archiving=settings.archiving
    )
    if removal is None or settings.archive is None or settings.session_id is None:
        return capped
    problem = await keep_within(
        settings.archive, settings.session_id, (removal,), settings.archive_timeout
    )
    if problem is not None:
        logger.warning(
            "session=<%s> | archive write failed; tool result kept whole: %s",
            settings.session_id,
            problem,
        )
        return message
    return capped


async def recall_in(settings: Settings, reference: str) -> tuple[Message, ...]:
    """`recall_originals` in the engine's archive and session.

    Raises:
        ConfigurationError: the engine keeps no archive.
    """
    if settings.archive is None or settings.session_id is None:
        raise ConfigurationError(
            "this engine keeps no archive; build it with archive= and session_id= to "
            "recall what rewrites removed"
        )
    return await recall_originals(settings.archive, settings.session_id, reference)
