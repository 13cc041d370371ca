"""How the provider summarizers retry: transient failures, ``Retry-After``, their own overflow.

One call of a model-backed summarizer goes through `summarize_with_retries`:

* Transient failures (HTTP 429, 408 and 5xx, timeouts, connection errors) are
  retried with exponential backoff and jitter. A ``Retry-After`` (or
  ``retry-after-ms``) header is honoured: the wait is the longer of the backoff
  and the server's delay, capped by `RetryPolicy.max_wait`. Attempts and the
  total time spent are bounded; no new attempt starts after the deadline, and
  a server delay that would end past it surfaces at once.
* When the summarizer's own model says the prompt is too long, the oldest fifth
  of the turns of ``request.messages`` is dropped and the prompt is rebuilt,
  a bounded number of times.
* Anything else surfaces at once as a `SummarizerError` whose message names the
  provider, the HTTP status and what to do; the original error is its ``__cause__``.

The provider clients' own retries are switched off by the summarizers, so
retrying happens in one place.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeAlias

import attrs
import tenacity

from context_engine._validate import (
    check_int,
    is_int,
    non_negative_int,
    non_negative_seconds,
    positive_int,
    share,
)
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.structure import analyze, is_user_message
from context_engine.summarize.prompts import build_request
from context_engine.summarize.request import SummaryRequest, parse_summary_text

__all__ = [
    "DEFAULT_RETRY_POLICY",
    "RebuildHook",
    "RetryPolicy",
    "drop_oldest_turns",
    "is_transient",
    "retry_after_seconds",
    "summarize_with_retries",
]

logger = logging.getLogger(__name__)

RebuildHook: TypeAlias = Callable[[SummaryRequest, tuple[Message, ...]], SummaryRequest]
"""Builds the request for fewer messages after the summarizer's model rejected the prompt."""


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """When and how long a provider summarizer retries."""

    max_attempts: int = attrs.field(default=4, validator=positive_int())
    """Attempts per prompt for transient failures, the first included."""
    max_delay: float = attrs.field(default=60.0, validator=non_negative_seconds())
    """Seconds after which no new attempt starts (one in flight ends by the client's timeout)."""
    initial_wait: float = attrs.field(default=0.5, validator=non_negative_seconds())
    """Backoff before the second attempt; doubles each time."""
    max_wait: float = attrs.field(default=30.0, validator=non_negative_seconds())
    """Cap on one wait, a server's ``Retry-After`` included."""
    jitter: float = attrs.field(default=0.5, validator=non_negative_seconds())
    """Up to this many random seconds added to each backoff."""
    max_overflow_retries: int = attrs.field(default=3, validator=non_negative_int())
    """How many times the prompt is shrunk after the summarizer's model says it is too long."""
    overflow_drop_fraction: float = attrs.field(
        default=0.2,
        validator=share(
            exclusive_minimum=True,
            exclusive_maximum=True,
            fix="it is the share between 0 and 1 of the turns dropped each time "
            "(0.2 drops a fifth)",
        ),
    )
    """Share of the turns dropped, oldest first, each time."""
    sleep: Callable[[float], Awaitable[None]] = attrs.field(
        default=asyncio.sleep, eq=False, repr=False
    )
    """Coroutine function used to wait (inject a recording one in tests)."""


DEFAULT_RETRY_POLICY = RetryPolicy()


# ------------------------------------------------------------ classification


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if is_int(status) else None


def is_transient(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether retrying ``exc`` may succeed: 408, 429, 5xx, timeouts, connection errors.

    Args:
        exc: The error of one attempt.
        transient: The client's own connection/timeout error classes.
    """
    if is_context_overflow(exc):
        return False
    status = _status(exc)
    if status is not None:
        return status in (408, 429) or status >= 500
    return isinstance(exc, (TimeoutError, asyncio.TimeoutError, ConnectionError, *transient))


def retry_after_seconds(exc: BaseException, *, now: float | None = None) -> float | None:
    """The delay a ``retry-after-ms`` or ``Retry-After`` header on ``exc.response`` asks for.

    ``Retry-After`` may be seconds or an HTTP date. Returns None without a usable header.
    """
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        return None
    millis = _number(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    raw = headers.get("retry-after")
    seconds = _number(raw)
    if seconds is not None or not isinstance(raw, str):
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _number(raw: object) -> float | None:
    if not isinstance(raw, str):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return max(0.0, value) if math.isfinite(value) else None


# ------------------------------------------------------------ tenacity parts


class _WaitBackoffOrRetryAfter(tenacity.wait.wait_base):
    """The longer of exponential backoff with jitter and the server's Retry-After, capped."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        policy = self._policy
        exponent = min(retry_state.attempt_number - 1, 32)
        wait = policy.initial_wait * 2**exponent + random.uniform(0, policy.jitter)
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        server = retry_after_seconds(error) if error is not None else None
        if server is not None:
            wait = max(wait, server)
        return float(min(wait, policy.max_wait))


class _StopAtDeadline(tenacity.stop.stop_base):
    """Stop when the next attempt would start after the deadline.

    A server's ``Retry-After`` counts in full here, though the wait itself is
    capped by `RetryPolicy.max_wait`: a delay the deadline cannot honour ends
    the retries (``server_delay`` keeps it for the error message) instead of
    being shortened into an attempt the server said it would refuse.
    """

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        self.server_delay: float | None = None

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        upcoming = float(getattr(retry_state, "upcoming_sleep", 0.0) or 0.0)
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None and outcome.failed else None
        server = retry_after_seconds(error) if error is not None else None
        now = time.monotonic()
        if server is not None and now + server >= self._deadline:
            self.server_delay = server
            return True
        return now + upcoming >= self._deadline


def _log_retry(provider: str) -> Callable[[tenacity.RetryCallState], None]:
    def log(state: tenacity.RetryCallState) -> None:
        outcome, action = state.outcome, state.next_action
        logger.warning(
            "provider=<%s> attempt=<%s> error=<%s> wait=<%.2f> | retrying summarizer call",
            provider,
            state.attempt_number,
            type(outcome.exception()).__name__ if outcome is not None else None,
            action.sleep if action is not None else 0.0,
        )

    return log


# ------------------------------------------------------------ overflow trimming


def drop_oldest_turns(messages: Sequence[Message], fraction: float = 0.2) -> tuple[Message, ...]:
    """``messages`` without the oldest ``fraction`` of their turns (at least one).

    Leading system/developer messages stay, and so does the newest turn. Messages
    before the first user message count as a turn. With a single turn, its user
    message stays and the oldest ``fraction`` of the steps after it (tool groups
    whole) is dropped instead. Returns the input unchanged when nothing can go.
    """
    lead = 0
    while lead < len(messages) and messages[lead].role in ("system", "developer"):
        lead += 1
    body = tuple(messages[lead:])
    starts = [i for i, message in enumerate(body) if is_user_message(message)]
    if not starts or starts[0] != 0:
        starts.insert(0, 0)
    keep_first = 0
    if len(starts) < 2:
        keep_first = 1 if body and is_user_message(body[0]) else 0
        shape = analyze(body)
        starts, index = [], keep_first
        while index < len(body):
            starts.append(index)
            index = shape.unit_end(index)
    if len(starts) < 2:
        return tuple(messages)
    drop = min(len(starts) - 1, max(1, math.ceil(len(starts) * fraction)))
    return tuple(messages[:lead]) + body[:keep_first] + body[starts[drop] :]


def _rebuild(
    request: SummaryRequest, fewer: tuple[Message, ...], hook: RebuildHook | None
) -> SummaryRequest:
    if hook is not None:
        return hook(request, fewer)
    if request.rebuild is not None:
        return request.with_messages(fewer)
    return build_request(
        fewer,
        kind=request.kind,
        previous_summary=request.previous_summary,
        instructions=request.instructions,
        reason=request.reason,
        max_tokens=request.max_tokens,
        max_tool_result_chars=request.max_tool_result_chars,
        redact=request.redact,
    )


# ------------------------------------------------------------ the driver


async def summarize_with_retries(
    send: Callable[[SummaryRequest], Awaitable[str]],
    request: SummaryRequest,
    *,
    provider: str,
    model: str,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    transient: tuple[type[BaseException], ...] = (),
    rebuild: RebuildHook | None = None,
) -> str:
    """Run ``send`` on ``request`` with the retries of ``policy``; return the checkpoint text.

    Args:
        send: One attempt: sends the request to the model and returns its text.
        request: What to summarize.
        provider: Provider name for messages and logs (``OpenAI``, ``Anthropic``).
        model: Model name for messages.
        policy: Attempts, waits and overflow handling.
        transient: The client's connection and timeout error classes.
        rebuild: Builds the request for fewer messages; by default the request's
            own ``rebuild``, else `build_request` with the default prompts.

    Raises:
        SummarizerError: a non-transient error, transient errors past the bounds,
            a prompt still too long after the allowed shrinking (cause chained),
            or an answer with no checkpoint text in it.
    """
    deadline = time.monotonic() + policy.max_delay
    current = request
    for shrunk in range(policy.max_overflow_retries + 1):
        attempts = 0

        async def attempt(req: SummaryRequest) -> str:
            nonlocal attempts
            attempts += 1
            return await send(req)

        at_deadline = _StopAtDeadline(deadline)
        retrying = tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(policy.max_attempts) | at_deadline,
            wait=_WaitBackoffOrRetryAfter(policy),
            retry=tenacity.retry_if_exception(lambda exc: is_transient(exc, transient)),
            sleep=policy.sleep,
            before_sleep=_log_retry(provider),
            reraise=True,
        )
        try:
            answer: str = await retrying(attempt, current)
        except SummarizerError:
            raise
        except Exception as exc:
            if not is_context_overflow(exc):
                message = _failure_message(provider, model, exc, attempts)
                if at_deadline.server_delay is not None:
                    message += _past_deadline(at_deadline.server_delay, policy)
                raise SummarizerError(message) from exc
            fewer = _shrink(current, exc, shrunk, provider=provider, model=model, policy=policy)
            current = _rebuild(request, fewer, rebuild)
            continue
        return _parse(answer, provider, model)
    raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover


def _parse(answer: str, provider: str, model: str) -> str:
    try:
        return parse_summary_text(answer)
    except SummarizerError as exc:
        raise SummarizerError(
            f"{provider} summarizer ({model}): {exc}; check that the model follows the prompt "
            "and that max_tokens leaves room for the answer"
        ) from exc


def _shrink(
    current: SummaryRequest,
    exc: Exception,
    shrunk: int,
    *,
    provider: str,
    model: str,
    policy: RetryPolicy,
) -> tuple[Message, ...]:
    """The messages to retry with; raises when no more shrinking is allowed or possible."""
    fewer = drop_oldest_turns(current.messages, policy.overflow_drop_fraction)
    if shrunk >= policy.max_overflow_retries or len(fewer) == len(current.messages):
        raise SummarizerError(
            f"{provider} summarizer ({model}): the summary prompt is longer than the model's "
            f"window even after dropping the oldest turns {shrunk} time(s) "
            f"({len(current.messages)} messages left); use a summarizer model with a larger "
            "window, lower the strategy's summarizer_window so the history is sent in "
            "smaller chunks, or raise RetryPolicy.max_overflow_retries"
        ) from exc
    logger.warning(
        "provider=<%s> messages=<%d> kept=<%d> | summary prompt too long, dropping oldest turns",
        provider,
        len(current.messages),
        len(fewer),
    )
    return fewer


def _failure_message(provider: str, model: str, exc: BaseException, attempts: int) -> str:
    """The message of the `SummarizerError` raised for ``exc``: what failed and what to do."""
    status = _status(exc)
    detail = _provider_message(exc)[:300]
    if status is None and ("Timeout" in type(exc).__name__ or isinstance(exc, TimeoutError)):
        what, advice = "the request timed out", "raise the client's timeout or try again later"
    elif status is None and ("Connection" in type(exc).__name__ or isinstance(exc, OSError)):
        what, advice = f"could not reach the server ({detail})", "check base_url and the network"
    elif status == 429:
        what, advice = "rate limited (HTTP 429)", "wait, or raise RetryPolicy.max_attempts"
    elif status == 408 or (status is not None and status >= 500):
        what, advice = f"server error (HTTP {status})", "the provider is failing; retry later"
    elif status in (401, 403):
        what, advice = f"credentials rejected (HTTP {status})", "check the client's API key"
    elif status == 404:
        what, advice = "not found (HTTP 404)", "check the model name and the client's base_url"
    elif status is not None:
        what = f"request rejected (HTTP {status}): {detail}"
        advice = "fix the request or the summarizer's options as the provider's message says"
    else:
        what = f"{type(exc).__name__}: {detail}"
        advice = "see the chained exception"
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    return f"{provider} summarizer ({model}) failed{tries}: {what}; {advice}"


def _past_deadline(server_delay: float, policy: RetryPolicy) -> str:
    return (
        f" (the server asked to retry after {server_delay:g} s, past the "
        f"{policy.max_delay:g} s RetryPolicy.max_delay; raise it to wait that long)"
    )


def _provider_message(exc: BaseException) -> str:
    """The provider's own error message when the body has one, else the exception's text."""
    body = getattr(exc, "body", None)
    inner = body.get("error", body) if isinstance(body, Mapping) else None
    if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
        return str(inner["message"])
    return str(getattr(exc, "message", None) or exc)


def _check_options(model: object, max_output_tokens: object, retry: object, owner: str) -> None:
    """Shared argument checks of the provider summarizers."""
    if not isinstance(model, str) or not model:
        raise ConfigurationError(f"{owner} needs a model name (str), got {model!r}")
    check_int(max_output_tokens, owner, "max_output_tokens", minimum=1, optional=True)
    if not isinstance(retry, RetryPolicy):
        raise ConfigurationError(
            f"{owner}: retry must be a RetryPolicy, got {type(retry).__name__}; "
            "use context_engine.summarize.retry.RetryPolicy(...)"
        )
