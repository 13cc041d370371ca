"""The SVG chart of the HTML report: prompt tokens per LLM call, with and without the engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

from context_engine.cli.replay import CallRecord, ReplayReport, RewriteRecord

__all__ = ["STRATEGY_COLOURS", "colour", "nice_ticks", "render_chart"]

STRATEGY_COLOURS = {
    "tool_result_microcompact": "#56B4E9",
    "light_trim": "#009E73",
    "session_memory": "#CC79A7",
    "micro_summary": "#F0E442",
    "full_summary": "#E69F00",
    "summary_digest": "#8C6D1F",
    "hard_truncate": "#D55E00",
    "circuit_breaker": "#000000",
}
"""Marker colour per strategy (Okabe-Ito, readable with colour-vision deficiencies)."""

WIDTH, HEIGHT = 1120, 480
STRIP = 10
LEFT, RIGHT, TOP, BOTTOM = 78, 150, 70, 56
WITH_COLOUR, WITHOUT_COLOUR = "#0072B2", "#8a8a8a"
# Hard trimming, the baseline savings are measured against: black, dotted (every Okabe-Ito
# hue but yellow, too pale for a thin line, already names a strategy).
TRIMMED_COLOUR = "#000000"
# Cache breaks: crosses in a row just above the strategy strip (the rewrites that caused them).
BREAK_COLOUR, BREAK_RISE = "#111827", STRIP + 8


def colour(strategy: str) -> str:
    """The marker colour of ``strategy`` (grey for one this report does not know)."""
    return STRATEGY_COLOURS.get(strategy, "#777777")


def nice_ticks(top: float, count: int = 6) -> list[float]:
    """Round tick values from 0 to at least ``top``, about ``count`` of them."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [step * i for i in range(math.ceil(top / step) + 1)]


def _short(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


class _Scale:
    def __init__(self, calls: int, top: float) -> None:
        self.calls, self.top = max(calls, 1), top
        self.width, self.height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(self, call: float) -> float:
        span = max(self.calls - 1, 1)
        return LEFT + (call - 1) / span * self.width

    def y(self, tokens: float) -> float:
        """Values above the top land above the plot, where the clip path hides them."""
        return TOP + self.height - tokens / self.top * self.height


def _axes(scale: _Scale, y_ticks: Sequence[float]) -> list[str]:
    parts = []
    for tick in y_ticks:
        y = scale.y(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + scale.width}" y2="{y:.1f}" '
            'stroke="#e5e7eb"/>'
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{_short(tick)}</text>"
        )
    for tick in nice_ticks(scale.calls, 10):
        if 1 <= tick <= scale.calls or tick == 0:
            x = scale.x(max(tick, 1))
            parts.append(
                f'<line x1="{x:.1f}" y1="{TOP + scale.height}" x2="{x:.1f}" '
                f'y2="{TOP + scale.height + 5}" stroke="#374151"/>'
                f'<text x="{x:.1f}" y="{TOP + scale.height + 20}" text-anchor="middle" '
                f'class="tick">{int(max(tick, 1))}</text>'
            )
    bottom = TOP + scale.height
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#374151"/>'
        f'<line x1="{LEFT}" y1="{bottom}" x2="{LEFT + scale.width}" y2="{bottom}" '
        'stroke="#374151"/>'
        f'<text x="{LEFT + scale.width / 2:.1f}" y="{HEIGHT - 12}" text-anchor="middle" '
        'class="axis">LLM call (one per assistant message of the transcript)</text>'
        f'<text x="18" y="{TOP + scale.height / 2:.1f}" text-anchor="middle" class="axis" '
        f'transform="rotate(-90 18 {TOP + scale.height / 2:.1f})">prompt tokens</text>'
    )
    return parts


def _limit(scale: _Scale, tokens: int, label: str, dash: str) -> str:
    y = scale.y(tokens)
    return (
        f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + scale.width}" y2="{y:.1f}" '
        f'stroke="#111827" stroke-width="1.5" stroke-dasharray="{dash}"/>'
        f'<text x="{LEFT + scale.width + 8}" y="{y + 4:.1f}" class="limit">'
        f"{escape(label)} {tokens:,}</text>"
    )


def _polyline(scale: _Scale, values: Sequence[int], colour: str, extra: str) -> str:
    points = " ".join(f"{scale.x(i + 1):.1f},{scale.y(v):.1f}" for i, v in enumerate(values))
    return (
        f'<polyline points="{points}" fill="none" stroke="{colour}" '
        f'stroke-linejoin="round" {extra}/>'
    )


def _marker(scale: _Scale, record: RewriteRecord, tokens: int) -> str:
    x, y = scale.x(record.call), scale.y(tokens)
    fill = colour(record.strategy)
    title = (
        f"<title>call {record.call}: {escape(record.reason)} {escape(record.strategy)} "
        f"{record.tokens_before:,} → {record.tokens_after:,} tokens"
        f"{' (committed)' if record.committed else ''}"
        f"{chr(10) + escape(record.excerpt) if record.excerpt else ''}</title>"
    )
    if record.reason == "overflow":
        return (
            f'<path d="M{x:.1f},{y - 8:.1f} L{x + 7:.1f},{y + 5:.1f} L{x - 7:.1f},{y + 5:.1f} Z" '
            f'fill="{fill}" stroke="#111827" stroke-width="1.5">{title}</path>'
        )
    if record.committed:
        return (
            f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + scale.height}" '
            f'stroke="{fill}" stroke-width="1.5" stroke-opacity="0.55"/>'
            f'<path d="M{x:.1f},{y - 8:.1f} L{x + 7:.1f},{y:.1f} L{x:.1f},{y + 8:.1f} '
            f'L{x - 7:.1f},{y:.1f} Z" fill="{fill}" stroke="#111827" stroke-width="1">'
            f"{title}</path>"
        )
    width = max(scale.width / scale.calls, 1.5)
    bottom = TOP + scale.height
    return (
        f'<rect x="{x - width / 2:.1f}" y="{bottom - STRIP:.1f}" width="{width:.1f}" '
        f'height="{STRIP}" fill="{fill}">{title}</rect>'
    )


def _break_marker(scale: _Scale, call: CallRecord) -> str:
    """A cross above the strip at a call whose prompt broke the provider's cache ("" if none)."""
    sent = call.cost.engine if call.cost is not None else None
    if sent is None or sent.cache_break is None:
        return ""
    x, y = scale.x(call.call), TOP + scale.height - BREAK_RISE
    title = (
        f"<title>call {call.call}: cache break ({escape(sent.cache_break)}); "
        f"{sent.cached_tokens:,} of {sent.tokens:,} prompt tokens read from the cache</title>"
    )
    return (
        f'<path class="cache-break" d="M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} '
        f'M{x - 5:.1f},{y + 5:.1f} L{x + 5:.1f},{y - 5:.1f}" stroke="{BREAK_COLOUR}" '
        f'stroke-width="2.2">{title}</path>'
    )


def _legend(strategies: Sequence[str], overflow: bool, breaks: bool = False) -> str:
    items = [
        (
            f'<line x1="0" y1="0" x2="26" y2="0" stroke="{WITH_COLOUR}" stroke-width="2.5"/>',
            "with the engine",
        ),
        (
            f'<line x1="0" y1="0" x2="26" y2="0" stroke="{WITHOUT_COLOUR}" stroke-width="2" '
            'stroke-dasharray="6 4"/>',
            "whole history",
        ),
        (
            f'<line x1="0" y1="0" x2="26" y2="0" stroke="{TRIMMED_COLOUR}" stroke-width="2" '
            'stroke-dasharray="2 3"/>',
            "hard trimming",
        ),
    ]
    items += [
        (
            f'<rect x="7" y="-6" width="12" height="12" fill="{colour(name)}" '
            'stroke="#111827" stroke-width="0.6"/>',
            name,
        )
        for name in strategies
    ]
    items.append(
        ('<path d="M13,-7 L19,0 L13,7 L7,0 Z" fill="white" stroke="#111827"/>', "committed")
    )
    if overflow:
        items.append(
            ('<path d="M13,-7 L20,6 L6,6 Z" fill="white" stroke="#111827"/>', "overflow recovered")
        )
    if breaks:
        items.append(
            (
                f'<path d="M8,-5 L18,5 M8,5 L18,-5" stroke="{BREAK_COLOUR}" stroke-width="2.2"/>',
                "cache break",
            )
        )
    x, y, parts = LEFT, 36, []
    for sample, label in items:
        width = 44 + 7 * len(label)
        if x > LEFT and x + width > WIDTH - 8:  # a second row rather than off the edge
            x, y = LEFT, y + 18
        parts.append(
            f'<g transform="translate({x},{y})">{sample}'
            f'<text x="32" y="4" class="legend">{escape(label)}</text></g>'
        )
        x += width
    return "".join(parts)


def _escape_note(scale: _Scale, report: ReplayReport) -> str:
    """Where the line without the engine leaves the chart, and where it ends."""
    values = [c.tokens_without for c in report.calls]
    first = next((i for i, v in enumerate(values) if v > scale.top), None)
    if first is None:
        return ""
    x = min(scale.x(first + 1), LEFT + scale.width - 260)
    return (
        f'<text x="{x + 6:.1f}" y="{TOP + 14}" class="note">↑ whole history: '
        f"{values[-1]:,} tokens by the last call</text>"
    )


def render_chart(report: ReplayReport) -> str:
    """An inline SVG chart of prompt tokens per call against the window and threshold."""
    with_engine = [c.tokens for c in report.calls]
    top = max(report.window * 1.2, max(with_engine, default=0) * 1.05)
    y_ticks = nice_ticks(top)
    scale = _Scale(len(report.calls), y_ticks[-1])
    tokens_at = {c.call: c.tokens for c in report.calls}
    shown = [r for r in report.rewrites if r.changed or r.reason == "circuit_breaker"]
    strategies = list(dict.fromkeys(r.strategy for r in shown))
    breaks = [marker for marker in (_break_marker(scale, c) for c in report.calls) if marker]
    parts = [
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        'aria-label="Prompt tokens per LLM call, with and without the engine">',
        '<defs><clipPath id="plot">'
        f'<rect x="{LEFT}" y="{TOP - 1}" width="{scale.width}" height="{scale.height + 2}"/>'
        "</clipPath></defs>",
        f'<text x="{LEFT}" y="18" class="title">Prompt tokens per LLM call</text>',
        _legend(strategies, any(r.reason == "overflow" for r in shown), bool(breaks)),
        *_axes(scale, y_ticks),
        '<g clip-path="url(#plot)">',
        _polyline(
            scale,
            [c.tokens_without for c in report.calls],
            WITHOUT_COLOUR,
            'stroke-width="2" stroke-dasharray="6 4"',
        ),
        _polyline(
            scale,
            [c.tokens_trimmed for c in report.calls],
            TRIMMED_COLOUR,
            'stroke-width="2" stroke-dasharray="2 3"',
        ),
        _polyline(scale, with_engine, WITH_COLOUR, 'stroke-width="2.5"'),
        "</g>",
        _limit(scale, report.window, "window", "none"),
        _limit(scale, report.threshold, "threshold", "7 5"),
        _escape_note(scale, report),
        f'<text x="{LEFT + scale.width + 8}" y="{TOP + scale.height - 1}" class="legend">'
        "rewritten by</text>"
        if shown
        else "",
        *(_marker(scale, r, tokens_at.get(r.call, r.tokens_after)) for r in shown),
        *breaks,
        "</svg>",
    ]
    return "\n".join(part for part in parts if part)
