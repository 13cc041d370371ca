"""Every python code block in README.md and docs/ runs as written and passes mypy --strict."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.extras import extras_of_code

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def code_blocks() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = []
    for page in pages:
        for number, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8")), 1):
            blocks.append((f"{page.relative_to(ROOT)}#{number}", match.group(1)))
    return blocks


def cases() -> list[object]:
    """Each block as a test case, marked with the extras its imports need."""
    cases = []
    for where, code in code_blocks():
        extras = extras_of_code(code)
        marks = [pytest.mark.extra(*extras)] if extras else []
        cases.append(pytest.param(where, code, id=where, marks=marks))
    return cases


@pytest.mark.parametrize(("where", "code"), cases())
def test_documented_example_runs(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})


def test_documented_examples_pass_mypy_strict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader who copies an example into a typed project gets no type errors."""
    api = pytest.importorskip("mypy.api")
    for index, (where, code) in enumerate(code_blocks()):
        name = re.sub(r"\W", "_", where)
        (tmp_path / f"ex{index:03d}_{name}.py").write_text(code, encoding="utf-8")
    # From the repository root, `import context_engine` finds this checkout (not an installed
    # copy) and mypy reads the same [tool.mypy] settings as `make lint`, so the cache that
    # `mypy --strict context_engine` leaves in .mypy_cache already holds context_engine and the
    # runtimes its adapters import: only the examples are checked afresh (seconds, not minutes).
    monkeypatch.chdir(ROOT)
    stdout, _, status = api.run(
        ["--strict", "--no-error-summary", "--cache-dir", str(ROOT / ".mypy_cache"), str(tmp_path)]
    )
    assert status == 0, stdout
