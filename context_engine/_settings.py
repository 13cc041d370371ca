"""Checks of `ContextEngine`'s settings: each names the setting and how to fix it."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from context_engine._validate import check_int, check_number, is_int
from context_engine.archive.base import Archive, check_session_id
from context_engine.errors import ConfigurationError
from context_engine.strategies.base import Strategy
from context_engine.summarize.pinned import pinned_setting

__all__ = [
    "archive_settings",
    "default_reserve",
    "non_negative",
    "pinned_setting",
    "positive_window",
    "reserve",
    "seconds",
    "strategy_tuple",
    "user_share",
    "warn_if_no_room",
]

logger = logging.getLogger("context_engine.engine")


def default_reserve(context_window: int) -> int:
    """The default head-room: ``clamp(0.13 * window, 4096, 16384)``."""
    return max(4096, min(16384, int(0.13 * context_window)))


def positive_window(value: object) -> int:
    if not is_int(value) or value <= 0:
        raise ConfigurationError(f"context_window must be a positive int of tokens, got {value!r}")
    return value


def reserve(value: object) -> int | None:
    if value == 0 and not isinstance(value, bool):
        return None  # 0, like None, restores the default
    return check_int(
        value, "ContextEngine", "reserve_tokens", optional=True, fix="None restores the default"
    )


def non_negative(name: str, value: object) -> int:
    return check_int(value, "ContextEngine", name)


def user_share(value: object) -> float | None:
    return check_number(
        value,
        "ContextEngine",
        "max_user_share",
        maximum=1,
        exclusive_minimum=True,
        optional=True,
        fix="it is the share of the threshold the newest user message always keeps when it "
        "has to be trimmed (1.0 trims it only when it alone exceeds the threshold); None "
        "never trims it",
    )


def seconds(name: str, value: object) -> float:
    return check_number(value, "ContextEngine", name, exclusive_minimum=True, unit="seconds")


def strategy_tuple(strategies: object) -> tuple[Strategy, ...]:
    if strategies is None or not isinstance(strategies, Iterable) or hasattr(strategies, "apply"):
        raise ConfigurationError(
            f"strategies must be a list of strategies, got {strategies!r}; "
            "wrap a single strategy in a list"
        )
    checked = tuple(strategies)
    for strategy in checked:
        lacking = [
            member
            for member, ok in (
                ("a str `name`", isinstance(getattr(strategy, "name", None), str)),
                ("a bool `uses_llm`", isinstance(getattr(strategy, "uses_llm", None), bool)),
                ("an async `apply`", callable(getattr(strategy, "apply", None))),
            )
            if not ok
        ]
        if lacking:
            raise ConfigurationError(
                f"{strategy!r} is not a strategy: it lacks {' and '.join(lacking)} "
                "(see context_engine.strategies.Strategy and docs/strategies/writing.md)"
            )
    return checked


def archive_settings(archive: object, session_id: object) -> tuple[Archive | None, str | None]:
    if archive is None:
        return None, None if session_id is None else check_session_id(session_id)
    if not isinstance(archive, Archive):
        raise ConfigurationError(
            f"archive must implement context_engine.archive.Archive (MemoryArchive, "
            f"SQLiteArchive, RedisArchive or open_archive(url)), got {archive!r}"
        )
    if session_id is None:
        raise ConfigurationError(
            "an archive needs session_id=: references are scoped by session, so pass the "
            "id of the agent session this engine serves"
        )
    return archive, check_session_id(session_id)


def warn_if_no_room(window: int, reserve: int) -> None:
    if reserve >= window:
        logger.warning(
            "window=<%d> reserve=<%d> | the reserve leaves no room for the prompt: every call "
            "is above the threshold; set reserve_tokens below the window",
            window,
            reserve,
        )
