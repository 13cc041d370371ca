"""Memory a dropped session leaves behind: measured with tracemalloc.

An agent runs an engine over a long session, call by call, then drops the
engine and its transcript. Everything the engine derived from those messages
(token counts, digests, cleared and trimmed copies) should go with them; what
stays is held by something global. This script builds a synthetic coding
session with large tool results, projects it step by step with
``ContextEngine.default`` and a small window (so microcompact, light trim and
hard truncate rewrite on most calls), drops everything, runs ``gc.collect()``
and prints how much traced memory is still held.

    .venv/bin/python benchmarks/memory_release.py            # 3,000 steps, 20 KB results
    .venv/bin/python benchmarks/memory_release.py --quick    # 300 steps, in seconds

Results go to benchmarks/results/memory_release.json (``--json`` overrides).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from steady_state import package_versions, run_facts, write_atomic

from context_engine import ContextEngine, Message
from context_engine.testing import synthetic_session

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
STEPS = {"quick": 300, "full": 3_000}
# One line of a synthetic file read is about 57 characters.
LINE_CHARS = 57
MB = 1024 * 1024


def build_session(steps: int, result_kb: int) -> list[Message]:
    """A synthetic session whose file reads are about ``result_kb`` KB each."""
    return synthetic_session(steps, result_lines=max(1, result_kb * 1024 // LINE_CHARS))


def run_session(session: list[Message], window: int) -> dict[str, Any]:
    """Project the session once per tool result, as an agent loop calls before each turn."""
    engine = ContextEngine.default(window)
    calls = rewritten = 0
    started = time.perf_counter()
    for end in [index + 1 for index, message in enumerate(session) if message.role == "tool"]:
        projection = engine.project_sync(session[:end])
        calls += 1
        rewritten += projection.changed
    return {"calls": calls, "rewritten": rewritten, "seconds": time.perf_counter() - started}


def measure(steps: int, result_kb: int, window: int) -> dict[str, Any]:
    """Traced memory before, at the peak, and after the session is dropped and collected."""
    # Warm up what a process loads once (the tokenizer, compiled patterns), untraced.
    run_session(build_session(3, 1), window)
    gc.collect()
    tracemalloc.start()
    baseline = tracemalloc.get_traced_memory()[0]
    session = build_session(steps, result_kb)
    results = [len(m.text) for m in session if m.role == "tool"]
    session_bytes = tracemalloc.get_traced_memory()[0] - baseline
    run = run_session(session, window)
    peak = tracemalloc.get_traced_memory()[1] - baseline
    del session
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - baseline
    top = tracemalloc.take_snapshot().statistics("filename")[:5]
    tracemalloc.stop()
    return {
        "steps": steps,
        "window": window,
        "tool_results": len(results),
        "median_tool_result_kb": round(statistics.median(results) / 1024, 1),
        "session_mb": round(session_bytes / MB, 1),
        "peak_mb": round(peak / MB, 1),
        "held_after_drop_mb": round(held / MB, 2),
        "top_holders": [f"{s.traceback[0].filename}: {s.size / MB:.2f} MB" for s in top],
        **run,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 steps instead of 3,000")
    parser.add_argument("--steps", type=int, help="session length in tool steps")
    parser.add_argument("--result-kb", type=int, default=20, help="size of a file read")
    parser.add_argument("--window", type=int, default=32_768, help="context window in tokens")
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    steps = args.steps if args.steps is not None else STEPS[mode]
    figures = measure(steps, args.result_kb, args.window)
    for key, value in figures.items():
        if key != "top_holders":
            print(f"{key}: {value}")
    print("largest holders after the drop:")
    for line in figures["top_holders"]:
        print(f"  {line}")
    command = "benchmarks/memory_release.py" + (" --quick" if args.quick else "")
    versions = package_versions(("context-engine", "tiktoken", "attrs"))
    record = {"environment": run_facts(command, mode, versions), "figures": figures}
    out = args.json or RESULTS / f"memory_release{'_quick' if args.quick else ''}.json"
    write_atomic(out, json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
