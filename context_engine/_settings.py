"""Checks of `ContextEngine`'s settings: each names the setting and how to fix it."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import attrs

from context_engine._validate import check_int, check_number, is_int
from context_engine.archive.base import Archive, check_session_id
from context_engine.breaker import CircuitBreaker
from context_engine.errors import ConfigurationError
from context_engine.native.hook import is_native
from context_engine.pricing import CachePricing, pricing_for
from context_engine.reasoning import ReasoningPolicy, checked_reasoning_policy
from context_engine.request_cap import DEFAULT_MAX_LLM_REWRITES, checked_cap
from context_engine.strategies.background import BackgroundSummary
from context_engine.strategies.base import Strategy, proactive_trigger
from context_engine.strategies.light_trim import LightTrim
from context_engine.summarize.pinned import Pinned, pinned_setting
from context_engine.tokens import TokenCounter

__all__ = [
    "Settings",
    "archive_settings",
    "check_hooks",
    "checked_breaker",
    "checked_cost_aware",
    "checked_counter",
    "checked_flag",
    "checked_settings",
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
    if sum(isinstance(strategy, BackgroundSummary) for strategy in checked) > 1:
        raise ConfigurationError(
            "strategies hold more than one BackgroundSummary; the engine writes one "
            "checkpoint ahead of time, so wrap one summary strategy"
        )
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


@attrs.frozen
class Settings:
    """What the engine was configured with, checked once; replaced whole when a setter runs.

    ``reserve_tokens`` and ``threshold`` are derived here, so a call reads them
    as plain attributes.
    """

    window: int
    reserve: int | None
    strategies: tuple[Strategy, ...]
    commit_strategies: frozenset[str]
    max_user_share: float | None
    archive: Archive | None
    session_id: str | None
    archive_timeout: float
    pinned: Pinned | None = None
    reasoning: ReasoningPolicy = "drop"
    pricing: CachePricing | None = None
    cost_aware: bool = False
    """Below the threshold, clear old tool results when that pays under ``pricing``."""
    cache_breakpoints: bool = False
    """Place Anthropic cache breakpoints on the views handed out."""
    max_llm_rewrites: int | None = DEFAULT_MAX_LLM_REWRITES
    """LLM rewrites allowed between two user messages (None: no cap)."""
    reserve_tokens: int = attrs.field(init=False)
    threshold: int = attrs.field(init=False)
    native: tuple[Strategy, ...] = attrs.field(init=False)
    """The strategies that ask the provider to edit or compact (`context_engine.native`)."""
    proactive_at: int | None = attrs.field(init=False)
    """Tokens from which a `ProactiveStrategy` runs below the threshold, or None."""
    background: BackgroundSummary | None = attrs.field(init=False)
    """The strategy whose next checkpoint is written in the background, or None."""
    background_at: int = attrs.field(init=False)
    """Tokens of the view from which ``background`` starts (0 without one)."""

    @reserve_tokens.default
    def _reserve_tokens(self) -> int:
        return self.reserve if self.reserve is not None else default_reserve(self.window)

    @threshold.default
    def _threshold(self) -> int:
        return max(0, self.window - self.reserve_tokens)

    @native.default
    def _native(self) -> tuple[Strategy, ...]:
        return tuple(s for s in self.strategies if is_native(s))

    @proactive_at.default
    def _proactive_at(self) -> int | None:
        trigger = proactive_trigger(self.strategies, self.window)
        return trigger if trigger is not None and trigger < self.threshold else None

    @background.default
    def _background(self) -> BackgroundSummary | None:
        return next((s for s in self.strategies if isinstance(s, BackgroundSummary)), None)

    @background_at.default
    def _background_at(self) -> int:
        background = self.background
        return 0 if background is None else background.pre_trigger_tokens(self.threshold)

    @property
    def archiving(self) -> bool:
        """Whether originals are kept in an archive."""
        return self.archive is not None


def checked_settings(
    *,
    context_window: object,
    strategies: object,
    reserve_tokens: object,
    commit_strategies: object,
    max_user_share: object,
    archive: object,
    session_id: object,
    archive_timeout_seconds: object,
    pinned: object = None,
    reasoning: object = "drop",
    pricing: object = None,
    max_llm_rewrites_per_request: object = DEFAULT_MAX_LLM_REWRITES,
    cost_aware: object = False,
    cache_breakpoints: object = False,
) -> Settings:
    """The constructor's settings, each checked (a `ConfigurationError` names the first bad one)."""
    window = positive_window(context_window)
    checked_archive, checked_session = archive_settings(archive, session_id)
    timeout = seconds("archive_timeout_seconds", archive_timeout_seconds)
    if isinstance(commit_strategies, str) or not isinstance(commit_strategies, Iterable):
        raise ConfigurationError(
            f"commit_strategies must be a collection of strategy names, got {commit_strategies!r}"
        )
    cost_aware_flag = checked_cost_aware(cost_aware, pricing)
    settings = Settings(
        window=window,
        reserve=reserve(reserve_tokens),
        strategies=pipeline_for(strategy_tuple(strategies), cost_aware=cost_aware_flag),
        commit_strategies=frozenset(commit_strategies),
        max_user_share=user_share(max_user_share),
        archive=checked_archive,
        session_id=checked_session,
        archive_timeout=timeout,
        pinned=pinned_setting(pinned),
        reasoning=checked_reasoning_policy(reasoning),
        pricing=None if pricing is None else pricing_for(pricing),
        cost_aware=cost_aware_flag,
        cache_breakpoints=checked_flag("cache_breakpoints", cache_breakpoints),
        max_llm_rewrites=checked_cap(max_llm_rewrites_per_request),
    )
    warn_if_no_room(settings.window, settings.reserve_tokens)
    return settings


def checked_flag(name: str, value: object) -> bool:
    """A setting that must be True or False."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")
    return value


def pipeline_for(strategies: tuple[Strategy, ...], *, cost_aware: bool) -> tuple[Strategy, ...]:
    """``strategies`` as the engine runs them.

    A cost-aware engine's `LightTrim` trims old assistant messages to fit too
    (`LightTrim.trimming_assistant`); every other strategy is run as given.
    """
    if not cost_aware:
        return strategies
    return tuple(s.trimming_assistant() if isinstance(s, LightTrim) else s for s in strategies)


def checked_cost_aware(value: object, pricing: object) -> bool:
    """``cost_aware``: a bool, True only with a ``pricing`` to weigh rewrites by."""
    flag = checked_flag("cost_aware", value)
    if flag and pricing is None:
        raise ConfigurationError(
            "cost_aware=True weighs rewrites by cache prices: pass pricing= too "
            '(a CachePricing or a family such as "anthropic")'
        )
    return flag


def checked_breaker(
    max_failures: int, cooldown_calls: int, cooldown_seconds: float
) -> CircuitBreaker:
    """The breaker, its errors naming the engine's setting names."""
    try:
        return CircuitBreaker(
            max_failures=max_failures,
            cooldown_calls=cooldown_calls,
            cooldown_seconds=cooldown_seconds,
        )
    except ConfigurationError as exc:
        raise ConfigurationError(
            f"{exc} (max_consecutive_failures / breaker_cooldown_* settings)"
        ) from None


def checked_counter(counter: object) -> TokenCounter:
    """``counter`` when it is a `TokenCounter`."""
    if not isinstance(counter, TokenCounter):
        raise ConfigurationError(
            f"token_counter must be a TokenCounter (count_text, count_message, key), "
            f"got {counter!r}; use encoding= to pick a tiktoken encoding by name"
        )
    return counter


def check_hooks(**hooks: object) -> None:
    """Every hook given is callable."""
    for label, hook in hooks.items():
        if hook is not None and not callable(hook):
            raise ConfigurationError(f"{label} must be callable or None, got {hook!r}")
