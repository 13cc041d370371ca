"""The CLI package's modules import on their own and depend on each other one way only."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import context_engine.cli

PACKAGE = Path(context_engine.cli.__file__).parent
MODULES = sorted(f"context_engine.cli.{path.stem}" for path in PACKAGE.glob("*.py"))


def cli_imports(module: str) -> set[str]:
    """The CLI modules ``module`` imports anywhere, function bodies included (deferred imports)."""
    source = (PACKAGE / f"{module.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & set(MODULES)


def cycle_from(start: str, graph: dict[str, set[str]]) -> list[str] | None:
    """A path of imports leading from ``start`` back to itself, or None."""
    stack = [(start, [start])]
    seen: set[str] = set()
    while stack:
        module, path = stack.pop()
        for imported in graph[module]:
            if imported == start:
                return [*path, start]
            if imported not in seen:
                seen.add(imported)
                stack.append((imported, [*path, imported]))
    return None


def test_the_scan_sees_the_known_imports() -> None:
    """Guards the cycle test against a scan that finds nothing: the app imports its commands."""
    assert {"context_engine.cli._archive", "context_engine.cli._commands"} <= cli_imports(
        "context_engine.cli._app"
    )


@pytest.mark.parametrize("module", MODULES)
def test_no_cli_module_imports_itself_back(module: str) -> None:
    """No import cycle, not even one deferred into a function body (as ``_archive`` had)."""
    graph = {name: cli_imports(name) for name in MODULES}
    assert cycle_from(module, graph) is None


@pytest.mark.parametrize("module", [m for m in MODULES if not m.endswith("__main__")])
def test_each_cli_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    """Importing any one module first works; no order of imports is required."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    completed = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
