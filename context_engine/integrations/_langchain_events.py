"""Rewrites as LangChain custom events, for the run's callbacks and ``astream_events``.

LangChain's own observability is its callback system: a handler's
``on_custom_event`` (LangSmith records these on the run, ``astream_events``
yields them as ``on_custom_event``). Each rewrite the engine makes for a model
call is dispatched there under the name of the engine call that made it
(``context_engine.project``, ``context_engine.recover_overflow``,
``context_engine.compact``) with `rewrite_fields` as its data, from inside the
model node's run, before the model is sent the rewritten view.
"""

from __future__ import annotations

import logging

from langchain_core.callbacks import adispatch_custom_event, dispatch_custom_event

from context_engine.events import RewriteEvent
from context_engine.integrations._reporting import event_name, rewrite_fields

__all__ = ["adispatch_rewrite", "dispatch_rewrite"]

# Logged under the public module, where users configure the adapter's logging.
logger = logging.getLogger("context_engine.integrations.langchain")


def dispatch_rewrite(event: RewriteEvent) -> None:
    """Dispatch ``event`` to the callbacks of the LangChain run in progress (blocking hooks)."""
    try:
        dispatch_custom_event(event_name(event), rewrite_fields(event))
    except RuntimeError:  # no run to attach it to: a hook called outside an agent
        logger.debug("strategy=<%s> | no LangChain run; event not dispatched", event.strategy)


async def adispatch_rewrite(event: RewriteEvent) -> None:
    """`dispatch_rewrite` for the async hooks.

    On Python 3.10 an async LangGraph run does not pass its config to the
    middleware's context, so there is no run to attach the event to: it is
    skipped (the engine's hooks and spans still have it).
    """
    try:
        await adispatch_custom_event(event_name(event), rewrite_fields(event))
    except RuntimeError:
        logger.debug("strategy=<%s> | no LangChain run; event not dispatched", event.strategy)
