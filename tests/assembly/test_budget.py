"""Budget profiles: the seed-003 arithmetic, named profiles, the registry, env overrides."""

from __future__ import annotations

import pytest

from context_engine.assembly import BudgetProfile, ProfileRegistry
from context_engine.errors import ConfigurationError

TOTAL = 10_500  # 500 for the system prompt, 10_000 to split


def test_default_with_retrieval_reserves_the_system_prompt_then_splits_40_15_45() -> None:
    allocation = BudgetProfile(name="default").allocate(TOTAL, has_retrieval=True)
    assert allocation.system == 500
    assert allocation.preferences == 1_000  # 10 % of the room after the system prompt
    rest = 9_000
    assert (allocation.history, allocation.long_term, allocation.retrieval) == (
        int(rest * 0.40),
        int(rest * 0.15),
        int(rest * 0.45),
    )


def test_without_retrieval_history_takes_55_percent() -> None:
    allocation = BudgetProfile(name="default").allocate(TOTAL, has_retrieval=False)
    assert allocation.retrieval == 0
    assert allocation.history == int(9_000 * 0.55)


def test_memo_search_gives_retrieval_60_percent() -> None:
    profile, found = ProfileRegistry().get("memo_search")
    assert found
    assert profile.allocate(TOTAL).retrieval == int(9_000 * 0.60)


@pytest.mark.parametrize(
    ("turns", "history", "long_term"),
    [(20, 0.40, 0.15), (21, 0.25, 0.20)],
    ids=["turn-20-unchanged", "turn-21-shifts-history-to-memory"],
)
def test_a_long_conversation_moves_share_from_history_to_long_term(
    turns: int, history: float, long_term: float
) -> None:
    allocation = BudgetProfile(name="default").allocate(TOTAL, turns=turns)
    assert allocation.history / 9_000 == pytest.approx(history, abs=1e-3)
    assert allocation.long_term / 9_000 == pytest.approx(long_term, abs=1e-3)


def test_a_share_under_100_tokens_becomes_zero() -> None:
    allocation = BudgetProfile(name="default").allocate(1_000)  # 500 left: prefs 50
    assert allocation.preferences == 0
    assert allocation.history == int(450 * 0.40)


def test_a_zero_budget_profile_gives_the_sources_nothing() -> None:
    profile, found = ProfileRegistry().get("external")
    allocation = profile.allocate(TOTAL)
    assert found
    assert (allocation.preferences, allocation.history, allocation.retrieval) == (0, 0, 0)


@pytest.mark.parametrize(
    "ratios",
    [
        {"history": 0.5, "long_term": 0.5, "retrieval": 0.5},
        {"history": 0.1, "long_term": 0.1, "retrieval": 0.1},
        {"preferences": 1.5},
    ],
    ids=["over-one", "under-one", "ratio-above-one"],
)
def test_ratios_that_do_not_add_up_are_rejected_naming_the_profile(
    ratios: dict[str, float],
) -> None:
    with pytest.raises(ConfigurationError, match="'intent_x'"):
        BudgetProfile(name="intent_x", **ratios)  # type: ignore[arg-type]


def test_an_unknown_profile_falls_back_to_default() -> None:
    profile, found = ProfileRegistry().get("no_such_intent")
    assert (profile.name, found) == ("default", False)


def test_environment_overrides_change_a_named_profile() -> None:
    registry = ProfileRegistry()
    registry.load_env(
        {
            "CONTEXT_ENGINE_BUDGET_MEMO_SEARCH_HISTORY": "0.35",
            "CONTEXT_ENGINE_BUDGET_MEMO_SEARCH_RETRIEVAL": "0.55",
            "CONTEXT_ENGINE_BUDGET_MEMO_SEARCH_SYSTEM": "800",
            "UNRELATED": "1",
        }
    )
    profile, _ = registry.get("memo_search")
    assert (profile.history, profile.retrieval, profile.system_tokens) == (0.35, 0.55, 800)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CONTEXT_ENGINE_BUDGET_NOPE_HISTORY", "0.3", "no budget profile called 'nope'"),
        ("CONTEXT_ENGINE_BUDGET_DEFAULT_COLOUR", "0.3", "must end in one of"),
        ("CONTEXT_ENGINE_BUDGET_DEFAULT_HISTORY", "lots", "is not a number"),
        ("CONTEXT_ENGINE_BUDGET_DEFAULT_HISTORY", "0.9", "'default'"),
    ],
    ids=["unknown-profile", "unknown-field", "not-a-number", "breaks-the-sum"],
)
def test_bad_environment_overrides_say_what_is_wrong(
    variable: str, value: str, message: str
) -> None:
    registry = ProfileRegistry()
    with pytest.raises(ConfigurationError, match=message):
        registry.load_env({variable: value})
    assert registry.get("default")[0].history == 0.40  # nothing half-applied
