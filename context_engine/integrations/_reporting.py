"""A rewrite as a runtime's own observability carries it: plain fields and span attributes.

Every adapter hands the engine's `RewriteEvent` to its runtime (a LangChain
custom event, a Strands hook event, a pydantic-ai capability event, an Agents
SDK custom span). Those travel through serializers, tracing exporters and UI
streams, so they carry the event's facts as JSON-ready fields rather than the
event object (its view holds whole messages). The names match the engine's
own OpenTelemetry spans (``context_engine.project`` and its
``context_engine.tokens_before`` ... attributes), so one query finds both.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

from context_engine.events import RewriteEvent

__all__ = [
    "annotate_current_span",
    "event_name",
    "operation",
    "rewrite_fields",
    "span_attributes",
]

logger = logging.getLogger(__name__)

_OPERATIONS = {
    "threshold": "project",
    "circuit_breaker": "project",
    "overflow": "recover_overflow",
    "manual": "compact",
    "request_boundary": "compact_if_needed",
}


def operation(event: RewriteEvent) -> str:
    """The engine call that made ``event``: ``project``, ``recover_overflow``, ``compact`` ..."""
    return _OPERATIONS.get(event.reason, "project")


def event_name(event: RewriteEvent) -> str:
    """``context_engine.<operation>``: the name of the engine's own span for that call."""
    return f"context_engine.{operation(event)}"


def rewrite_fields(event: RewriteEvent) -> dict[str, Any]:
    """The facts of ``event`` as JSON-ready values (no messages, no attrs objects).

    Keys: ``operation``, ``reason``, ``strategy``, ``changed``, ``committed``,
    ``tokens_before``, ``tokens_after``, ``futile``, ``failures``,
    ``compacted_messages`` (replaced by a checkpoint; 0 without one) and
    ``steps`` (one dict per strategy tried: ``name``, ``applied``,
    ``tokens_before``, ``tokens_after``, ``error``).
    """
    return {
        "operation": operation(event),
        "reason": event.reason,
        "strategy": event.strategy,
        "changed": event.changed,
        "committed": event.committed,
        "tokens_before": event.tokens_before,
        "tokens_after": event.tokens_after,
        "futile": event.futile,
        "failures": event.failures,
        "compacted_messages": event.info.compacted_count if event.info is not None else 0,
        "steps": [
            {
                "name": step.name,
                "applied": step.applied,
                "tokens_before": step.tokens_before,
                "tokens_after": step.tokens_after,
                "error": step.error,
            }
            for step in event.steps
        ],
    }


def span_attributes(event: RewriteEvent) -> dict[str, Any]:
    """``event`` as OpenTelemetry attributes, prefixed ``context_engine.`` like the engine's."""
    fields = rewrite_fields(event)
    steps = fields.pop("steps")
    attributes = {f"context_engine.{key}": value for key, value in fields.items()}
    attributes["context_engine.strategies_applied"] = tuple(
        s["name"] for s in steps if s["applied"]
    )
    return attributes


def annotate_current_span(event: RewriteEvent) -> None:
    """Write ``event`` onto the OpenTelemetry span current in the runtime (when one records).

    Under a runtime's own tracing that is the span of the model call (a
    pydantic-ai ``chat`` span, a Strands event-loop cycle), so the rewrite is
    read on the runtime's span without opening the engine's child spans. A
    later rewrite in the same span overwrites the attributes. Never raises.
    """
    try:
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(span_attributes(event))
    except Exception:  # telemetry never breaks the model call
        logger.debug("telemetry | could not annotate the current span", exc_info=True)
