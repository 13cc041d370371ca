"""`MemoryArchive`: the archive in this process's memory (tests, one-off scripts)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs

from context_engine.archive.base import ArchiveRecord, check_session_id, expiry_cutoff
from context_engine.archive.codec import encode_messages
from context_engine.errors import ArchiveError

__all__ = ["MemoryArchive"]


class MemoryArchive:
    """Keeps records in a dict; gone when the process ends.

    Records are stored as given (messages are immutable), so a recall returns
    the very objects that were removed.
    """

    def __init__(self) -> None:
        self._records: dict[str, dict[str, ArchiveRecord]] = {}
        self._state: dict[str, str] = {}

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Store ``records``; a reference already stored is kept as is.

        Raises:
            ArchiveCodecError: a message cannot be archived (its metadata is not
                JSON); nothing is stored, as in the other stores.
        """
        check_session_id(session_id)
        for record in records:
            encode_messages(record.messages)
        stored = self._records.setdefault(session_id, {})
        now = time.time()
        for record in records:
            if record.reference not in stored:
                stored[record.reference] = attrs.evolve(record, created_at=now)

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        """The record ``reference`` names in ``session_id``, or None."""
        return self._records.get(session_id, {}).get(reference)

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        """The newest ``tool_result`` record of the call ``tool_call_id``, or None."""
        found = None
        for record in self._records.get(session_id, {}).values():
            if record.kind == "tool_result" and tool_call_id in record.tool_call_ids:
                found = record
        return found

    async def records(self, session_id: str) -> list[ArchiveRecord]:
        """Every record of ``session_id``, oldest first."""
        return list(self._records.get(session_id, {}).values())

    async def sessions(self) -> list[str]:
        """The session ids with at least one record, sorted."""
        return sorted(session for session, stored in self._records.items() if stored)

    async def refresh(self, session_id: str) -> None:
        """Nothing to refresh: records live as long as the process."""

    async def delete_session(self, session_id: str) -> int:
        """Delete every record of ``session_id``; return how many there were."""
        return len(self._records.pop(session_id, {}))

    async def expire(self, max_age_seconds: float) -> int:
        """Delete the records stored more than ``max_age_seconds`` ago; return how many."""
        cutoff = expiry_cutoff(max_age_seconds, time.time())
        deleted = 0
        for session_id, stored in list(self._records.items()):
            old = [ref for ref, record in stored.items() if 0 < record.created_at < cutoff]
            for reference in old:
                del stored[reference]
            deleted += len(old)
            if not stored:
                del self._records[session_id]
        return deleted

    async def get_state(self, key: str) -> str | None:
        """A shared state value, or None."""
        return self._state.get(key)

    async def set_state(self, key: str, value: str) -> None:
        """Set a shared state value."""
        self._state[key] = value

    async def increment_state(self, key: str) -> int:
        """Add one to an integer state value (missing counts as 0); return it.

        Raises:
            ArchiveError: the value stored under ``key`` is not an integer.
        """
        current = self._state.get(key, "0")
        try:
            value = int(current) + 1
        except ValueError:
            raise ArchiveError(f"state {key!r} holds {current!r}, not an integer") from None
        self._state[key] = str(value)
        return value

    async def delete_state(self, key: str) -> None:
        """Remove a shared state value."""
        self._state.pop(key, None)

    async def close(self) -> None:
        """Nothing to release."""
