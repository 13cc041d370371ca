"""Every python code block in README.md and docs/ runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def code_blocks() -> list[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    blocks = []
    for page in pages:
        for number, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8")), 1):
            blocks.append((f"{page.relative_to(ROOT)}#{number}", match.group(1)))
    return blocks


@pytest.mark.parametrize(("where", "code"), code_blocks(), ids=[w for w, _ in code_blocks()])
def test_documented_example_runs(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})
