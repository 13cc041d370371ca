"""The providers' prompt-cache diagnostics, where the converters carried them.

Anthropic answers a request that sent ``diagnostics.previous_message_id`` with
``Message.diagnostics.cache_miss_reason`` (``model_changed``, ``system_changed``,
``tools_changed``, ``messages_changed`` with ``cache_missed_input_tokens``,
``previous_message_not_found``, ``unavailable``); `from_anthropic` keeps that
top-level key of a stored response under ``anthropic.extra``. OpenAI's
Responses API answers ``prompt_cache_options.comparison_response_id`` with
``Response.prompt_cache_diagnostics`` (``{"type": "cache_miss", "reason",
"cache_missed_tokens"}``); a Chat Completions dict that stored it keeps it
under ``openai.extra``. Shapes read from ``anthropic`` 2.14.0 and ``openai``
3.57.0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_engine.formats._anthropic_blocks import EXTRA_KEY as ANTHROPIC_EXTRA
from context_engine.formats.openai import EXTRA_KEY as OPENAI_EXTRA
from context_engine.messages import Message

__all__ = ["cache_miss_of", "newest_cache_miss"]


def cache_miss_of(message: Message) -> dict[str, Any] | None:
    """The cache-miss diagnostic a provider returned with ``message``, as sent, or None.

    A cache hit, a pending diagnosis and a message without diagnostics give None.
    """
    anthropic = message.metadata.get(ANTHROPIC_EXTRA)
    if isinstance(anthropic, Mapping):
        diagnostics = anthropic.get("diagnostics")
        if isinstance(diagnostics, Mapping):
            reason = diagnostics.get("cache_miss_reason")
            if isinstance(reason, Mapping):
                return dict(reason)
    openai = message.metadata.get(OPENAI_EXTRA)
    if isinstance(openai, Mapping):
        found = openai.get("prompt_cache_diagnostics")
        if isinstance(found, Mapping) and found.get("type") == "cache_miss":
            return dict(found)
    return None


def newest_cache_miss(messages: Sequence[Message]) -> dict[str, Any] | None:
    """The diagnostic of the newest assistant message, the provider's word on the last call."""
    for message in reversed(messages):
        if message.role == "assistant":
            return cache_miss_of(message)
    return None
