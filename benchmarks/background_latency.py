"""How long an agent loop waits on `project` for a slow summarizer, with `BackgroundSummary` or not.

Issue 19 item 5's check in real time: a summarizer that takes 2 s, an agent
whose own model call takes ``--model-seconds``, one file read per step. The
same loop runs with a plain `FullSummary` (the summary is written at the
threshold, while the agent waits) and with `BackgroundSummary` (written from
the pre-trigger, swapped in at the threshold). For the calls from the
pre-trigger on, it reports how many there were, how many waited for a
summary (``project`` took longer than ``--waited-ms``), the longest and the
median ``project`` time, and how many summaries were written.

    .venv/bin/python benchmarks/background_latency.py                  # under two minutes
    .venv/bin/python benchmarks/background_latency.py --summary-seconds 0.2 --model-seconds 0.05

It prints a table; nothing is written to docs/ or benchmarks/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable

from context_engine import ContextEngine, Message, SummaryRequest, ToolCall
from context_engine.strategies import BackgroundSummary, FullSummary, HardTruncate, Strategy
from context_engine.testing import FixedTokenCounter

WINDOW, RESERVE = 40_000, 8_000  # threshold 32,000; the background summary starts at 25,600


class SlowSummarizer:
    """Answers after ``seconds``, like a model writing a summary."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    async def __call__(self, request: SummaryRequest) -> str:
        self.calls += 1
        await asyncio.sleep(self.seconds)
        return f"## Goal\n- read the modules ({len(request.messages)} messages summarized)"


def file_round(index: int) -> list[Message]:
    call = ToolCall(f"c{index}", "read_file", json.dumps({"path": f"src/m{index}.py"}))
    return [
        Message.assistant(f"Reading m{index}.", tool_calls=[call]),
        Message.tool(call.id, f"m{index}\n" + "x = 1\n" * 400, name="read_file"),
    ]


async def run(
    label: str,
    pipeline: Callable[[SlowSummarizer], list[Strategy]],
    args: argparse.Namespace,
) -> dict[str, object]:
    summarizer = SlowSummarizer(args.summary_seconds)
    engine = ContextEngine(
        WINDOW,
        pipeline(summarizer),
        reserve_tokens=RESERVE,
        token_counter=FixedTokenCounter(),
        max_llm_rewrites_per_request=None,
    )
    transcript = [Message.system("You are a coder."), Message.user("Read every module.")]
    pre_trigger = int(0.8 * engine.threshold)
    timings: list[float] = []
    passed = False
    for step in range(args.steps):
        transcript += file_round(step)
        started = time.perf_counter()
        projection = await engine.project(transcript)
        elapsed = time.perf_counter() - started
        passed = passed or projection.usage.tokens >= pre_trigger
        if passed:
            timings.append(elapsed)
        if projection.commit is not None:
            transcript = list(projection.commit)
        await asyncio.sleep(args.model_seconds)  # the agent's own model call
    await engine.close()
    waited = sum(t * 1000 > args.waited_ms for t in timings)
    return {
        "pipeline": label,
        "calls": len(timings),
        "waited": waited,
        "max_ms": max(timings, default=0.0) * 1000,
        "median_ms": statistics.median(timings) * 1000 if timings else 0.0,
        "summaries": summarizer.calls,
    }


def pipelines() -> dict[str, Callable[[SlowSummarizer], list[Strategy]]]:
    return {
        "FullSummary": lambda s: [FullSummary(summarizer=s), HardTruncate()],
        "BackgroundSummary": lambda s: [
            BackgroundSummary(summary=FullSummary(summarizer=s)),
            HardTruncate(),
        ],
    }


def table(rows: list[dict[str, object]], args: argparse.Namespace) -> str:
    lines = [
        f"summarizer {args.summary_seconds} s, agent model call {args.model_seconds} s, "
        f"{args.steps} steps, window {WINDOW:,}, threshold {WINDOW - RESERVE:,}",
        "",
        f"| pipeline | calls from the pre-trigger | waited > {args.waited_ms:g} ms "
        "| longest project (ms) | median project (ms) | summaries |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['pipeline']} | {row['calls']} | {row['waited']} | {row['max_ms']:,.1f} "
            f"| {row['median_ms']:,.2f} | {row['summaries']} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary-seconds", type=float, default=2.0)
    parser.add_argument("--model-seconds", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--waited-ms", type=float, default=100.0)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    args = parse_args(argv)
    rows = [asyncio.run(run(label, build, args)) for label, build in pipelines().items()]
    print(table(rows, args))
    return rows


if __name__ == "__main__":
    main()
