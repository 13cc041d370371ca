"""Archives: where the originals a rewrite removed are kept, so nothing is lost.

`MemoryArchive` for tests and scripts. The `Archive` protocol says what every
store does; references are a pure function of the originals.
"""

from context_engine.archive.base import Archive, ArchiveRecord, RecordKind
from context_engine.archive.codec import decode_messages, encode_messages
from context_engine.archive.memory import MemoryArchive
from context_engine.archive.reference import REFERENCE_PATTERN, find_references, reference_for

__all__ = [
    "REFERENCE_PATTERN",
    "Archive",
    "ArchiveRecord",
    "MemoryArchive",
    "RecordKind",
    "decode_messages",
    "encode_messages",
    "find_references",
    "reference_for",
]
