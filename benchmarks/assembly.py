"""Context assembly: what three providers add to a `project` call, and prefix reuse by placement.

Two measurements, both in this one process:

1. Overhead. A warm engine with no providers and one with three (a static
   house-rules block, an identity-and-date header, a per-call status) each
   project the same history plus one fresh tool result, interleaved call by
   call in a shuffled order; medians and p90s of ``time.perf_counter_ns``.
2. Prefix reuse. Every dev-corpus transcript is replayed call by call (a call
   before each assistant message) with a stable rules file and a per-call
   status placed ``stable``, ``volatile`` or ``tail``; the trace's reused
   tokens over the prompt tokens is the share a prompt cache could reuse. The
   invariants are checked on every view (provider blocks stripped).

    .venv/bin/python benchmarks/assembly.py            # full run, rewrites the marked section
    .venv/bin/python benchmarks/assembly.py --quick    # fewer calls and transcripts, prints only
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from context_engine import ContextEngine, Message, ToolCall
from context_engine.assembly import (
    CallableProvider,
    ContextProvider,
    FileProvider,
    HeaderProvider,
    ProviderRequest,
    StaticProvider,
    strip_provided,
)
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.testing import synthetic_session

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"
DOCS = REPO / "docs" / "benchmarks.md"
RESULTS = REPO / "benchmarks" / "results"
SECTION = re.compile(r"<!-- assembly:start -->.*?<!-- assembly:end -->", re.DOTALL)
CALL_ID = "call_bench"
PENDING = Message.assistant(
    "Reading the module once more.",
    tool_calls=[ToolCall(CALL_ID, "read_file", '{"path": "src/app/parser.py"}')],
)
RULES = "\n".join(f"{n}. Keep public names stable; test before committing." for n in range(1, 21))
_serial = 0


def fresh_result() -> Message:
    """A new tool result of a realistic size, unequal to any before."""
    global _serial
    _serial += 1
    rows = [f"{n:4d}    total_{_serial}_{n} = accumulate(rows[{n}])" for n in range(1, 31)]
    return Message.tool(CALL_ID, "\n".join(rows), name="read_file")


def status(request: ProviderRequest) -> str:
    """A per-call status: different on every call, like a clock or a queue length."""
    return f"Build queue: {_serial} jobs; last check {time.perf_counter_ns()}"


def three_providers() -> list[ContextProvider]:
    return [
        StaticProvider(text=RULES, name="house_rules"),
        HeaderProvider(
            identity={"Tenant": "acme", "User": "ada"}, today=lambda: dt.date(2026, 1, 1)
        ),
        CallableProvider(function=status, name="status"),
    ]


def overhead(loop: asyncio.AbstractEventLoop, calls: int, seed: int) -> list[dict[str, Any]]:
    """Median and p90 of `project` with no providers and with three, per workload."""
    workloads = [("synthetic_session(200)", synthetic_session(200))]
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if files:
        largest = max(files, key=lambda p: p.stat().st_size)
        dicts = [json.loads(line) for line in largest.read_text().splitlines() if line.strip()]
        workloads.insert(0, (f"corpus: {largest.stem}", from_openai(dicts)))
    rows = []
    rng = random.Random(seed)
    for name, base in workloads:
        history = [*base, PENDING]
        window = max(65_536, 2 * ContextEngine.default(10**9).estimate(history).tokens)
        engines = {
            "none": ContextEngine.default(window),
            "three": ContextEngine.default(window, providers=three_providers()),
        }
        for engine in engines.values():
            loop.run_until_complete(engine.project([*history, fresh_result()]))
        samples: dict[str, list[int]] = {key: [] for key in engines}
        gc.collect()
        gc.freeze()  # setup garbage stays out of the collections the timed calls trigger
        for _ in range(calls):
            order = list(engines)
            rng.shuffle(order)
            for key in order:
                history.append(fresh_result())
                start = time.perf_counter_ns()
                result = loop.run_until_complete(engines[key].project(history))
                samples[key].append(time.perf_counter_ns() - start)
                history.pop()
                if result.changed:
                    raise SystemExit("benchmark invalid: a strategy ran; the window is too small")
        gc.unfreeze()
        row: dict[str, Any] = {"workload": name, "messages": len(history) + 1}
        for key, values in samples.items():
            ordered = sorted(values)
            row[f"{key}_median_us"] = statistics.median(ordered) / 1e3
            row[f"{key}_p90_us"] = ordered[int(0.9 * (len(ordered) - 1))] / 1e3
        rows.append(row)
    return rows


def call_points(messages: list[Message]) -> list[int]:
    """Where the model was called: before each assistant message."""
    return [i for i, m in enumerate(messages) if m.role == "assistant" and i > 0]


def reuse(files: list[Path], window: int, max_calls: int) -> list[dict[str, Any]]:
    """Prefix reuse per placement of the per-call status, over the corpus replay."""
    root = Path(tempfile.mkdtemp())
    (root / "AGENTS.md").write_text(RULES, encoding="utf-8")
    totals = {p: {"reused": 0, "prompt": 0, "calls": 0, "problems": 0} for p in PLACEMENTS}
    for path in files:
        dicts = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        messages = from_openai(dicts)
        points = call_points(messages)[:max_calls]
        for placement in PLACEMENTS:
            providers: list[ContextProvider] = [
                FileProvider(root=root, paths=["AGENTS.md"], name="rules"),
                CallableProvider(function=status, name="status", placement=placement),
            ]
            engine = ContextEngine.default(window, providers=providers)
            total = totals[placement]
            for index in points:
                prompt = messages[:index]
                result = engine.project_sync(prompt)
                total["problems"] += len(check_view(prompt, strip_provided(result.messages)))
                total["reused"] += result.trace.reused_tokens
                total["prompt"] += sum(map(engine.counter.count_message, result.messages))
                total["calls"] += 1
    return [
        {
            "placement": placement,
            "calls": t["calls"],
            "prompt_tokens": t["prompt"],
            "reused_tokens": t["reused"],
            "reused_share": t["reused"] / t["prompt"] if t["prompt"] else 0.0,
            "invariant_problems": t["problems"],
        }
        for placement, t in totals.items()
    ]


PLACEMENTS = ("stable", "volatile", "tail")


def render(cost: list[dict[str, Any]], reused: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "<!-- assembly:start -->",
        "## Context assembly",
        "",
        f"From `benchmarks/assembly.py` ({meta['command']}, {meta['date']}, "
        f"Python {meta['python']}); raw figures in `benchmarks/results/assembly.json`.",
        "",
        "`project` on a warm engine, one fresh tool result appended per call, with no",
        "providers and with three (house rules, identity-and-date header, per-call status):",
        "",
        "| workload | messages | none (µs) | none p90 | three (µs) | three p90 | added (µs) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in cost:
        added = row["three_median_us"] - row["none_median_us"]
        lines.append(
            f"| {row['workload']} | {row['messages']} | {row['none_median_us']:.0f} | "
            f"{row['none_p90_us']:.0f} | {row['three_median_us']:.0f} | "
            f"{row['three_p90_us']:.0f} | {added:.0f} |"
        )
    lines += [
        "",
        f"Prefix reuse over the dev corpus ({meta['transcripts']} transcripts, a call before",
        f"each assistant message, at most {meta['max_calls']} per transcript, window "
        f"{meta['window']:,}): a stable rules file",
        "plus a per-call status placed three ways. Reused share: tokens of the leading",
        "messages each prompt shares with the one before, over all prompt tokens.",
        "",
        "| status placement | calls | prompt tokens | reused tokens | reused share "
        "| invariant problems |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in reused:
        lines.append(
            f"| {row['placement']} | {row['calls']} | {row['prompt_tokens']:,} | "
            f"{row['reused_tokens']:,} | {row['reused_share']:.1%} | {row['invariant_problems']} |"
        )
    lines += ["<!-- assembly:end -->"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls; print only")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    calls, max_calls = (150, 40) if args.quick else (600, 200)
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if args.quick:
        files = files[:4]
    window = 32_000
    loop = asyncio.new_event_loop()
    cost = overhead(loop, calls, args.seed)
    reused = reuse(files, window, max_calls) if files else []
    meta = {
        "command": "--quick" if args.quick else "full run",
        "date": dt.date.today().isoformat(),
        "python": sys.version.split()[0],
        "transcripts": len(files),
        "max_calls": max_calls,
        "window": window,
    }
    page = render(cost, reused, meta)
    print(page)
    if any(row["invariant_problems"] for row in reused):
        raise SystemExit("invariants broken on some view")
    if args.quick:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "overhead": cost, "reuse": reused}
    (RESULTS / "assembly.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    old = DOCS.read_text(encoding="utf-8")
    new = SECTION.sub(lambda _: page, old) if SECTION.search(old) else f"{old.rstrip()}\n\n{page}\n"
    DOCS.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
