"""The optional extras the tests know, and how a test that needs one says so.

The core tests run on the core dependencies and the test tools alone
(``pip install -e '.[test]'``). A test that needs an extra is marked
``@pytest.mark.extra("name")`` and skips when that extra is missing; a module whose own
imports need it also calls ``pytest.importorskip(module, reason=needs("name"))`` before
them. ``pytest --require-extras`` (every environment that installs all extras runs with it)
stops the run instead when an extra that this Python can install does not import, so a
broken extra can never pass as a skip.
"""

from __future__ import annotations

import ast
import importlib
import sys

# Each extra of pyproject.toml with the modules its tests import.
EXTRAS: dict[str, tuple[str, ...]] = {
    "cli": ("rich",),
    "langchain": ("langchain", "langchain_core"),
    "strands": ("strands",),
    "pydantic-ai": ("pydantic_ai",),
    "openai-agents": ("agents",),
    "redis": ("redis",),
    "openai": ("openai",),
    "anthropic": ("anthropic",),
    "docs": (
        "mkdocs",
        "material",
        "mkdocstrings_handlers.python",
        "mkdocs_include_markdown_plugin",
    ),
    "rules": ("yaml",),
}


# Extras that cannot be installed on older Pythons, with the first Python they install on.
MINIMUM_PYTHON: dict[str, tuple[int, int]] = {"pydantic-ai": (3, 11)}


def installable(extra: str) -> bool:
    """Whether ``extra`` can be installed on this Python at all."""
    return sys.version_info >= MINIMUM_PYTHON.get(extra, (3, 0))


def needs(extra: str) -> str:
    """The skip reason of a test that needs ``extra``."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {sorted(EXTRAS)}")
    return f"needs the {extra} extra (pip install 'context-engine[{extra}]')"


def missing(extra: str) -> str | None:
    """Why ``extra`` cannot be imported here, or None when all its modules import."""
    for module in EXTRAS[extra]:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return f"{module}: {exc}"
    return None


# The package's own modules that load an extra when imported.
_OWN_MODULES: dict[str, str] = {
    "context_engine.archive.redis": "redis",
    "context_engine.summarize.openai": "openai",
    "context_engine.summarize.anthropic": "anthropic",
    "context_engine.summarize.langchain": "langchain",
    "context_engine.summarize.pydantic_ai": "pydantic-ai",
    "context_engine.summarize.strands": "strands",
    "context_engine.summarize.openai_agents": "openai-agents",
    # The Responses item converter it uses comes with the Agents SDK.
    "context_engine.native.openai_compact": "openai-agents",
    **{
        f"context_engine.{kind}.{name}": extra
        for kind in ("formats", "integrations")
        for name, extra in (
            ("langchain", "langchain"),
            ("strands", "strands"),
            ("pydantic_ai", "pydantic-ai"),
            ("openai_agents", "openai-agents"),
        )
    },
}


def extras_of_code(code: str) -> list[str]:
    """The extras a piece of Python source imports, directly or through this package."""
    modules: list[str] = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
            modules.extend(f"{node.module}.{alias.name}" for alias in node.names)
    found: list[str] = []
    for module in modules:
        for extra, roots in EXTRAS.items():
            if module.split(".")[0] in roots and extra not in found:
                found.append(extra)
        extra = _OWN_MODULES.get(module)
        if extra is not None and extra not in found:
            found.append(extra)
    return found
