"""Strategies the engine runs, cheapest first, while the view is above the threshold."""

from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    Strategy,
    StrategyResult,
)

__all__ = [
    "Budget",
    "ForceCompactionStrategy",
    "Strategy",
    "StrategyResult",
]
