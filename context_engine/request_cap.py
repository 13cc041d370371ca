"""The per-request cap: at most N LLM rewrites between two user messages.

An agent loop answering one user message can run for hundreds of model
calls. Without a cap, a small window makes the summary strategy run again and
again inside that one request, each run a paid model call that also breaks
the provider's prompt cache. Past the cap the LLM strategies are skipped, each
skip recorded on its step like the open breaker's, and the deterministic
strategies still make the view fit. The count belongs to the request: a new
user message (the newest one differs from the one the count was for) starts
it again at zero.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine._validate import check_int
from context_engine.messages import Message

__all__ = [
    "CAP_REACHED",
    "DEFAULT_MAX_LLM_REWRITES",
    "RequestCap",
    "cap_reached",
    "checked_cap",
    "newest_user",
]

DEFAULT_MAX_LLM_REWRITES = 3
"""LLM rewrites allowed between two user messages (seed 001's reactive limit)."""


CAP_REACHED = "per-request cap reached"
"""How the error on the step of an LLM strategy the cap skipped begins."""


def cap_reached(limit: int) -> str:
    """The error recorded on the step of an LLM strategy the cap skipped."""
    return (
        f"{CAP_REACHED}: {limit} LLM rewrites since the last user message "
        "(max_llm_rewrites_per_request)"
    )


def checked_cap(value: object) -> int | None:
    """``max_llm_rewrites_per_request``: None (no cap) or an int >= 0."""
    return check_int(
        value,
        "ContextEngine",
        "max_llm_rewrites_per_request",
        optional=True,
        fix="None removes the cap; 0 never calls the summarizer from project",
    )


def newest_user(transcript: Sequence[Message]) -> Message | None:
    """The newest user message that is not a checkpoint, or None."""
    for message in reversed(transcript):
        if message.role == "user" and not message.is_summary:
            return message
    return None


@attrs.define
class RequestCap:
    """How many LLM rewrites the current request has had (kept in the engine's `Session`).

    Attributes:
        count: LLM rewrites since ``request`` arrived.
        request: The newest user message the count is for (None before the first rewrite).
    """

    count: int = 0
    request: Message | None = None

    def refusal(self, transcript: Sequence[Message], limit: int | None) -> str | None:
        """Why LLM strategies may not run on ``transcript`` (None: they may)."""
        if limit is None or self.count < limit:
            return None
        # A new request starts at zero (`record` resets the count when it rewrites).
        count = self.count if _same(newest_user(transcript), self.request) else 0
        return cap_reached(limit) if count >= limit else None

    def record(self, transcript: Sequence[Message], rewrites: int) -> None:
        """Count ``rewrites`` LLM rewrites made for ``transcript``'s request."""
        if rewrites <= 0:
            return
        newest = newest_user(transcript)
        if not _same(newest, self.request):
            self.count, self.request = 0, newest
        self.count += rewrites


def _same(one: Message | None, other: Message | None) -> bool:
    # Identity first: an agent loop passes the same message object on every call.
    return one is other or one == other
