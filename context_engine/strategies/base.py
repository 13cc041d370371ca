"""The contract between the engine and its strategies: two protocols and the values they exchange.

`Strategy` and `ForceCompactionStrategy` say what a strategy MUST do; `Budget`
is what it works against, `StrategyResult` what it hands back and `Removal`
what it reports as removed so an archive keeps the originals. A custom
strategy needs nothing else (docs/strategies/writing.md). The helpers the
built-in strategies share live in `context_engine.strategies._shorten`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, runtime_checkable

import attrs

from context_engine.archive.base import RecordKind
from context_engine.archive.reference import reference_for
from context_engine.events import SummaryInfo
from context_engine.messages import Message
from context_engine.summarize.pinned import Pinned
from context_engine.tokens import TokenCounter

__all__ = [
    "Budget",
    "ForceCompactionStrategy",
    "ProactiveStrategy",
    "Removal",
    "Strategy",
    "StrategyResult",
    "proactive_trigger",
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
            (``compact``), ``overflow`` (``recover_overflow``) or
            ``request_boundary`` (``compact_if_needed``).
        archiving: The engine keeps every original in an archive: placeholders,
            markers and checkpoints must name the references of what they replace.
        archive_down: The engine keeps an archive but it did not take this
            call's originals: shortened messages say theirs was not archived.
        max_user_share: The share of the threshold the newest user message
            always keeps when a strategy must trim it, or None when it is never
            trimmed (the engine's floor counts it the same way).
        pinned: Messages a checkpoint strategy re-injects right after its
            checkpoint (the engine's ``pinned=``), or None.
    """

    tokens: int
    window: int
    threshold: int
    counter: TokenCounter = attrs.field(eq=False, repr=False)
    measure: Callable[[Sequence[Message]], int] = attrs.field(eq=False, repr=False)
    overhead_tokens: int = 0
    reason: Literal["threshold", "manual", "overflow", "request_boundary"] = "threshold"
    archiving: bool = False
    archive_down: bool = False
    max_user_share: float | None = 0.5
    pinned: Pinned | None = attrs.field(default=None, eq=False, repr=False)

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


@runtime_checkable
class ProactiveStrategy(Strategy, Protocol):
    """A strategy the engine also runs below the threshold, from its own trigger.

    `MicroSummary` is one: from ``proactive_tokens(window)`` up to the threshold
    the engine runs the LLM strategies alone, against a budget whose
    threshold is that trigger, and stops at the first that applies (one
    summary per call). Above the threshold the strategy runs in the pipeline
    like any other. ``proactive_tokens`` MUST be pure and cheap: the engine
    reads it once per configuration.
    """

    def proactive_tokens(self, window: int) -> int:
        """Tokens of the view from which the engine runs this strategy below the threshold."""
        ...


def proactive_trigger(strategies: Sequence[Strategy], window: int) -> int | None:
    """The lowest trigger of the `ProactiveStrategy`s in ``strategies``, or None."""
    triggers = [s.proactive_tokens(window) for s in strategies if isinstance(s, ProactiveStrategy)]
    return min(triggers) if triggers else None
