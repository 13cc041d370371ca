"""The tables, the docs/benchmarks.md section and the page of `fidelity.py`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from _economics_report import replace_section as _replace_section
from _fidelity_probe import PROBES

Row = dict[str, Any]
TITLES = {
    "edited": "files the agent edited, shown as modified",
    "last_failure": "key line of the most recent failure",
    "constraints": "earlier user instructions and constraints",
    "steps_done": "steps already done (files read, commands and tests run)",
    "newest_user": "newest user message verbatim",
}
KIND_TITLES = {
    "rewrite": "At every rewrite point (the view differs from the original transcript; "
    "each engine at its own, the baselines at the default engine's)",
    "compact": "After a forced `/compact` (at a quarter, half, three quarters and the end)",
    "rewrite_both": "At the calls where both engines rewrote (the same points for every contender)",
}
SECTION_KINDS = ("rewrite", "compact")  # docs/benchmarks.md; the page has every kind
ENGINES = ("engine", "engine_cost_aware")
CONTENDERS = (*ENGINES, "trim_last", "masking")
LABELS = "engine / cost-aware / trim-last / masking"
ENGINE_LABELS = {"engine": "the engine", "engine_cost_aware": "the cost-aware engine"}
PAGE_LINK = "[benchmarks_fidelity.md](benchmarks_fidelity.md)"


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _find(rows: Sequence[Row], window: int, kind: str, contender: str) -> Row:
    for row in rows:
        if (row["window"], row["kind"], row["contender"]) == (window, kind, contender):
            return row
    raise KeyError(f"no result for {contender} at {window} ({kind})")


def _windows(rows: Sequence[Row]) -> list[int]:
    return sorted({row["window"] for row in rows})


def table(rows: Sequence[Row], kind: str) -> list[str]:
    """Probe by window: mean recall %, engine / cost-aware / trim-last / masking."""
    windows = _windows(rows)
    header = [f"probe (mean recall %, {LABELS})"]
    header += [f"{w // 1000}k window" for w in windows]
    lines = ["| " + " | ".join(header) + " |", "|---" + "|---:" * len(windows) + "|"]
    for probe in PROBES:
        cells = [TITLES[probe]]
        for window in windows:
            found = [_find(rows, window, kind, c)["mean_recall_pct"][probe] for c in CONTENDERS]
            cells.append(" / ".join(_cell(v) for v in found))
        lines.append("| " + " | ".join(cells) + " |")
    for engine in ENGINES:
        marked = [
            f"failed commands {ENGINE_LABELS[engine]}'s notes call ok, of those they name "
            "(over points)"
        ]
        for window in windows:
            row = _find(rows, window, kind, engine)
            marked.append(f"{row['failed_marked_ok']} of {row['failed_named']}")
        lines.append("| " + " | ".join(marked) + " |")
    points = ["points scored (engine / cost-aware / baselines)"]
    for window in windows:
        found = [_find(rows, window, kind, c)["points"] for c in (*ENGINES, "trim_last")]
        points.append(" / ".join(f"{n:,}" for n in found))
    lines.append("| " + " | ".join(points) + " |")
    return lines


def tables(rows: Sequence[Row]) -> str:
    """Every table with its title, for the terminal."""
    out: list[str] = []
    for kind, title in KIND_TITLES.items():
        out += [f"{title}:", "", *table(rows, kind), ""]
    return "\n".join(out).rstrip()


def _run_line(meta: Row) -> str:
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    return (
        f"Run: `{meta['command']}` ({meta['mode']} mode, {meta['elapsed_s']} s), {meta['date']}; "
        f"{len(meta['transcripts'])} transcripts; Python {meta['python']}; {versions}; "
        f"counter `{meta['counter']}`."
    )


METHOD = """\
`benchmarks/fidelity.py` (`make bench-fidelity`) replays each dev-corpus transcript call by
call through `ContextEngine.default(window, summarizer=ExtractiveSummarizer())` (the
**engine**) and through the same engine with `pricing="anthropic", cost_aware=True` (the
**cost-aware** engine: below the threshold too it clears old tool results and trims old
assistant messages when that pays, and its light trim trims old assistant messages to fit),
each keeping its commits, and scores the view the model would get against ground truth
read off the original transcript up to that call by the benchmark's own parsers
(independent of the engine's): every file edited (editor tools and shell writes: `sed -i`,
redirections and heredocs, `tee`, `python -c` writes, `git apply`, `cp`/`mv` targets) named
in a modified-files section or by a visible edit call; the key line of the most recent
failed tool result, verbatim; the constraint sentences (must, don't, never, only...) of the
user's messages, verbatim or near-verbatim; every file read and command run, by path or
command string; the newest user message verbatim. Baselines at the same points and budget:
**trim-last** (system, first user message, newest whole steps that fit) and observation
**masking** (ten newest tool results kept, older ones replaced by a placeholder, then
capped the same way). A dash: nothing to recall at those points."""


def section(meta: Row, rows: Sequence[Row]) -> str:
    """The "Fidelity" section of docs/benchmarks.md."""
    lines = ["## Fidelity", "", METHOD, "", _run_line(meta), ""]
    for kind in SECTION_KINDS:
        lines += [f"{KIND_TITLES[kind]}:", "", *table(rows, kind), ""]
    lines += [
        f"Per transcript, both engines on the same points, and how each probe is read: "
        f"{PAGE_LINK}.",
        "",
    ]
    return "\n".join(lines)


def _transcript_rows(per_transcript: Sequence[Row], kind: str) -> list[str]:
    header = ["transcript", "window", "points (engine / cost-aware)", *PROBES]
    lines = ["| " + " | ".join(header) + " |", "|---|---:|---:" + "|---:" * len(PROBES) + "|"]
    for entry in per_transcript:
        board = entry[kind]
        points = " / ".join(str(board[e]["points"]) for e in ENGINES)
        cells = [f"`{entry['transcript']}`", f"{entry['window']:,}", points]
        for probe in PROBES:
            found = [board[c]["mean_recall_pct"][probe] for c in CONTENDERS]
            cells.append(" / ".join(_cell(v) for v in found))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def page(meta: Row, data: Row) -> str:
    """docs/benchmarks_fidelity.md: the method, every table and the per-transcript figures."""
    lines = [
        "# Benchmarks: fidelity after a rewrite",
        "",
        "This page is written by `benchmarks/fidelity.py` (it is overwritten), with every "
        "figure in `benchmarks/results/fidelity.json`. The summary is also in "
        "[benchmarks.md](benchmarks.md#fidelity).",
        "",
        METHOD,
        "",
        _run_line(meta),
        "",
    ]
    for kind, title in KIND_TITLES.items():
        lines += [f"## {title}", "", *table(data["results"], kind), ""]
        lines += [
            f"Per transcript ({LABELS}, mean recall %):",
            "",
            *_transcript_rows(data["per_transcript"], kind),
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


def replace_section(page_text: str, text: str) -> str:
    """``page_text`` with ``text`` between the fidelity markers."""
    return _replace_section(page_text, text, name="fidelity")
