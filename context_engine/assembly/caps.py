"""Per-source selection: rules' verdicts, relevance order and the source's cap. Pure functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from context_engine.assembly.provider import Item
from context_engine.assembly.rules import Rule, Verdict
from context_engine.assembly.trace import Decision

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
    decisions: list[Decision] = []
    pinned_ids = {item.id for item, _ in pinned}
    scored: list[tuple[Item, int]] = []
    for item in items:
        if item.id in pinned_ids:
            continue
        tokens = _tokens(item, count)
        verdict = Verdict.of(item.id, source, rules)
        if verdict.excluded_by is not None:
            rule, glob = verdict.excluded_by
            decisions.append(
                Decision(
                    source=source,
                    item=item.id,
                    tokens=tokens,
                    action="exclude",
                    reason=f"rule {rule!r} excludes {glob}",
                )
            )
            continue
        if verdict.boosted_by:
            item = attrs.evolve(item, relevance=item.relevance * verdict.weight)
            decisions.append(
                Decision(
                    source=source,
                    item=item.id,
                    tokens=tokens,
                    action="boost",
                    reason="; ".join(verdict.boosted_by) + f" -> relevance {item.relevance:g}",
                )
            )
        scored.append((item, tokens))
    scored.sort(key=lambda pair: -pair[0].relevance)  # sort is stable: ties keep their order
    kept_pins = [(item, _tokens(item, count), rule) for item, rule in pinned]
    room = None if cap is None else cap - sum(tokens for _, tokens, _ in kept_pins)
    total = sum(tokens for _, tokens in scored)
    dropped: set[int] = set()
    for index in range(len(scored) - 1, -1, -1):  # lowest relevance first
        if room is None or total <= room:
            break
        item, tokens = scored[index]
        total -= tokens
        dropped.add(index)
        decisions.append(
            Decision(
                source=source,
                item=item.id,
                tokens=tokens,
                action="drop",
                reason=f"over the source's cap of {cap} tokens (relevance {item.relevance:g})",
            )
        )
    for item, tokens, rule in kept_pins:
        reason = f"rule {rule!r} always includes it"
        if cap is not None and room is not None and room < 0:
            reason += f", past the source's cap of {cap} tokens"
        decisions.append(
            Decision(
                source=source, item=item.id, tokens=tokens, action="always_include", reason=reason
            )
        )
    kept = [item for item, _, _ in kept_pins]
    for index, (item, tokens) in enumerate(scored):
        if index in dropped:
            continue
        kept.append(item)
        decisions.append(
            Decision(
                source=source,
                item=item.id,
                tokens=tokens,
                action="include",
                reason=f"relevance {item.relevance:g}",
            )
        )
    return Selection(tuple(kept), tuple(decisions))


def _tokens(item: Item, count: Callable[[str], int]) -> int:
    return item.tokens if item.tokens is not None else count(item.text)
