"""Circuit breaker transitions, tested without an engine or an event loop."""

from __future__ import annotations

import pytest

from context_engine.breaker import CircuitBreaker
from context_engine.errors import ConfigurationError


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def tripped(max_failures: int = 3, **options: object) -> CircuitBreaker:
    breaker = CircuitBreaker(max_failures=max_failures, **options)  # type: ignore[arg-type]
    for _ in range(max_failures):
        breaker.record_failure()
    return breaker


def test_starts_closed_and_never_skips() -> None:
    breaker = CircuitBreaker()
    assert breaker.state == "closed"
    assert not breaker.should_skip()


def test_failures_below_max_keep_it_closed() -> None:
    breaker = CircuitBreaker(max_failures=3)
    assert breaker.record_failure() is False
    assert breaker.record_failure() is False
    assert breaker.state == "closed"
    assert breaker.failures == 2


def test_reaching_max_failures_opens_it() -> None:
    breaker = CircuitBreaker(max_failures=2)
    breaker.record_failure()
    assert breaker.record_failure() is True
    assert breaker.state == "open"


def test_open_breaker_skips_one_call_then_goes_half_open_with_count_max_minus_one() -> None:
    breaker = tripped(3)
    assert breaker.should_skip() is True
    assert breaker.state == "half_open"
    assert breaker.failures == 2
    assert breaker.should_skip() is False


def test_failure_in_half_open_trips_it_again() -> None:
    breaker = tripped(3)
    breaker.should_skip()
    assert breaker.record_failure() is True
    assert breaker.state == "open"
    assert breaker.should_skip() is True


def test_success_in_half_open_closes_it() -> None:
    breaker = tripped(3)
    breaker.should_skip()
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.failures == 0


def test_success_resets_the_count_while_closed() -> None:
    breaker = CircuitBreaker(max_failures=3)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state == "closed"


def test_cooldown_calls_skip_that_many_calls() -> None:
    breaker = tripped(2, cooldown_calls=3)
    assert [breaker.should_skip() for _ in range(4)] == [True, True, True, False]
    assert breaker.state == "half_open"


def test_cooldown_seconds_keep_it_open_until_time_passes() -> None:
    clock = FakeClock()
    breaker = tripped(2, cooldown_seconds=30.0, clock=clock)
    assert breaker.should_skip() is True
    clock.now += 10
    assert breaker.should_skip() is True
    assert breaker.state == "open"
    clock.now += 25
    assert breaker.should_skip() is False
    assert breaker.state == "half_open"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_failures", 0),
        ("cooldown_calls", 0),
        ("cooldown_seconds", -1.0),
        ("max_failures", True),
    ],
    ids=["zero-max", "zero-cooldown-calls", "negative-seconds", "bool-max"],
)
def test_bad_settings_fail_at_construction(option: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        CircuitBreaker(**{option: value})  # type: ignore[arg-type]
