"""Turning messages into the text a summarizer reads, safely.

The conversation is data: it goes inside a ``<conversation>`` block, and any
text in it that looks like the opening or closing tag of one of the prompt's
blocks is escaped, so a tool result cannot end the block and speak as the
prompt. Images become a placeholder; long tool results and reasoning are
clipped to head and tail with a marker.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from context_engine.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall

__all__ = [
    "BLOCK_TAGS",
    "IMAGE_PLACEHOLDER",
    "clip",
    "escape_block_tags",
    "serialize_conversation",
    "serialize_message",
]

BLOCK_TAGS = ("conversation", "previous-summary", "instructions", "originals")
IMAGE_PLACEHOLDER = "[image omitted]"
# Whitespace is allowed on both sides of the slash: a model may read ``< /conversation>`` as a tag.
_TAG = regex.compile(r"<\s*(/?)\s*(" + "|".join(BLOCK_TAGS) + r")\b", regex.IGNORECASE)


def escape_block_tags(text: str) -> str:
    """Make text unable to open or close a prompt block by escaping the tag's ``<``."""
    return _TAG.sub(lambda m: "<\\" + m.group(1) + m.group(2), text)


def clip(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters: head, a marker with the count, tail."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    removed = len(text) - head - tail
    return f"{text[:head]}\n[... {removed} characters clipped ...]\n{text[len(text) - tail :]}"


def serialize_message(message: Message, *, max_tool_result_chars: int = 2000) -> str:
    """One message as labelled lines; tool results and reasoning clipped."""
    role = "checkpoint" if message.is_summary else message.role
    if message.role == "tool":
        label = f"[tool result{f' {message.name}' if message.name else ''}]"
        body = clip(_plain_text(message.content), max_tool_result_chars)
        return f"{label}: {escape_block_tags(body)}"
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(f"[{role}]: {escape_block_tags(block.text)}")
        elif isinstance(block, ThinkingBlock) and not block.redacted:
            reasoning = clip(block.thinking, max_tool_result_chars)
            parts.append(f"[{role} reasoning]: {escape_block_tags(reasoning)}")
        elif isinstance(block, ToolCall):
            arguments = clip(block.arguments, max_tool_result_chars)
            parts.append(f"[{role} calls {block.name}]: {escape_block_tags(arguments)}")
        elif isinstance(block, ImageBlock):
            parts.append(f"[{role}]: {IMAGE_PLACEHOLDER}")
    return "\n".join(parts) if parts else f"[{role}]: (empty)"


def serialize_conversation(
    messages: Iterable[Message], *, max_tool_result_chars: int = 2000
) -> str:
    """The messages as a ``<conversation>`` block, one labelled entry per message."""
    body = "\n\n".join(
        serialize_message(m, max_tool_result_chars=max_tool_result_chars) for m in messages
    )
    return f"<conversation>\n{body}\n</conversation>"


def _plain_text(content: tuple[object, ...]) -> str:
    pieces = []
    for block in content:
        if isinstance(block, TextBlock):
            pieces.append(block.text)
        elif isinstance(block, ImageBlock):
            pieces.append(IMAGE_PLACEHOLDER)
    return "\n".join(pieces)
