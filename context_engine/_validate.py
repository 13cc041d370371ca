"""Checks of configuration values, written once for the whole package.

Every setting that must be a count, a share or a number of seconds is checked
here, so each bad value fails the same way: a `ConfigurationError` that names
the owner, the setting and the value as the user wrote them, states the rule
and, when the owner gives one, how to fix it::

    SessionMemory(keep_recent_tokens=-1): keep_recent_tokens must be an int >= 0, got -1;
    use the default 8000 or 0 to keep only the protected tail

Two forms of the same checks:

* ``check_int`` / ``check_number`` for code that validates by hand (an
  ``__init__``, a property setter): they return the value, so
  ``self._ttl = check_number(ttl, "RedisArchive", "ttl", minimum=1)`` reads as
  one step.
* ``int_at_least``, ``positive_int``, ``non_negative_int``, ``number_in``,
  ``non_negative_seconds``, ``positive_seconds`` and ``share`` build attrs
  validators (``attrs.field(validator=positive_int())``); the owner is the
  instance's class and the setting the attribute's name.

The rules: a bool is never an int (``True`` is not a count); an int is
accepted where a number is; a number is always finite (nan compares false with
everything, so a nan cool-down would keep a breaker open for ever, and inf
means "never" without saying so). ``is_int`` is the bare "int but not bool"
test for code that raises its own error (messages, formats).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal, NoReturn, TypeAlias, TypeGuard, overload

import attrs

from context_engine.errors import ConfigurationError

__all__ = [
    "Validator",
    "check_int",
    "check_number",
    "fail",
    "int_at_least",
    "is_int",
    "non_negative_int",
    "non_negative_seconds",
    "number_in",
    "positive_int",
    "positive_seconds",
    "share",
]

Validator: TypeAlias = Callable[[Any, "attrs.Attribute[Any]", Any], None]
"""The signature of an attrs validator: ``(instance, attribute, value) -> None``."""


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int and not a bool (``isinstance(True, int)`` holds)."""
    return isinstance(value, int) and not isinstance(value, bool)


def fail(owner: str, setting: str, value: object, rule: str, fix: str | None = None) -> NoReturn:
    """Raise the `ConfigurationError` of a bad setting.

    Args:
        owner: What the user configured, as they wrote it (``"HardTruncate"``).
        setting: The argument or attribute name (``"max_user_share"``).
        value: The rejected value.
        rule: What the value must be, completing "must be ..." (``"an int >= 0"``).
        fix: How to fix it, appended after a semicolon; None adds nothing.

    Raises:
        ConfigurationError: always.
    """
    message = f"{owner}({setting}={value!r}): {setting} must be {rule}, got {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        message += " (nan and infinities are not allowed)"
    raise ConfigurationError(f"{message}; {fix}" if fix else message)


@overload
def check_int(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: int = ...,
    optional: Literal[False] = ...,
    fix: str | None = ...,
) -> int: ...
@overload
def check_int(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: int = ...,
    optional: bool,
    fix: str | None = ...,
) -> int | None: ...
def check_int(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: int = 0,
    optional: bool = False,
    fix: str | None = None,
) -> int | None:
    """Return ``value`` when it is an int (not a bool) of at least ``minimum``.

    Args:
        value: The value to check.
        owner: What the user configured (see `fail`).
        setting: The setting's name.
        minimum: The smallest value allowed.
        optional: Whether None is allowed too.
        fix: How to fix a bad value (see `fail`).

    Raises:
        ConfigurationError: the value breaks the rule.
    """
    if optional and value is None:
        return None
    if not is_int(value) or value < minimum:
        rule = f"an int >= {minimum}"
        fail(owner, setting, value, f"None or {rule}" if optional else rule, fix)
    return value


@overload
def check_number(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: float = ...,
    maximum: float = ...,
    exclusive_minimum: bool = ...,
    exclusive_maximum: bool = ...,
    optional: Literal[False] = ...,
    unit: str | None = ...,
    fix: str | None = ...,
) -> float: ...
@overload
def check_number(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: float = ...,
    maximum: float = ...,
    exclusive_minimum: bool = ...,
    exclusive_maximum: bool = ...,
    optional: bool,
    unit: str | None = ...,
    fix: str | None = ...,
) -> float | None: ...
def check_number(
    value: object,
    owner: str,
    setting: str,
    *,
    minimum: float = 0.0,
    maximum: float = math.inf,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    optional: bool = False,
    unit: str | None = None,
    fix: str | None = None,
) -> float | None:
    """Return ``value`` when it is a finite int or float (not a bool) within the bounds.

    Args:
        value: The value to check.
        owner: What the user configured (see `fail`).
        setting: The setting's name.
        minimum: The lower bound.
        maximum: The upper bound; ``math.inf`` for none (the value stays finite).
        exclusive_minimum: Whether ``minimum`` itself is refused.
        exclusive_maximum: Whether ``maximum`` itself is refused.
        optional: Whether None is allowed too.
        unit: What the number counts, for the message (``"seconds"``).
        fix: How to fix a bad value (see `fail`).

    Raises:
        ConfigurationError: the value breaks the rule.
    """
    if optional and value is None:
        return None
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or (value <= minimum if exclusive_minimum else value < minimum)
        or (value >= maximum if exclusive_maximum else value > maximum)
    ):
        rule = _number_rule(minimum, maximum, exclusive_minimum, exclusive_maximum, unit)
        fail(owner, setting, value, f"None or {rule}" if optional else rule, fix)
    return value


def _number_rule(low: float, high: float, low_open: bool, high_open: bool, unit: str | None) -> str:
    noun = f"number of {unit}" if unit else "number"
    if math.isinf(high):
        if low == 0 and low_open:
            return f"a positive {noun}"
        return f"a {noun} {'>' if low_open else '>='} {low:g}"
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    return f"a {noun} in {interval}"


def int_at_least(minimum: int, *, optional: bool = False, fix: str | None = None) -> Validator:
    """An attrs validator: an int (not a bool) of at least ``minimum``, or None when optional."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_int(
            value,
            type(instance).__name__,
            attribute.name,
            minimum=minimum,
            optional=optional,
            fix=fix,
        )

    return check


def positive_int(*, optional: bool = False, fix: str | None = None) -> Validator:
    """An attrs validator: an int >= 1 (a count that cannot be zero)."""
    return int_at_least(1, optional=optional, fix=fix)


def non_negative_int(*, optional: bool = False, fix: str | None = None) -> Validator:
    """An attrs validator: an int >= 0."""
    return int_at_least(0, optional=optional, fix=fix)


def number_in(
    minimum: float = 0.0,
    maximum: float = math.inf,
    *,
    exclusive_minimum: bool = False,
    exclusive_maximum: bool = False,
    optional: bool = False,
    unit: str | None = None,
    fix: str | None = None,
) -> Validator:
    """An attrs validator: a finite number within the bounds (see `check_number`)."""

    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        check_number(
            value,
            type(instance).__name__,
            attribute.name,
            minimum=minimum,
            maximum=maximum,
            exclusive_minimum=exclusive_minimum,
            exclusive_maximum=exclusive_maximum,
            optional=optional,
            unit=unit,
            fix=fix,
        )

    return check


def share(
    *, exclusive_minimum: bool = False, exclusive_maximum: bool = False, fix: str | None = None
) -> Validator:
    """An attrs validator: a share of a whole, a number between 0 and 1."""
    return number_in(
        0.0,
        1.0,
        exclusive_minimum=exclusive_minimum,
        exclusive_maximum=exclusive_maximum,
        fix=fix,
    )


def non_negative_seconds(*, optional: bool = False, fix: str | None = None) -> Validator:
    """An attrs validator: a finite number of seconds >= 0."""
    return number_in(0.0, optional=optional, unit="seconds", fix=fix)


def positive_seconds(*, optional: bool = False, fix: str | None = None) -> Validator:
    """An attrs validator: a finite number of seconds > 0."""
    return number_in(0.0, exclusive_minimum=True, optional=optional, unit="seconds", fix=fix)
