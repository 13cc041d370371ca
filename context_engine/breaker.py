"""The circuit breaker that stops a failing pipeline from burning LLM calls.

States::

    closed ──(failures reach max)──▶ open ──(cool-down over)──▶ half_open
      ▲                                                          │   │
      └──────────────(a successful rewrite or recovery)──────────┘   │
                        open ◀──────────(the trial call fails)───────┘

While open, ``project`` skips every strategy. The cool-down is counted in
skipped calls (default one) and optionally in seconds; both must pass. Moving
to half-open sets the failure count to ``max - 1``, so one more failure opens
the breaker again and one success closes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeAlias

import attrs

from context_engine._validate import non_negative_seconds, positive_int

__all__ = ["BreakerState", "CircuitBreaker"]

BreakerState: TypeAlias = Literal["closed", "open", "half_open"]


@attrs.define
class CircuitBreaker:
    """Counts consecutive pipeline failures and decides when to skip.

    The decisions are synchronous and free of I/O so they can be tested alone.

    Attributes:
        max_failures: Consecutive failures that open the breaker.
        cooldown_calls: Calls skipped while open before the half-open trial.
        cooldown_seconds: Seconds that must also pass before the trial.
        clock: Monotonic clock, replaceable in tests.
        failures: The current consecutive failure count.
    """

    max_failures: int = attrs.field(default=3, validator=positive_int())
    cooldown_calls: int = attrs.field(default=1, validator=positive_int())
    cooldown_seconds: float = attrs.field(default=0.0, validator=non_negative_seconds())
    clock: Callable[[], float] = attrs.field(default=time.monotonic, repr=False)
    failures: int = attrs.field(default=0, init=False)
    _half_open: bool = attrs.field(default=False, init=False)
    _opened_at: float = attrs.field(default=0.0, init=False, repr=False)
    _skipped: int = attrs.field(default=0, init=False, repr=False)

    @property
    def state(self) -> BreakerState:
        """``closed``, ``open`` or ``half_open``."""
        if self.failures >= self.max_failures:
            return "open"
        return "half_open" if self._half_open else "closed"

    def should_skip(self) -> bool:
        """Decide for one call: True skips the pipeline (and counts toward the cool-down).

        A skipped call that completes the cool-down moves the breaker to
        half-open, so the following call is the trial.
        """
        if self.failures < self.max_failures:
            return False
        if self._cooled_down():
            self._enter_half_open()
            return False
        self._skipped += 1
        if self._cooled_down():
            self._enter_half_open()
        return True

    def record_failure(self) -> bool:
        """Count a failed pipeline; return True when this failure opens the breaker."""
        self.failures += 1
        self._half_open = False
        if self.failures >= self.max_failures:
            self._opened_at = self.clock()
            self._skipped = 0
            return True
        return False

    def record_success(self) -> None:
        """A successful rewrite or recovery closes the breaker."""
        self.failures = 0
        self._half_open = False

    def _cooled_down(self) -> bool:
        return (
            self._skipped >= self.cooldown_calls
            and self.clock() - self._opened_at >= self.cooldown_seconds
        )

    def _enter_half_open(self) -> None:
        self.failures = self.max_failures - 1
        self._half_open = True
