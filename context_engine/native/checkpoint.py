"""Compaction checkpoints a provider returned, found in a view.

Anthropic's server-side compaction returns a ``compaction`` content block at
the start of an assistant message; OpenAI's Responses API returns a
``compaction`` output item. Both are opaque: the converters keep them whole in
the message's metadata (``anthropic.blocks`` / ``openai_agents.items``), and
the provider ignores everything before the newest one. The engine treats such
a message as a checkpoint it did not write: right after the leading system
messages it is part of the lead no strategy rewrites (`structure.analyze`),
and the messages before it can leave the view (archived, recallable).
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine._native_checkpoint import carries_native_checkpoint
from context_engine.messages import Message
from context_engine.native.options import NativeProvider

__all__ = ["carries_native_checkpoint", "newest_native_checkpoint"]


def newest_native_checkpoint(view: Sequence[Message], provider: NativeProvider) -> int | None:
    """The index of the last message holding ``provider``'s compaction, or None."""
    for index in range(len(view) - 1, -1, -1):
        if carries_native_checkpoint(view[index], provider):
            return index
    return None
