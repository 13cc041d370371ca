"""Rewrites as pydantic-ai capability events and attributes on the request's span.

pydantic-ai's own observability is its run event stream and its
instrumentation. Each rewrite the engine makes for a model request is

* emitted into the run's event stream as a `ContextRewriteEvent` (kind
  ``context_engine.rewrite``), which reaches ``event_stream_handler``,
  ``agent.run_stream_events()``, ``agent.iter()`` streaming, the UI adapters
  and every capability's ``on_event``;
* written as ``context_engine.*`` attributes onto the OpenTelemetry span
  current in the hook: under ``Instrumentation`` (logfire) that is the
  request's ``chat`` span.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from pydantic_ai import CapabilityEvent
from pydantic_ai.exceptions import UserError
from pydantic_ai.tools import RunContext

from context_engine.events import RewriteEvent
from context_engine.integrations._reporting import annotate_current_span, rewrite_fields

__all__ = ["ContextRewriteEvent", "emit_rewrite"]

# Logged under the public module, where users configure the adapter's logging.
logger = logging.getLogger("context_engine.integrations.pydantic_ai")


@dataclasses.dataclass(kw_only=True)
class ContextRewriteEvent(CapabilityEvent, namespace="context_engine", name="rewrite"):
    """The engine rewrote what a model request is sent (kind ``context_engine.rewrite``).

    The fields are `RewriteEvent`'s facts, JSON-ready so the event serializes
    like pydantic-ai's own.
    """

    operation: str = "project"
    """The engine call: ``project``, ``recover_overflow`` or ``compact``."""
    reason: str = "threshold"
    """``threshold``, ``overflow``, ``manual`` or ``circuit_breaker``."""
    strategy: str = ""
    """The last strategy that applied."""
    changed: bool = False
    """Whether the view differs from the history."""
    committed: bool = False
    """Whether the run's history was replaced by the view (a checkpoint)."""
    tokens_before: int = 0
    """Tokens of the history, as the engine counts them."""
    tokens_after: int = 0
    """Tokens of the view."""
    futile: bool = False
    """The part no strategy may touch is alone above the threshold."""
    failures: int = 0
    """Consecutive pipeline failures (set when the circuit breaker is open)."""
    compacted_messages: int = 0
    """Messages a checkpoint replaced (0 without one)."""
    steps: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Every strategy tried: ``name``, ``applied``, ``tokens_before``, ``tokens_after``,
    ``error``."""


async def emit_rewrite(ctx: RunContext[Any], event: RewriteEvent) -> None:
    """Report ``event`` on the current span and in the run's event stream."""
    annotate_current_span(event)
    try:
        await ctx.emit(ContextRewriteEvent(**rewrite_fields(event)))
    except UserError:  # a RunContext without an event stream (not inside an agent run)
        logger.debug("strategy=<%s> | no run event stream; event not emitted", event.strategy)
