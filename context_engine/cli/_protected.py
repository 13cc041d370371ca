"""What no strategy may remove from a view, and why: the floor a compaction cannot go under."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine.messages import Message
from context_engine.structure import analyze
from context_engine.tokens import TokenCounter

__all__ = ["ProtectedPart", "protected_parts"]


@attrs.frozen(kw_only=True)
class ProtectedPart:
    """One part of a view every strategy keeps.

    Attributes:
        part: ``system``, ``checkpoint``, ``newest user message`` or ``tail``.
        messages: How many messages it holds.
        tokens: Their tokens.
        why: Why it stays.
    """

    part: str
    messages: int
    tokens: int
    why: str


def protected_parts(view: Sequence[Message], counter: TokenCounter) -> tuple[ProtectedPart, ...]:
    """The protected parts of ``view``, in view order; parts with no message are left out."""
    shape = analyze(view)
    lead = range(shape.lead_end)
    checkpoints = [i for i in range(len(view)) if view[i].is_summary]
    tail = range(max(shape.tail_start, shape.lead_end), len(view))
    user = [shape.last_user] if 0 <= shape.last_user < shape.tail_start else []
    parts = (
        ("system", list(lead), "the instructions every call is sent"),
        (
            "checkpoint",
            checkpoints,
            "it stands for everything summarized before it; never dropped (the last resort "
            "may only shorten it)",
        ),
        ("newest user message", user, "the request the model is answering"),
        (
            "tail",
            list(tail),
            "the current turn's newest tool group (pending calls included) and what follows: "
            "the model is in the middle of it",
        ),
    )
    return tuple(
        ProtectedPart(
            part=name,
            messages=len(indexes),
            tokens=sum(counter.count_message(view[i]) for i in indexes),
            why=why,
        )
        for name, indexes, why in parts
        if indexes
    )
