"""Rebuild a view from its `AssemblyTrace`: no provider, rule or cap runs again.

Given the providers' outputs of a call and the part of its view the
strategies made from the transcript, the trace alone says which items went
where, so the same view comes back. A view that does not come back means the
trace does not explain it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from context_engine.assembly.placement import Block, mark, place, render_items
from context_engine.assembly.provider import Item, Placement
from context_engine.assembly.trace import AssemblyTrace
from context_engine.messages import Message, Role

__all__ = ["replay"]


def replay(
    trace: AssemblyTrace,
    history: Sequence[Message],
    outputs: Mapping[str, Sequence[Item | Message]],
) -> tuple[Message, ...]:
    """The view ``trace`` describes, from ``history`` and each provider's ``outputs``.

    Raises:
        ValueError: the trace includes an item ``outputs`` lacks (the message names it).
    """
    blocks = []
    for source, placement, role in trace.placements:
        kept = [
            d.item for d in trace.by_source(source) if d.action in ("include", "always_include")
        ]
        output = outputs.get(source, ())
        messages: tuple[Message, ...]
        if output and all(isinstance(o, Message) for o in output):
            by_item = {f"{source}[{i}]": o for i, o in enumerate(output)}
            messages = tuple(mark(cast(Message, _found(by_item, source, i)), source) for i in kept)
        else:
            items = {o.id: o for o in output if isinstance(o, Item)}
            chosen = [cast(Item, _found(items, source, i)) for i in kept]
            messages = render_items(source, cast(Role, role), chosen)
        blocks.append(Block(source, cast(Placement, placement), cast(Role, role), messages))
    return place(tuple(history), blocks)


def _found(table: Mapping[str, Item | Message], source: str, item: str) -> Item | Message:
    try:
        return table[item]
    except KeyError:
        raise ValueError(
            f"the trace includes {item!r} from {source!r}, which the outputs given do not have"
        ) from None
