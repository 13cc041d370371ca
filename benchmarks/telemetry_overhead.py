"""Cost of the OpenTelemetry instrumentation on the hot path when no SDK is configured.

Two engines project the same growing transcript below the threshold: one with
the real instrumentation (API only, no SDK: every span and metric a no-op) and
one whose telemetry is compiled out (replaced by a stub that does nothing).
Calls alternate between the two; medians and their ratio are reported.

Run: .venv/bin/python benchmarks/telemetry_overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")

from opentelemetry.trace import INVALID_SPAN, Span

from context_engine import ContextEngine, Message
from context_engine.testing import synthetic_session

RESULTS = Path(__file__).resolve().parent / "results" / "telemetry_overhead.json"


class CompiledOut:
    """A telemetry stand-in with the same methods that does nothing at all."""

    @contextlib.contextmanager
    def operation(self, name: str, attributes: dict[str, Any]) -> Iterator[Span]:
        yield INVALID_SPAN  # the same non-recording span the real telemetry hands out

    def rewrite(self, *args: Any) -> None:
        return None

    def breaker_moved(self, opened: bool) -> None:
        return None


async def measure(rounds: int, steps: int) -> dict[str, Any]:
    session = synthetic_session(steps)
    window = 10_000_000
    with_otel = ContextEngine.default(window)
    without = ContextEngine.default(window, token_counter=with_otel.counter)
    without._telemetry = CompiledOut()  # type: ignore[assignment]
    base = session[:-1]
    for engine in (with_otel, without):
        await engine.project(base)
    samples: dict[str, list[float]] = {"instrumented": [], "compiled_out": []}
    for round_number in range(rounds):
        appended = Message.user(f"note {round_number}: keep going")
        order = [("instrumented", with_otel), ("compiled_out", without)]
        if round_number % 2:
            order.reverse()
        for label, engine in order:
            messages = [*base, appended]
            started = time.perf_counter_ns()
            await engine.project(messages)
            samples[label].append((time.perf_counter_ns() - started) / 1000)
    medians = {label: statistics.median(values) for label, values in samples.items()}
    return {
        "steps": steps,
        "messages": len(session),
        "rounds": rounds,
        "median_us": medians,
        "ratio_instrumented_to_compiled_out": medians["instrumented"] / medians["compiled_out"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    result = asyncio.run(measure(args.rounds, args.steps))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    medians = result["median_us"]
    ratio = result["ratio_instrumented_to_compiled_out"]
    print(
        f"project below the threshold, {result['messages']} messages, {args.rounds} rounds: "
        f"instrumented {medians['instrumented']:.1f} µs, compiled out "
        f"{medians['compiled_out']:.1f} µs, ratio {ratio:.3f}"
    )


if __name__ == "__main__":
    main()
