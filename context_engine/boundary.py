"""Request-boundary compaction: summarize old history once, before a request starts.

A stored session (a server's conversation store, an SDK session) is loaded
whole at the start of every request. Without compaction there, each request
starts from the entire history and the first `project` of the request pays
for the summary inside the agent loop. `ContextEngine.compact_if_needed`
checks the stored history once, at the boundary: above ``trigger_tokens`` and
with at least ``min_messages`` messages it writes one checkpoint (reason
``request_boundary``, archived like any other), and the caller persists the
returned transcript. The decision is the pure `boundary_due`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from context_engine._aio import call_hook
from context_engine._validate import check_int
from context_engine.results import CompactResult

__all__ = [
    "DEFAULT_MIN_MESSAGES",
    "DEFAULT_TRIGGER_TOKENS",
    "boundary_due",
    "bracketed",
    "checked_boundary",
]

DEFAULT_TRIGGER_TOKENS = 80_000
"""History tokens above which a request starts with a compaction (seed 001)."""
DEFAULT_MIN_MESSAGES = 20
"""Fewer stored messages than this are never compacted at the boundary (seed 001)."""


def checked_boundary(trigger_tokens: object, min_messages: object) -> tuple[int, int]:
    """``trigger_tokens`` and ``min_messages``, each an int >= 0."""
    owner = "compact_if_needed"
    return (
        check_int(trigger_tokens, owner, "trigger_tokens", fix="e.g. 80_000 tokens of history"),
        check_int(min_messages, owner, "min_messages", fix="e.g. 20 messages"),
    )


def boundary_due(tokens: int, messages: int, trigger_tokens: int, min_messages: int) -> bool:
    """Whether a stored history of ``tokens`` tokens in ``messages`` messages is compacted."""
    return tokens > trigger_tokens and messages >= min_messages


async def bracketed(
    tokens: int,
    compact: Callable[[], Awaitable[CompactResult]],
    on_start: Callable[[int], Any] | None,
    on_end: Callable[[CompactResult | None], Any] | None,
) -> CompactResult:
    """``compact()`` between ``on_start(tokens)`` and ``on_end(result)``.

    ``on_end`` runs on failure too, with None, so a server that opened its
    ``context_compaction_start`` event always closes it.
    """
    await call_hook("compact_if_needed on_start", on_start, tokens)
    result: CompactResult | None = None
    try:
        result = await compact()
    finally:
        await call_hook("compact_if_needed on_end", on_end, result)
    return result
