"""docs/reliability.md's figures are read off the suite, so a new test cannot leave them stale.

The table once said 127 named bad inputs while the suite collected 117: each
row is now recomputed here, from the collected test ids and the example counts
the tests declare (``@examples(N)``, ``@settings(max_examples=N)``).
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import regex

from tests.reliability.support import SCALE
from tests.reliability.test_concurrency import SESSIONS, THREAD_SESSIONS

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reliability.md"
TESTS = ROOT / "tests" / "reliability"
PYTEST_COLLECT = (sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider")
SOAK_SCALE = 20  # tests/conftest.py's soak profile: max_examples 2,000 over the default 100


def cited_files() -> list[str]:
    """The test modules the page cites, besides the reliability suite."""
    found = regex.findall(r"`(tests/[\w/]+\.py)", DOC.read_text(encoding="utf-8"))
    return sorted({path for path in found if not path.startswith("tests/reliability/")})


@functools.cache
def collected() -> tuple[str, ...]:
    """The ids of the reliability suite's tests and of every other test the page cites."""
    done = subprocess.run(
        [*PYTEST_COLLECT, "tests/reliability", *cited_files()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return tuple(line for line in done.stdout.splitlines() if "::" in line)


def declared_examples(path: Path) -> int:
    """The examples a module's hypothesis tests run under the default profile."""
    total = 0
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        if node.func.id == "examples" and node.args and isinstance(node.args[0], ast.Constant):
            total += int(node.args[0].value) * SCALE
        if node.func.id == "settings":
            total += sum(
                int(k.value.value)
                for k in node.keywords
                if k.arg == "max_examples" and isinstance(k.value, ast.Constant)
            )
    return total


def table() -> dict[str, tuple[str, str]]:
    """The rows of the "In numbers" table: what -> (make test, make soak)."""
    rows = {}
    for line in DOC.read_text(encoding="utf-8").split("## Guarantees")[0].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] and cells[1][0].isdigit():
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def row(rows: dict[str, tuple[str, str]], start: str) -> tuple[str, str]:
    (found,) = [value for what, value in rows.items() if what.startswith(start)]
    return found


def test_the_in_numbers_table_matches_the_suite() -> None:
    ids = collected()
    rows = table()
    assert len(rows) == 7

    def count(module: str) -> int:
        return sum(1 for test_id in ids if test_id.startswith(f"tests/reliability/{module}::"))

    def scaled(examples: int) -> tuple[str, str]:
        return f"{examples:,}", f"{examples * SOAK_SCALE:,}"

    assert row(rows, "generated cases") == scaled(declared_examples(TESTS / "test_properties.py"))
    assert row(rows, "fuzzed reader") == scaled(declared_examples(TESTS / "test_fuzz_formats.py"))
    assert row(rows, "generated prompt") == scaled(declared_examples(TESTS / "test_security.py"))
    redaction = declared_examples(ROOT / "tests" / "test_redact.py")
    assert row(rows, "generated redaction") == (f"{redaction:,}", "not run")  # not in soak
    faults = count("test_faults.py")
    assert row(rows, "fault scenarios") == (str(faults), str(faults))
    sessions = f"{SESSIONS} / {THREAD_SESSIONS}"
    assert row(rows, "concurrent sessions") == (sessions, sessions)
    bad = count("test_bad_input.py")
    assert row(rows, "named bad inputs") == (str(bad), str(bad))


def test_case_counts_named_beside_tests_match_their_parameters() -> None:
    """``::test_x` (82 cases)`` in the guarantees: the parametrized test has that many ids."""
    ids = collected()
    claims = regex.findall(
        r"`(tests/[\w/]+\.py)::(\w+)` \((\d+) (?:cases|kinds of failure)\)",
        DOC.read_text(encoding="utf-8"),
    )
    assert len(claims) >= 2
    for path, name, number in claims:
        cases = [test_id for test_id in ids if test_id.startswith(f"{path}::{name}[")]
        assert len(cases) == int(number), name


def test_every_test_the_page_names_exists() -> None:
    """A renamed or deleted test cannot stay cited as the proof of a guarantee."""
    ids = collected()
    names = {test_id.split("[")[0] for test_id in ids}
    text = DOC.read_text(encoding="utf-8")
    cited, path = [], None
    for found in regex.finditer(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`", text):
        path = found[1] or path
        if found[2] is None:
            if found[1] is not None:
                assert (ROOT / found[1]).exists(), found[1]
            continue
        cited.append(f"{path}::{found[2]}")
    assert len(cited) > 20
    modules = {name.split("::")[0] for name in names}  # a module needing an extra may skip
    missing = [test for test in cited if test.split("::")[0] in modules and test not in names]
    assert missing == []
