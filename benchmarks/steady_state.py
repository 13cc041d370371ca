"""Steady-state cost of `ContextEngine.project`: one appended message on a warm engine.

Backs the claim that a call which appends one step to a long history costs
work proportional to that step, not to the history. Every scenario runs in
this one process, interleaved round by round in a shuffled order, and is
timed with ``time.perf_counter_ns``; medians and p90s are reported.

    .venv/bin/python benchmarks/steady_state.py            # full run (make bench)
    .venv/bin/python benchmarks/steady_state.py --quick    # under two minutes (make bench-quick)

The full run rewrites docs/benchmarks.md and benchmarks/results/steady_state.json;
the quick run prints the table and writes benchmarks/results/steady_state_quick.json
only, so a smoke run never replaces the published numbers (``--docs`` / ``--json``
override either path).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import gc
import json
import os
import platform
import random
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from context_engine import ContextEngine, Message, ToolCall
from context_engine.formats.openai import from_openai, message_to_openai, to_openai
from context_engine.testing import synthetic_session

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"
DOCS = REPO / "docs" / "benchmarks.md"
RESULTS = REPO / "benchmarks" / "results"
STEPS = {"quick": (50, 200, 1000), "full": (50, 200, 1000, 5000)}
# Per (workload, scenario): a time budget for the timed calls, and bounds on their number.
BUDGET_S = {"quick": 4.0, "full": 15.0}
REPS = {"quick": (15, 300), "full": (21, 600)}
CALL_ID = "call_bench"
PENDING = Message.assistant(
    "Reading the module once more.",
    tool_calls=[ToolCall(CALL_ID, "read_file", '{"path": "src/app/parser.py"}')],
)
_serial = 0


def fresh_result() -> Message:
    """A new tool result of a realistic size (a 30-line file read), unequal to any before."""
    global _serial
    _serial += 1
    rows = [f"# src/app/generated_{_serial}.py"]
    rows += [
        f"{n:4d}    total_{_serial}_{n} = accumulate(rows[{n}], scale={(_serial * n) % 97})"
        for n in range(1, 31)
    ]
    return Message.tool(CALL_ID, "\n".join(rows), name="read_file")


def texts_of(messages: list[Message] | tuple[Message, ...]) -> list[str]:
    """Every string the counter tokenizes, for the cold whole-transcript baseline."""
    texts: list[str] = []
    for message in messages:
        if message.name:
            texts.append(message.name)
        for block in message.content:
            for attr in ("text", "thinking", "name", "arguments"):
                value = getattr(block, attr, None)
                if isinstance(value, str):
                    texts.append(value)
    return texts


@dataclass
class Case:
    """One workload, ready to time: the warm prefix, its dicts and one engine per scenario."""

    name: str
    transcript: list[Message]
    dicts: list[dict[str, Any]]
    window: int
    engines: dict[str, ContextEngine] = field(default_factory=dict)
    prefix_texts: list[str] = field(default_factory=list)
    tokens: int = 0
    samples: dict[str, list[int]] = field(default_factory=dict)
    reps: dict[str, int] = field(default_factory=dict)


def load_workloads(mode: str) -> list[tuple[str, list[Message], list[dict[str, Any]]]]:
    workloads = []
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if files:
        largest = max(files, key=lambda p: p.stat().st_size)
        with largest.open(encoding="utf-8") as handle:
            dicts = [json.loads(line) for line in handle if line.strip()]
        workloads.append((f"corpus: {largest.stem}", from_openai(dicts), dicts))
    else:
        print(f"note: no corpus at {CORPUS}; corpus workload skipped", file=sys.stderr)
    for steps in STEPS[mode]:
        session = synthetic_session(steps)
        workloads.append((f"synthetic_session({steps})", session, to_openai(session)))
    return workloads


def prepare(name: str, base: list[Message], dicts: list[dict[str, Any]], loop: Any) -> Case:
    """Warm one engine per scenario on the first N-1 messages, as an agent loop would."""
    prefix = [*base, PENDING]
    tokens = ContextEngine.default(1_000_000_000).estimate([*prefix, fresh_result()]).tokens
    # Twice the transcript keeps the view far below the threshold: no strategy runs.
    case = Case(name, prefix, [*dicts, message_to_openai(PENDING)], max(65_536, 2 * tokens))
    case.tokens = tokens
    case.prefix_texts = texts_of(prefix)
    for scenario in ("project", "project_sync", "rebuilt"):
        engine = ContextEngine.default(case.window)
        warm = from_openai(case.dicts) if scenario == "rebuilt" else prefix
        loop.run_until_complete(engine.project(warm))
        case.engines[scenario] = engine
    return case


@contextlib.contextmanager
def appended(history: list[Any], item: Any) -> Iterator[None]:
    """The agent loop's step: append the new message, call the engine, then undo it."""
    history.append(item)
    try:
        yield
    finally:
        history.pop()


async def _timed_project(engine: ContextEngine, transcript: list[Message]) -> int:
    start = time.perf_counter_ns()
    projection = await engine.project(transcript)
    elapsed = time.perf_counter_ns() - start
    check(projection.changed, projection.messages, transcript)
    return elapsed


def check(changed: bool, view: tuple[Message, ...], transcript: list[Message]) -> None:
    if changed or view[-1] is not transcript[-1]:
        raise SystemExit("benchmark invalid: the view was rewritten; the window is too small")


Step = Callable[[Any], dict[str, int]]


def steps_for(case: Case, loop: Any) -> dict[str, tuple[Callable[[], Any], Step]]:
    """Per scenario: how to build one input (untimed) and how to time one call on it."""
    engines = case.engines
    encode = engines["project"].counter.encoding.encode_ordinary  # type: ignore[attr-defined]

    def run_project(message: Message) -> dict[str, int]:
        with appended(case.transcript, message):
            elapsed = loop.run_until_complete(_timed_project(engines["project"], case.transcript))
        return {"project": elapsed}

    def run_sync(message: Message) -> dict[str, int]:
        with appended(case.transcript, message):
            start = time.perf_counter_ns()
            projection = engines["project_sync"].project_sync(case.transcript)
            elapsed = time.perf_counter_ns() - start
            check(projection.changed, projection.messages, case.transcript)
        return {"project_sync": elapsed}

    def run_floor(text: str) -> dict[str, int]:
        start = time.perf_counter_ns()
        len(encode(text))
        return {"floor": time.perf_counter_ns() - start}

    def run_full(text: str) -> dict[str, int]:
        start = time.perf_counter_ns()
        total = sum(len(encode(t)) for t in case.prefix_texts) + len(encode(text))
        elapsed = time.perf_counter_ns() - start
        assert total > 0
        return {"full_tokenize": elapsed}

    def run_rebuilt(data: dict[str, Any]) -> dict[str, int]:
        with appended(case.dicts, data):
            start = time.perf_counter_ns()
            messages = from_openai(case.dicts)
            converted = time.perf_counter_ns()
            elapsed = loop.run_until_complete(_timed_project(engines["rebuilt"], messages))
        return {"from_openai": converted - start, "rebuilt_project": elapsed}

    return {
        "project": (fresh_result, run_project),
        "project_sync": (fresh_result, run_sync),
        "floor": (lambda: fresh_result().text, run_floor),
        "full_tokenize": (lambda: fresh_result().text, run_full),
        "rebuilt": (lambda: message_to_openai(fresh_result()), run_rebuilt),
    }


def calibrate(make: Callable[[], Any], run: Step, mode: str) -> int:
    """Warm the scenario up and choose how many timed calls fit its budget."""
    costs: list[int] = []
    deadline = time.perf_counter() + 0.3
    while len(costs) < 3 or (len(costs) < 30 and time.perf_counter() < deadline):
        costs.append(sum(run(make()).values()))
    low, high = REPS[mode]
    cost_s = statistics.median(costs) / 1e9
    return max(low, min(high, int(BUDGET_S[mode] / cost_s)))


def measure(cases: list[Case], loop: Any, mode: str, seed: int) -> None:
    """Time every scenario of every case, interleaved: each round runs a shuffled subset."""
    jobs = []
    for case in cases:
        for scenario, (make, run) in steps_for(case, loop).items():
            reps = calibrate(make, run, mode)
            case.reps[scenario] = reps
            jobs.append((case, reps, [make() for _ in range(reps)], run))
        print(f"calibrated {case.name}: {case.reps}", file=sys.stderr)
    gc.collect()
    gc.freeze()  # setup garbage stays out of the collections the timed calls trigger
    rounds = max(reps for _, reps, _, _ in jobs)
    rng = random.Random(seed)
    for r in range(rounds):
        due = [job for job in jobs if (r * job[1]) // rounds != ((r + 1) * job[1]) // rounds]
        rng.shuffle(due)
        for case, _, inputs, run in due:
            for key, value in run(inputs.pop()).items():
                case.samples.setdefault(key, []).append(value)
        if (r + 1) % max(1, rounds // 5) == 0:
            print(f"round {r + 1}/{rounds}", file=sys.stderr)
    gc.unfreeze()


def stats(samples: list[int]) -> dict[str, float]:
    ordered = sorted(samples)
    p90 = statistics.quantiles(ordered, n=10, method="inclusive")[8] if len(ordered) > 1 else 0
    return {
        "median_us": round(statistics.median(ordered) / 1e3, 1),
        "p90_us": round(p90 / 1e3, 1),
        "min_us": round(ordered[0] / 1e3, 1),
        "n": len(ordered),
    }


def summarize(case: Case) -> dict[str, Any]:
    result = {key: stats(values) for key, values in case.samples.items()}
    project, full = result["project"]["median_us"], result["full_tokenize"]["median_us"]
    return {
        "workload": case.name,
        "messages": len(case.transcript) + 1,
        "tokens": case.tokens,
        "window": case.window,
        "scenarios": result,
        "ratio_project_full_tokenize": round(project / full, 5),
        "ratio_project_floor": round(project / result["floor"]["median_us"], 3),
        "ratio_rebuilt_project_full_tokenize": round(
            result["rebuilt_project"]["median_us"] / full, 5
        ),
        "samples_ns": case.samples,
    }


def fmt(value: float, digits: int = 3) -> str:
    """Three significant digits, thousands separated, no scientific notation."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(f"{abs(value):e}".split("e")[1]))
    return f"{value:,.{decimals}f}"


Row = dict[str, Any]
Column = tuple[str, Callable[[Row], str]]


def _at(scenario: str, stat: str = "median_us", scale: float = 1.0) -> Callable[[Row], str]:
    return lambda row: fmt(row["scenarios"][scenario][stat] / scale)


def _ratio(key: str) -> Callable[[Row], str]:
    return lambda row: fmt(row[key], 2)


def _name(row: Row) -> str:
    return str(row["workload"])


MAIN: list[Column] = [
    ("workload", _name),
    ("messages", lambda row: f"{row['messages']:,}"),
    ("tokens", lambda row: f"{row['tokens']:,}"),
    ("project (µs)", _at("project")),
    ("project_sync (µs)", _at("project_sync")),
    ("floor (µs)", _at("floor")),
    ("full tokenize (ms)", _at("full_tokenize", scale=1e3)),
    ("project / full tokenize", _ratio("ratio_project_full_tokenize")),
    ("project / floor", _ratio("ratio_project_floor")),
]
SPREAD: list[Column] = [
    ("workload", _name),
    ("project p90 (µs)", _at("project", "p90_us")),
    ("project_sync p90 (µs)", _at("project_sync", "p90_us")),
    ("floor p90 (µs)", _at("floor", "p90_us")),
    ("full tokenize p90 (ms)", _at("full_tokenize", "p90_us", 1e3)),
    (
        "samples (project / full tokenize)",
        lambda row: "{} / {}".format(
            row["scenarios"]["project"]["n"], row["scenarios"]["full_tokenize"]["n"]
        ),
    ),
]
REBUILT: list[Column] = [
    ("workload", _name),
    ("project, rebuilt (µs)", _at("rebuilt_project")),
    ("p90 (µs)", _at("rebuilt_project", "p90_us")),
    ("from_openai (ms)", _at("from_openai", scale=1e3)),
    ("p90 (ms)", _at("from_openai", "p90_us", 1e3)),
    ("project, rebuilt / full tokenize", _ratio("ratio_rebuilt_project_full_tokenize")),
]


def table(columns: list[Column], rows: list[Row]) -> list[str]:
    lines = ["| " + " | ".join(title for title, _ in columns) + " |"]
    lines.append("| --- |" + " ---: |" * (len(columns) - 1))
    lines += ["| " + " | ".join(cell(row) for _, cell in columns) + " |" for row in rows]
    return lines


def tables(rows: list[Row]) -> str:
    return "\n".join(
        [
            *table(MAIN, rows),
            "",
            "Spread (p90) and sample counts:",
            "",
            *table(SPREAD, rows),
            "",
            "Rebuilt messages (the caller converts dicts with `from_openai` on every call):",
            "",
            *table(REBUILT, rows),
        ]
    )


def package_versions(packages: Iterable[str]) -> dict[str, str]:
    """The installed version of each package, or "not installed"."""
    versions = {}
    for package in packages:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


def run_facts(command: str, mode: str, versions: dict[str, str]) -> dict[str, Any]:
    """What every benchmark records about its run: when, how, on what machine, with what."""
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "mode": mode,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
    }


def environment(command: str, mode: str, counter: object, appended_tokens: int) -> dict[str, Any]:
    versions = package_versions(("context-engine", "tiktoken", "attrs"))
    return {
        **run_facts(command, mode, versions),
        "counter": repr(counter),
        "appended_message_tokens": appended_tokens,
    }


def load_average() -> float | None:
    """The one-minute load average, where the platform has one."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


HEADER = """# Benchmarks

These numbers back the hot-path claim: once an agent's history has been seen,
a `project` call that appends one message costs work proportional to that
message, not to the history. They come from `benchmarks/steady_state.py`;
`make bench` regenerates this page (all but the marked economics and fidelity
sections, which `make bench-economics` and `make bench-fidelity` write) and the raw samples in
`benchmarks/results/steady_state.json`. Peers (LangChain, Strands, AutoGen)
are compared in [benchmarks_peers.md](benchmarks_peers.md).

## Steady state: one appended message

The engine is `ContextEngine.default(window)` with a window of twice the
transcript's tokens (at least 65,536), so the view stays below the threshold
and no strategy runs. It has already projected the first N-1 messages (an
assistant tool call ends them); each timed call appends one new tool result
of {appended_message_tokens} tokens (a 30-line file read; a new object with new text every
call, built before the timer starts) to the caller's list and projects it.
All scenarios run in one process, interleaved round by round in a shuffled
order, each after a warm-up; garbage collection stays on (setup objects are
frozen out of it). Medians resist other load on the machine; the p90 shows it.

- **workload**: the largest transcript of the dev corpus (by file size), or
  `context_engine.testing.synthetic_session(n)` with n tool steps.
- **messages**, **tokens**: the timed transcript, as the engine estimates it
  (framing included).
- **project**: median of `await engine.project(messages)`, timed inside a
  coroutine on one long-lived event loop.
- **project_sync**: median of `engine.project_sync(messages)` (its private
  per-thread loop included).
- **floor**: median of tokenizing only the appended message's text with the
  same tiktoken encoding: no engine can do less.
- **full tokenize**: median of tokenizing all text of all messages with the
  same encoding, cold (no caches): what a counter without caches pays.
- **project / full tokenize**, **project / floor**: ratios of the medians.
- Rebuilt messages: the caller rebuilds every `Message` from OpenAI dicts
  with `from_openai` on every call; `project` is timed on the fresh objects
  (only the counter's content-keyed cache can help), and the conversion
  separately.

Run:

- command: `{command}` ({mode} mode, {elapsed_s} s), {date}
- machine: {platform}, {cpu_count} CPUs, one-minute load average {load_average_start}
  at the start and {load_average_end} at the end
- Python {python}; context-engine {ce}, tiktoken {tk}, attrs {at}
- token counter: `{counter}` (what `ContextEngine.default` resolved on this machine)

"""


PEERS_LINK = """
Side by side with LangChain, Strands and AutoGen (`make bench-peers`):
[benchmarks_peers.md](benchmarks_peers.md).
"""


def render(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    versions = meta["versions"]
    names = {"ce": "context-engine", "tk": "tiktoken", "at": "attrs"}
    fields = {**meta, **{short: versions[name] for short, name in names.items()}}
    return HEADER.format(**fields) + tables(rows) + "\n" + PEERS_LINK


def to_json(data: dict[str, Any]) -> str:
    """Indented JSON with each list of numbers kept on one line."""
    text = json.dumps(data, indent=1)
    return re.sub(r"\[([-\d.,\s]+)\]", lambda m: "[" + " ".join(m[1].split()) + "]", text) + "\n"


MARKED_SECTION = re.compile(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", re.DOTALL)
"""A section another script owns (``economics.py``: ``<!-- economics:start -->``...)."""


def keep_marked_sections(page: str, previous: Path) -> str:
    """``page``, followed by the marked sections of the ``previous`` page it replaces."""
    old = previous.read_text(encoding="utf-8") if previous.exists() else ""
    kept = [m.group(0) for m in MARKED_SECTION.finditer(old) if m.group(0) not in page]
    return page.rstrip() + "".join(f"\n\n{block}" for block in kept) + "\n" if kept else page


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text, encoding="utf-8")
    scratch.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads, under two minutes")
    parser.add_argument("--docs", type=Path, help="Markdown output (full run: docs/benchmarks.md)")
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    parser.add_argument("--seed", type=int, default=20240601, help="order of the interleaving")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    if args.docs is None and mode == "full":
        args.docs = DOCS
    if args.json is None:
        args.json = RESULTS / ("steady_state.json" if mode == "full" else "steady_state_quick.json")
    args.mode = mode
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    load, cpus = load_average(), os.cpu_count() or 1
    if load is not None and load > cpus / 2:
        print(f"note: load average {load} on {cpus} CPUs; expect a wide p90", file=sys.stderr)
    loop = asyncio.new_event_loop()
    try:
        workloads = load_workloads(args.mode)
        cases = [prepare(name, base, dicts, loop) for name, base, dicts in workloads]
        measure(cases, loop, args.mode, args.seed)
    finally:
        loop.close()
    counter = cases[0].engines["project"].counter
    appended = counter.count_message(fresh_result())
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    meta = environment(command, args.mode, counter, appended)
    meta["load_average_start"] = load
    rows = [summarize(case) for case in cases]
    print(tables(rows))
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    write_atomic(args.json, to_json({"meta": meta, "workloads": rows}))
    if args.docs is not None:
        write_atomic(args.docs, keep_marked_sections(render(meta, rows), args.docs))
    print(
        f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}"
        + (f" and {args.docs}" if args.docs else ""),
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
