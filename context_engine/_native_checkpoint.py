"""Recognise a provider's compaction checkpoint on a message (`structure` uses it).

Anthropic's server-side compaction returns a ``compaction`` content block,
which `formats.anthropic` keeps whole under ``anthropic.blocks``; OpenAI's
Responses API returns a ``compaction`` item, which `formats.openai_agents`
keeps whole under ``openai_agents.items``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from context_engine.messages import Message

__all__ = ["carries_native_checkpoint"]

_ANTHROPIC_BLOCKS: Final = "anthropic.blocks"
_RESPONSES_ITEMS: Final = "openai_agents.items"


def _anthropic_block(entry: object) -> bool:
    if not isinstance(entry, Mapping):
        return False
    opaque: Any = entry.get("opaque")
    return isinstance(opaque, Mapping) and opaque.get("type") == "compaction"


def _responses_item(item: object) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "compaction"


def carries_native_checkpoint(
    message: Message, provider: Literal["anthropic", "openai"] | None = None
) -> bool:
    """Whether ``message`` holds a compaction block (Anthropic) or item (OpenAI).

    ``provider`` None: either one.
    """
    if message.role != "assistant" or not message.metadata:
        return False
    if provider != "openai":
        entries = message.metadata.get(_ANTHROPIC_BLOCKS)
        if isinstance(entries, list) and any(_anthropic_block(e) for e in entries):
            return True
    if provider != "anthropic":
        items = message.metadata.get(_RESPONSES_ITEMS)
        if isinstance(items, list) and any(_responses_item(i) for i in items):
            return True
    return False
