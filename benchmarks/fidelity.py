"""Fidelity: what the view still tells the agent after its context was rewritten.

Every corpus transcript is replayed call by call (one call per assistant
message, commits kept, a view above the threshold recovered with
``recover_overflow``: the replay of `_fits_replay`) through two engines
at 8k and 16k windows:

* ``engine``: ``ContextEngine.default(window, summarizer=ExtractiveSummarizer())``;
* ``engine_cost_aware``: the same with ``pricing="anthropic"`` and
  ``cost_aware=True`` (economics.py's cost-aware contender): old tool results
  are cleared, and old messages trimmed, below the threshold too when that
  pays, in views it does not commit; its light trim also trims old assistant
  messages (tool-call arguments included) to fit.

Each engine runs its own replay (their commits differ). Three kinds of points
are scored:

* ``rewrite``: every call whose view differs from the original transcript up
  to that call (a rewrite now, or a checkpoint committed earlier), each engine
  at its own such points (the cost-aware engine's include the calls below the
  threshold it rewrote), the baselines at the default engine's;
* ``compact``: a forced ``/compact`` (``engine.compact`` on the running
  transcript, by a fresh engine of the same settings so the replay goes on
  undisturbed) at a quarter, half, three quarters and the end of the calls;
* ``rewrite_both``: the calls where both engines' views differ from the
  original, every contender scored there (the two engines side by side on the
  same points).

Each view is scored against ground truth read off the ORIGINAL transcript up
to that point by the benchmark's own parsers (`_fidelity_truth`, independent
of the engine's), with the probes of `_fidelity_probe`: files edited shown as
modified, the most recent failure's key line, the user's constraint
sentences, steps already done (files read, commands run), the newest user
message verbatim; plus failed commands that a view's notes call ok. Side by
side, at the same points and budget (the engine's threshold less its
overhead):

* ``trim_last``: system messages, the first user message and the newest whole
  steps that fit (tool pairs kept): `_economics_ledger.cap_to_window`;
* ``masking``: observation masking, the ten newest tool results verbatim and
  older ones replaced by a placeholder, then capped the same way
  (`_economics_ledger.mask_observations`, economics' baseline).

    .venv/bin/python benchmarks/fidelity.py            # full run (make bench-fidelity)
    .venv/bin/python benchmarks/fidelity.py --quick    # a few transcripts, for the test suite

The full run writes benchmarks/results/fidelity.json, docs/benchmarks_fidelity.md
and the fidelity section of docs/benchmarks.md (between its markers, which the
page's regeneration keeps); the quick run writes
benchmarks/results/fidelity_quick.json only (``--json`` and ``--docs`` override).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")  # no tokenizer download, ever

import _fidelity_report as report
from _economics_ledger import call_points, cap_to_window, mask_observations
from _fidelity_probe import PROBES, marked_ok, read_view, score
from _fidelity_truth import Truth, truth_of
from _fits_replay import _Replay, build_engine
from fits import corpus_run, load_transcripts
from steady_state import load_average, to_json, write_atomic

from context_engine import ContextEngine, Message
from context_engine.errors import CompactionError
from context_engine.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs" / "benchmarks.md"
PAGE = REPO / "docs" / "benchmarks_fidelity.md"
WINDOWS = (8_000, 16_000)
COST_AWARE_PRICING = "anthropic"  # economics.py's cost-aware contender
ENGINES: dict[str, dict[str, Any]] = {  # contender -> options of its ContextEngine.default
    "engine": {},
    "engine_cost_aware": {"pricing": COST_AWARE_PRICING, "cost_aware": True},
}
BASELINES = ("trim_last", "masking")
CONTENDERS = (*ENGINES, *BASELINES)
KINDS = ("rewrite", "compact", "rewrite_both")
COMPACT_AT = (0.25, 0.5, 0.75, 1.0)  # shares of the replayed calls
QUICK_TRANSCRIPTS = (  # edits through an editor and through bash, failures, a support agent
    "swea_gpt4__pydicom__pydicom-1458",
    "openhands_resolver-mock__dark-mode-toggle",
    "swea_ctf-demo__crypto_katy",
    "msa_deepseek-chat-dev__pyvista__pyvista-4315",
)
QUICK_CALLS = 40


@dataclass
class Scores:
    """Per-point recalls of every probe, and the failed-marked-ok counts, of one contender."""

    recalls: dict[str, list[float]] = field(default_factory=lambda: {p: [] for p in PROBES})
    points: int = 0
    marked_ok: int = 0
    failed_named: int = 0

    def add(self, recalls: dict[str, float | None], wrong: int, named: int) -> None:
        self.points += 1
        for probe, value in recalls.items():
            if value is not None:
                self.recalls[probe].append(value)
        self.marked_ok += wrong
        self.failed_named += named

    def merge(self, other: Scores) -> None:
        self.points += other.points
        for probe, values in other.recalls.items():
            self.recalls[probe] += values
        self.marked_ok += other.marked_ok
        self.failed_named += other.failed_named

    def mean(self, probe: str) -> float | None:
        """Mean recall of ``probe`` in percent, over the points where it had something to recall.

        Two decimals: the two engines can differ by less than a tenth of a point.
        """
        values = self.recalls[probe]
        return round(100 * sum(values) / len(values), 2) if values else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "points": self.points,
            "mean_recall_pct": {p: self.mean(p) for p in PROBES},
            "scored_points": {p: len(v) for p, v in self.recalls.items()},
            "failed_marked_ok": self.marked_ok,
            "failed_named": self.failed_named,
        }


Board = dict[str, dict[str, Scores]]  # kind -> contender -> scores
Judged = tuple[dict[str, float | None], int, int]  # recalls, failed marked ok, failed named


def new_board() -> Board:
    return {kind: {c: Scores() for c in CONTENDERS} for kind in KINDS}


class _Recorder(_Replay):
    """The fits replay, remembering the view each call finally sent."""

    sent: tuple[Message, ...] | None = None

    def _look(self, given: Sequence[Message], view: Sequence[Message]) -> tuple[bool, bool]:
        self.sent = tuple(view)
        return super()._look(given, view)


def _same(view: Sequence[Message], original: Sequence[Message]) -> bool:
    return len(view) == len(original) and all(
        a is b or a == b for a, b in zip(view, original, strict=True)
    )


class _Transcript:
    """One transcript at one window: its truth and the baselines' scores, memoised per point."""

    def __init__(self, messages: Sequence[Message], engine: ContextEngine, counter: TokenCounter):
        self.messages = tuple(messages)
        self.truth = truth_of(self.messages)
        self.counter = counter
        self.budget = engine.threshold - engine.overhead_tokens
        self._baselines: dict[int, dict[str, Judged]] = {}

    def judge(self, view: Sequence[Message], truth: Truth) -> Judged:
        seen = read_view(view)
        return (score(seen, truth), *marked_ok(seen, truth))

    def baselines(self, point: int, truth: Truth) -> dict[str, Judged]:
        if point not in self._baselines:
            original = self.messages[:point]
            trimmed = cap_to_window(original, self.budget, self.counter)
            masked = cap_to_window(mask_observations(original), self.budget, self.counter)
            self._baselines[point] = {
                "trim_last": self.judge(trimmed, truth),
                "masking": self.judge(masked, truth),
            }
        return self._baselines[point]


@dataclass
class _Run:
    """One engine's replay of one transcript: its judged views by call point."""

    rewrites: dict[int, Judged] = field(default_factory=dict)
    compacts: dict[int, Judged] = field(default_factory=dict)
    errors: int = 0
    compact_errors: int = 0


async def _replay(
    facts: _Transcript,
    points: Sequence[int],
    compact_points: set[int],
    window: int,
    counter: TokenCounter,
    options: dict[str, Any],
) -> _Run:
    """Replay ``facts`` through an engine built with ``options``, judging what it sends."""
    run = _Recorder(build_engine("healthy", window, counter, **options), counter)
    found = _Run()
    consumed = 0
    for point in points:
        run.transcript.extend(facts.messages[consumed:point])
        consumed = point
        run.sent = None
        await run.call()
        truth = facts.truth.before(point)
        if run.sent is None:
            found.errors += 1
        elif not _same(run.sent, facts.messages[:point]):
            found.rewrites[point] = facts.judge(run.sent, truth)
        if point in compact_points:
            twin = build_engine("healthy", window, counter, **options)
            try:
                result = await twin.compact(tuple(run.transcript))
            except CompactionError:
                found.compact_errors += 1
                continue
            found.compacts[point] = facts.judge(result.messages, truth)
    return found


async def measure_transcript(
    messages: Sequence[Message],
    window: int,
    counter: TokenCounter,
    *,
    max_calls: int | None = None,
) -> tuple[Board, dict[str, int]]:
    """The scores of every contender at the rewrite and compact points of one replay per engine.

    The baselines are scored at the default engine's rewrite and compact points,
    and at the points where every engine rewrote (``rewrite_both``).
    """
    facts = _Transcript(messages, build_engine("healthy", window, counter), counter)
    points = call_points(facts.messages)[:max_calls]
    compact_points = {points[max(round(share * len(points)) - 1, 0)] for share in COMPACT_AT}
    runs = {
        name: await _replay(facts, points, compact_points, window, counter, options)
        for name, options in ENGINES.items()
    }
    board = new_board()
    stats = {"calls": len(points)}
    for name, run in runs.items():
        stats[f"{name}_errors"] = run.errors
        stats[f"{name}_compact_errors"] = run.compact_errors
        for kind, judged in (("rewrite", run.rewrites), ("compact", run.compacts)):
            for found in judged.values():
                board[kind][name].add(*found)
    default = runs["engine"]
    for kind, judged in (("rewrite", default.rewrites), ("compact", default.compacts)):
        for point in judged:
            _add_baselines(board[kind], facts.baselines(point, facts.truth.before(point)))
    shared = set.intersection(*(set(run.rewrites) for run in runs.values()))
    for point in sorted(shared):
        for name, run in runs.items():
            board["rewrite_both"][name].add(*run.rewrites[point])
        _add_baselines(board["rewrite_both"], facts.baselines(point, facts.truth.before(point)))
    return board, stats


def _add_baselines(scores: dict[str, Scores], baselines: dict[str, Judged]) -> None:
    for name, judged in baselines.items():
        scores[name].add(*judged)


async def measure_all(
    transcripts: Sequence[tuple[str, Sequence[Message]]],
    counter: TokenCounter,
    *,
    windows: Sequence[int] = WINDOWS,
    max_calls: int | None = None,
    verbose: bool = False,
) -> dict[str, Any]:
    """Totals per window and kind, and the same per transcript."""
    totals: dict[int, Board] = {}
    per_transcript: list[dict[str, Any]] = []
    for window in windows:
        total = totals.setdefault(window, new_board())
        for name, messages in transcripts:
            board, stats = await measure_transcript(messages, window, counter, max_calls=max_calls)
            for kind in KINDS:
                for contender in CONTENDERS:
                    total[kind][contender].merge(board[kind][contender])
            per_transcript.append(
                {
                    "transcript": name,
                    "window": window,
                    **stats,
                    **{kind: {c: board[kind][c].as_dict() for c in CONTENDERS} for kind in KINDS},
                }
            )
            if verbose:
                print(f"  {window:,}: {name}", file=sys.stderr)
    return {"totals": totals, "per_transcript": per_transcript}


def as_json(totals: dict[int, Board]) -> list[dict[str, Any]]:
    """One row per window, kind and contender."""
    return [
        {"window": window, "kind": kind, "contender": contender, **scores.as_dict()}
        for window, board in totals.items()
        for kind, by_contender in board.items()
        for contender, scores in by_contender.items()
    ]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{len(QUICK_TRANSCRIPTS)} transcripts, {QUICK_CALLS} calls each",
    )
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    parser.add_argument(
        "--docs", type=Path, help="page with the section (full: docs/benchmarks.md)"
    )
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.json is None:
        args.json = RESULTS / ("fidelity.json" if args.mode == "full" else "fidelity_quick.json")
    if args.docs is None and args.mode == "full":
        args.docs = DOCS
    return args


def quick_transcripts() -> list[tuple[str, tuple[Message, ...]]]:
    """The quick run's transcripts (none when the corpus is absent)."""
    loaded = load_transcripts(quick=False)
    return [(name, messages) for name, messages in loaded if name in QUICK_TRANSCRIPTS]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    transcripts = quick_transcripts() if args.quick else load_transcripts(quick=False)
    if not transcripts:
        print("note: no corpus; the fidelity benchmark skipped", file=sys.stderr)
        return 0
    counter, meta = corpus_run(
        args.mode,
        transcripts,
        WINDOWS,
        QUICK_CALLS if args.quick else None,
        compact_at=list(COMPACT_AT),
    )
    found = asyncio.run(
        measure_all(transcripts, counter, max_calls=meta["max_calls"], verbose=not args.quick)
    )
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    rows = as_json(found["totals"])
    print(report.tables(rows))
    data = {"meta": meta, "results": rows, "per_transcript": found["per_transcript"]}
    write_atomic(args.json, to_json(data))
    if args.docs is not None:
        page = args.docs.read_text(encoding="utf-8") if args.docs.exists() else ""
        write_atomic(args.docs, report.replace_section(page, report.section(meta, rows)))
        write_atomic(args.docs.with_name(PAGE.name), report.page(meta, data))
    print(f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
