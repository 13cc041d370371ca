"""References: the names archived originals go by, a pure function of their content.

A reference is ``arc-`` and 20 hex digits of a SHA-256 over the canonical
encoding of the originals (`context_engine.archive.codec`). The same originals
always get the same reference, so the placeholder a strategy writes for them is
the same on every call (the prompt prefix stays cacheable) and writing them
twice stores them once. References are scoped by session in every store: the
same content archived by two sessions is two records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import regex

from context_engine._memo import DIGEST, memoized
from context_engine.archive.codec import encode_messages
from context_engine.messages import Message

__all__ = ["REFERENCE_PATTERN", "find_references", "message_digest", "reference_for"]

REFERENCE_PATTERN = regex.compile(r"\barc-[0-9a-f]{20}\b")
"""Matches a reference inside any text (placeholders, markers, checkpoints)."""


def message_digest(message: Message) -> str:
    """SHA-256 of one message's canonical encoding, kept on the message."""
    return memoized(message, DIGEST, _digest)


def _digest(message: Message) -> str:
    # surrogatepass: messages may hold lone surrogates (valid in a str, not in UTF-8), and
    # this encoding keeps distinct strings distinct.
    return hashlib.sha256(encode_messages((message,)).encode("utf-8", "surrogatepass")).hexdigest()


def reference_for(originals: Sequence[Message]) -> str:
    """The reference of ``originals`` (in order); equal originals give equal references.

    Raises:
        ValueError: ``originals`` is empty.
        ArchiveCodecError: a message's metadata is not JSON.
    """
    if not originals:
        raise ValueError("a reference needs at least one original message")
    joined = hashlib.sha256()
    for message in originals:
        joined.update(message_digest(message).encode())
    return "arc-" + joined.hexdigest()[:20]


def find_references(text: str) -> list[str]:
    """The references mentioned in ``text``, in order, each once."""
    return list(dict.fromkeys(REFERENCE_PATTERN.findall(text)))
