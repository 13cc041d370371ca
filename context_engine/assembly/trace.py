"""The record of one assembly: every include, drop, cap, exclusion, clear, trim and summary.

A `Decision` says what happened to one item of one source and why; an
`AssemblyTrace` holds them in the order they were made, with where each
provider block went and how much of the previous prompt was reused. Both are
plain data and round-trip through JSON, so a call can be explained (and
replayed, `context_engine.assembly.replay`) long after it ran.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias

import attrs

__all__ = ["EMPTY_TRACE", "Action", "AssemblyTrace", "Decision", "DeltaKind"]

Action: TypeAlias = Literal[
    "include",
    "always_include",
    "drop",
    "cap",
    "exclude",
    "boost",
    "fail",
    "cancel",
    "clear",
    "trim",
    "summary",
    "truncate",
    "transform",
]
"""What happened to an item: kept (``include``, ``always_include``), left out
(``drop``: over the source's cap; ``cap``: the source was cut to its share;
``exclude``: a rule's glob), reordered (``boost``), a provider that raised
(``fail``) or was cut short (``cancel``), a strategy's rewrite of the
transcript (``clear``, ``trim``, ``summary``, ``truncate``), or a message a
transform replaced or removed before the providers ran (``transform``)."""

DeltaKind: TypeAlias = Literal["first", "append_only", "history_only", "full_rebuild"]
"""How a prompt relates to the previous one: the first prompt; the previous
prompt plus new messages; the same stable part with the history changed; or
a prompt whose stable part (system prompt, stable blocks) changed."""


@attrs.frozen(kw_only=True)
class Decision:
    """One thing the assembly did to one item, and why.

    Attributes:
        source: The provider's name, or ``transcript`` for a strategy's rewrite.
        item: The item's id (a path, a retrieval hit's id, a tool call id).
        tokens: The item's tokens.
        action: What happened (`Action`).
        reason: Why, in words a person can check (the rule, glob or cap behind it).
        reference: The archive reference of what a strategy removed, when there is one.
    """

    source: str
    item: str
    tokens: int
    action: Action
    reason: str = ""
    reference: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The decision as JSON-ready data."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class AssemblyTrace:
    """Every decision of one call, in order, and how its prompt relates to the last one.

    Attributes:
        decisions: In the order they were made: providers (priority order),
            then the strategies' rewrites of the transcript.
        placements: ``(source, "stable" | "volatile", role)`` for each provider block
            placed, in run order.
        provided_tokens: Tokens of the provider blocks in the view.
        delta: `DeltaKind` of this prompt against the previous one.
        reused_tokens: Tokens of the leading messages shared with the previous prompt.
    """

    decisions: tuple[Decision, ...] = ()
    placements: tuple[tuple[str, str, str], ...] = ()
    provided_tokens: int = 0
    delta: DeltaKind = "first"
    reused_tokens: int = 0

    def by_action(self, action: Action) -> tuple[Decision, ...]:
        """The decisions whose action is ``action``."""
        return tuple(d for d in self.decisions if d.action == action)

    def by_source(self, source: str) -> tuple[Decision, ...]:
        """The decisions about ``source``'s items."""
        return tuple(d for d in self.decisions if d.source == source)

    def source_tokens(self) -> dict[str, int]:
        """Tokens each source has in the view (included items only), in trace order."""
        totals: dict[str, int] = {}
        for decision in self.decisions:
            if decision.action in ("include", "always_include"):
                totals[decision.source] = totals.get(decision.source, 0) + decision.tokens
        return totals

    def as_dict(self) -> dict[str, Any]:
        """The trace as JSON-ready data."""
        return {
            "decisions": [d.as_dict() for d in self.decisions],
            "placements": [list(p) for p in self.placements],
            "provided_tokens": self.provided_tokens,
            "delta": self.delta,
            "reused_tokens": self.reused_tokens,
        }

    def to_json(self) -> str:
        """The trace as a JSON string."""
        return json.dumps(self.as_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AssemblyTrace:
        """Read a trace written by `as_dict`.

        Raises:
            ValueError: ``data`` is not a trace (the message names the bad field).
        """
        try:
            decisions = tuple(Decision(**d) for d in data.get("decisions", ()))
            placements = tuple((str(s), str(p), str(r)) for s, p, r in data.get("placements", ()))
            return cls(
                decisions=decisions,
                placements=placements,
                provided_tokens=int(data.get("provided_tokens", 0)),
                delta=data.get("delta", "first"),
                reused_tokens=int(data.get("reused_tokens", 0)),
            )
        except (TypeError, ValueError) as exc:
            raise ValueError(f"not an assembly trace: {exc}") from exc

    @classmethod
    def from_json(cls, text: str) -> AssemblyTrace:
        """Read a trace written by `to_json`."""
        return cls.from_dict(json.loads(text))

    def then(self, decisions: tuple[Decision, ...]) -> AssemblyTrace:
        """This trace with ``decisions`` appended."""
        return attrs.evolve(self, decisions=self.decisions + decisions)


EMPTY_TRACE = AssemblyTrace()
"""The trace of a call with no providers and no rewrite: nothing was decided."""
