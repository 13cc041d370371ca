"""Request sizes of the runtime adapters: the largest request of each runtime's agent loop.

Each installed runtime (LangChain, pydantic-ai, Strands, the OpenAI Agents
SDK) runs its own agent loop around a fake model of its own kind
(`_adapter_loops`): a code search returning several thousand tokens per call,
tool schemas and instructions of a few hundred tokens, compaction from
``("fraction", 0.8)`` of the window the model states. Every loop runs twice:
with the adapter counting the request's tool schemas and instructions into the
engine's overhead (the default) and without. Per runtime and window it prints
the threshold and the largest request as sent (messages, framing, schemas and
instructions, counted with the engine's own counter), how many requests went
over the threshold, and the largest view the engine itself measured
(pydantic-ai sends a tool result as one string; a result the engine wrote as
two text blocks goes out with a joining newline its count leaves out). The
Agents SDK sends its instructions as the leading system message the engine
projects, so its "uncounted" run leaves out only the tool schemas.

Archive references hash the runtime's message ids and timestamps, which are
random, and tokenize to slightly different lengths, so the figures move by a
few tokens from run to run.

    .venv/bin/python benchmarks/adapters.py            # 8k, 16k, 32k windows, 90 steps
    .venv/bin/python benchmarks/adapters.py --quick    # 8k and 16k windows, 45 steps

The full run writes benchmarks/results/adapters.json, the quick run
benchmarks/results/adapters_quick.json (``--json`` overrides either).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")  # no tokenizer download, ever

from _adapter_loops import RUNTIMES, Loop
from steady_state import load_average, package_versions, run_facts, to_json, write_atomic

from context_engine.tokens import TokenCounter, resolve_counter

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
WINDOWS = {"quick": (8_000, 16_000), "full": (8_000, 16_000, 32_000)}
STEPS = {"quick": 45, "full": 90}
PACKAGES = (
    "context-engine",
    "tiktoken",
    "langchain",
    "langchain-core",
    "langgraph",
    "pydantic-ai-slim",
    "strands-agents",
    "openai-agents",
)


def installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def row(runtime: str, window: int, counted: Loop, uncounted: Loop) -> dict[str, Any]:
    """One runtime at one window: the figures of both runs, side by side."""
    return {
        "runtime": runtime,
        "window": window,
        "threshold": counted.threshold,
        "beside_tokens": counted.beside,
        "requests": len(counted.requests),
        "max_counted": max(counted.requests),
        "over_counted": sum(r > counted.threshold for r in counted.requests),
        "max_measured": max(counted.measured),
        "max_uncounted": max(uncounted.requests),
        "over_uncounted": sum(r > uncounted.threshold for r in uncounted.requests),
        "finished": counted.finished and uncounted.finished,
        "checkpoint": counted.checkpoint,
        "counted": asdict(counted),
        "uncounted": asdict(uncounted),
    }


def measure(mode: str, counter: TokenCounter) -> list[dict[str, Any]]:
    rows = []
    for runtime, (module, loop) in RUNTIMES.items():
        if not installed(module):
            print(f"note: {module} is not installed; {runtime} skipped", file=sys.stderr)
            continue
        for window in WINDOWS[mode]:
            counted = loop(window, STEPS[mode], True, counter)
            uncounted = loop(window, STEPS[mode], False, counter)
            rows.append(row(runtime, window, counted, uncounted))
    return rows


COLUMNS = (
    ("runtime", "runtime"),
    ("window", "window"),
    ("threshold", "threshold"),
    ("tools+instr", "beside_tokens"),
    ("requests", "requests"),
    ("max counted", "max_counted"),
    ("over", "over_counted"),
    ("engine max", "max_measured"),
    ("max uncounted", "max_uncounted"),
    ("over", "over_uncounted"),
    ("finished", "finished"),
    ("checkpoint", "checkpoint"),
)


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a Markdown table."""
    lines = [
        "| " + " | ".join(title for title, _ in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for data in rows:
        cells = [
            f"{data[key]:,}"
            if isinstance(data[key], int) and not isinstance(data[key], bool)
            else str(data[key])
            for _, key in COLUMNS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help=f"8k and 16k windows, {STEPS['quick']} steps"
    )
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.json is None:
        args.json = RESULTS / ("adapters.json" if args.mode == "full" else "adapters_quick.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    # The engine logs every rewrite it makes; the table is what this run reports.
    logging.getLogger("context_engine").addHandler(logging.NullHandler())
    logging.getLogger("context_engine").propagate = False
    counter = resolve_counter()
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    meta = {
        **run_facts(command, args.mode, package_versions(PACKAGES)),
        "counter": repr(counter),
        "windows": list(WINDOWS[args.mode]),
        "steps": STEPS[args.mode],
        "trigger": ("fraction", 0.8),
        "load_average_start": load_average(),
    }
    rows = measure(args.mode, counter)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    print(table(rows))
    write_atomic(args.json, to_json({"meta": meta, "results": rows}))
    print(f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
