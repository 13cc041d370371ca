"""The recommended pipeline `ContextEngine.default` builds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from context_engine.errors import ConfigurationError
from context_engine.redact import Redactor
from context_engine.strategies.base import Strategy
from context_engine.strategies.hard_truncate import HardTruncate
from context_engine.strategies.light_trim import LightTrim
from context_engine.strategies.microcompact import ToolResultMicrocompact
from context_engine.strategies.session_memory import SessionMemory
from context_engine.strategies.summary import FullSummary
from context_engine.strategies.tool_result_cap import ToolResultCap
from context_engine.summarize.rehydrate import Rehydration

__all__ = ["default_pipeline"]


def default_pipeline(
    *,
    summarizer: Callable[..., Any] | None,
    seed: Callable[[], Any] | None,
    redactor: Redactor | None,
    tool_result_cap: Strategy | Literal["default"] | None,
    rehydrate: Rehydration | None = None,
) -> list[Strategy]:
    """Cap, microcompact, light trim, session memory and summary when given, hard truncate."""
    if rehydrate is not None and summarizer is None:
        raise ConfigurationError(
            "rehydrate= re-attaches files after a summary checkpoint: pass a summarizer= too"
        )
    cap = ToolResultCap() if tool_result_cap == "default" else tool_result_cap
    strategies: list[Strategy] = [ToolResultMicrocompact(), LightTrim()]
    if cap is not None:
        strategies.insert(0, cap)
    if seed is not None:
        strategies.append(SessionMemory(seed=seed))
    if summarizer is not None:
        strategies.append(
            FullSummary(summarizer=summarizer, redactor=redactor, rehydrate=rehydrate)
        )
    strategies.append(HardTruncate())
    return strategies
