"""The fidelity benchmark: its own ground-truth parsers, its probes, and its corpus floors."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from context_engine import Message, ToolCall
from context_engine.tokens import resolve_counter
from tests.conftest import corpus_files

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _module(name: str) -> Any:
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    return importlib.import_module(name)


truth = _module("_fidelity_truth")
probe = _module("_fidelity_probe")

# -- the shell-write parser, on commands agents of the corpus (and others) run -----------------

WRITES = [
    ("sed -i 's/foo/bar/g' astropy/utils/shapes.py", ["astropy/utils/shapes.py"]),
    (
        "cd /testbed && sed -i.bak -e 's/a/b/' -e 's/c/d/' src/x.py src/y.py",
        ["src/x.py", "src/y.py"],
    ),
    ("sed -n '10,20p' src/x.py", []),
    ("cat > reproduce.py << 'EOF'\nimport x\nprint(x > 1)\nEOF", ["reproduce.py"]),
    ("cat <<EOF > /tmp/t.py\nfoo > bar.txt\nEOF\npython /tmp/t.py", ["/tmp/t.py"]),
    ("echo 'x = 1' >> config.py", ["config.py"]),
    ("printf 'a\\n' > out.txt 2>&1", ["out.txt"]),
    ("python test.py > /dev/null 2>&1", []),
    ('echo "a > b" && grep -n x src/a.py', []),
    ("echo hi | tee -a log.txt notes.md", ["log.txt", "notes.md"]),
    ("python -c \"open('patch.txt', 'w').write('x')\"", ["patch.txt"]),
    ("python -c \"print(open('setup.py').read())\"", []),
    (
        "python3 - <<'PY'\nfrom pathlib import Path\nPath('src/a.py').write_text('x')\nPY",
        ["src/a.py"],
    ),
    (
        "git apply <<'EOF'\ndiff --git a/src/m.py b/src/m.py\n--- a/src/m.py\n+++ b/src/m.py\n"
        "@@ -1 +1 @@\n-a\n+b\nEOF",
        ["src/m.py"],
    ),
    ("cp pyvista/core/grid.py pyvista/core/grid.py.backup", ["pyvista/core/grid.py.backup"]),
    ("mv fix.py src/ && ls", ["src/fix.py"]),
    ("cp -t dest/ a.py b.py", ["dest/a.py", "dest/b.py"]),
    ("touch new_file.py && python -m pytest tests/ -x", ["new_file.py"]),
    ("perl -pi -e 's/x/y/' lib/a.pl", ["lib/a.pl"]),
    ("FOO=1 sudo tee /etc/hosts < x", ["/etc/hosts"]),
    ("cat -n src/x.py | sed -n '1,5p'", []),
]


@pytest.mark.parametrize(("command", "written"), WRITES, ids=[c[:40] for c, _ in WRITES])
def test_shell_writes_finds_every_file_a_command_writes(command: str, written: list[str]) -> None:
    assert truth.shell_writes(command) == written


READS = [
    ("cat -n src/x.py | sed -n '1,5p'", ["src/x.py"]),
    ("head -50 ./tests/filters/test_grid.py", ["./tests/filters/test_grid.py"]),
    ("tail -n 20 log.txt", ["log.txt"]),
    ("grep -n 'def foo' src/x.py | head -5", ["src/x.py"]),
    ("grep -rn 'def foo' src/", []),
    ("sed -i 's/a/b/' src/x.py", []),
    ("ls -la && pwd", []),
]


@pytest.mark.parametrize(("command", "read"), READS, ids=[c[:40] for c, _ in READS])
def test_shell_reads_finds_the_files_a_command_shows(command: str, read: list[str]) -> None:
    assert truth.shell_reads(command) == read


FAILURES = [
    ("<returncode>1</returncode>\n<output>\n</output>", None),  # grep found nothing
    ("<returncode>0</returncode>\n<output>\nall good\n</output>", None),
    (
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "NameError: name 'Query' is not defined",
        "NameError: name 'Query' is not defined",
    ),
    (
        "<returncode>2</returncode>\n<output>\nfoo.py:3: error: bad\n</output>",
        "foo.py:3: error: bad",
    ),
    ("Error: reservation not found", "Error: reservation not found"),
    ("Flight booked. No errors.", None),
    (
        "<returncode>1</returncode>\n<output>\nE   AssertionError: 1 != 2\n"
        "FAILED tests/test_a.py::test_x - AssertionError\n1 failed\n</output>",
        "E   AssertionError: 1 != 2",
    ),
    ("bash: submit: command not found", "bash: submit: command not found"),
    (
        'Traceback (most recent call last):\n  File "/bin/tool", line 3, in <module>\n    main()\n',
        "main()",
    ),
]


@pytest.mark.parametrize(("result", "line"), FAILURES, ids=range(len(FAILURES)))
def test_failure_line_is_the_line_that_says_what_went_wrong(result: str, line: str | None) -> None:
    assert truth.failure_line(result) == line


def test_constraint_sentences_keep_the_rules_and_drop_the_rest() -> None:
    text = (
        "Fix the bug in the parser. You must not modify the tests! Only edit files under src/.\n"
        "- DO NOT MODIFY: Tests, configuration files\n**IMPORTANT**"
    )
    assert truth.constraint_sentences(text) == [
        "You must not modify the tests!",
        "Only edit files under src/.",
        "DO NOT MODIFY: Tests, configuration files",
    ]


def _call(call_id: str, name: str, **arguments: Any) -> ToolCall:
    return ToolCall(call_id, name, json.dumps(arguments))


SESSION = [
    Message.system("You are a coder."),
    Message.user("Fix the parser. You must not touch the tests."),
    Message.assistant(tool_calls=[_call("c1", "open", command="open src/parse.py 10\n")]),
    Message.tool("c1", "[File: src/parse.py (40 lines total)]"),
    Message.assistant(
        tool_calls=[_call("c2", "edit", command="edit 3:4\n    x = 1\nend_of_edit\n")]
    ),
    Message.tool("c2", "File updated."),
    Message.assistant(tool_calls=[_call("c3", "bash", command="python -m pytest tests -x")]),
    Message.tool(
        "c3", "<returncode>1</returncode>\n<output>\nE   KeyError: 'x'\n1 failed\n</output>"
    ),
    Message.assistant(
        tool_calls=[_call("c4", "str_replace_editor", command="create", path="/r/new.py")]
    ),
    Message.tool("c4", "File created successfully at: /r/new.py"),
    Message.user("Now also update the changelog."),
    Message.assistant("On it."),
]


def test_truth_of_follows_the_open_file_and_stamps_every_item() -> None:
    found = truth.truth_of(SESSION)
    assert found.edited_paths() == ["src/parse.py", "/r/new.py"]
    assert found.read_paths() == ["src/parse.py"]
    assert [f.key_line for f in found.failures] == ["E   KeyError: 'x'"]
    assert [s.failed for s in found.steps] == [False, False, True, False]
    early = found.before(6)
    assert early.edited_paths() == ["src/parse.py"]
    assert early.failures == []
    assert early.users[-1][1].startswith("Fix the parser")


# -- the probes --------------------------------------------------------------------------------


def test_path_in_accepts_tails_of_two_components_and_rejects_other_files() -> None:
    assert probe.path_in("/testbed/pvlib/iam.py", "- `pvlib/iam.py`")
    assert probe.path_in("pvlib/iam.py", "edited /testbed/pvlib/iam.py")
    assert not probe.path_in("pvlib/iam.py", "edited pvlib/iam.py.bak")
    assert not probe.path_in("a.py", "edited data.py")


def test_mentions_accepts_a_command_shortened_with_an_ellipsis() -> None:
    command = "python -c 'import numpy as np; print(np.array([1, 2, 3]).sum())' && echo done"
    assert probe.mentions(f"- `{command}` (ok)", command)
    assert probe.mentions(f"- `{command[:50]}…` (ok)", command)
    assert not probe.mentions(f"- `{command[:20]}…` (ok)", command)


def test_score_reads_a_checkpoint_and_the_visible_calls() -> None:
    found = truth.truth_of(SESSION).before(11)
    checkpoint = Message.user(
        "## Files modified\n- src/parse.py\n## Files read\n- /r/new.py\n"
        "## Commands run\n- `python -m pytest tests -x` (failed: E   KeyError: 'x')"
    )
    view = [SESSION[0], SESSION[1], checkpoint, *SESSION[8:11]]
    scores = probe.score(probe.read_view(view), found)
    assert scores["edited"] == 1.0  # src/parse.py in the section, /r/new.py by its visible call
    assert scores["last_failure"] == 1.0
    assert scores["newest_user"] == 1.0
    assert scores["constraints"] == 1.0
    only_files_read = Message.user("## Files read\n- src/parse.py")
    bare = probe.score(probe.read_view([SESSION[0], only_files_read, SESSION[10]]), found)
    assert bare["edited"] == 0.0
    assert bare["last_failure"] == 0.0
    assert bare["constraints"] == 0.0


def test_marked_ok_counts_a_failed_command_called_ok_and_not_a_longer_one() -> None:
    found = truth.truth_of(SESSION)
    wrong = probe.read_view([Message.user("- `python -m pytest tests -x` (ok)")])
    right = probe.read_view([Message.user("- `python -m pytest tests -x` (failed, exit 1)")])
    other = probe.read_view([Message.user("- `pip install x && python -m pytest tests -x` (ok)")])
    assert probe.marked_ok(wrong, found) == (1, 1)
    assert probe.marked_ok(right, found) == (0, 1)
    assert probe.marked_ok(other, found) == (0, 0)


def test_marked_ok_does_not_read_a_complete_script_as_the_opening_of_another() -> None:
    """``python -c "print(1)" ✓`` says nothing of the script below a bare ``python -c "``."""
    failed = [
        Message.assistant(
            "",
            tool_calls=[
                ToolCall("c1", "bash", '{"command": "python -c \\"\\nraise SystemExit(3)\\n\\""}')
            ],
        ),
        Message.tool("c1", "<returncode>1</returncode>\nValueError: no such frame"),
    ]
    found = truth.truth_of(failed)
    assert [key for key, _ in found.last_status()] == ['python -c "']
    complete = probe.read_view([Message.user('- python -c "print(1)" ✓')])
    family = probe.read_view([Message.user('- python -c " … ✓ (2 runs)')])
    assert probe.marked_ok(complete, found) == (0, 0)
    assert probe.marked_ok(family, found) == (1, 1)


# -- the corpus run, its figures asserted as floors --------------------------------------------

# The quick run's figures less about 3 points: a change that makes the engine's views forget
# more fails here. The cost-aware engine (pricing="anthropic", cost_aware=True) keeps the same
# floors: clearing old tool results below the threshold must not cost recall.
FLOORS = {
    ("rewrite", 8_000): (96, 95, 94, 95, 97),
    ("rewrite", 16_000): (97, 97, 96, 95, 97),
    ("compact", 8_000): (96, 97, 93, 97, 97),
    ("compact", 16_000): (97, 97, 95, 97, 97),
}  # per probe, in the order of _fidelity_probe.PROBES.
# Measured (the lower of the two engines, benchmarks/results/fidelity_quick.json): rewrite 8k
# 99.8 / 98.2 / 97.7 / 98.2 / 100, 16k 100 / 100 / 99.2 / 98.5 / 100; compact 8k
# 99.0 / 100 / 96.3 / 100 / 100, 16k 100 / 100 / 98.8 / 100 / 100. Issue 15's follow-ups (a
# denser work log, files read through bash, commits keeping the request and the checkpoint
# whole, log lines without bullet or check mark) raised steps done from 80-92; the first
# round raised the last failure's key line from 35-71 to 98-100 and edited files to 99-100.


@pytest.fixture(scope="module")
def quick_rows() -> list[dict[str, Any]]:
    if not corpus_files():
        pytest.skip("../shared/corpus/dev is not present")
    fidelity = _module("fidelity")
    transcripts = fidelity.quick_transcripts()
    assert len(transcripts) == len(fidelity.QUICK_TRANSCRIPTS)
    found = asyncio.run(
        fidelity.measure_all(transcripts, resolve_counter(), max_calls=fidelity.QUICK_CALLS)
    )
    rows: list[dict[str, Any]] = fidelity.as_json(found["totals"])
    return rows


def _row(rows: list[dict[str, Any]], kind: str, window: int, contender: str) -> dict[str, Any]:
    return next(
        r for r in rows if (r["kind"], r["window"], r["contender"]) == (kind, window, contender)
    )


ENGINES = ("engine", "engine_cost_aware")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("kind", "window"), list(FLOORS), ids=[f"{k}-{w}" for k, w in FLOORS])
def test_quick_corpus_run_keeps_its_floors(
    quick_rows: list[dict[str, Any]], kind: str, window: int, engine: str
) -> None:
    row = _row(quick_rows, kind, window, engine)
    assert row["points"] > 0
    recall = row["mean_recall_pct"]
    floors = dict(zip(probe.PROBES, FLOORS[kind, window], strict=True))
    below = {p: (recall[p], floor) for p, floor in floors.items() if recall[p] < floor}
    assert not below, f"recall under its floor (measured, floor): {below}"
    named = sum(_row(quick_rows, kind, window, e)["failed_named"] for e in ENGINES)
    assert named > 0  # the check below is not vacuous
    assert row["failed_marked_ok"] == 0, "a checkpoint called a failed command ok"


def test_the_cost_aware_engine_is_scored_at_the_calls_it_rewrote_below_the_threshold(
    quick_rows: list[dict[str, Any]],
) -> None:
    """Its rewrite points are its own: every call where the default engine rewrote, and more."""
    for window in (8_000, 16_000):
        default = _row(quick_rows, "rewrite", window, "engine")["points"]
        cost_aware = _row(quick_rows, "rewrite", window, "engine_cost_aware")["points"]
        both = _row(quick_rows, "rewrite_both", window, "engine_cost_aware")["points"]
        assert both == default <= cost_aware
    assert (
        _row(quick_rows, "rewrite", 16_000, "engine_cost_aware")["points"]
        > _row(quick_rows, "rewrite", 16_000, "engine")["points"]
    )


def test_quick_run_writes_the_table_and_the_json(tmp_path: Path) -> None:
    if not corpus_files():
        pytest.skip("../shared/corpus/dev is not present")
    fidelity = _module("fidelity")
    out, docs = tmp_path / "fidelity.json", tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nSteady state.\n", encoding="utf-8")
    assert fidelity.main(["--quick", "--json", str(out), "--docs", str(docs)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert {(r["kind"], r["window"], r["contender"]) for r in data["results"]} == {
        (k, w, c) for k in fidelity.KINDS for w in fidelity.WINDOWS for c in fidelity.CONTENDERS
    }
    page = docs.read_text(encoding="utf-8")
    assert page.startswith("# Benchmarks")
    assert "<!-- fidelity:start -->\n## Fidelity" in page
    assert (tmp_path / "benchmarks_fidelity.md").exists()


def test_the_section_survives_the_regeneration_of_benchmarks_md(tmp_path: Path) -> None:
    """steady_state.py rewrites docs/benchmarks.md and keeps the marked sections of others."""
    report, steady = _module("_fidelity_report"), _module("steady_state")
    previous = tmp_path / "benchmarks.md"
    previous.write_text(report.replace_section("# Benchmarks\n", "## Fidelity\n\nx\n"))
    kept = steady.keep_marked_sections("# Benchmarks\n\nnew tables\n", previous)
    assert "new tables" in kept
    assert "<!-- fidelity:start -->\n## Fidelity\n\nx" in kept


def test_the_bound_credits_what_the_witness_shows_and_fits_the_rest_densest_first() -> None:
    """`fidelity_bound`: a wide room holds every step; a tight one the cheapest only."""
    bound = _module("fidelity_bound")
    counter = resolve_counter()
    found = truth.truth_of(SESSION)
    roomy = bound.point_bound(SESSION, found, 100_000, 0, counter)
    assert roomy is not None
    assert roomy.recall == 1.0
    assert roomy.by_witness + roomy.fit == roomy.steps
    tight = bound.point_bound(SESSION, found, roomy.room - 100_000 + 1, 0, counter)
    assert tight is not None
    assert tight.fit == 0
    assert tight.recall == tight.by_witness / tight.steps < 1.0
    credited = [False] * tight.steps
    lines = bound.dense_lines(found, credited)
    assert len(lines) == tight.steps
    steps = len(found.last_status())
    assert all(line.endswith((" ✓", " ✗")) for line in lines[:steps])  # with its status
