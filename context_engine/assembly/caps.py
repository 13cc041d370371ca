"""Per-source selection: rules' verdicts, relevance order and the source's cap. Pure functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from context_engine.assembly.provider import Item
from context_engine.assembly.rules import Rule, Verdict
from context_engine.assembly.trace import Action, Decision

__all__ = ["Selection", "select"]


@attrs.frozen
class Selection:
    """The items a source keeps, in the order the model sees them, and every decision."""

    kept: tuple[Item, ...]
    decisions: tuple[Decision, ...]


def select(
    source: str,
    items: Sequence[Item],
    pinned: Sequence[tuple[Item, str]],
    rules: Sequence[Rule],
    cap: int | None,
    count: Callable[[str], int],
) -> Selection:
    """Choose ``source``'s items for one call.

    Excluded items go first (the rule's glob is recorded), boosted items have
    their relevance multiplied, the rest are ordered by relevance (highest
    first, stable among equals). ``pinned`` items (a rule's always-include,
    with the rule's name) come first and are kept past the cap; the others are
    dropped lowest-relevance first until the source fits ``cap``.
    """
    log = _Log(source)
    pinned_ids = {item.id for item, _ in pinned}
    scored = _judged([i for i in items if i.id not in pinned_ids], rules, count, log)
    pins = [(item, _tokens(item, count), rule) for item, rule in pinned]
    room = None if cap is None else cap - sum(tokens for _, tokens, _ in pins)
    dropped = _over_cap(scored, room, cap, log)
    for item, tokens, rule in pins:
        past = f", past the source's cap of {cap} tokens" if room is not None and room < 0 else ""
        log.add(item, tokens, "always_include", f"rule {rule!r} always includes it{past}")
    kept = [item for item, _, _ in pins]
    for index, (item, tokens) in enumerate(scored):
        if index not in dropped:
            kept.append(item)
            log.add(item, tokens, "include", f"relevance {item.relevance:g}")
    return Selection(tuple(kept), tuple(log.decisions))


@attrs.define
class _Log:
    """The decisions about one source's items, in the order they are made."""

    source: str
    decisions: list[Decision] = attrs.field(factory=list)

    def add(self, item: Item, tokens: int, action: Action, reason: str) -> None:
        self.decisions.append(
            Decision(source=self.source, item=item.id, tokens=tokens, action=action, reason=reason)
        )


def _judged(
    items: Sequence[Item], rules: Sequence[Rule], count: Callable[[str], int], log: _Log
) -> list[tuple[Item, int]]:
    """The items no rule excludes, boosted, most relevant first, with their tokens."""
    scored: list[tuple[Item, int]] = []
    for item in items:
        tokens = _tokens(item, count)
        verdict = Verdict.of(item.id, log.source, rules)
        if verdict.excluded_by is not None:
            rule, glob = verdict.excluded_by
            log.add(item, tokens, "exclude", f"rule {rule!r} excludes {glob}")
            continue
        if verdict.boosted_by:
            item = attrs.evolve(item, relevance=item.relevance * verdict.weight)
            why = "; ".join(verdict.boosted_by) + f" -> relevance {item.relevance:g}"
            log.add(item, tokens, "boost", why)
        scored.append((item, tokens))
    scored.sort(key=lambda pair: -pair[0].relevance)  # sort is stable: ties keep their order
    return scored


def _over_cap(
    scored: list[tuple[Item, int]], room: int | None, cap: int | None, log: _Log
) -> set[int]:
    """Indexes of ``scored`` to drop, lowest relevance first, until the rest fit ``room``."""
    dropped: set[int] = set()
    total = sum(tokens for _, tokens in scored)
    for index in range(len(scored) - 1, -1, -1):
        if room is None or total <= room:
            break
        item, tokens = scored[index]
        total -= tokens
        dropped.add(index)
        why = f"over the source's cap of {cap} tokens (relevance {item.relevance:g})"
        log.add(item, tokens, "drop", why)
    return dropped


def _tokens(item: Item, count: Callable[[str], int]) -> int:
    return item.tokens if item.tokens is not None else count(item.text)
