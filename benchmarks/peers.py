"""Side by side with the peers: pre-call cost, rewrites above the threshold, tool pairs, memory.

The peers are the packages of the ``bench`` extra (LangChain, Strands, AutoGen),
installed in their own virtualenv so the test environment never sees them:

    make bench-peers          # creates .venv-bench, full run: docs/benchmarks_peers.md
    make bench-peers-quick    # 50 to 1,000 steps, a few minutes, JSON only

Everything runs offline: the peers' models are stubs and every tokenizer is
the bundled cl100k encoding. All timed scenarios run in this one process,
each after a warm-up, interleaved round by round in a shuffled order;
medians, p90s and ratios of medians are reported. See `_peer_scenarios.py`
and `_peer_rewrites.py` for what each scenario calls.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import _peer_adapters as peers
import _peer_memory
import _peer_report
from _peer_rewrites import GROWTH, over_jobs, peer_over_jobs, sweep, sweep_fractions
from _peer_scenarios import LIGHT_TRIM_RESULT_LINES, Job, Session, steady_jobs
from steady_state import load_average, run_facts, to_json, write_atomic

from context_engine.testing import synthetic_session

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks_peers.md"
RESULTS = REPO / "benchmarks" / "results"
STEPS = {"quick": (50, 200, 1000), "full": (50, 200, 1000, 5000)}
SWEEP_STEPS = {"quick": (200,), "full": (200, 1000)}
MEMORY_STEPS = {"quick": (1000,), "full": (1000, 5000)}
CONCURRENT = {"quick": (200, 50), "full": (1000, 50)}  # sessions, steps each
OVER_FRACTION = 0.5
# Per job: a time budget for its timed calls, bounds on their number, and the
# longest single call a peer may be predicted to take before it is skipped.
BUDGET_S = {"quick": 1.5, "full": 8.0}
REPS = {"quick": (7, 200), "full": (15, 400)}
PROBE_LIMIT_S = {"quick": 10.0, "full": 30.0}


def calibrate(job: Job, mode: str) -> int:
    """Warm the job up and choose how many timed calls fit its budget."""
    costs: list[int] = []
    deadline = time.perf_counter() + 0.3
    while len(costs) < 2 or (len(costs) < 20 and time.perf_counter() < deadline):
        costs.append(job.run(job.make()))
    cost_s = statistics.median(costs) / 1e9
    low, high = REPS[mode]
    budget = BUDGET_S[mode]
    if cost_s * low > 3 * budget:  # a call of seconds: fewer samples, still a median
        return max(3, int(3 * budget / cost_s))
    return max(low, min(high, int(budget / cost_s)))


def measure(jobs: list[Job], mode: str, seed: int) -> None:
    """Time every job, interleaved: each round runs a shuffled subset, spread evenly."""
    plan = []
    for job in jobs:
        if "skipped" in job.info:
            continue
        reps = calibrate(job, mode)
        job.info["reps"] = reps
        plan.append((job, reps))
    gc.collect()
    gc.freeze()  # setup garbage stays out of the collections the timed calls trigger
    rounds = max((reps for _, reps in plan), default=0)
    rng = random.Random(seed)
    for r in range(rounds):
        due = [job for job, reps in plan if (r * reps) // rounds != ((r + 1) * reps) // rounds]
        rng.shuffle(due)
        for job in due:
            job.samples.append(job.run(job.make()))
        if (r + 1) % max(1, rounds // 4) == 0:
            print(f"  round {r + 1}/{rounds}", file=sys.stderr)
    gc.unfreeze()


def stats(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = (
        statistics.quantiles(ordered, n=10, method="inclusive")[8]
        if len(ordered) > 1
        else ordered[0]
    )
    return {
        "median_us": round(statistics.median(ordered) / 1e3, 1),
        "p90_us": round(p90 / 1e3, 1),
        "n": len(ordered),
    }


class Skipper:
    """Skips a peer whose next call is predicted to take longer than the limit."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.seen: dict[str, tuple[int, float]] = {}

    def __call__(self, name: str, steps: int) -> str | None:
        if name not in self.seen:
            return None
        last_steps, last_s = self.seen[name]
        predicted = last_s * (steps / last_steps) ** GROWTH.get(name, 1.0)
        if predicted > self.limit_s:
            return (
                f"one call predicted at {predicted:,.0f} s "
                f"(took {last_s:,.1f} s at {last_steps:,} steps)"
            )
        return None

    def record(self, jobs: list[Job]) -> None:
        for job in jobs:
            if "probe_s" in job.info:
                self.seen[job.name] = (job.steps, job.info["probe_s"])


def rows_of(jobs: list[Job], sessions: dict[int, Session]) -> list[dict[str, Any]]:
    rows = []
    for job in jobs:
        info = {k: v for k, v in job.info.items() if k != "reps"}
        row = {"section": job.section, "steps": job.steps, "scenario": job.name, **info}
        row["messages"] = len(sessions[job.steps].prefix) + 1
        row.setdefault("tokens", sessions[job.steps].tokens)
        if job.samples:
            row.update(stats(job.samples))
        rows.append(row)
    return rows


def run_timings(mode: str, seed: int, loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    sessions = {steps: Session.build(steps) for steps in STEPS[mode]}
    jobs: list[Job] = []
    skipper = Skipper(PROBE_LIMIT_S[mode])
    for steps, session in sessions.items():
        print(f"preparing {steps} steps ({session.tokens:,} tokens)", file=sys.stderr)
        jobs += steady_jobs(session, loop)
        long_session = Session.build(steps, result_lines=LIGHT_TRIM_RESULT_LINES)
        jobs += over_jobs(session, long_session, OVER_FRACTION, loop)
        peer_jobs = peer_over_jobs(session, OVER_FRACTION, loop, skipper)
        skipper.record(peer_jobs)
        jobs += peer_jobs
    print(f"timing {len(jobs)} jobs", file=sys.stderr)
    measure(jobs, mode, seed)
    return rows_of(jobs, sessions)


def run_sweeps(mode: str) -> dict[str, Any]:
    results = {}
    for steps in SWEEP_STEPS[mode]:
        print(f"budget sweep at {steps} steps", file=sys.stderr)
        results[str(steps)] = sweep(synthetic_session(steps), sweep_fractions())
    return results


def environment(command: str, mode: str) -> dict[str, Any]:
    return {**run_facts(command, mode, peers.versions()), "over_fraction": OVER_FRACTION}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 to 1,000 steps, fewer samples")
    parser.add_argument(
        "--docs", type=Path, help="Markdown output (full run: docs/benchmarks_peers.md)"
    )
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    parser.add_argument("--seed", type=int, default=20240601, help="order of the interleaving")
    parser.add_argument("--render", type=Path, help="only rewrite the page from this results file")
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.docs is None and args.mode == "full":
        args.docs = DOCS
    if args.json is None:
        args.json = RESULTS / ("peers.json" if args.mode == "full" else "peers_quick.json")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render is not None:
        data = json.loads(args.render.read_text(encoding="utf-8"))
        data["targets"] = _peer_report.targets(_peer_report.with_siblings(data))
        write_atomic(args.docs or DOCS, _peer_report.render(data))
        return
    started = time.perf_counter()
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    meta = environment(command, args.mode)
    meta["load_average_start"] = load_average()
    loop = asyncio.new_event_loop()
    try:
        rows = run_timings(args.mode, args.seed, loop)
    finally:
        loop.close()
    data: dict[str, Any] = {"meta": meta, "timings": rows}
    data["sweep"] = run_sweeps(args.mode)
    print("memory (tracemalloc)", file=sys.stderr)
    data["memory"] = _peer_memory.measure(MEMORY_STEPS[args.mode], *CONCURRENT[args.mode])
    data["heuristic_error"] = _peer_memory.heuristic_error()
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    data["targets"] = _peer_report.targets(_peer_report.with_siblings(data))
    write_atomic(args.json, to_json(data))
    text = _peer_report.render(data)
    print(text)
    if args.docs is not None:
        write_atomic(args.docs, text)
    print(
        f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}"
        + (f" and {args.docs}" if args.docs else ""),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
