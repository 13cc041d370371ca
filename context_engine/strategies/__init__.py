"""Strategies the engine runs, cheapest first, while the view is above the threshold."""

from context_engine.strategies.background import BackgroundSummary
from context_engine.strategies.base import (
    Budget,
    ForceCompactionStrategy,
    ProactiveStrategy,
    Removal,
    Strategy,
    StrategyResult,
)
from context_engine.strategies.hard_truncate import HardTruncate
from context_engine.strategies.light_trim import LightTrim
from context_engine.strategies.micro_summary import MicroSummary
from context_engine.strategies.microcompact import ToolResultMicrocompact
from context_engine.strategies.session_memory import SessionMemory
from context_engine.strategies.summary import FullSummary, PostSummaryHook
from context_engine.strategies.tool_result_cap import ToolResultCap

__all__ = [
    "BackgroundSummary",
    "Budget",
    "ForceCompactionStrategy",
    "FullSummary",
    "HardTruncate",
    "LightTrim",
    "MicroSummary",
    "PostSummaryHook",
    "ProactiveStrategy",
    "Removal",
    "SessionMemory",
    "Strategy",
    "StrategyResult",
    "ToolResultCap",
    "ToolResultMicrocompact",
]
