"""The steps-done bound: the highest recall of `fidelity.py`'s steps probe any fitting view reaches.

At every point where `fidelity.py` scores the engine (its rewrite points, and
the forced ``/compact`` points), this script works out how much of the steps
probe (every distinct command or call before the point, and every file read)
a view under the threshold could possibly show:

* the parts no strategy may drop are kept: the leading system messages, the
  newest user message (the task statement in a one-request session) and the
  newest tool group, its results cut to a preview: `_fits_floor.witness` of the
  ORIGINAL transcript up to the point, measured with the request and the
  engine's overhead as the engine measures a view. The room for a log is the
  threshold less that;
* a step the witness itself credits costs nothing;
* every other step is written in the densest form the probe still credits,
  one line each: ``- `` + the command whole when it has at most 40 characters,
  else its first 40 characters and "…", + `` ✓`` or `` ✗`` (a tool call with
  its argument values whole); a file read is its shortest credited form (the
  last two path components) on a line of its own;
* the cheapest lines go in first (the most steps in the room), counted with
  the engine's counter as one text.

The bound of one point is (steps credited by the witness + steps whose lines
fit) / steps. It is generous: no checkpoint framing, no headings, no room for
anything else the other probes need (earlier user instructions, the failure's
key line, the modified files). With ``--task`` the first user message is kept
too (the task statement the engine pins in a multi-request session).

    .venv/bin/python benchmarks/fidelity_bound.py           # 8k and 16k, the whole corpus
    .venv/bin/python benchmarks/fidelity_bound.py --window 8000 --per-transcript
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")  # no tokenizer download, ever

from _economics_ledger import call_points
from _fidelity_probe import _PREFIX, _path_forms, mentions, path_in, read_view
from _fidelity_truth import Truth, truth_of
from _fits_floor import measure, witness
from _fits_replay import build_engine
from fidelity import COMPACT_AT, WINDOWS, _Recorder, _same
from fits import corpus_run, load_transcripts

from context_engine import Message
from context_engine.tokens import TokenCounter

__all__ = ["Bound", "dense_lines", "point_bound"]


def _short(key: str) -> str:
    key = " ".join(key.split())
    return key if len(key) <= _PREFIX else key[:_PREFIX] + "…"


def dense_lines(truth: Truth, credited: Sequence[bool], *, status: bool = True) -> list[str]:
    """The log lines of the steps ``credited`` does not cover, densest form the probe credits.

    ``credited`` has one flag per step of the probe's list (distinct commands,
    then read files), in `score`'s order.
    """
    lines: list[str] = []
    steps = list(truth.last_status().items())
    for at, ((key, values), step) in enumerate(steps):
        if credited[at]:
            continue
        mark = (" ✗" if step.failed else " ✓") if status else ""
        lines.append(f"- {' '.join([_short(key), *values])}{mark}")
    for at, path in enumerate(truth.read_paths(), len(steps)):
        if not credited[at]:
            lines.append(f"- {min(_path_forms(path), key=len, default=path)}")
    return lines


def _credited(seen_flat: str, truth: Truth) -> list[bool]:
    """One flag per step of the probe (commands, then read files): credited by ``seen_flat``."""
    return [
        mentions(seen_flat, key) and all(v in seen_flat for v in values)
        for key, values in truth.last_status()
    ] + [path_in(p, seen_flat) for p in truth.read_paths()]


def _most_lines(lines: list[str], room: int, counter: TokenCounter) -> int:
    """How many of ``lines``, cheapest first, fit ``room`` tokens as one text."""
    if room <= 0 or not lines:
        return 0
    lines = sorted(lines, key=counter.count_text)
    low, high = 0, len(lines)
    while low < high:
        middle = (low + high + 1) // 2
        if counter.count_text("\n".join(lines[:middle])) <= room:
            low = middle
        else:
            high = middle - 1
    return low


@dataclass
class PointBound:
    """The bound at one point and what it is made of."""

    steps: int
    by_witness: int
    room: int
    need: int  # tokens the dense lines of every uncovered step take
    fit: int

    @property
    def recall(self) -> float:
        return (self.by_witness + self.fit) / self.steps


def point_bound(
    original: Sequence[Message],
    truth: Truth,
    threshold: int,
    overhead: int,
    counter: TokenCounter,
    *,
    status: bool = True,
    task: bool = False,
) -> PointBound | None:
    """The bound at the point ``original`` ends (None: no step to recall yet)."""
    kept = witness(original, counter)
    if task:
        first = next((m for m in original if m.role == "user" and not m.tool_call_id), None)
        if first is not None and not any(m is first for m in kept):
            kept = (first, *kept)
    credited = _credited(read_view(kept).flat, truth)
    if not credited:
        return None
    room = threshold - measure(kept, counter, overhead)
    lines = dense_lines(truth, credited, status=status)
    need = counter.count_text("\n".join(lines)) if lines else 0
    fit = len(lines) if need <= room else _most_lines(lines, room, counter)
    return PointBound(len(credited), sum(credited), room, need, fit)


@dataclass
class Bound:
    """The bounds of one transcript (or a total) at one window, per kind of point."""

    points: dict[str, list[PointBound]] = field(
        default_factory=lambda: {"rewrite": [], "compact": []}
    )

    def merge(self, other: Bound) -> None:
        for kind, found in other.points.items():
            self.points[kind] += found

    def mean(self, kind: str) -> float | None:
        found = self.points[kind]
        return round(100 * sum(p.recall for p in found) / len(found), 1) if found else None

    def describe(self, kind: str) -> str:
        found = self.points[kind]
        if not found:
            return f"{kind}: no point"
        rooms = sorted(p.room for p in found)
        needs = sorted(p.need for p in found)
        return (
            f"{kind}: {len(found)} points, bound {self.mean(kind)} %; "
            f"room median {rooms[len(rooms) // 2]:,} tokens (min {rooms[0]:,}); "
            f"dense log needs median {needs[len(needs) // 2]:,} (max {needs[-1]:,}); "
            f"points where all fits: {sum(p.fit + p.by_witness == p.steps for p in found)}"
        )


async def transcript_bound(
    messages: Sequence[Message],
    window: int,
    counter: TokenCounter,
    *,
    status: bool = True,
    task: bool = False,
) -> Bound:
    """The bound at `fidelity.py`'s rewrite and compact points of one replay."""
    engine = build_engine("healthy", window, counter)
    run = _Recorder(engine, counter)
    facts = truth_of(messages)
    bound = Bound()
    points = call_points(messages)
    compact_points = {points[max(round(share * len(points)) - 1, 0)] for share in COMPACT_AT}
    consumed = 0
    for point in points:
        run.transcript.extend(messages[consumed:point])
        consumed = point
        run.sent = None
        await run.call()
        original = tuple(messages[:point])
        kinds = []
        if run.sent is not None and not _same(run.sent, original):
            kinds.append("rewrite")
        if point in compact_points:
            kinds.append("compact")
        if not kinds:
            continue
        found = point_bound(
            original,
            facts.before(point),
            engine.threshold,
            engine.overhead_tokens,
            counter,
            status=status,
            task=task,
        )
        if found is not None:
            for kind in kinds:
                bound.points[kind].append(found)
    return bound


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, action="append", help="default: 8000 and 16000")
    parser.add_argument("--per-transcript", action="store_true")
    parser.add_argument("--no-status", action="store_true", help="lines without ✓/✗")
    parser.add_argument("--task", action="store_true", help="keep the first user message too")
    args = parser.parse_args(argv)
    transcripts = load_transcripts(quick=False)
    if not transcripts:
        print("note: no corpus; the bound skipped", file=sys.stderr)
        return 0
    windows = args.window or list(WINDOWS)
    counter, _ = corpus_run("full", transcripts, windows, None)
    for window in windows:
        total = Bound()
        for name, messages in transcripts:
            found = asyncio.run(
                transcript_bound(
                    messages, window, counter, status=not args.no_status, task=args.task
                )
            )
            total.merge(found)
            if args.per_transcript and any(found.points.values()):
                print(f"{window:,} {name}")
                for kind in found.points:
                    print(f"    {found.describe(kind)}")
        print(f"window {window:,} (steps done, the most any fitting view could show):")
        for kind in total.points:
            print(f"  {total.describe(kind)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
