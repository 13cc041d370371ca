"""The replay report as one self-contained HTML page: inline CSS and SVG, nothing fetched."""

from __future__ import annotations

from collections import Counter
from html import escape

from context_engine.cli._baselines import MASK_KEEP
from context_engine.cli._chart import colour, render_chart
from context_engine.cli._cost_view import cost_card, cost_html
from context_engine.cli._present import num, percent, saved_share, session_rows
from context_engine.cli.replay import ReplayReport

__all__ = ["render_html"]

_CSS = """
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", sans-serif;
       color: #111827; background: #f9fafb; margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 28px 48px; }
h1 { font-size: 26px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 32px 0 10px; }
.sub { color: #4b5563; margin: 0 0 20px; }
.cards { display: grid; grid-template-columns: repeat(4, 1fr); gap: 12px; }
.card { background: white; border: 1px solid #e5e7eb; border-radius: 8px; padding: 12px 14px; }
.card .label { color: #4b5563; font-size: 13px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 24px; font-weight: 650; margin-top: 2px; }
.card .detail { color: #4b5563; font-size: 13px; }
.good { color: #047857; } .bad { color: #b91c1c; }
figure { background: white; border: 1px solid #e5e7eb; border-radius: 8px; margin: 20px 0 0;
         padding: 10px 8px 4px; }
figcaption { color: #4b5563; font-size: 13px; padding: 0 12px 8px; }
svg .title { font-size: 17px; font-weight: 650; fill: #111827; }
svg .tick { font-size: 13px; fill: #374151; }
svg .axis { font-size: 14px; fill: #111827; }
svg .limit { font-size: 13px; fill: #111827; font-weight: 600; }
svg .legend { font-size: 13px; fill: #111827; }
svg .note { font-size: 13px; fill: #4b5563; font-style: italic; }
table { border-collapse: collapse; width: 100%; background: white; font-size: 14px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 6px 10px; text-align: left;
         vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
          margin-right: 6px; border: 1px solid #111827; vertical-align: -1px; }
td.tried { color: #4b5563; font-size: 13px; }
td.excerpt { color: #374151; font-size: 12px; max-width: 420px; }
ul.problems li { color: #b91c1c; }
.bar { display: flex; align-items: center; gap: 10px; margin: 4px 0; font-size: 14px; }
.bar .name { width: 260px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.bar .track { flex: 1; background: #f3f4f6; border: 1px solid #e5e7eb; height: 16px; }
.bar .fill { background: #2563eb; height: 100%; }
.bar .fill.transcript { background: #6b7280; }
.bar .n { width: 150px; text-align: right; font-variant-numeric: tabular-nums; }
footer { color: #6b7280; font-size: 12px; margin-top: 28px; }
"""


def _card(label: str, value: str, detail: str, tone: str = "") -> str:
    return (
        f'<div class="card"><div class="label">{escape(label)}</div>'
        f'<div class="value {tone}">{escape(value)}</div>'
        f'<div class="detail">{escape(detail)}</div></div>'
    )


def _cards(report: ReplayReport) -> str:
    t = report.totals
    calls_after_first = max(t.calls - 1, 0)
    cards = [
        _card("Tokens sent", num(t.tokens), "with the engine, all calls"),
        _card(
            "vs hard trimming",
            saved_share(t.tokens_trimmed, t.tokens),
            f"{num(t.tokens_trimmed)} with trim-last: the oldest messages dropped to fit",
            "good" if t.tokens <= t.tokens_trimmed else "",
        ),
        _card(
            "vs observation masking",
            saved_share(t.tokens_masked, t.tokens),
            f"{num(t.tokens_masked)} masking all but the newest {MASK_KEEP} tool results; "
            f"{num(t.masked_over_window)} calls above the window",
            "good" if t.tokens <= t.tokens_masked else "",
        ),
        _card(
            "Whole history",
            num(t.tokens_without),
            f"for context: {num(t.without_over_window)} of {num(t.calls)} calls above the "
            "window, a provider rejects those",
        ),
        _card(
            "Largest prompt",
            num(t.max_tokens),
            f"window {num(report.window)}, threshold {num(report.threshold)}",
            "good" if t.max_tokens <= report.window else "bad",
        ),
        _card("LLM calls", num(t.calls), f"{num(report.messages)} messages replayed"),
        _card("Rewrites", num(t.rewrites), f"{num(t.commits)} committed checkpoints or cuts"),
        _card("Summarizer calls", num(t.summarizer_calls), report.summarizer),
        _card(
            "Prompt prefix kept",
            percent(t.prefix_reused, calls_after_first),
            f"{num(t.prefix_reused)} of {num(calls_after_first)} calls reuse the previous prompt",
        ),
        _card(
            "Problems",
            num(len(report.problems)),
            f"{num(t.overflows)} overflows, {num(t.breaker_trips)} breaker trips",
            "bad" if report.problems else "good",
        ),
    ]
    priced = cost_card(report)
    if priced is not None:
        cards.insert(1, _card(*priced))
    return '<div class="cards">' + "".join(cards) + "</div>"


def _strategy_cell(name: str, suffix: str = "") -> str:
    return (
        f'<span class="swatch" style="background:{colour(name)}"></span>'
        f"{escape(name)}{escape(suffix)}"
    )


def _session_table(report: ReplayReport) -> str:
    head = (
        "<tr><th>calls</th><th class=n>rewrites</th><th>reason</th><th>strategy</th>"
        "<th class=n>tokens before</th><th class=n>tokens after</th><th>strategies tried "
        "(* applied)</th><th>replaced with</th></tr>"
    )
    rows = [
        f'<tr title="{escape(row.excerpt)}"><td>{row.calls}</td><td class=n>{row.count}</td>'
        f"<td>{escape(row.reason)}</td>"
        f"<td>{_strategy_cell(row.strategy, ' (committed)' if row.committed else '')}</td>"
        f"<td class=n>{num(row.tokens_before)}</td><td class=n>{num(row.tokens_after)}</td>"
        f'<td class="tried">{escape(", ".join(row.tried))}</td>'
        f'<td class="excerpt">{escape(row.excerpt)}</td></tr>'
        for row in session_rows(report.rewrites)
    ]
    if not rows:
        rows = ['<tr><td colspan="8">No rewrites: every call fit under the threshold.</td></tr>']
    return f"<table>{head}{''.join(rows)}</table>"


def _strategy_table(report: ReplayReport) -> str:
    counts = Counter(r.strategy for r in report.rewrites if r.changed)
    saved: Counter[str] = Counter()
    for r in report.rewrites:
        if r.changed:
            saved[r.strategy] += r.tokens_before - r.tokens_after
    rows = "".join(
        f"<tr><td>{_strategy_cell(name)}</td><td class=n>{num(count)}</td>"
        f"<td class=n>{num(saved[name] // count)}</td></tr>"
        for name, count in counts.most_common()
    )
    return (
        "<table><tr><th>strategy</th><th class=n>rewrites</th>"
        f"<th class=n>tokens removed per rewrite (mean)</th></tr>{rows}</table>"
        if rows
        else ""
    )


def _problems(report: ReplayReport) -> str:
    if not report.problems:
        return '<p class="good">No problems: every view kept the invariants and fit the window.</p>'
    items = "".join(f"<li>{escape(p)}</li>" for p in report.problems)
    return f'<ul class="problems">{items}</ul>'


def _budget_bars(report: ReplayReport, number: int | None) -> str:
    """Each source's tokens in one call's view, as bars against the threshold."""
    if not report.calls or not any(c.sources for c in report.calls):
        return ""
    chosen = max(report.calls, key=lambda c: c.tokens)
    if number is not None:
        chosen = next((c for c in report.calls if c.call == number), chosen)
    provided = sum(chosen.sources.values())
    rows = [("transcript", chosen.tokens - provided), *chosen.sources.items()]
    scale = max(report.threshold, chosen.tokens, 1)
    bars = "".join(
        f'<div class="bar"><span class="name">{escape(name)}</span>'
        f'<span class="track"><span class="fill{" transcript" if i == 0 else ""}" '
        f'style="display:block;width:{100 * tokens / scale:.1f}%"></span></span>'
        f'<span class="n">{num(tokens)} ({percent(tokens, report.threshold)})</span></div>'
        for i, (name, tokens) in enumerate(rows)
    )
    return (
        f"<h2>Budget by source, call {chosen.call}</h2>"
        f"<p class=sub>{num(chosen.tokens)} tokens sent against a threshold of "
        f"{num(report.threshold)}: the transcript's part after the strategies, and each "
        f"context provider's items.</p>{bars}"
    )


def render_html(
    report: ReplayReport, *, title: str | None = None, version: str = "", call: int | None = None
) -> str:
    """The replay report as a standalone HTML page (``call``: the one whose sources it shows)."""
    heading = title or f"Replay of {report.source}"
    subtitle = (
        f"window {num(report.window)} tokens, reserve {num(report.reserve)}, threshold "
        f"{num(report.threshold)} · strategies: {', '.join(report.strategies)} · "
        f"summarizer: {report.summarizer}"
    )
    caption = (
        "Each point of a line is the prompt of one LLM call. The coloured strip at the "
        "bottom shows which strategy rewrote each call's view; diamonds and vertical lines "
        "mark rewrites committed to the transcript (a checkpoint or a cut); triangles mark "
        "views above the window that went through overflow recovery; crosses just above the "
        "strip mark calls whose prompt broke the provider's cache. Hover a marker for its numbers."
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(heading)}</title><style>{_CSS}</style></head><body><main>",
            f"<h1>{escape(heading)}</h1>",
            f'<p class="sub">{escape(subtitle)}</p>',
            _cards(report),
            f"<figure>{render_chart(report)}<figcaption>{escape(caption)}</figcaption></figure>",
            _budget_bars(report, call),
            cost_html(report),
            "<h2>Rewrites by strategy</h2>",
            _strategy_table(report) or "<p>None.</p>",
            "<h2>Session</h2>",
            "<p class=sub>One row per rewrite; calls rewritten the same way in a row are "
            "grouped and show the figures of the last one.</p>",
            _session_table(report),
            "<h2>Problems</h2>",
            _problems(report),
            f"<footer>context-engine {escape(version)} · replay took "
            f"{report.duration:.1f} s</footer>",
            "</main></body></html>",
        ]
    )
