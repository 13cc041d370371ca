"""Archives: where the originals a rewrite removed are kept, so nothing is lost.

`MemoryArchive` for tests and scripts, `SQLiteArchive` (one file, several
processes on a machine) as the embedded default, `RedisArchive` (the
``redis`` extra) for many workers on many machines. `open_archive` builds one
from a URL (``memory:``, ``sqlite:PATH``, ``redis://HOST:PORT/DB``).
`RecallTool` lets the agent read originals back by reference;
`SharedSummarizerBreaker` and `stored_seed` share state between workers
through the same store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from context_engine.archive.base import Archive, ArchiveRecord, RecordKind
from context_engine.archive.codec import decode_messages, encode_messages
from context_engine.archive.memory import MemoryArchive
from context_engine.archive.open import open_archive
from context_engine.archive.reference import REFERENCE_PATTERN, find_references, reference_for
from context_engine.archive.shared import SharedSummarizerBreaker, save_seed, stored_seed
from context_engine.archive.sqlite import SQLiteArchive
from context_engine.archive.tool import RECALL_TOOL_NAME, RecallTool

if TYPE_CHECKING:
    from context_engine.archive.redis import RedisArchive

__all__ = [
    "RECALL_TOOL_NAME",
    "REFERENCE_PATTERN",
    "Archive",
    "ArchiveRecord",
    "MemoryArchive",
    "RecallTool",
    "RecordKind",
    "RedisArchive",
    "SQLiteArchive",
    "SharedSummarizerBreaker",
    "decode_messages",
    "encode_messages",
    "find_references",
    "open_archive",
    "reference_for",
    "save_seed",
    "stored_seed",
]


def __getattr__(name: str) -> Any:
    """`RedisArchive` on first use, so importing the package never loads redis-py."""
    if name == "RedisArchive":
        from context_engine.archive.redis import RedisArchive

        return RedisArchive
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
