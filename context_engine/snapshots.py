"""Describing a view for `ContextEngine.snapshot`; computed on demand, off the hot path."""

from __future__ import annotations

from context_engine._validate import is_int
from context_engine.events import ContextUsage, Scope, Snapshot
from context_engine.messages import Message
from context_engine.pipeline import Outcome
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY

__all__ = ["describe_view"]


def describe_view(
    scope: Scope, view: tuple[Message, ...], usage: ContextUsage, outcome: Outcome | None
) -> Snapshot:
    """Count what a view is made of and what the last rewrite did to it."""
    info = outcome.info if outcome else None
    trimmed = 0
    for message in view:
        value = message.metadata.get(TRIMMED_KEY)
        if is_int(value):
            trimmed += value
    return Snapshot(
        scope=scope,
        messages=view,
        usage=usage,
        message_count=len(view),
        summary_messages=sum(1 for m in view if m.is_summary),
        tool_messages=sum(1 for m in view if m.role == "tool"),
        cleared_tool_results=sum(1 for m in view if m.role == "tool" and CLEARED_KEY in m.metadata),
        trimmed_text_blocks=trimmed,
        last_strategy=outcome.applied[-1] if outcome and outcome.applied else None,
        last_compacted_count=info.compacted_count if info else 0,
        last_kept_count=info.kept_count if info else 0,
        split_turn=info.is_split_turn if info else False,
    )
