"""Answers a summarizer already gave, kept so a failed summary resumes instead of paying again.

A summary of a long history takes several summarizer requests (one per
chunk, then the turn-prefix summary). When one of them fails, the answers
before it are still good: the next attempt builds the very same requests for
the same chunks (chunking is deterministic and each chunk's request carries
the running summary the earlier ones produced), finds their answers here and
only sends the requests that are missing.

The key is a digest of everything the answer depends on besides the
summarizer and the strategy's settings (one memo belongs to one strategy):
the kind, the running summary, the instructions, the reason, the output budget
and the canonical encoding of every message.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict

from context_engine.archive.reference import message_digest
from context_engine.errors import ArchiveError
from context_engine.summarize.request import SummaryRequest

__all__ = ["DEFAULT_MEMO_SIZE", "SummaryMemo", "request_key"]

DEFAULT_MEMO_SIZE = 64
"""Answers kept per strategy: more than the chunks of any realistic summary."""


def request_key(request: SummaryRequest) -> str | None:
    """The memo key of ``request``, or None when a message cannot be encoded (non-JSON metadata)."""
    try:
        digests = [message_digest(message) for message in request.messages]
    except (ArchiveError, TypeError, ValueError):
        return None
    facts = [
        request.kind,
        request.previous_summary,
        request.instructions,
        request.reason,
        request.max_tokens,
        digests,
    ]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()


class SummaryMemo:
    """A bounded, thread-safe map from request keys to parsed answers, least recently used out.

    Args:
        size: Answers kept at most.
    """

    def __init__(self, size: int = DEFAULT_MEMO_SIZE) -> None:
        if size < 1:
            raise ValueError("a SummaryMemo keeps at least one answer")
        self.size = size
        self._answers: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str | None) -> str | None:
        """The answer kept under ``key``, or None."""
        if key is None:
            return None
        with self._lock:
            answer = self._answers.get(key)
            if answer is not None:
                self._answers.move_to_end(key)
            return answer

    def put(self, key: str | None, answer: str) -> None:
        """Keep ``answer`` under ``key`` (a None key keeps nothing)."""
        if key is None:
            return
        with self._lock:
            self._answers[key] = answer
            self._answers.move_to_end(key)
            while len(self._answers) > self.size:
                self._answers.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)

    def __repr__(self) -> str:
        return f"SummaryMemo(size={self.size}, kept={len(self)})"
