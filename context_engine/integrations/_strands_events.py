"""Rewrites as a Strands hook event and attributes on the event-loop cycle's span.

Strands' own observability is its typed hooks (``agent.hooks``, a
``HookProvider``) and its OpenTelemetry spans. Each rewrite the engine makes
for the agent is

* invoked on the agent's hook registry as a `ContextRewriteEvent`, which a
  ``HookProvider`` subscribes to like Strands' own events
  (``registry.add_callback(ContextRewriteEvent, ...)``);
* written as ``context_engine.*`` attributes onto the span current when the
  engine runs: the ``execute_event_loop_cycle`` span of the model call (the
  ``invoke_agent`` span for the projection after the invocation).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from strands.hooks import HookEvent

from context_engine.events import RewriteEvent
from context_engine.integrations._reporting import annotate_current_span, operation

__all__ = ["ContextRewriteEvent", "emit_rewrite"]

# Logged under the public module, where users configure the adapter's logging.
logger = logging.getLogger("context_engine.integrations.strands")


@dataclasses.dataclass
class ContextRewriteEvent(HookEvent):
    """The engine rewrote what the agent's model is sent, or committed a checkpoint to its history.

    Attributes:
        agent: The agent whose history it was.
        rewrite: The engine's `RewriteEvent` (strategy, tokens before and
            after, whether ``agent.messages`` was replaced, every step).
    """

    rewrite: RewriteEvent

    @property
    def operation(self) -> str:
        """The engine call: ``project``, ``recover_overflow`` or ``compact``."""
        return operation(self.rewrite)


async def emit_rewrite(agent: Any, event: RewriteEvent) -> None:
    """Report ``event`` on the current span and to the agent's hook callbacks; never raises."""
    annotate_current_span(event)
    hooks = getattr(agent, "hooks", None)
    if hooks is None:  # an agent-like object without Strands' registry
        return
    try:
        await hooks.invoke_callbacks_async(ContextRewriteEvent(agent=agent, rewrite=event))
    except Exception:  # an observer never breaks the model call
        logger.warning(
            "strategy=<%s> | a ContextRewriteEvent callback failed; ignored",
            event.strategy,
            exc_info=True,
        )
