"""Summarizer calls per 100 steps, and the same figures before and after a change.

Issue 17 asks how often each contender calls its summarizer (each call a paid
request that also breaks the prompt cache), at 8k, 32k and 128k, next to the
tokens sent and the cache-reusable share, for the engine as it is and as it
was before. ``rate_lines`` reads one run's outcomes; ``before_after_lines``
sets a stored earlier run (``benchmarks/results/economics_before_17.json``,
the engine at commit 5a2b570 driven by the same harness) beside this one.
Pure functions over the outcome rows ``economics.py`` writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]
TIERED = "context_engine_micro"
TIERED_STRATEGIES = (
    "tool_result_microcompact",
    "light_trim",
    "micro_summary",
    "full_summary",
    "hard_truncate",
)
ORDER = (
    "context_engine",
    TIERED,
    "langchain_summarization",
    "observation_masking",
    "no_management",
)
NAMES = {
    "context_engine": "context-engine",
    TIERED: "context-engine + `MicroSummary`",
    "langchain_summarization": "LangChain summarization",
    "observation_masking": "observation masking",
    "no_management": "no management",
}
SECTION = "economics-rate"  # the docs/benchmarks.md markers of the section


def totals(rows: Sequence[Row], window: int, contender: str) -> Row | None:
    """Steps, summarizer calls and tokens of one contender over every transcript at ``window``."""
    mine = [r for r in rows if r["window"] == window and r["contender"] == contender]
    if not mine:
        return None
    steps = sum(r["calls"] for r in mine)
    tokens = sum(r["tokens"] for r in mine)
    calls = sum(r["summarizer_calls"] for r in mine)
    return {
        "steps": steps,
        "summarizer_calls": calls,
        "per_100_steps": 100 * calls / steps if steps else 0.0,
        "tokens": tokens,
        "cache_share": sum(r["reused"] for r in mine) / tokens if tokens else 0.0,
    }


def _windows(rows: Sequence[Row]) -> list[int]:
    return sorted({r["window"] for r in rows})


def _contenders(rows: Sequence[Row]) -> list[str]:
    present = {r["contender"] for r in rows}
    return [c for c in ORDER if c in present]


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def rate_lines(rows: Sequence[Row]) -> list[str]:
    """One table: per window and contender, summarizer calls per 100 steps and what was sent."""
    body = []
    for window in _windows(rows):
        for contender in _contenders(rows):
            t = totals(rows, window, contender)
            if t is None:  # not run at this window
                continue
            body.append(
                [
                    f"{window // 1000}k",
                    NAMES[contender],
                    f"{t['steps']:,}",
                    str(t["summarizer_calls"]),
                    f"{t['per_100_steps']:.2f}",
                    f"{t['tokens']:,}",
                    f"{100 * t['cache_share']:.1f} %",
                ]
            )
    header = [
        "window",
        "contender",
        "steps",
        "summarizer calls",
        "per 100 steps",
        "prompt tokens sent",
        "cache-reusable share",
    ]
    return _table(header, body)


def before_after_lines(before: Sequence[Row], after: Sequence[Row]) -> list[str]:
    """Per window and contender: the earlier run's figures, then this run's."""
    body = []
    for window in _windows(after):
        for contender in _contenders(after):
            old, new = totals(before, window, contender), totals(after, window, contender)
            if old is None or new is None:
                continue
            body.append(
                [
                    f"{window // 1000}k",
                    NAMES[contender],
                    f"{old['summarizer_calls']} → {new['summarizer_calls']}",
                    f"{old['per_100_steps']:.2f} → {new['per_100_steps']:.2f}",
                    f"{old['tokens']:,} → {new['tokens']:,}",
                    f"{100 * old['cache_share']:.1f} % → {100 * new['cache_share']:.1f} %",
                ]
            )
    header = [
        "window",
        "contender",
        "summarizer calls",
        "per 100 steps",
        "prompt tokens sent",
        "cache-reusable share",
    ]
    return _table(header, body)


def tiered_rows(
    transcripts: Sequence[tuple[str, Any]],
    windows: Sequence[int],
    counter: Any,
    run: Callable[..., Any],
) -> list[Row]:
    """The engine's pipeline with the micro tier before its full summary, on every transcript.

    ``run`` is ``economics.run_context_engine``; the rows are reported here
    only, beside the default pipeline's (the micro tier is opt-in).
    """
    return [
        run(name, messages, window, counter, TIERED_STRATEGIES, TIERED).as_dict()
        for window in windows
        for name, messages in transcripts
    ]


def load_outcomes(path: Path) -> list[Row]:
    """The outcome rows of a JSON file ``economics.py`` wrote."""
    rows: list[Row] = json.loads(path.read_text(encoding="utf-8"))["outcomes"]
    return rows


def _idle_notes(rows: Sequence[Row]) -> list[str]:
    """A note for each window at which no contender called a summarizer, and why."""
    notes = []
    for window in _windows(rows):
        mine = [r for r in rows if r["window"] == window]
        if any(r["summarizer_calls"] for r in mine):
            continue
        longest = max((r["max_tokens"] for r in mine if "max_tokens" in r), default=None)
        why = f": the longest prompt any contender sent was {longest:,} tokens" if longest else ""
        notes.append(f"At {window // 1000}k no contender called a summarizer{why}.")
    return ["", *notes] if notes else []


def render_markdown(rows: Sequence[Row], before: Sequence[Row] | None, label: str) -> str:
    """The section between the ``economics-rate`` markers of docs/benchmarks.md."""
    lines = [
        "## Summarizer calls per 100 steps",
        "",
        "How often each contender calls its summarizer over the corpus replay above (one",
        "step is one LLM call of the agent), with what it sent. Every summarizer call is a",
        "paid request, and every checkpoint it writes changes the prompt's prefix.",
        "*context-engine + `MicroSummary`* is the same pipeline with the micro tier",
        "(`micro_summary`, default triggers 85 % / 92 % of the window) before the full",
        "summary; it is reported here only.",
        "",
        *rate_lines(rows),
    ]
    lines += _idle_notes(rows)
    if before is not None:
        lines += [
            "",
            f"Before → after: {label}.",
            "",
            *before_after_lines(before, rows),
        ]
    return "\n".join(lines) + "\n"
