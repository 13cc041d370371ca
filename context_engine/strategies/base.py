"""The protocols every strategy implements and the values they exchange with the engine."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

import attrs

from context_engine._memo import memoized
from context_engine._validate import Validator, share
from context_engine.archive.base import RecordKind
from context_engine.archive.reference import reference_for
from context_engine.events import SummaryInfo
from context_engine.messages import Message, TextBlock
from context_engine.structure import ARCHIVED_KEY
from context_engine.tokens import TokenCounter

__all__ = [
    "Budget",
    "ForceCompactionStrategy",
    "Removal",
    "Strategy",
    "StrategyResult",
    "archived_copy",
    "derived_copy",
    "reference_note",
    "replace_oldest_first",
    "step_share",
]


@attrs.frozen(kw_only=True)
class Budget:
    """The pressure a strategy works against.

    Attributes:
        tokens: Estimated tokens of the current view.
        window: The model's context window.
        threshold: The view must end at or below this many tokens.
        counter: Counts single messages the way the engine does.
        measure: Estimates a whole view exactly as the engine does (provider
            usage anchors and fixed overhead included).
        overhead_tokens: Fixed prompt parts (tool schemas) sent with every call.
        reason: Why the pipeline runs: ``threshold`` (``project``), ``manual``
            (``compact``) or ``overflow`` (``recover_overflow``).
        archiving: The engine keeps every original in an archive: placeholders,
            markers and checkpoints must name the references of what they replace.
        max_user_share: The share of the threshold the newest user message
            always keeps when a strategy must trim it, or None when it is never
            trimmed (the engine's floor counts it the same way).
    """

    tokens: int
    window: int
    threshold: int
    counter: TokenCounter = attrs.field(eq=False, repr=False)
    measure: Callable[[Sequence[Message]], int] = attrs.field(eq=False, repr=False)
    overhead_tokens: int = 0
    reason: Literal["threshold", "manual", "overflow"] = "threshold"
    archiving: bool = False
    max_user_share: float | None = 0.5

    @property
    def excess(self) -> int:
        """Tokens above the threshold (0 when the view fits)."""
        return max(0, self.tokens - self.threshold)

    def with_tokens(self, tokens: int) -> Budget:
        """The same budget for a view of ``tokens`` tokens."""
        return attrs.evolve(self, tokens=tokens)

    def goal_in_steps(self, step_share: float) -> int:
        """Tokens to save: the excess plus one step of ``step_share`` x threshold, in whole steps.

        The extra step is head-room. The engine sends the same view plus new
        messages until they no longer fit, so a rewrite that leaves room lasts
        many calls and the prompt prefix (what a provider's cache reuses) stays
        the same for all of them; saving whole steps keeps the same messages
        shortened from one rewrite to the next. A share of 0 saves the excess.
        """
        excess = self.tokens - self.threshold
        step = int(step_share * self.threshold)
        if step <= 0:
            return excess
        return -(-(excess + step) // step) * step


step_share: Validator = share(exclusive_maximum=True)
"""Attrs validator of a head-room step (`Budget.goal_in_steps`): a share in [0, 1)."""


def _message_tuple(messages: Iterable[Message]) -> tuple[Message, ...]:
    # A typed converter: mypy cannot infer the element type of a bare ``tuple`` converter.
    return tuple(messages)


@attrs.frozen
class Removal:
    """Originals one rewrite removed or shortened, archived under one reference.

    Attributes:
        kind: ``tool_result`` (a cleared result), ``text`` (a trimmed message)
            or ``messages`` (a range a checkpoint replaced or truncation dropped).
        originals: The messages as they were in the view, in view order.
    """

    kind: RecordKind
    originals: tuple[Message, ...] = attrs.field(converter=_message_tuple)

    @property
    def reference(self) -> str:
        """The archive reference of the originals (a pure function of their content)."""
        return reference_for(self.originals)


def reference_note(reference: str) -> str:
    """The line a shortened message gets so the agent can fetch its original back."""
    return f"[Original archived as {reference}; the recall_context tool returns it.]"


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


def archived_copy(shortened: Message, reference: str) -> Message:
    """``shortened`` naming ``reference``: one more text block and `ARCHIVED_KEY` in metadata.

    The copy is made once per ``shortened`` object and reference (`derived_copy`).
    """
    return derived_copy(shortened, (ARCHIVED_KEY, reference), _with_reference(reference))


def _removal_tuple(removals: Iterable[Removal]) -> tuple[Removal, ...]:
    return tuple(removals)


@attrs.frozen(kw_only=True)
class StrategyResult:
    """What one strategy run did.

    Attributes:
        messages: The new view (the input view when nothing applied).
        applied: Whether the view was rewritten.
        tokens_saved: Estimated tokens removed.
        info: Checkpoint details when a checkpoint was written.
        error: A recoverable problem behind a no-op (a seed that failed).
        removed: What this run removed or shortened, one `Removal` per
            reference it wrote into the view, so an archive can keep the originals.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_message_tuple)
    applied: bool
    tokens_saved: int = 0
    info: SummaryInfo | None = None
    error: str | None = None
    removed: tuple[Removal, ...] = attrs.field(default=(), converter=_removal_tuple)

    @property
    def replaced(self) -> tuple[Message, ...]:
        """Every original this run removed or shortened, in the order of ``removed``."""
        return tuple(message for removal in self.removed for message in removal.originals)

    @classmethod
    def unchanged(cls, view: Sequence[Message], *, error: str | None = None) -> StrategyResult:
        """A no-op result that hands the view on."""
        return cls(messages=tuple(view), applied=False, error=error)


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
    the same message reuses the very same shorter object.
    """
    count = budget.counter.count_message
    key = None if memo is None else (_STEP, memo, kind, budget.archiving, budget.counter.key)
    messages = list(view)
    removed: list[Removal] = []
    saved = 0
    for index, make in replacements:
        if saved >= goal:
            break
        original = view[index]
        if key is None:
            step = _shorten(original, make, kind, budget.archiving, count)
        else:
            step = memoized(original, key, _shorten, make, kind, budget.archiving, count)
        if step.saved <= 0:
            continue
        messages[index] = step.shorter
        removed.append(step.removal(original, kind))
        saved += step.saved
    if not removed:
        return StrategyResult.unchanged(view)
    return StrategyResult(messages=messages, applied=True, tokens_saved=saved, removed=removed)


def _shorten(
    original: Message,
    make: Callable[[], Message],
    kind: RecordKind,
    archiving: bool,
    count: Callable[[Message], int],
) -> _Step:
    shorter = make()
    if archiving:
        shorter = archived_copy(shorter, Removal(kind, (original,)).reference)
    return _Step(shorter, count(original) - count(shorter))


@runtime_checkable
class Strategy(Protocol):
    """Rewrites a view to bring it under the budget's threshold.

    ``transcript`` is the full input of the call; ``view`` is what earlier
    strategies produced from it. A strategy MUST return a new tuple (or
    `StrategyResult.unchanged`) and MUST NOT mutate either argument; it SHOULD
    return the same view for the same input, and running it again on its own
    output SHOULD change nothing. It MAY raise: the engine records the error on
    its step and runs the next strategy.
    """

    @property
    def name(self) -> str:
        """Stable snake_case name used in events, spans, logs and ``commit_strategies``.

        A read-only property here so that frozen strategy classes satisfy the protocol.
        """
        ...

    @property
    def uses_llm(self) -> bool:
        """Whether the strategy calls a model (it costs money and can fail).

        The circuit breaker guards these strategies only; the engine also skips
        them when no rewrite can make the view fit (futility) and does not retry
        them until the transcript has grown. Deterministic strategies always run.
        """
        ...

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Rewrite ``view`` if it helps; return `StrategyResult.unchanged` otherwise."""
        ...


@runtime_checkable
class ForceCompactionStrategy(Strategy, Protocol):
    """A strategy that can also run on demand (``compact``, ``recover_overflow``).

    ``force_apply`` works from ``transcript`` (the full history), not from a
    view earlier strategies degraded, and runs even below the threshold.
    """

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """Compact on demand; ``instructions`` steer what the checkpoint keeps."""
        ...
