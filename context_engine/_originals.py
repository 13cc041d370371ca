"""Keeping the originals a rewrite removed, and fetching them back, through an `Archive`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from context_engine._settings import Settings
from context_engine.archive.base import Archive, ArchiveRecord
from context_engine.errors import ArchiveError, ConfigurationError, RecallError
from context_engine.messages import Message
from context_engine.strategies.base import Removal
from context_engine.strategies.tool_result_cap import ToolResultCap, cap_tool_result
from context_engine.tokens import TokenCounter

__all__ = [
    "capped_on_arrival",
    "keep_originals",
    "keep_within",
    "recall_in",
    "recall_originals",
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
    try:
        record = await archive.get(session_id, reference.strip())
    except ArchiveError:
        raise
    except Exception as exc:
        raise ArchiveError(f"the archive failed to read {reference!r}: {exc!r}") from exc
    if record is None:
        raise RecallError(reference, session_id)
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
