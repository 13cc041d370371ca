"""Turning reports into lines and tables a person reads in the terminal (and in the HTML report)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from context_engine.cli._baselines import MASK_KEEP
from context_engine.cli._cost_view import show_cost
from context_engine.cli._inspect import InspectReport
from context_engine.cli._output import Output, Table
from context_engine.cli.replay import ReplayReport, RewriteRecord

__all__ = [
    "SessionRow",
    "num",
    "percent",
    "replay_summary",
    "session_rows",
    "session_table",
    "show_inspect",
    "show_replay",
    "show_trace",
]


def num(value: int) -> str:
    """``12,345``."""
    return f"{value:,}"


def percent(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``, one decimal."""
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


@attrs.frozen(kw_only=True)
class SessionRow:
    """Consecutive calls rewritten the same way, shown as one row.

    A light strategy rewrites the view again on every call until a checkpoint
    is committed; those calls are grouped. Committed rewrites, overflow
    recoveries and breaker skips always get a row of their own.

    Attributes:
        first_call: The first call of the group.
        last_call: The last call of the group.
        first_step: Transcript index of the first call's assistant message.
        last_step: Transcript index of the last call's assistant message.
        count: Rewrites in the group.
        reason: The events' reason.
        strategy: The events' strategy.
        tokens_before: Input tokens of the last rewrite in the group.
        tokens_after: View tokens of the last rewrite in the group.
        committed: Whether the rewrite was committed.
        changed: Whether the view changed.
        tried: Strategies tried by the last rewrite (``*`` = applied).
        excerpt: What the last rewrite put in place of the content (`RewriteRecord.excerpt`).
    """

    first_call: int
    last_call: int
    first_step: int
    last_step: int
    count: int
    reason: str
    strategy: str
    tokens_before: int
    tokens_after: int
    committed: bool
    changed: bool
    tried: tuple[str, ...]
    excerpt: str = ""

    @property
    def calls(self) -> str:
        """``12`` or ``12-40``."""
        if self.first_call == self.last_call:
            return str(self.first_call)
        return f"{self.first_call}-{self.last_call}"


def _groupable(row: SessionRow, record: RewriteRecord) -> bool:
    return (
        not row.committed
        and not record.committed
        and record.reason == row.reason == "threshold"
        and record.strategy == row.strategy
        and record.changed == row.changed
        and record.call == row.last_call + 1
    )


def session_rows(rewrites: Sequence[RewriteRecord]) -> list[SessionRow]:
    """The rewrites of a replay, consecutive repeats of the same light rewrite grouped."""
    rows: list[SessionRow] = []
    for record in rewrites:
        if rows and _groupable(rows[-1], record):
            rows[-1] = attrs.evolve(
                rows[-1],
                last_call=record.call,
                last_step=record.step,
                count=rows[-1].count + 1,
                tokens_before=record.tokens_before,
                tokens_after=record.tokens_after,
                tried=record.strategies_tried,
                excerpt=record.excerpt,
            )
            continue
        rows.append(
            SessionRow(
                first_call=record.call,
                last_call=record.call,
                first_step=record.step,
                last_step=record.step,
                count=1,
                reason=record.reason,
                strategy=record.strategy,
                tokens_before=record.tokens_before,
                tokens_after=record.tokens_after,
                committed=record.committed,
                changed=record.changed,
                tried=record.strategies_tried,
                excerpt=record.excerpt,
            )
        )
    return rows


def session_table(report: ReplayReport) -> Table:
    """The session table: one row per rewrite, repeats of a light rewrite grouped."""
    rows = tuple(
        (
            row.calls,
            str(row.count),
            row.reason,
            row.strategy + (" (committed)" if row.committed else ""),
            num(row.tokens_before),
            num(row.tokens_after),
            ", ".join(row.tried),
        )
        for row in session_rows(report.rewrites)
    )
    return Table(
        "Rewrites (calls rewritten the same way in a row are grouped; figures of the last)",
        (
            "calls",
            "rewrites",
            "reason",
            "strategy",
            "tokens before",
            "tokens after",
            "tried",
        ),
        rows,
        numeric=frozenset({1, 4, 5}),
    )


def saved_share(baseline: int, tokens: int) -> str:
    """``12.5% saved`` against ``baseline``, or ``3.1% more`` when the engine sent more."""
    if baseline >= tokens:
        return f"{percent(baseline - tokens, baseline)} saved"
    return f"{percent(tokens - baseline, baseline)} more"


def replay_summary(report: ReplayReport) -> list[tuple[str, str]]:
    """The headline numbers of a replay as (label, value) pairs."""
    totals = report.totals
    by_strategy = Counter(r.strategy for r in report.rewrites if r.changed)
    return [
        ("LLM calls", f"{num(totals.calls)} (from {num(report.messages)} messages)"),
        ("tokens sent", f"{num(totals.tokens)} with the engine"),
        (
            "vs hard trimming",
            f"{num(totals.tokens_trimmed)} dropping the oldest messages to fit (trim-last) "
            f"({saved_share(totals.tokens_trimmed, totals.tokens)})",
        ),
        (
            "vs masking",
            f"{num(totals.tokens_masked)} masking all but the newest {MASK_KEEP} tool results "
            f"({saved_share(totals.tokens_masked, totals.tokens)}; "
            f"{num(totals.masked_over_window)} calls still above the window)",
        ),
        (
            "whole history",
            f"{num(totals.tokens_without)} sending everything, for context: "
            f"{num(totals.without_over_window)} of {num(totals.calls)} calls would be above "
            "the window and rejected",
        ),
        ("largest prompt", f"{num(totals.max_tokens)} tokens (window {num(report.window)})"),
        (
            "rewrites",
            f"{num(totals.rewrites)}, {num(totals.commits)} committed"
            + "".join(f"; {name} {count}" for name, count in by_strategy.most_common()),
        ),
        ("summarizer calls", f"{num(totals.summarizer_calls)} ({report.summarizer})"),
        (
            "prompt prefix kept",
            f"{percent(totals.prefix_reused, max(totals.calls - 1, 0))} of calls "
            f"({num(totals.prefix_reused)} of {num(max(totals.calls - 1, 0))}: "
            "the previous prompt is a prefix, a provider cache can reuse it)",
        ),
        (
            "overflows",
            f"{num(totals.overflows)} views above the window recovered, "
            f"{num(totals.over_window)} still above",
        ),
        ("breaker trips", f"{num(totals.breaker_trips)} ({num(totals.failures)} failed calls)"),
    ]


def show_replay(report: ReplayReport, out: Output) -> None:
    """Print a replay's summary, session table and problems."""
    out.line(
        f"Replayed {report.source}: window {num(report.window)}, reserve {num(report.reserve)}, "
        f"threshold {num(report.threshold)}; strategies {', '.join(report.strategies)}"
    )
    for label, value in replay_summary(report):
        out.line(f"  {label + ':':<20}{value}")
    out.line()
    show_cost(report, out)
    out.table(session_table(report))
    if report.problems:
        out.line(f"{len(report.problems)} problem(s):")
        for problem in report.problems:
            out.line(f"  - {problem}")
    else:
        out.line("No problems: every view kept the invariants and fit the window.")


def show_trace(report: ReplayReport, out: Output) -> None:
    """Print each rewrite's assembly trace, one decision a line."""
    out.line()
    out.line(f"Assembly trace ({len(report.rewrites)} rewrite(s)):")
    for record in report.rewrites:
        out.line(
            f"  call {record.call} (message {record.step}): {record.strategy}, "
            f"{num(record.tokens_before)} -> {num(record.tokens_after)} tokens"
        )
        for d in record.decisions:
            reference = f" [{d['reference']}]" if d.get("reference") else ""
            out.line(
                f"    {d['action']:<9} {d['source']}:{d['item']} {num(d['tokens'])} tokens"
                f" - {d['reason']}{reference}"
            )
        if not record.decisions:
            out.line("    (nothing cleared, trimmed, summarized or truncated)")


def show_inspect(report: InspectReport, out: Output) -> None:
    """Print what ``inspect`` found."""
    verdict = (
        f"fits ({percent(report.tokens, report.threshold)} of the threshold)"
        if report.fits
        else f"DOES NOT FIT: {num(report.tokens - report.threshold)} tokens over the threshold"
    )
    out.line(
        f"{report.source} ({report.format}): {num(report.messages)} messages, "
        f"{num(report.tokens)} tokens"
        + (f" ({num(report.usage_tokens)} from provider usage)" if report.usage_tokens else "")
    )
    out.line(
        f"window {num(report.window)}, reserve {num(report.reserve)}, "
        f"threshold {num(report.threshold)}: {verdict}"
    )
    overhead = report.overhead
    if overhead.tokens:
        out.line(
            f"sent with every call besides the messages: {num(overhead.tokens)} tokens "
            f"({overhead.tools} tool definitions: {num(overhead.tools_tokens)}; "
            f"--overhead: {num(overhead.extra)}), included above"
        )
    out.line()
    for table in inspect_tables(report):
        out.table(table)
    _show_engine(report, out)


def inspect_tables(report: InspectReport) -> list[Table]:
    """The role, tool, largest-message and usage-anchor tables of ``inspect``."""
    tables = [_role_table(report), _tool_table(report), _largest_table(report)]
    if report.anchors:
        tables.append(_anchor_table(report))
    return tables


def _role_table(report: InspectReport) -> Table:
    total = report.counted_tokens
    return Table(
        "Tokens by role",
        ("role", "messages", "tokens", "share"),
        tuple(
            (r.role, num(r.messages), num(r.tokens), percent(r.tokens, total))
            for r in report.by_role
        ),
        numeric=frozenset({1, 2, 3}),
    )


def _tool_table(report: InspectReport) -> Table:
    total = report.counted_tokens
    return Table(
        "Tokens by tool (calls: arguments; results: tool messages)",
        ("tool", "calls", "call tokens", "results", "result tokens", "share"),
        tuple(
            (
                t.tool,
                num(t.calls),
                num(t.call_tokens),
                num(t.results),
                num(t.result_tokens),
                percent(t.call_tokens + t.result_tokens, total),
            )
            for t in report.by_tool
        ),
        numeric=frozenset({1, 2, 3, 4, 5}),
    )


def _largest_table(report: InspectReport) -> Table:
    return Table(
        f"Largest {len(report.largest)} messages",
        ("index", "role", "tool", "tokens", "preview"),
        tuple(
            (str(m.index), m.role, m.tool or "", num(m.tokens), m.preview) for m in report.largest
        ),
        numeric=frozenset({0, 3}),
    )


def _anchor_table(report: InspectReport) -> Table:
    return Table(
        "Provider usage anchors (assistant messages with usage)",
        ("index", "input", "output", "cache read", "cache write"),
        tuple(
            (
                str(a.index),
                num(a.input_tokens),
                num(a.output_tokens),
                num(a.cache_read_tokens),
                num(a.cache_write_tokens),
            )
            for a in report.anchors
        ),
        numeric=frozenset({0, 1, 2, 3, 4}),
    )


def _show_engine(report: InspectReport, out: Output) -> None:
    if not report.anchors:
        out.line("No provider usage anchors: all counts come from the tokenizer.")
    outcome = report.engine
    out.line(
        f"What the pipeline would do ({', '.join(report.strategies)}; "
        f"summarizer {report.summarizer}):"
    )
    if not outcome.steps:
        out.line("  nothing: the transcript is at or below the threshold.")
        return
    out.table(
        Table(
            "Strategies run (in order, until the view fits)",
            ("strategy", "applied", "tokens before", "tokens after", "ms", "why"),
            tuple(
                (
                    s.name,
                    "yes" if s.applied else "no",
                    num(s.tokens_before),
                    num(s.tokens_after),
                    f"{s.duration_ms:.1f}",
                    s.reason,
                )
                for s in outcome.steps
            ),
            numeric=frozenset({2, 3, 4}),
        )
    )
    state = "fits" if outcome.fits else "still does not fit"
    if outcome.futile:
        state += f" (futile: {num(outcome.floor_tokens)} tokens no strategy may remove)"
    out.line(
        f"  result: {num(outcome.tokens_after)} tokens in {num(outcome.messages_after)} "
        f"messages, {state}"
    )
