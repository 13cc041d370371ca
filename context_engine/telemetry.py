"""OpenTelemetry spans and metrics, on the API only.

The tracer and meter are named ``context_engine`` with the package version.
Without an SDK configured every call is a no-op. The user may pass their own
``tracer_provider`` / ``meter_provider`` to the engine. Telemetry errors are
logged, never raised.

Nothing here hands out None: outside an engine call `current_telemetry` is a
disabled `Telemetry`, and every span context manager yields OpenTelemetry's
non-recording ``INVALID_SPAN`` when no span is started (the ``INVALID_SPAN``
pattern of opentelemetry-api). Callers use what they get without checking;
`set_attributes` does nothing on a span that is not recording, and a caller
that builds many attributes guards that work with ``span.is_recording()``.

Spans: ``context_engine.project`` / ``context_engine.compact`` /
``context_engine.recover_overflow`` for each engine call, a child
``context_engine.strategy`` per strategy run, and a GenAI-convention child
(``chat {model}``) per summarizer call. A checkpoint written in the background
(`BackgroundSummary`) is a trace of its own, ``context_engine.background_checkpoint``,
with its summarizer calls as children.

With a pricing on the engine, each view handed out for a model call
(``project``, ``recover_overflow``) also counts its expected cache reads and
writes and its modelled cost, and each rewrite that invalidated cached
tokens counts as a cache break (`Telemetry.prompt_cost`, `Telemetry.cache_break`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import time
import traceback
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.trace import INVALID_SPAN, Span, SpanKind, Status, StatusCode

if TYPE_CHECKING:
    from context_engine.cache_cost import CacheEstimate, RewriteCost

__all__ = ["Telemetry", "current_telemetry", "record_model_usage"]

logger = logging.getLogger(__name__)

_NO_OP_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_current: ContextVar[Telemetry | None] = ContextVar("context_engine_telemetry", default=None)


def _version() -> str:
    from context_engine import __version__

    return __version__


def current_telemetry() -> Telemetry:
    """The telemetry of the engine call running in this context.

    Outside an engine call (a summarizer called directly, say) this is the
    shared `Telemetry.disabled` instance, which starts no span and records no
    metric, so callers never check for None.
    """
    telemetry = _current.get()
    return _disabled() if telemetry is None else telemetry


@functools.cache
def _disabled() -> Telemetry:
    # Built on first use, not at import: the constructor reads the package
    # version, which is not set yet while `context_engine` is importing us.
    return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider())


class Telemetry:
    """The instruments of one engine.

    Args:
        tracer_provider: Provider for spans; None uses the global one. The
            API's ``NoOpTracerProvider`` turns spans off altogether.
        meter_provider: Provider for metrics; None uses the global one.
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        version = _version()
        # A given provider decides once; only the global one can change later.
        self._fixed_tracing = (
            None
            if tracer_provider is None
            else not isinstance(tracer_provider, trace.NoOpTracerProvider)
        )
        self._tracing = False
        self._tracing_checked_until = 0.0
        self.tracer = trace.get_tracer("context_engine", version, tracer_provider=tracer_provider)
        meter = metrics.get_meter("context_engine", version, meter_provider=meter_provider)
        self.rewrites = meter.create_counter(
            "context_engine.rewrites",
            unit="{rewrite}",
            description="Views rewritten, by strategy and reason",
        )
        self.tokens_saved = meter.create_histogram(
            "context_engine.tokens_saved", unit="{token}", description="Tokens a rewrite removed"
        )
        self.duration = meter.create_histogram(
            "context_engine.operation.duration",
            unit="s",
            description="Engine call latency, summarizer time included",
        )
        self.engine_duration = meter.create_histogram(
            "context_engine.operation.engine_duration",
            unit="s",
            description="Engine call latency without summarizer time",
        )
        self.summarizer_calls = meter.create_counter(
            "context_engine.summarizer.calls", unit="{call}", description="Summarizer calls"
        )
        self.summarizer_failures = meter.create_counter(
            "context_engine.summarizer.failures",
            unit="{call}",
            description="Summarizer calls that raised, timed out or answered nothing usable",
        )
        self.breaker_trips = meter.create_counter(
            "context_engine.breaker.trips", unit="{trip}", description="Circuit breaker openings"
        )
        self.breaker_open = meter.create_up_down_counter(
            "context_engine.breaker.open",
            unit="{engine}",
            description="Engines whose circuit breaker is open",
        )
        self._cache_instruments(meter)
        self._llm_seconds = 0.0

    def _cache_instruments(self, meter: Any) -> None:
        """The prompt-cache and cost instruments (recorded only with a pricing)."""
        self.cache_read_tokens = meter.create_counter(
            "context_engine.cache.read_tokens",
            unit="{token}",
            description="Prompt tokens expected to be read from the provider's prompt cache",
        )
        self.cache_write_tokens = meter.create_counter(
            "context_engine.cache.write_tokens",
            unit="{token}",
            description="Prompt tokens expected to be written to the cache (or sent uncached)",
        )
        self.prompt_units = meter.create_counter(
            "context_engine.prompt.cost",
            unit="{input_token}",
            description="Modelled prompt cost, in tokens at the model's base input price",
        )
        self.prompt_dollars = meter.create_counter(
            "context_engine.prompt.dollars",
            unit="{USD}",
            description="Modelled prompt cost in US dollars (when the pricing has a price)",
        )
        self.cache_breaks = meter.create_counter(
            "context_engine.cache.breaks",
            unit="{rewrite}",
            description="Rewrites that changed a prompt prefix the provider had cached",
        )
        self.cache_invalidated = meter.create_histogram(
            "context_engine.cache.invalidated_tokens",
            unit="{token}",
            description="Cached tokens a rewrite invalidated (written again instead of read)",
        )

    @staticmethod
    def disabled() -> Telemetry:
        """The shared telemetry that starts no span and records no metric.

        `current_telemetry` returns it outside an engine call; its span
        context managers yield ``INVALID_SPAN``.
        """
        return _disabled()

    def tracing(self) -> bool:
        """Whether spans go anywhere: a provider was given or an SDK was installed globally.

        Starting a span on the API's no-op proxy costs more than the engine's
        whole hot path, so without a provider no span is started at all. The
        global provider is looked up at most once a second (the lookup itself
        reads the environment).
        """
        if self._fixed_tracing is not None:
            return self._fixed_tracing
        now = time.monotonic()
        if now >= self._tracing_checked_until:
            self._tracing = not isinstance(trace.get_tracer_provider(), _NO_OP_PROVIDERS)
            self._tracing_checked_until = now + 1.0
        return self._tracing

    @contextlib.contextmanager
    def _span(self, name: str, **options: Any) -> Iterator[Span]:
        if not self.tracing():
            yield INVALID_SPAN
            return
        with self.tracer.start_as_current_span(name, record_exception=False, **options) as span:
            try:
                yield span
            except BaseException as exc:
                record_error(span, exc)
                raise

    def operation(self, name: str, attributes: dict[str, Any]) -> _Operation:
        """A span for one engine call; also makes this telemetry current for strategies.

        Entering it gives the span, ``INVALID_SPAN`` (not recording) when spans
        go nowhere.
        """
        return _Operation(self, name, attributes)

    @contextlib.contextmanager
    def strategy(self, name: str, tokens_before: int) -> Iterator[Span]:
        """A child span for one strategy run; an exception is recorded and re-raised.

        Yields ``INVALID_SPAN`` (not recording) when spans go nowhere.
        """
        attributes = {
            "context_engine.strategy.name": name,
            "context_engine.tokens_before": tokens_before,
        }
        with self._span("context_engine.strategy", attributes=attributes) as span:
            yield span

    @contextlib.contextmanager
    def background(self, name: str, tokens_before: int) -> Iterator[Span]:
        """A root span for a checkpoint written in the background; current for its summarizer.

        The work runs with a copy of this telemetry (the same tracer and
        instruments) that keeps its own tally of model time, so the engine
        time reported for the calls running meanwhile is not reduced by it.
        Yields ``INVALID_SPAN`` (not recording) when spans go nowhere.
        """
        detached = copy.copy(self)
        detached._llm_seconds = 0.0
        token = _current.set(detached)
        attributes = {
            "context_engine.strategy.name": name,
            "context_engine.tokens_before": tokens_before,
        }
        try:
            span_name = "context_engine.background_checkpoint"
            with detached._span(span_name, attributes=attributes) as span:
                yield span
        finally:
            _current.reset(token)

    @contextlib.contextmanager
    def summarizer_call(self, summarizer: object, attributes: dict[str, Any]) -> Iterator[Span]:
        """A GenAI-convention client span around one summarizer call; counts it and its failure.

        Yields ``INVALID_SPAN`` (not recording) when spans go nowhere.
        """
        model = getattr(summarizer, "model", None)
        provider = getattr(summarizer, "provider", None) or type(summarizer).__name__
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": str(provider),
            **({"gen_ai.request.model": str(model)} if model else {}),
            **attributes,
        }
        labels = {"context_engine.summary.kind": attributes.get("context_engine.summary.kind", "")}
        started = time.perf_counter()
        try:
            name = f"chat {model}" if model else "chat"
            with self._span(name, kind=SpanKind.CLIENT, attributes=attributes) as span:
                yield span
        except BaseException:
            _safely(self.summarizer_failures.add, 1, labels)
            raise
        finally:
            self._llm_seconds += time.perf_counter() - started
            _safely(self.summarizer_calls.add, 1, labels)

    def rewrite(self, strategy: str, reason: str, tokens_saved: int) -> None:
        """Count one rewrite and the tokens it saved."""
        labels = {"context_engine.strategy": strategy, "context_engine.reason": reason}
        _safely(self.rewrites.add, 1, labels)
        _safely(self.tokens_saved.record, max(0, tokens_saved), labels)

    def prompt_cost(self, operation: str, family: str, cache: CacheEstimate) -> None:
        """Count one view's expected cache reads and writes and its modelled cost."""
        labels = {"context_engine.operation": operation, "context_engine.pricing.family": family}
        _safely(self.cache_read_tokens.add, cache.cached_tokens, labels)
        _safely(self.cache_write_tokens.add, cache.uncached_tokens, labels)
        _safely(self.prompt_units.add, cache.cost, labels)
        if cache.dollars is not None:
            _safely(self.prompt_dollars.add, cache.dollars, labels)

    def cache_break(self, strategy: str, reason: str, family: str, cost: RewriteCost) -> None:
        """Count a rewrite that invalidated cached tokens (nothing when it invalidated none)."""
        if cost.invalidated_tokens <= 0:
            return
        labels = {
            "context_engine.strategy": strategy,
            "context_engine.reason": reason,
            "context_engine.pricing.family": family,
        }
        _safely(self.cache_breaks.add, 1, labels)
        _safely(self.cache_invalidated.record, cost.invalidated_tokens, labels)

    def breaker_moved(self, opened: bool) -> None:
        """Record the breaker opening (a trip) or leaving the open state."""
        if opened:
            _safely(self.breaker_trips.add, 1, None)
        _safely(self.breaker_open.add, 1 if opened else -1, None)


class _Operation:
    """Context manager of one engine call (a class: it runs on every call)."""

    __slots__ = ("_attributes", "_name", "_span", "_span_scope", "_started", "_telemetry", "_token")

    def __init__(self, telemetry: Telemetry, name: str, attributes: dict[str, Any]) -> None:
        self._telemetry = telemetry
        self._name = name
        self._attributes = attributes
        self._span_scope: Any = None
        self._span: Span = INVALID_SPAN

    def __enter__(self) -> Span:
        telemetry = self._telemetry
        self._token = _current.set(telemetry)
        telemetry._llm_seconds = 0.0
        self._started = time.perf_counter()
        if not telemetry.tracing():
            return INVALID_SPAN
        self._span_scope = telemetry.tracer.start_as_current_span(
            f"context_engine.{self._name}", attributes=self._attributes, record_exception=False
        )
        span: Span = self._span_scope.__enter__()
        self._span = span
        return span

    def __exit__(self, kind: Any, error: Any, trace_back: Any) -> None:
        telemetry = self._telemetry
        try:
            if self._span_scope is not None:
                if error is not None:
                    record_error(self._span, error)
                self._span_scope.__exit__(kind, error, trace_back)
        finally:
            _current.reset(self._token)
            elapsed = time.perf_counter() - self._started
            labels = {"context_engine.operation": self._name}
            _safely(telemetry.duration.record, elapsed, labels)
            spent = max(0.0, elapsed - telemetry._llm_seconds)
            _safely(telemetry.engine_duration.record, spent, labels)


def record_model_usage(
    input_tokens: object, output_tokens: object, response_model: object = None
) -> None:
    """Put a provider's reported usage on the current summarizer span (GenAI conventions).

    Summarizers that talk to a model call this with what the response said; it
    does nothing when no span is recording.
    """
    span = trace.get_current_span()
    if not span.is_recording():
        return
    set_attributes(
        span,
        {
            "gen_ai.usage.input_tokens": input_tokens if isinstance(input_tokens, int) else None,
            "gen_ai.usage.output_tokens": output_tokens if isinstance(output_tokens, int) else None,
            "gen_ai.response.model": response_model if isinstance(response_model, str) else None,
        },
    )


def record_error(span: Span, error: BaseException) -> None:
    """Record ``error`` on ``span`` as an exception event, without its chained causes.

    The SDK's own recording formats the whole chain, and a cause may quote
    message content (a summarizer's error echoing its prompt) that the
    error's own text leaves out (`context_engine.summarize.scrub`).
    """
    if not span.is_recording():
        return
    stack = traceback.format_exception(type(error), error, error.__traceback__, chain=False)
    with contextlib.suppress(Exception):
        span.record_exception(error, attributes={"exception.stacktrace": "".join(stack)})


def mark_error(span: Span, error: BaseException) -> None:
    """Set an error status on ``span`` (the exception itself is recorded by the span)."""
    if not span.is_recording():
        return
    with contextlib.suppress(Exception):
        span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def set_attributes(span: Span, attributes: dict[str, Any]) -> None:
    """Set attributes, dropping None values; never raises. A span not recording is left alone."""
    if not span.is_recording():
        return
    try:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    except Exception:
        logger.debug("telemetry | could not set span attributes", exc_info=True)


def _safely(record: Any, value: float, labels: dict[str, str] | None) -> None:
    try:
        record(value, labels)
    except Exception:
        logger.debug("telemetry | metric recording failed", exc_info=True)
