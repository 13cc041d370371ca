"""Shortening helpers the built-in strategies share: copies made once, the oldest-first loop.

Private on purpose (docs/decisions.md, "Shortening helpers stay private"):
they encode the built-ins' caching conventions (keys in a message's memo,
weak references to the last `Removal`), which change with the memo. A custom
strategy needs only the contract in `context_engine.strategies.base`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence

import attrs

from context_engine._memo import memoized
from context_engine._validate import Validator, share
from context_engine.archive.base import RecordKind
from context_engine.messages import Message, TextBlock
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import ARCHIVED_KEY

__all__ = [
    "UNARCHIVED_NOTE",
    "archived_copy",
    "derived_copy",
    "noted_copy",
    "reference_note",
    "replace_oldest_first",
    "step_share",
    "unarchived_copy",
]

step_share: Validator = share(exclusive_maximum=True)
"""Attrs validator of a head-room step (`Budget.goal_in_steps`): a share in [0, 1)."""


def reference_note(reference: str) -> str:
    """The line a shortened message gets so the agent can fetch its original back."""
    return f"[Original archived as {reference}; the recall_context tool returns it.]"


UNARCHIVED_NOTE = (
    "[The original was not archived (the archive did not answer), so it cannot be "
    "recalled; re-run the call if you need it.]"
)
"""The line a shortened message gets when the archive could not keep its original."""


# Marks the keys of `derived_copy`'s values in a message's memo (`context_engine._memo`).
_COPY = "context_engine.derived_copy"


def derived_copy(
    message: Message, key: Hashable, make: Callable[..., Message], *args: object
) -> Message:
    """``make(message, *args)``, computed once per message and ``key`` and kept on the message.

    A strategy that shortens a message the same way on every call (a cleared
    tool result, a trimmed text block) gets the very same object back on the
    next call: no new copy to build or count, and the view it rebuilds from
    the transcript has the same objects as the last one. ``key`` must name
    everything the copy depends on besides ``message`` (the placeholder text,
    the trim sizes); ``make`` must not return ``message`` itself.
    """
    # Under a key of its own, so no ``key`` can collide with other memoized values.
    return memoized(message, (_COPY, key), make, *args)


def _with_reference(reference: str) -> Callable[[Message], Message]:
    def make(shortened: Message) -> Message:
        return attrs.evolve(
            shortened,
            content=(*shortened.content, TextBlock(reference_note(reference))),
            metadata={**shortened.metadata, ARCHIVED_KEY: [reference]},
        )

    return make


def _unarchived(shortened: Message) -> Message:
    return attrs.evolve(shortened, content=(*shortened.content, TextBlock(UNARCHIVED_NOTE)))


def unarchived_copy(shortened: Message) -> Message:
    """``shortened`` saying its original was not archived (made once per object)."""
    return derived_copy(shortened, UNARCHIVED_NOTE, _unarchived)


def noted_copy(shortened: Message, reference: str, budget: Budget) -> Message:
    """``shortened`` as the budget's archive state wants it.

    It names ``reference`` (archiving), says its original was not archived (the
    store did not answer), or stays as it is (no archive).
    """
    if budget.archiving:
        return archived_copy(shortened, reference)
    return unarchived_copy(shortened) if budget.archive_down else shortened


def archived_copy(shortened: Message, reference: str) -> Message:
    """``shortened`` naming ``reference``: one more text block and `ARCHIVED_KEY` in metadata.

    The copy is made once per ``shortened`` object and reference (`derived_copy`).
    """
    return derived_copy(shortened, (ARCHIVED_KEY, reference), _with_reference(reference))


# Marks the keys of `replace_oldest_first`'s values in a message's memo.
_STEP = "context_engine.replace_oldest_first"


@attrs.define
class _Step:
    """One memoized replacement: the shorter message and the tokens it saves.

    It holds no strong reference back to the original: the `Removal` naming
    the original is kept by weak reference, reused while the last result
    that reported it is alive (the engine keeps its last outcome). So the
    message and its cache never form a cycle and go as soon as the caller
    drops them.
    """

    shorter: Message
    saved: int
    _removal: weakref.ref[Removal] | None = None

    def removal(self, original: Message, kind: RecordKind) -> Removal:
        """The `Removal` of ``original``: the last one made, while it is alive."""
        removal = self._removal() if self._removal is not None else None
        if removal is None:
            removal = Removal(kind, (original,))
            self._removal = weakref.ref(removal)
        return removal


def replace_oldest_first(
    view: Sequence[Message],
    replacements: Iterable[tuple[int, Callable[[], Message]]],
    budget: Budget,
    goal: int,
    kind: RecordKind,
    *,
    memo: Hashable | None = None,
    variant: Callable[[int], Hashable] | None = None,
) -> StrategyResult:
    """Swap messages for shorter versions, in the order given, until ``goal`` tokens are saved.

    ``replacements`` yields ``(index, make)`` pairs; ``make()`` builds the
    shorter message and is only called while more saving is needed. When the
    budget is archiving, the shorter message also names its original's
    reference. A replacement that would not save anything is skipped. The
    shared loop of the strategies that shorten messages in place (microcompact,
    light trim).

    With ``memo`` (a key naming everything ``make`` depends on besides the
    original: the strategy and its settings), each replacement is computed
    once per original message and kept on it, so the next call that shortens
    the same message reuses the very same shorter object. ``variant(index)``
    names what else ``make`` depends on at that place of the view (light trim:
    whether the message is outside the protected tail), so one message
    shortened two ways keeps both.
    """
    count = budget.counter.count_message
    key = None if memo is None else (_STEP, memo, kind, _notes(budget), budget.counter.key)
    messages = list(view)
    removed: list[Removal] = []
    saved = 0
    for index, make in replacements:
        if saved >= goal:
            break
        original = view[index]
        if key is None:
            step = _shorten(original, make, kind, budget, count)
        else:
            at = key if variant is None else (*key, variant(index))
            step = memoized(original, at, _shorten, make, kind, budget, count)
        if step.saved <= 0:
            continue
        messages[index] = step.shorter
        removed.append(step.removal(original, kind))
        saved += step.saved
    if not removed:
        return StrategyResult.unchanged(view)
    return StrategyResult(messages=messages, applied=True, tokens_saved=saved, removed=removed)


def _notes(budget: Budget) -> tuple[bool, bool]:
    """What a shortened copy's note depends on (part of the memo key)."""
    return budget.archiving, budget.archive_down


def _shorten(
    original: Message,
    make: Callable[[], Message],
    kind: RecordKind,
    budget: Budget,
    count: Callable[[Message], int],
) -> _Step:
    # The reference is only named when archiving: a message the codec refuses (metadata
    # that is not JSON) has none, and must not keep view-only shortening from working.
    reference = Removal(kind, (original,)).reference if budget.archiving else ""
    shorter = noted_copy(make(), reference, budget)
    return _Step(shorter, count(original) - count(shorter))
