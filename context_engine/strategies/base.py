"""The protocols every strategy implements and the values they exchange with the engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

import attrs

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
    "reference_note",
    "replace_oldest_first",
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
    """

    tokens: int
    window: int
    threshold: int
    counter: TokenCounter = attrs.field(eq=False, repr=False)
    measure: Callable[[Sequence[Message]], int] = attrs.field(eq=False, repr=False)
    overhead_tokens: int = 0
    reason: Literal["threshold", "manual", "overflow"] = "threshold"
    archiving: bool = False

    @property
    def excess(self) -> int:
        """Tokens above the threshold (0 when the view fits)."""
        return max(0, self.tokens - self.threshold)

    def with_tokens(self, tokens: int) -> Budget:
        """The same budget for a view of ``tokens`` tokens."""
        return attrs.evolve(self, tokens=tokens)


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


def archived_copy(shortened: Message, reference: str) -> Message:
    """``shortened`` naming ``reference``: one more text block and `ARCHIVED_KEY` in metadata."""
    return attrs.evolve(
        shortened,
        content=(*shortened.content, TextBlock(reference_note(reference))),
        metadata={**shortened.metadata, ARCHIVED_KEY: [reference]},
    )


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


def replace_oldest_first(
    view: Sequence[Message],
    replacements: Iterable[tuple[int, Callable[[], Message]]],
    budget: Budget,
    goal: int,
    kind: RecordKind,
) -> StrategyResult:
    """Swap messages for shorter versions, in the order given, until ``goal`` tokens are saved.

    ``replacements`` yields ``(index, make)`` pairs; ``make()`` builds the
    shorter message and is only called while more saving is needed. When the
    budget is archiving, the shorter message also names its original's
    reference. A replacement that would not save anything is skipped. The
    shared loop of the strategies that shorten messages in place (microcompact,
    light trim).
    """
    counter = budget.counter
    messages = list(view)
    removed: list[Removal] = []
    saved = 0
    for index, make in replacements:
        if saved >= goal:
            break
        original = view[index]
        removal = Removal(kind, (original,))
        shorter = make()
        if budget.archiving:
            shorter = archived_copy(shorter, removal.reference)
        delta = counter.count_message(original) - counter.count_message(shorter)
        if delta <= 0:
            continue
        messages[index] = shorter
        removed.append(removal)
        saved += delta
    if not removed:
        return StrategyResult.unchanged(view)
    return StrategyResult(messages=messages, applied=True, tokens_saved=saved, removed=removed)


@runtime_checkable
class Strategy(Protocol):
    """Rewrites a view to bring it under the budget's threshold.

    ``transcript`` is the full input of the call; ``view`` is what earlier
    strategies produced from it. A strategy returns a new tuple and never
    mutates either argument.

    A strategy that calls a model should also have a ``uses_llm = True``
    attribute: the engine then skips it when no rewrite can make the view fit
    (futility) and does not retry it until the transcript has grown.
    """

    @property
    def name(self) -> str:
        """Stable snake_case name used in events, spans, logs and ``commit_strategies``.

        A read-only property here so that frozen strategy classes satisfy the protocol.
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
        view: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """Compact on demand; ``instructions`` steer what the checkpoint keeps."""
        ...
