"""What a rewrite put where the content was: an excerpt of its checkpoint, placeholder or marker."""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.messages import Message
from context_engine.structure import CAPPED_KEY, CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY

__all__ = ["replacement_excerpt"]

_WIDTH = 160
_KINDS = (
    (TRUNCATION_KEY, "marker"),
    (CLEARED_KEY, "placeholder"),
    (CAPPED_KEY, "preview"),
    (TRIMMED_KEY, "trimmed"),
)


def replacement_excerpt(view: Sequence[Message]) -> str:
    """``kind: text`` for the newest replacement in ``view``; the checkpoint first; else ``""``.

    The newest, because a light strategy that rewrites again on every call
    leaves its older placeholders in place and the newest is what this call added.
    """
    checkpoint = next((m for m in view if m.is_summary), None)
    if checkpoint is not None:
        return _line("checkpoint", checkpoint)
    for message in reversed(view):
        for key, kind in _KINDS:
            if key in message.metadata:
                return _line(kind, message)
    return ""


def _line(kind: str, message: Message) -> str:
    text = " ".join(message.text.split())
    text = text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…"
    return f"{kind}: {text}"
