"""The strategy contract a user relies on: the built-ins keep it and the engine enforces it."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence

import pytest

from context_engine import ConfigurationError, ContextEngine, Message
from context_engine import strategies as exported
from context_engine.strategies import (
    BackgroundSummary,
    Budget,
    ForceCompactionStrategy,
    FullSummary,
    HardTruncate,
    LightTrim,
    MicroSummary,
    ProactiveStrategy,
    SessionMemory,
    Strategy,
    StrategyResult,
    ToolResultCap,
    ToolResultMicrocompact,
)
from context_engine.testing import RecordingSummarizer

# (factory, name, uses_llm, force-capable): one row per built-in strategy.
BUILT_INS: list[tuple[Callable[[], object], str, bool, bool]] = [
    (ToolResultCap, "tool_result_cap", False, False),
    (ToolResultMicrocompact, "tool_result_microcompact", False, False),
    (LightTrim, "light_trim", False, False),
    (lambda: SessionMemory(seed=lambda: "notes"), "session_memory", False, True),
    (lambda: MicroSummary(summarizer=RecordingSummarizer()), "micro_summary", True, False),
    (lambda: FullSummary(summarizer=RecordingSummarizer()), "full_summary", True, True),
    (HardTruncate, "hard_truncate", False, False),
    (
        lambda: BackgroundSummary(summary=FullSummary(summarizer=RecordingSummarizer())),
        "full_summary",  # the wrapped summary's name: events and commits read as before
        True,
        True,
    ),
]
IDS = [type(factory()).__name__ for factory, _, _, _ in BUILT_INS]


def test_every_exported_strategy_class_is_in_the_table() -> None:
    """A new built-in cannot ship without its row here."""
    classes = {
        value
        for value in vars(exported).values()
        if inspect.isclass(value) and callable(getattr(value, "apply", None))
    } - {Strategy, ForceCompactionStrategy, ProactiveStrategy}
    built = {type(factory()) for factory, _, _, _ in BUILT_INS}
    assert classes == built


@pytest.mark.parametrize(("factory", "name", "uses_llm", "force"), BUILT_INS, ids=IDS)
def test_built_in_satisfies_the_strategy_protocol(
    factory: Callable[[], object], name: str, uses_llm: bool, force: bool
) -> None:
    """Each built-in has its documented snake_case name, a bool `uses_llm` and an async `apply`."""
    strategy = factory()
    assert isinstance(strategy, Strategy)
    assert strategy.name == name
    assert re.fullmatch(r"[a-z][a-z0-9_]*", strategy.name)
    assert type(strategy.uses_llm) is bool
    assert strategy.uses_llm is uses_llm
    assert inspect.iscoroutinefunction(strategy.apply)
    assert list(inspect.signature(strategy.apply).parameters) == ["transcript", "view", "budget"]


@pytest.mark.parametrize(("factory", "name", "uses_llm", "force"), BUILT_INS, ids=IDS)
def test_force_capable_built_ins_satisfy_force_compaction(
    factory: Callable[[], object], name: str, uses_llm: bool, force: bool
) -> None:
    """`compact` and `recover_overflow` use exactly these; `force_apply` takes no view."""
    strategy = factory()
    assert isinstance(strategy, ForceCompactionStrategy) is force
    if force:
        assert isinstance(strategy, ForceCompactionStrategy)
        assert inspect.iscoroutinefunction(strategy.force_apply)
        parameters = inspect.signature(strategy.force_apply).parameters
        assert list(parameters) == ["transcript", "budget", "instructions"]
        assert parameters["instructions"].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters["instructions"].default is None


class Partial:
    """A would-be strategy with only the members it is given."""

    def __init__(self, **members: object) -> None:
        self.__dict__.update(members)

    def __repr__(self) -> str:
        return f"Partial({', '.join(sorted(self.__dict__))})"


async def _apply(
    transcript: Sequence[Message], view: Sequence[Message], budget: Budget
) -> StrategyResult:
    return StrategyResult.unchanged(view)


@pytest.mark.parametrize(
    ("members", "lacking"),
    [
        ({"name": "mine", "apply": _apply}, "a bool `uses_llm`"),
        ({"name": "mine", "apply": _apply, "uses_llm": 1}, "a bool `uses_llm`"),
        ({"name": "mine", "apply": _apply, "uses_llm": None}, "a bool `uses_llm`"),
        ({"apply": _apply, "uses_llm": False}, "a str `name`"),
        ({"name": "mine", "uses_llm": False}, "an async `apply`"),
    ],
    ids=["no-uses_llm", "int-uses_llm", "none-uses_llm", "no-name", "no-apply"],
)
def test_engine_refuses_an_object_that_breaks_the_protocol(
    members: dict[str, object], lacking: str
) -> None:
    """The error names the object and the member it lacks, and nothing else."""
    strategy = Partial(**members)
    with pytest.raises(ConfigurationError) as caught:
        ContextEngine(8_000, [HardTruncate(), strategy])  # type: ignore[list-item]
    message = str(caught.value)
    assert message.startswith(f"{strategy!r} is not a strategy")
    assert f"lacks {lacking} (" in message


def test_a_complete_object_is_accepted_without_subclassing() -> None:
    """The protocol is structural: three members are enough."""
    strategy = Partial(name="mine", uses_llm=False, apply=_apply)
    assert isinstance(strategy, Strategy)
    assert not isinstance(strategy, ForceCompactionStrategy)
    ContextEngine(8_000, [strategy])  # type: ignore[list-item]
