"""Walks every reference a view names and checks each removed original comes back."""

from __future__ import annotations

from collections.abc import Sequence

from context_engine import ContextEngine, ContextSummary, Message
from context_engine.archive import encode_messages, find_references


def references_in(messages: Sequence[Message]) -> list[str]:
    """Every reference named by ``messages``: in texts and in checkpoint fields."""
    found: list[str] = []
    for message in messages:
        found += find_references(message.text)
        if isinstance(message, ContextSummary):
            found += message.references
    return list(dict.fromkeys(found))


async def recalled_closure(engine: ContextEngine, view: Sequence[Message]) -> set[str]:
    """The encodings of every original reachable from ``view`` through references."""
    pending, seen, originals = references_in(view), set(), set()
    while pending:
        reference = pending.pop()
        if reference in seen:
            continue
        seen.add(reference)
        messages = await engine.recall(reference)
        originals.update(encode_messages((m,)) for m in messages)
        pending += references_in(messages)
    return originals


async def assert_removed_are_recallable(
    engine: ContextEngine, given: Sequence[Message], view: Sequence[Message]
) -> int:
    """Every message of ``given`` missing from ``view`` is recallable byte for byte.

    Returns how many removed messages were checked.
    """
    in_view = {encode_messages((m,)) for m in view}
    removed = [m for m in given if encode_messages((m,)) not in in_view]
    if not removed:
        return 0
    reachable = await recalled_closure(engine, view)
    lost = [m for m in removed if encode_messages((m,)) not in reachable]
    assert not lost, f"{len(lost)} removed messages cannot be recalled, first: {lost[0]!r}"
    return len(removed)
