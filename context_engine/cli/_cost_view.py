"""The replay's modelled prompt cost, as terminal lines and tables and as HTML."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from context_engine.cli._cost import CONTENDERS, ContenderCost, ReplayCost
from context_engine.cli._output import Output, Table
from context_engine.cli._records import ReplayReport

__all__ = [
    "CONTENDER_LABELS",
    "break_rows",
    "cost_card",
    "cost_html",
    "cost_rows",
    "money",
    "pricing_line",
    "show_cost",
]

CONTENDER_LABELS = {
    "engine": "with the engine",
    "without": "whole history",
    "trim_last": "trim-last",
}
"""How the report names each contender."""

_HEADERS = (
    "sent",
    "calls billed",
    "rejected (above the window)",
    "prompt tokens",
    "cache hit share",
    "cost",
    "cache breaks",
)


def money(dollars: float | None, units: float) -> str:
    """``$1,234``, ``$12.34`` or ``$0.0123``; input-token units when there is no price."""
    if dollars is None:
        return f"{units:,.0f} input-token units"
    if dollars >= 100:
        return f"${dollars:,.0f}"
    if dollars >= 1:
        return f"${dollars:,.2f}"
    return f"${dollars:.4f}"


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def pricing_line(cost: ReplayCost) -> str:
    """The pricing the figures are under, in one sentence."""
    price = (
        f"${cost.input_per_mtok:g} per million input tokens"
        if cost.input_per_mtok is not None
        else "no price given (costs in input-token units)"
    )
    return (
        f"{cost.family} prompt cache, {cost.model or 'any model'}: {price}; cache reads "
        f"{cost.read_multiplier:g}x, writes {cost.write_multiplier:g}x the input price, "
        f"prefixes from {cost.min_cacheable_tokens:,} tokens; prices of {cost.checked}"
    )


def _rejected(sums: ContenderCost) -> str:
    if not sums.rejected:
        return "0"
    return f"{sums.rejected:,} (from call {sums.first_rejected})"


def cost_rows(cost: ReplayCost) -> list[tuple[str, ...]]:
    """One row per contender: billed, rejected, tokens, hit share, cost, breaks."""
    rows: list[tuple[str, ...]] = []
    for name in CONTENDERS:
        sums = cost.contender(name)
        rows.append(
            (
                CONTENDER_LABELS[name],
                f"{sums.calls:,}",
                _rejected(sums),
                f"{sums.tokens:,}",
                _share(sums.cached_tokens, sums.tokens),
                money(sums.dollars, sums.cost),
                f"{sums.cache_breaks:,}",
            )
        )
    return rows


def break_rows(cost: ReplayCost) -> list[tuple[str, str, int]]:
    """(contender, source, breaks) for every source of a cache break, engine first."""
    return [
        (CONTENDER_LABELS[name], source, count)
        for name in CONTENDERS
        for source, count in cost.contender(name).breaks_by_source.items()
    ]


def _rejected_note(cost: ReplayCost) -> str:
    without = cost.without
    if not without.rejected:
        return ""
    return (
        f"The whole history is above the window from call {without.first_rejected}: a "
        f"provider rejects those {without.rejected:,} calls and bills nothing, so its cost "
        "covers only the calls before (the session could not have gone on without context "
        "management)."
    )


def show_cost(report: ReplayReport, out: Output) -> None:
    """Print the cost table and where the cache breaks came from."""
    cost = report.cost
    if cost is None:
        return
    out.line(f"Modelled prompt cost under the {pricing_line(cost)}:")
    out.table(
        Table(
            "Modelled prompt cost",
            _HEADERS,
            tuple(cost_rows(cost)),
            numeric=frozenset({1, 2, 3, 4, 5, 6}),
        )
    )
    note = _rejected_note(cost)
    if note:
        out.line(note)
    breaks = break_rows(cost)
    if breaks:
        out.line("Cache breaks by source:")
        for contender, source, count in breaks:
            out.line(f"  {contender}: {source} {count:,}")
    out.line()


def cost_card(report: ReplayReport) -> tuple[str, str, str] | None:
    """(label, value, detail) of the summary card, or None without a pricing."""
    cost = report.cost
    if cost is None:
        return None
    engine, trim, without = cost.engine, cost.trim_last, cost.without
    detail = (
        f"trim-last {money(trim.dollars, trim.cost)}; whole history "
        f"{money(without.dollars, without.cost)}"
        + (f" ({without.rejected:,} calls rejected)" if without.rejected else "")
        + f"; {_share(engine.cached_tokens, engine.tokens)} cache hits"
    )
    return "Modelled cost", money(engine.dollars, engine.cost), detail


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: int) -> str:
    """A table whose columns from ``numeric`` on are right-aligned numbers."""

    def cells(tag: str, values: Sequence[str]) -> str:
        return "".join(
            f"<{tag}{' class=n' if i >= numeric else ''}>{escape(v)}</{tag}>"
            for i, v in enumerate(values)
        )

    body = "".join(f"<tr>{cells('td', row)}</tr>" for row in rows)
    return f"<table><tr>{cells('th', headers)}</tr>{body}</table>"


def cost_html(report: ReplayReport) -> str:
    """The cost section of the HTML report ("" without a pricing)."""
    cost = report.cost
    if cost is None:
        return ""
    explained = (
        "Each call's prompt reads from the provider's cache the messages it shares, from "
        "the start, with the last prompt that contender had accepted, and pays a cache write "
        "for the rest. A cache break is a prompt that does not start with that previous one: "
        "the rewrite that caused it, or a miss the provider reported on the recorded call."
    )
    parts = [
        "<h2>Modelled prompt cost</h2>",
        f'<p class="sub">{escape(pricing_line(cost))}. {escape(explained)}</p>',
        _table(_HEADERS, cost_rows(cost), 1),
    ]
    note = _rejected_note(cost)
    if note:
        parts.append(f'<p class="sub">{escape(note)}</p>')
    breaks = [(c, s, f"{n:,}") for c, s, n in break_rows(cost)]
    if breaks:
        parts.append("<h2>Cache breaks by source</h2>")
        parts.append(_table(("sent", "source", "breaks"), breaks, 2))
    return "\n".join(parts)
