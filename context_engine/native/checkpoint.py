"""Compaction checkpoints a provider returned, found in a view and cut before.

Anthropic's server-side compaction returns a ``compaction`` content block at
the start of an assistant message; OpenAI's Responses API returns a
``compaction`` output item. Both are opaque: the converters keep them whole in
the message's metadata (``anthropic.blocks`` / ``openai_agents.items``), and
the provider ignores everything before the newest one. The engine treats such
a message as a checkpoint it did not write: it never edits it, and the
messages before it can leave the view (archived, recallable) at no loss.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from context_engine.messages import Message
from context_engine.native.options import NativeProvider

__all__ = ["carries_native_checkpoint", "newest_native_checkpoint"]

# The metadata keys of the converters (formats.anthropic.BLOCKS_KEY,
# formats.openai_agents.ITEMS_KEY), named here to keep this module import-light.
_ANTHROPIC_BLOCKS: Final = "anthropic.blocks"
_RESPONSES_ITEMS: Final = "openai_agents.items"


def _anthropic_block(entry: object) -> bool:
    if not isinstance(entry, Mapping):
        return False
    opaque: Any = entry.get("opaque")
    return isinstance(opaque, Mapping) and opaque.get("type") == "compaction"


def _responses_item(item: object) -> bool:
    return isinstance(item, Mapping) and item.get("type") == "compaction"


def carries_native_checkpoint(message: Message, provider: NativeProvider) -> bool:
    """Whether ``message`` holds a compaction block (Anthropic) or item (OpenAI)."""
    if message.role != "assistant":
        return False
    if provider == "anthropic":
        entries = message.metadata.get(_ANTHROPIC_BLOCKS)
        return isinstance(entries, list) and any(_anthropic_block(e) for e in entries)
    items = message.metadata.get(_RESPONSES_ITEMS)
    return isinstance(items, list) and any(_responses_item(i) for i in items)


def newest_native_checkpoint(view: Sequence[Message], provider: NativeProvider) -> int | None:
    """The index of the last message holding ``provider``'s compaction, or None."""
    for index in range(len(view) - 1, -1, -1):
        if carries_native_checkpoint(view[index], provider):
            return index
    return None
