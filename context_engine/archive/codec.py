"""A lossless JSON form of messages, for the archive and for references.

Every field of `Message`, its blocks, `Usage` and `ContextSummary` is
written, so ``decode_messages(encode_messages(m)) == m`` for any messages whose
metadata is JSON (str keys; str, number, bool, None, list and dict values);
anything else, int keys and tuples included, raises `ArchiveCodecError`.
The encoding is canonical (sorted keys, no spaces), which is what makes a
reference a pure function of the content.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from context_engine.errors import ArchiveCodecError, ArchiveError
from context_engine.messages import (
    Block,
    ContextSummary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)

__all__ = ["decode_messages", "encode_messages", "message_from_dict", "message_to_dict"]

_SCHEMA = 1


def _block_to_dict(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        return {
            "type": "thinking",
            "thinking": block.thinking,
            "signature": block.signature,
            "redacted": block.redacted,
        }
    if isinstance(block, ToolCall):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    return {
        "type": "image",
        "url": block.url,
        "data": block.data,
        "media_type": block.media_type,
        "detail": block.detail,
    }


def _block_from_dict(raw: Mapping[str, Any]) -> Block:
    kind = raw.get("type")
    fields = {key: value for key, value in raw.items() if key != "type"}
    if kind == "text":
        return TextBlock(**fields)
    if kind == "thinking":
        return ThinkingBlock(**fields)
    if kind == "tool_call":
        return ToolCall(**fields)
    if kind == "image":
        return ImageBlock(**fields)
    raise ArchiveError(f"archived block has unknown type {kind!r}")


def _usage_to_dict(usage: Usage | None) -> dict[str, int] | None:
    if usage is None:
        return None
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def message_to_dict(message: Message) -> dict[str, Any]:
    """The JSON-ready form of ``message``, every field included."""
    out: dict[str, Any] = {
        "role": message.role,
        "content": [_block_to_dict(block) for block in message.content],
        "tool_call_id": message.tool_call_id,
        "name": message.name,
        "usage": _usage_to_dict(message.usage),
        "stop_reason": message.stop_reason,
        "metadata": dict(message.metadata),
        "timestamp": message.timestamp.isoformat() if message.timestamp else None,
    }
    if isinstance(message, ContextSummary):
        out["checkpoint"] = {
            "summary": message.summary,
            "tokens_before": message.tokens_before,
            "read_files": list(message.read_files),
            "modified_files": list(message.modified_files),
            "references": list(message.references),
        }
    return out


def message_from_dict(raw: Mapping[str, Any]) -> Message:
    """Rebuild the message `message_to_dict` wrote."""
    try:
        stamp = raw.get("timestamp")
        timestamp = _dt.datetime.fromisoformat(stamp) if stamp else None
        usage = Usage(**raw["usage"]) if raw.get("usage") else None
        common: dict[str, Any] = {
            "tool_call_id": raw.get("tool_call_id"),
            "name": raw.get("name"),
            "usage": usage,
            "stop_reason": raw.get("stop_reason"),
            "metadata": raw.get("metadata") or {},
            "timestamp": timestamp,
        }
        checkpoint = raw.get("checkpoint")
        if checkpoint is not None:
            return ContextSummary(**checkpoint, **common)
        content = tuple(_block_from_dict(block) for block in raw["content"])
        return Message(raw["role"], content, **common)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"archived message is malformed: {exc}") from exc


def _check_json(value: object, path: str) -> None:
    """Raise unless ``value`` reads back from JSON as itself.

    ``json.dumps`` turns int keys into strings and tuples into lists, which a
    store that keeps the objects (memory) would not: every store would then
    return something else, and ``{1: 'a'}`` would share a reference with
    ``{'1': 'a'}``. So those are refused, like any value JSON cannot hold.
    """
    if value is None or isinstance(value, (str, bool, int, float)):
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{path}[{index}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ArchiveCodecError(
                    f"cannot archive a message whose metadata is not JSON: the "
                    f"{type(key).__name__} key {key!r} at {path} would come back as a str "
                    "from some stores; use str keys"
                )
            _check_json(item, f"{path}[{key!r}]")
        return
    fix = "use a list" if isinstance(value, tuple) else "keep metadata to JSON values"
    raise ArchiveCodecError(
        f"cannot archive a message whose metadata is not JSON: a {type(value).__name__} at "
        f"{path} would not come back as itself; {fix}, or run the engine without an archive"
    )


def encode_messages(messages: Sequence[Message]) -> str:
    """The canonical JSON text of ``messages``.

    Raises:
        ArchiveCodecError: a message's metadata holds a value JSON cannot represent
            as itself (a non-str key, a tuple, a set, an object).
    """
    for message in messages:
        if message.metadata:
            _check_json(dict(message.metadata), "metadata")
    document = {"schema": _SCHEMA, "messages": [message_to_dict(m) for m in messages]}
    try:
        return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise ArchiveCodecError(
            f"cannot archive a message whose metadata is not JSON ({exc}); keep metadata to "
            "str keys and JSON values, or run the engine without an archive"
        ) from exc


def decode_messages(text: str | bytes) -> tuple[Message, ...]:
    """The messages `encode_messages` wrote.

    Raises:
        ArchiveError: the text is not an encoding of messages this version reads.
    """
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ArchiveError(f"archived messages are not valid JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("schema") != _SCHEMA:
        raise ArchiveError("archived messages have an unknown encoding schema")
    return tuple(message_from_dict(raw) for raw in document["messages"])
