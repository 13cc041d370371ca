"""The fits benchmark: its independent floor, its replay, and the corpus figure it reports."""

from __future__ import annotations

import asyncio
import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given

from context_engine import ContextEngine, Message, ToolCall
from context_engine.invariants import check_view
from context_engine.results import Projection
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import resolve_counter
from tests.conftest import corpus_files
from tests.reliability.support import examples
from tests.transcripts import agent_sessions

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
COUNTER = FixedTokenCounter()


@pytest.fixture
def fits(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("CONTEXT_ENGINE_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("fits")


def _module(name: str) -> Any:
    import sys

    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    return importlib.import_module(name)


# -- the independent floor ----------------------------------------------------------------


@examples(40)
@given(session=agent_sessions())
def test_the_witness_keeps_every_invariant(session: list[Message]) -> None:
    """The view the floor vouches for is a view the engine may hand out."""
    floor = _module("_fits_floor")
    view = floor.witness(session, COUNTER)
    assert check_view(session, view) == []


def test_the_witness_previews_a_huge_fresh_result_and_keeps_the_request() -> None:
    """A 60k-token newest result counts as a 200-token preview; system and request stay whole."""
    floor = _module("_fits_floor")
    call = ToolCall("call_1", "bash", '{"command": "grep -rn x ."}')
    session = [
        Message.system("You are a coder."),
        Message.user("old request"),
        Message.assistant("old answer"),
        Message.user("find x"),
        Message.assistant("Searching.", tool_calls=[call]),
        Message.tool(call.id, "src/a.py:1: x\n" * 20_000),
    ]
    view = floor.witness(session, COUNTER)
    assert [m.role for m in view] == ["system", "user", "assistant", "tool"]
    assert view[1] is session[3]
    tokens = floor.measure(view, COUNTER)
    assert tokens < floor.measure(session, COUNTER) // 100
    assert COUNTER.count_text(view[-1].text) <= floor.PREVIEW_TOKENS + 20


def test_the_witness_keeps_pending_calls_verbatim() -> None:
    """Calls still waiting at the end are part of every view, so of the floor too."""
    floor = _module("_fits_floor")
    done, waiting = ToolCall("c1", "ls", "{}"), ToolCall("c2", "cat", "{}")
    session = [
        Message.user("go"),
        Message.assistant(tool_calls=[done]),
        Message.tool("c1", "a\n" * 5_000),
        Message.assistant(tool_calls=[waiting]),
    ]
    view = floor.witness(session, COUNTER)
    assert view[-1] is session[-1]
    assert check_view(session, view) == []


def test_measure_adds_the_request_and_fixed_overhead() -> None:
    """The floor is counted the way the engine counts a view without usage anchors."""
    floor = _module("_fits_floor")
    session = [Message.system("s" * 400), Message.user("u" * 800)]
    engine = ContextEngine(100_000, token_counter=COUNTER, overhead_tokens=250)
    assert floor.measure(session, COUNTER, 250) == engine.estimate(session).tokens


# -- the replay ---------------------------------------------------------------------------


def test_committed_reads_both_shapes_of_a_result() -> None:
    """The accessor survives the rename of should_commit/commit_messages to .commit."""
    replay = _module("_fits_replay")
    kept = (Message.user("checkpointed"),)

    class Renamed:
        commit = kept

    class NotCommitted:
        commit = None

    today = Projection(messages=kept, usage=None, changed=True)  # type: ignore[arg-type]
    assert replay.committed(Renamed()) == kept
    assert replay.committed(NotCommitted()) is None
    if not hasattr(today, "commit"):
        older = Projection(
            messages=kept,
            usage=None,  # type: ignore[arg-type]
            changed=True,
            should_commit=True,
            commit_messages=kept,
        )
        assert replay.committed(older) == kept
        assert replay.committed(today) is None


def test_the_replay_counts_a_huge_fresh_result_as_avoidable() -> None:
    """One 60k-token result at an 8k window: each call counted, views above told apart."""
    replay = _module("_fits_replay")
    call = ToolCall("call_1", "bash", '{"command": "grep -rn x ."}')
    session = [
        Message.system("You are a coder."),
        Message.user("find x"),
        Message.assistant("Searching.", tool_calls=[call]),
        Message.tool(call.id, "src/a.py:1: x\n" * 20_000),
        Message.assistant("Found it."),
    ]
    engine = ContextEngine(8_000, token_counter=COUNTER)  # no strategy: nothing can shrink
    tally = asyncio.run(replay.replay(session, engine, COUNTER))
    assert (tally.calls, tally.above, tally.above_fitting) == (2, 1, 1)
    assert (tally.recoveries, tally.recoveries_above_fitting) == (1, 1)
    assert tally.errors == tally.invariant_violations == 0


def test_the_quick_run_writes_its_table_and_json(fits: ModuleType, tmp_path: Path) -> None:
    """``--quick`` prints one row per condition and window and writes the same rows as JSON."""
    if not corpus_files():
        pytest.skip("../shared/corpus/dev is not present")
    out = tmp_path / "fits_quick.json"
    assert fits.main(["--quick", "--json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    rows = data["results"]
    assert {(r["condition"], r["window"]) for r in rows} == {
        (c, w) for c in fits.CONDITIONS for w in fits.WINDOWS
    }
    assert all(r["calls"] > 0 and r["above_fitting"] <= r["above"] for r in rows)
    assert data["meta"]["mode"] == "quick"


# -- the corpus figure: 0 views above the threshold where a fitting view existed ------------

FAILING_TODAY: dict[str, str] = {}
"""Conditions whose quick corpus replay has avoidable views on today's code, with the cause."""


def _conditions() -> list[Any]:
    return [
        pytest.param(
            name,
            id=name,
            marks=[pytest.mark.xfail(strict=True, reason=FAILING_TODAY[name])]
            if name in FAILING_TODAY
            else [],
        )
        for name in _module("_fits_replay").CONDITIONS
    ]


@pytest.mark.parametrize("condition", _conditions())
def test_no_avoidable_view_above_the_threshold_on_the_corpus(
    fits: ModuleType, condition: str
) -> None:
    """The quick corpus replay: no view above the threshold where a fitting view existed."""
    transcripts = fits.load_transcripts(quick=True)
    if not transcripts:
        pytest.skip("../shared/corpus/dev is not present")
    counter = resolve_counter()  # what the benchmark counts with (offline cl100k here)
    results = asyncio.run(
        fits.measure_all(transcripts, counter, conditions=[condition], max_calls=fits.QUICK_CALLS)
    )
    tallies = results[condition]
    assert sum(t.calls for t in tallies.values()) > 0
    assert {w: t.invariant_violations for w, t in tallies.items()} == dict.fromkeys(tallies, 0)
    assert {w: t.headline for w, t in tallies.items()} == dict.fromkeys(tallies, 0)
