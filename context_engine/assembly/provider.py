"""The `ContextProvider` contract: a source of context computed fresh for every call.

A provider is asked once per call, in priority order (lower first, stable
among equals), with a `ProviderRequest`; it answers with messages, with
`Item`s (which rules and caps can act on one by one), or with None (nothing
to add). What it returns is budgeted with the transcript and placed in the
view handed to the model, and never written into the transcript, archived,
committed or summarized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import attrs

from context_engine._validate import check_number
from context_engine.messages import Message, Role

__all__ = [
    "ContextProvider",
    "FetchingProvider",
    "Item",
    "Placement",
    "ProviderOutput",
    "ProviderRequest",
    "Share",
]

Placement: TypeAlias = Literal["stable", "volatile", "tail"]
"""``stable``: right after the system prompt, part of the cached prefix;
``volatile``: just before the newest user message, so a change never moves the
prefix before it; ``tail``: after the last message, so a change never moves any
of the prefix (for agent loops, where the newest user message is far back)."""

Share: TypeAlias = Literal["preferences", "long_term", "retrieval"]
"""The `BudgetProfile` share a provider's output counts against."""


def _relevance(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    check_number(value, "Item", attribute.name)  # a finite number >= 0


@attrs.frozen(kw_only=True)
class Item:
    """One piece of a provider's output that rules and caps act on.

    Attributes:
        id: Stable identifier: a path for files (rules match globs against it),
            a document id for retrieval hits.
        text: What the model sees.
        relevance: Higher is more relevant; a source over its cap drops its
            lowest-relevance items first, and a rule's boost multiplies it.
        tokens: The provider's own token estimate, or None to count ``text``.
    """

    id: str
    text: str
    relevance: float = attrs.field(default=1.0, validator=_relevance)
    tokens: int | None = None


ProviderOutput: TypeAlias = "Sequence[Message] | Sequence[Item] | None"


@attrs.frozen(kw_only=True)
class ProviderRequest:
    """What a provider is told about the call it contributes to.

    Attributes:
        transcript: The caller's transcript as given (read it, never change it).
        task: The text of the newest user message ("" when there is none).
        operation: ``project``, ``compact`` or ``recover_overflow``.
        max_tokens: The tokens this source may fill (its cap, its profile
            share), or None when it is uncapped.
        provided: What the providers before this one contributed, in order.
    """

    transcript: tuple[Message, ...] = attrs.field(repr=False)
    task: str
    operation: str = "project"
    max_tokens: int | None = None
    provided: tuple[Message, ...] = attrs.field(default=(), repr=False)


@runtime_checkable
class ContextProvider(Protocol):
    """A source of context for every call. Everything the engine relies on is here.

    Attributes:
        name: Short stable identifier, used in the trace, logs and rules.
        priority: Lower runs first; equal priorities run in registration
            order. The built-in providers leave gaps (10, 20, 30, ...) so yours
            can slot in between.
        max_tokens: Cap on this source's output, or None.
        placement: ``stable``, ``volatile`` or ``tail`` (`Placement`).
        share: The `BudgetProfile` share the output counts against, or None.
        role: The role of the message items are rendered into.
    """

    name: str
    priority: int
    max_tokens: int | None
    placement: Placement
    share: Share | None
    role: Role

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """Messages or items to add to this call, or None for nothing.

        MUST NOT change ``request.transcript``. MAY raise: the failure is
        recorded in the trace, the provider is skipped and the others run.
        SHOULD respect cancellation when it waits on I/O.
        """
        ...


@runtime_checkable
class FetchingProvider(ContextProvider, Protocol):
    """A provider that can also read one item by id (rules' ``always_include``)."""

    async def fetch(self, item_id: str) -> Item | None:
        """The item called ``item_id``, or None when there is no such item."""
        ...
