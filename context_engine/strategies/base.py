"""The protocols every strategy implements and the values they exchange with the engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

import attrs

from context_engine.events import SummaryInfo
from context_engine.messages import Message
from context_engine.tokens import TokenCounter

__all__ = [
    "Budget",
    "ForceCompactionStrategy",
    "Strategy",
    "StrategyResult",
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
    """

    tokens: int
    window: int
    threshold: int
    counter: TokenCounter = attrs.field(eq=False, repr=False)
    measure: Callable[[Sequence[Message]], int] = attrs.field(eq=False, repr=False)
    overhead_tokens: int = 0
    reason: Literal["threshold", "manual", "overflow"] = "threshold"

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


@attrs.frozen(kw_only=True)
class StrategyResult:
    """What one strategy run did.

    Attributes:
        messages: The new view (the input view when nothing applied).
        applied: Whether the view was rewritten.
        tokens_saved: Estimated tokens removed.
        info: Checkpoint details when a checkpoint was written.
        error: A recoverable problem behind a no-op (a seed that failed).
        replaced: The original messages this run removed or shortened, in view
            order, so an archive can keep them.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_message_tuple)
    applied: bool
    tokens_saved: int = 0
    info: SummaryInfo | None = None
    error: str | None = None
    replaced: tuple[Message, ...] = attrs.field(default=(), converter=_message_tuple)

    @classmethod
    def unchanged(cls, view: Sequence[Message], *, error: str | None = None) -> StrategyResult:
        """A no-op result that hands the view on."""
        return cls(messages=tuple(view), applied=False, error=error)


def replace_oldest_first(
    view: Sequence[Message],
    replacements: Iterable[tuple[int, Callable[[], Message]]],
    counter: TokenCounter,
    goal: int,
) -> StrategyResult:
    """Swap messages for shorter versions, in the order given, until ``goal`` tokens are saved.

    ``replacements`` yields ``(index, make)`` pairs; ``make()`` builds the
    shorter message and is only called while more saving is needed. A
    replacement that would not save anything is skipped. The shared loop of
    the strategies that shorten messages in place (microcompact, light trim).
    """
    messages = list(view)
    replaced: list[Message] = []
    saved = 0
    for index, make in replacements:
        if saved >= goal:
            break
        original = view[index]
        shorter = make()
        delta = counter.count_message(original) - counter.count_message(shorter)
        if delta <= 0:
            continue
        messages[index] = shorter
        replaced.append(original)
        saved += delta
    if not replaced:
        return StrategyResult.unchanged(view)
    return StrategyResult(messages=messages, applied=True, tokens_saved=saved, replaced=replaced)


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
