"""Budget profiles: how the room after the system prompt is split among sources.

The arithmetic (seed 003): the system prompt takes a fixed number of tokens;
preferences take their share of what is left; history, long-term memory and
retrieval split the rest by their ratios (history takes the retrieval share's
place when there is no retrieval). Past `LONG_CONVERSATION_TURNS` turns,
history's ratio shrinks and long-term memory's grows. Any share under
`MIN_SHARE_TOKENS` becomes 0. Pure functions and frozen data, so every number
can be checked without an engine.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from context_engine.errors import ConfigurationError

__all__ = [
    "DEFAULT_PROFILES",
    "ENV_PREFIX",
    "LONG_CONVERSATION_TURNS",
    "MIN_SHARE_TOKENS",
    "Allocation",
    "BudgetProfile",
    "ProfileRegistry",
]

MIN_SHARE_TOKENS = 100
"""A share smaller than this is not worth filling: it becomes 0."""

LONG_CONVERSATION_TURNS = 20
"""Above this many user turns, share moves from history to long-term memory."""

HISTORY_SHRINK = 0.375
"""The fraction of history's ratio a long conversation gives up (0.40 -> 0.25)."""

LONG_TERM_GROWTH = 0.333
"""The fraction by which long-term memory's ratio grows then (0.15 -> 0.20)."""

ENV_PREFIX = "CONTEXT_ENGINE_BUDGET_"
"""Overrides read by `ProfileRegistry.load_env`: ``CONTEXT_ENGINE_BUDGET_<PROFILE>_<FIELD>``."""

_ENV_FIELDS = {
    "SYSTEM": "system_tokens",
    "PREFERENCES": "preferences",
    "HISTORY": "history",
    "HISTORY_WITHOUT_RETRIEVAL": "history_without_retrieval",
    "LONG_TERM": "long_term",
    "RETRIEVAL": "retrieval",
}


def _ratio(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        name = getattr(instance, "name", "?")
        finite = isinstance(value, int | float) and math.isfinite(value)
        raise ConfigurationError(
            f"budget profile {name!r}: {attribute.name} must be a ratio between 0 and 1, "
            f"got {value!r}" + ("" if finite else " (nan and infinities are not allowed)")
        )


@attrs.frozen(kw_only=True)
class BudgetProfile:
    """How one kind of task splits its prompt budget.

    Attributes:
        name: The profile's name in a `ProfileRegistry`.
        description: What the profile is for.
        system_tokens: Tokens set aside for the system prompt.
        preferences: Share of the room after the system prompt for preferences.
        history: Share of the rest for short-term history (with retrieval).
        history_without_retrieval: History's share when the call has no retrieval.
        long_term: Share of the rest for long-term memory.
        retrieval: Share of the rest for retrieval results.

    History, long-term and retrieval must add up to 1 (or all be 0: a profile
    with no LLM budget), and so must history-without-retrieval and long-term.

    Raises:
        ConfigurationError: a ratio is outside [0, 1] or the ratios do not add
            up; the message names the profile.
    """

    name: str
    description: str = ""
    system_tokens: int = 500
    preferences: float = attrs.field(default=0.10, validator=_ratio)
    history: float = attrs.field(default=0.40, validator=_ratio)
    history_without_retrieval: float = attrs.field(default=0.55, validator=_ratio)
    long_term: float = attrs.field(default=0.15, validator=_ratio)
    retrieval: float = attrs.field(default=0.45, validator=_ratio)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.system_tokens, int) or self.system_tokens < 0:
            raise ConfigurationError(
                f"budget profile {self.name!r}: system_tokens must be an int >= 0, "
                f"got {self.system_tokens!r}"
            )
        split = self.history + self.long_term + self.retrieval
        if self.zero:
            return
        if not math.isclose(split, 1.0, abs_tol=0.01):
            raise ConfigurationError(
                f"budget profile {self.name!r}: history + long_term + retrieval must add up "
                f"to 1 (or all be 0), got {split:.3f}"
            )
        if self.history_without_retrieval + self.long_term > 1.0 + 0.01:
            raise ConfigurationError(
                f"budget profile {self.name!r}: history_without_retrieval + long_term must "
                f"not exceed 1, got {self.history_without_retrieval + self.long_term:.3f}"
            )

    @property
    def zero(self) -> bool:
        """The profile gives the sources no budget at all (another system manages context)."""
        return self.history == self.long_term == self.retrieval == self.preferences == 0

    def allocate(self, total: int, *, has_retrieval: bool = True, turns: int = 0) -> Allocation:
        """Split ``total`` tokens for a conversation of ``turns`` user turns."""
        if self.zero:
            return Allocation(profile=self.name, total=total, system=min(total, self.system_tokens))
        system = min(max(0, total), self.system_tokens)
        room = max(0, total) - system
        preferences = int(room * self.preferences)
        rest = room - preferences
        history = self.history if has_retrieval else self.history_without_retrieval
        long_term = self.long_term
        retrieval = self.retrieval if has_retrieval else 0.0
        if not has_retrieval:
            long_term = 1.0 - history
        if turns > LONG_CONVERSATION_TURNS:
            history *= 1.0 - HISTORY_SHRINK
            long_term *= 1.0 + LONG_TERM_GROWTH
        return Allocation(
            profile=self.name,
            total=total,
            system=system,
            preferences=_worth(preferences),
            history=_worth(int(rest * history)),
            long_term=_worth(int(rest * long_term)),
            retrieval=_worth(int(rest * retrieval)),
        )


def _worth(tokens: int) -> int:
    return tokens if tokens >= MIN_SHARE_TOKENS else 0


@attrs.frozen(kw_only=True)
class Allocation:
    """A profile's split of one call's tokens.

    ``history`` is the share history is guaranteed; in the engine it also gets
    whatever the other sources leave unused (the strategies fit the
    transcript into the room the providers did not take).
    """

    profile: str
    total: int
    system: int = 0
    preferences: int = 0
    history: int = 0
    long_term: int = 0
    retrieval: int = 0

    def share(self, name: str) -> int:
        """The tokens of the share called ``name`` (``preferences``, ``long_term``, ...)."""
        value = getattr(self, name, None)
        if name in ("profile", "total") or not isinstance(value, int):
            raise KeyError(name)
        return value


DEFAULT_PROFILES: tuple[BudgetProfile, ...] = (
    BudgetProfile(name="default", description="Balanced: history, memory and retrieval"),
    BudgetProfile(
        name="memo_search",
        description="Searching notes: retrieval first",
        history=0.30,
        long_term=0.10,
        retrieval=0.60,
    ),
    BudgetProfile(
        name="schedule_create",
        description="Creating a schedule: conversation and memory, little retrieval",
        history=0.55,
        long_term=0.25,
        retrieval=0.20,
    ),
    BudgetProfile(
        name="schedule_query",
        description="Querying a schedule: conversation and memory, little retrieval",
        history=0.55,
        long_term=0.25,
        retrieval=0.20,
    ),
    BudgetProfile(
        name="external",
        description="No LLM budget: another system manages this agent's context",
        preferences=0.0,
        history=0.0,
        history_without_retrieval=0.0,
        long_term=0.0,
        retrieval=0.0,
    ),
)


class ProfileRegistry:
    """Named budget profiles, the built-in ones first; unknown names get ``default``.

    Safe to share between threads: lookups and updates take a lock.
    """

    def __init__(self, profiles: Iterable[BudgetProfile] = DEFAULT_PROFILES) -> None:
        self._lock = threading.Lock()
        self._profiles: dict[str, BudgetProfile] = {}
        for profile in profiles:
            self.set(profile)

    def set(self, profile: BudgetProfile) -> None:
        """Add ``profile`` or replace the one with its name."""
        if not isinstance(profile, BudgetProfile):
            raise ConfigurationError(f"expected a BudgetProfile, got {profile!r}")
        with self._lock:
            self._profiles[profile.name] = profile

    def get(self, name: str) -> tuple[BudgetProfile, bool]:
        """The profile called ``name`` and True, or ``default`` and False when there is none."""
        with self._lock:
            found = self._profiles.get(name)
            if found is not None:
                return found, True
            fallback = self._profiles.get("default") or BudgetProfile(name="default")
            return fallback, False

    def names(self) -> tuple[str, ...]:
        """The registered names, in registration order."""
        with self._lock:
            return tuple(self._profiles)

    def load_env(self, environ: Mapping[str, str] | None = None) -> None:
        """Apply ``CONTEXT_ENGINE_BUDGET_<PROFILE>_<FIELD>=<value>`` overrides.

        ``<PROFILE>`` is the profile's name in capitals (``MEMO_SEARCH``);
        ``<FIELD>`` is SYSTEM, PREFERENCES, HISTORY, HISTORY_WITHOUT_RETRIEVAL,
        LONG_TERM or RETRIEVAL. All overrides of one profile apply together,
        so ratios may be moved in several variables.

        Raises:
            ConfigurationError: a variable names no profile or field, its value
                is not a number, or the overridden profile's ratios do not add up.
        """
        environ = os.environ if environ is None else environ
        changes: dict[str, dict[str, Any]] = {}
        with self._lock:
            by_key = {name.upper(): name for name in self._profiles}
        for variable, raw in environ.items():
            if not variable.startswith(ENV_PREFIX):
                continue
            name, field = _parse_variable(variable, by_key)
            try:
                value: Any = int(raw) if field == "system_tokens" else float(raw)
            except ValueError:
                raise ConfigurationError(f"{variable}={raw!r} is not a number") from None
            changes.setdefault(name, {})[field] = value
        for name, fields in changes.items():
            profile, _ = self.get(name)
            self.set(attrs.evolve(profile, **fields))


def _parse_variable(variable: str, by_key: Mapping[str, str]) -> tuple[str, str]:
    rest = variable[len(ENV_PREFIX) :]
    for suffix, field in sorted(_ENV_FIELDS.items(), key=lambda kv: -len(kv[0])):
        if rest.endswith("_" + suffix):
            key = rest[: -len(suffix) - 1]
            if key in by_key:
                return by_key[key], field
            raise ConfigurationError(
                f"{variable}: no budget profile called {key.lower()!r} "
                f"(known: {', '.join(sorted(k.lower() for k in by_key))})"
            )
    raise ConfigurationError(
        f"{variable}: the name must end in one of {', '.join('_' + f for f in _ENV_FIELDS)}"
    )
