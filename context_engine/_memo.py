"""One home for what is derived from a message and kept on it.

A `Message` is immutable, so whatever is computed from it (its token count
under a counter, its archive digest, its tool calls, a strategy's shortened
copy) stays true for the object's life. It is kept in one dict slot on the
message, ``_memo``, which is never part of the message's value (equality, hash
and repr ignore it) and goes with the message: nothing here is global, so
dropping a transcript releases everything derived from it.

Only this module reads or writes that slot. Its keys share one dict:

* token counts under the counter's ``key`` (a str): the hot path, one lookup;
* everything else under a key that is not a str: a private marker for the
  digest and the tool calls, a tuple naming the rewrite for strategies'
  derived values.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from context_engine.messages import Message

__all__ = ["DIGEST", "TOOL_CALLS", "keep_tokens", "memoized", "tokens"]

T = TypeVar("T")


class _Key:
    """A memo key that cannot equal a counter key or a strategy's tuple."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<memo {self.name}>"


DIGEST = _Key("digest")
"""Key of the archive digest (`context_engine.archive.reference.message_digest`)."""
TOOL_CALLS = _Key("tool_calls")
"""Key of `Message.tool_calls`."""

_MISSING = object()


def tokens(message: Message, counter_key: str) -> int | None:
    """The count kept for ``message`` under ``counter_key``, or None."""
    count: int | None = message._memo.get(counter_key)
    return count


def keep_tokens(message: Message, counter_key: str, count: int) -> None:
    """Keep ``count`` as the tokens of ``message`` under ``counter_key``."""
    message._memo[counter_key] = count


def memoized(message: Message, key: Hashable, make: Callable[..., T], *args: object) -> T:
    """``make(message, *args)``, computed once per message and ``key`` and kept on it.

    ``key`` must not be a str (those are token counts) and must name everything
    the value depends on besides ``message``. Two threads may both compute a
    missing value; either result is kept, so ``make`` must be deterministic.
    """
    memo = message._memo
    value: T = memo.get(key, _MISSING)
    if value is _MISSING:
        value = memo[key] = make(message, *args)
    return value
