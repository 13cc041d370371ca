"""The public surface: `__all__` is sorted, complete, and every name resolves."""

from __future__ import annotations

import importlib

import pytest

MODULES = ["context_engine", "context_engine.assembly", "context_engine.strategies"]


@pytest.mark.parametrize("module_name", MODULES)
def test_all_is_sorted_and_every_name_resolves(module_name: str) -> None:
    module = importlib.import_module(module_name)
    names = module.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name


@pytest.mark.parametrize("module_name", MODULES)
def test_every_public_name_is_listed_in_all(module_name: str) -> None:
    module = importlib.import_module(module_name)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and getattr(value, "__module__", "").startswith("context_engine")
    }
    assert public <= set(module.__all__)


def test_design_names_are_importable_from_the_package() -> None:
    from context_engine import ContextEngine, Message, ToolCall, Usage  # noqa: F401
    from context_engine.strategies import (  # noqa: F401
        HardTruncate,
        LightTrim,
        SessionMemory,
        ToolResultMicrocompact,
    )
