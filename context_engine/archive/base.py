"""The `Archive` protocol and the record it stores.

An archive keeps, per session, every original a rewrite removed or shortened,
under its reference. Writes are idempotent (the same reference again changes
nothing) and atomic per call (all records of one rewrite or none). A small
key-value state, shared by every engine on the same store, carries what many
workers must agree on (a shared summarizer breaker, a session-memory seed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from context_engine._validate import check_number
from context_engine.errors import ConfigurationError
from context_engine.messages import Message

__all__ = ["Archive", "ArchiveRecord", "RecordKind", "check_session_id", "expiry_cutoff"]

RecordKind: TypeAlias = Literal["tool_result", "text", "messages"]
"""``tool_result``: a tool result microcompact cleared; ``text``: a message whose
text was trimmed; ``messages``: a range a checkpoint replaced or truncation dropped."""

_KINDS = frozenset({"tool_result", "text", "messages"})


def _kind(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in _KINDS:
        raise ConfigurationError(
            f"ArchiveRecord.kind must be one of {', '.join(sorted(_KINDS))}, got {value!r}"
        )


def _messages(value: Sequence[Message]) -> tuple[Message, ...]:
    return tuple(value)


def check_session_id(session_id: object) -> str:
    """``session_id`` if it is a usable session id.

    Raises:
        ConfigurationError: it is not a one-line, non-empty str.
    """
    if not isinstance(session_id, str) or not session_id or session_id != session_id.strip():
        raise ConfigurationError(
            f"session_id must be a non-empty str without surrounding spaces, got {session_id!r}"
        )
    if any(ch in session_id for ch in "\n\r\t\0"):
        raise ConfigurationError(f"session_id must be one line of text, got {session_id!r}")
    return session_id


def expiry_cutoff(max_age_seconds: object, now: float) -> float:
    """The ``created_at`` before which `Archive.expire` deletes a record.

    Raises:
        ConfigurationError: ``max_age_seconds`` is not a finite number >= 0.
    """
    age = check_number(
        max_age_seconds,
        "Archive.expire",
        "max_age_seconds",
        unit="seconds",
        fix="it is how old a record may get, in seconds (7 days is 604800)",
    )
    return now - age


@attrs.frozen(kw_only=True)
class ArchiveRecord:
    """Originals stored under one reference.

    Attributes:
        reference: The reference the placeholder, marker or checkpoint names.
        kind: What the rewrite did to the originals.
        messages: The originals, byte for byte, in view order.
        created_at: Seconds since the epoch when the record was first written
            (0.0 before it is stored).
    """

    reference: str
    kind: RecordKind = attrs.field(validator=_kind)
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    created_at: float = attrs.field(default=0.0, eq=False)

    @property
    def tool_call_ids(self) -> tuple[str, ...]:
        """The ids of the tool results among the originals (``tool_result`` lookups use them)."""
        return tuple(m.tool_call_id for m in self.messages if m.tool_call_id)


@runtime_checkable
class Archive(Protocol):
    """A store of archived originals, scoped by session id.

    Implementations: `MemoryArchive`, `SQLiteArchive` (one file, several
    processes) and `RedisArchive` (many machines). Every method is a
    coroutine; a failure raises `ArchiveError`.
    """

    async def put(self, session_id: str, records: Sequence[ArchiveRecord]) -> None:
        """Store ``records`` for ``session_id``: all or none; a known reference is kept as is."""
        ...

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        """The record ``reference`` names in ``session_id``, or None."""
        ...

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        """The newest ``tool_result`` record of the call ``tool_call_id``, or None."""
        ...

    async def records(self, session_id: str) -> list[ArchiveRecord]:
        """Every record of ``session_id``, oldest first."""
        ...

    async def sessions(self) -> list[str]:
        """The session ids with at least one record, sorted."""
        ...

    async def refresh(self, session_id: str) -> None:
        """Tell the store ``session_id`` is in use: a store whose records expire keeps them.

        The engine calls it on the calls it serves with an archive (at most
        once a second), so a store with a time to live counts it from the
        session's last call, not its last rewrite. Stores without expiry do
        nothing; a store may skip refreshes made within a small share of its
        time to live.
        """
        ...

    async def delete_session(self, session_id: str) -> int:
        """Delete every record of ``session_id``; return how many there were."""
        ...

    async def expire(self, max_age_seconds: float) -> int:
        """Delete the records, of every session, stored more than ``max_age_seconds`` ago.

        Records whose time is unknown (``created_at`` 0, migrated from an old
        file) are kept. Returns how many records were deleted.

        Raises:
            ConfigurationError: ``max_age_seconds`` is not a finite number >= 0.
        """
        ...

    async def get_state(self, key: str) -> str | None:
        """A shared state value, or None."""
        ...

    async def set_state(self, key: str, value: str) -> None:
        """Set a shared state value."""
        ...

    async def increment_state(self, key: str) -> int:
        """Add one to an integer state value (missing counts as 0), atomically; return it."""
        ...

    async def delete_state(self, key: str) -> None:
        """Remove a shared state value (no error when missing)."""
        ...

    async def close(self) -> None:
        """Release connections; the archive is not used afterwards."""
        ...
