"""Pinned messages: a rules file or a plan the agent must see again after every checkpoint.

An AGENTS.md / CLAUDE.md-style rules file or a todo list usually sits early in
the transcript, so the first checkpoint replaces it and a summary of it is all
the model keeps. `Pinned` holds such messages (fixed, or read fresh from a
callable when a checkpoint is written) and `pin` re-injects them right after
each checkpoint, within a budget: a share of the threshold, and never more
than the room the checkpoint left, so the view still fits. What does not fit
is shortened with a marker that says so; nothing is dropped silently. The
injected copies carry `INJECTED_KEY`, so the next checkpoint replaces them
instead of summarizing them, and the user-instruction section does not take
them for requests.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import attrs

from context_engine._aio import maybe_await
from context_engine._validate import share
from context_engine.errors import ConfigurationError
from context_engine.messages import Message, TextBlock
from context_engine.tokens import TokenCounter

__all__ = ["INJECTED_KEY", "Pinned", "PinnedSource", "pinned_setting"]

logger = logging.getLogger(__name__)

INJECTED_KEY = "context_engine.injected"
"""Metadata key on a message the engine re-injected after a checkpoint: ``pinned`` or ``file``."""

_Items: TypeAlias = "Sequence[Message | str]"
PinnedSource: TypeAlias = "_Items | Callable[[], _Items | Awaitable[_Items]]"
"""Pinned messages, or a function (plain or async, no arguments) returning them."""

_MARKER = "\n[… pinned text shortened to fit the context budget: {left} characters left out]"


def _check_message(item: object) -> Message:
    if isinstance(item, str):
        return Message.user(item)
    if not isinstance(item, Message):
        raise ConfigurationError(
            f"pinned messages must be Message objects or strings, got {type(item).__name__}"
        )
    if item.role not in ("user", "assistant") or item.tool_calls or item.is_summary:
        raise ConfigurationError(
            f"a pinned message must be user or assistant text (got a {item.role} message"
            f"{' with tool calls' if item.tool_calls else ''}); put system rules in the "
            "leading system message, which no strategy touches"
        )
    return item


def _check_messages(items: object) -> tuple[Message, ...]:
    if isinstance(items, (str, Message)) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"pinned must be a list of messages (or strings), got {items!r}; wrap one in a list"
        )
    return tuple(_check_message(item) for item in items)


def _source(value: object) -> object:
    return value if callable(value) else _check_messages(value)


@attrs.frozen(kw_only=True)
class Pinned:
    """Messages re-injected right after every checkpoint, within a budget.

    Attributes:
        source: The messages (strings become user messages), or a function
            taking no arguments, plain or async, that returns them when a
            checkpoint is written (a plan that changes).
        max_share: Largest share of the threshold the pinned messages may take
            after a checkpoint; longer ones are shortened with a marker.
    """

    source: Any = attrs.field(converter=_source)
    max_share: float = attrs.field(
        default=0.1, validator=share(exclusive_minimum=True, fix="0.1 is a tenth of the threshold")
    )

    async def messages(self) -> tuple[Message, ...]:
        """The pinned messages now (the source called when it is a function)."""
        if callable(self.source):
            return _check_messages(await maybe_await(self.source()))
        return tuple(self.source)

    async def fitted(self, room: int, threshold: int, counter: TokenCounter) -> tuple[Message, ...]:
        """The injected copies, at most ``min(room, max_share x threshold)`` tokens together.

        Messages keep their order; once the budget runs short, the message that
        crosses it is shortened around a marker and later ones shortened to the
        marker alone, so each still says it was there.
        """
        left = min(room, int(self.max_share * threshold))
        injected: list[Message] = []
        for message in await self.messages():
            copy = _shortened(message, left, counter)
            cost = counter.count_message(copy)
            if cost > left:
                logger.warning("room=<%d> | a pinned message does not fit even shortened", left)
                continue
            injected.append(copy)
            left -= cost
        return tuple(injected)


def _tagged(message: Message, text: str | None = None) -> Message:
    content = message.content if text is None else (TextBlock(text),)
    return attrs.evolve(
        message, content=content, metadata={**message.metadata, INJECTED_KEY: "pinned"}
    )


def _shortened(message: Message, room: int, counter: TokenCounter) -> Message:
    whole = _tagged(message)
    tokens = counter.count_message(whole)
    if tokens <= room:
        return whole
    text = message.text
    chars = len(text) * max(room - 24, 0) // max(tokens, 1)
    while True:
        copy = _tagged(message, text[:chars] + _MARKER.format(left=len(text) - chars))
        if chars == 0 or counter.count_message(copy) <= room:
            return copy
        chars = chars * 9 // 10


def pinned_setting(value: object) -> Pinned | None:
    """The engine's ``pinned=`` setting: None, a `Pinned`, messages or a function returning them."""
    if value is None or isinstance(value, Pinned):
        return value
    return Pinned(source=value)
