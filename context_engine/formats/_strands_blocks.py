"""Usage dicts, content blocks and tool results of Strands messages, for `formats.strands`.

Each reader returns a block plus its *layout entry*: None for a block its
`Block` renders exactly, ``{"raw": block}`` for one that carried more (a
``reasoningSignature``, a ``json`` tool result item), ``{"opaque": block}`` for
one without a `Block` (``cachePoint``, ``document``, ...). The writer puts the
entries back while they still fit the blocks, so a round trip is exact and a
rewritten message (a trimmed text, a cleared result) still converts cleanly.
Nothing here imports Strands: its messages are plain dicts.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError
from context_engine.formats._openai_parts import copy_json
from context_engine.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)

__all__ = [
    "AFTER_KEY",
    "BEFORE_KEY",
    "BLOCKS_KEY",
    "CUSTOM_KEY",
    "EXTRA_KEY",
    "JOINS_KEY",
    "METADATA_KEY",
    "NEW_MESSAGE_KEY",
    "STATUS_KEY",
    "SYSTEM_FORM_KEY",
    "TOOL_RESULT_KEY",
    "TRACKING_ID_KEY",
    "USAGE_KEY",
    "layout_meta",
    "read_block",
    "read_run",
    "read_tool_result",
    "read_user_pieces",
    "usage_from_strands",
    "usage_to_strands",
    "write_blocks",
    "write_piece",
    "write_tool_result",
    "write_usage",
]

TRACKING_ID_KEY: Final = "strands.tracking_id"
"""Metadata key: the message dict's ``tracking_id``."""
METADATA_KEY: Final = "strands.metadata"
"""Metadata key: the message dict's ``metadata``, without an assistant's ``usage``."""
USAGE_KEY: Final = "strands.usage"
"""Metadata key: the ``usage`` dict as written, when it differs from the rendered one."""
EXTRA_KEY: Final = "strands.extra"
"""Metadata key: top-level keys of the message dict the model has no field for."""
BLOCKS_KEY: Final = "strands.blocks"
"""Metadata key: per-block details that blocks cannot hold, and blocks kept whole."""
BEFORE_KEY: Final = "strands.before"
"""Metadata key: blocks kept whole that come before this message's own blocks."""
AFTER_KEY: Final = "strands.after"
"""Metadata key: blocks kept whole that come after this message's own blocks."""
STATUS_KEY: Final = "strands.status"
"""Metadata key: a tool result's ``status`` when it is not ``success`` (None: absent)."""
TOOL_RESULT_KEY: Final = "strands.tool_result"
"""Metadata key: keys of a ``toolResult`` other than its id, status and content."""
NEW_MESSAGE_KEY: Final = "strands.new_message"
"""Metadata key: a tool message that began a new dict after a tool message."""
JOINS_KEY: Final = "strands.joins"
"""Metadata key: this message continued the dict of the message before it."""
CUSTOM_KEY: Final = "context_engine"
"""Entry of a dict's ``metadata["custom"]`` carrying the other metadata of its messages."""
SYSTEM_FORM_KEY: Final = "strands.system_form"
"""Metadata key: ``"blocks"`` on a system message read from a list of content blocks."""

_IMAGE_TYPES: Final = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
_FORMATS: Final = {**{v: k for k, v in _IMAGE_TYPES.items()}, "image/jpg": "jpeg"}
# Leading base64 characters of each image format, for data without a media type.
_MAGIC: Final = {"iVBORw0KGgo": "png", "/9j/": "jpeg", "R0lGOD": "gif", "UklGR": "webp"}


# --------------------------------------------------------------------- usage


def _count(usage: Mapping[str, Any], key: str, *, required: bool = False) -> int:
    value = usage.get(key)
    if value is None and not required:
        return 0
    if not is_int(value) or value < 0:
        raise InvalidMessageError(f"usage.{key} must be a non-negative int, got {value!r}")
    return value


def usage_from_strands(usage: Mapping[str, Any]) -> Usage:
    """Normalise a Strands ``usage`` dict (``inputTokens``, ``outputTokens``, ...).

    Strands providers report the cache two ways: inside ``inputTokens``
    (OpenAI; then ``inputTokens + outputTokens == totalTokens``) or beside it
    (Bedrock, Anthropic). ``Usage.input_tokens`` is the whole prompt either
    way: the cache read and write counts are added when they are beside it.

    Raises:
        InvalidMessageError: A count is missing, negative or not an int.
    """
    if not isinstance(usage, Mapping):
        raise InvalidMessageError(f"usage must be a dict, got {type(usage).__name__}")
    prompt = _count(usage, "inputTokens", required=True)
    output = _count(usage, "outputTokens")
    read = _count(usage, "cacheReadInputTokens")
    written = _count(usage, "cacheWriteInputTokens")
    if usage.get("totalTokens") != prompt + output:
        prompt += read + written
    return Usage(prompt, output, cache_read_tokens=read, cache_write_tokens=written)


def usage_to_strands(usage: Usage) -> dict[str, Any]:
    """Render `Usage` as a Strands ``usage`` dict, the cache inside ``inputTokens``."""
    rendered: dict[str, Any] = {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "totalTokens": usage.total_tokens,
    }
    if usage.cache_read_tokens:
        rendered["cacheReadInputTokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        rendered["cacheWriteInputTokens"] = usage.cache_write_tokens
    return rendered


# --------------------------------------------------------------------- blocks


def _parse_block(raw: Mapping[str, Any]) -> Block | None:
    """The `Block` a content block stands for, or None when it has none."""
    if isinstance(raw.get("text"), str):
        return TextBlock(raw["text"])
    if "toolUse" in raw:
        use = raw["toolUse"]
        if not isinstance(use, Mapping):
            raise InvalidMessageError("toolUse must be a dict")
        arguments = json.dumps(use.get("input"), ensure_ascii=False, default=repr)
        return ToolCall(use.get("toolUseId"), use.get("name"), arguments)  # type: ignore[arg-type]
    if "json" in raw:
        return TextBlock(json.dumps(raw["json"], ensure_ascii=False, default=repr))
    if isinstance(raw.get("image"), Mapping):
        source, kind = raw["image"].get("source"), raw["image"].get("format")
        if isinstance(source, Mapping) and isinstance(source.get("bytes"), bytes):
            data = base64.b64encode(source["bytes"]).decode("ascii")
            return ImageBlock(data=data, media_type=_IMAGE_TYPES.get(kind, f"image/{kind}"))
        return None
    if isinstance(raw.get("reasoningContent"), Mapping):
        return _parse_reasoning(raw["reasoningContent"])
    return None


def _parse_reasoning(reasoning: Mapping[str, Any]) -> ThinkingBlock | None:
    text = reasoning.get("reasoningText")
    if isinstance(text, Mapping) and isinstance(text.get("text"), str):
        signature = text.get("signature")
        return ThinkingBlock(text["text"], signature if isinstance(signature, str) else None)
    if isinstance(reasoning.get("redactedContent"), bytes):
        opaque = base64.b64encode(reasoning["redactedContent"]).decode("ascii")
        return ThinkingBlock(opaque, redacted=True)
    return None


def _write_block(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"text": block.text}
    if isinstance(block, ToolCall):
        try:
            tool_input = json.loads(block.arguments)
        except ValueError:
            raise InvalidMessageError(
                f"tool call {block.id!r}: arguments are not JSON; Strands needs the parsed input"
            ) from None
        return {"toolUse": {"toolUseId": block.id, "name": block.name, "input": tool_input}}
    if isinstance(block, ImageBlock):
        return {"image": _write_image(block)}
    if block.redacted:
        return {"reasoningContent": {"redactedContent": _decode(block.thinking, "thinking")}}
    text: dict[str, Any] = {"text": block.thinking}
    if block.signature is not None:
        text["signature"] = block.signature
    return {"reasoningContent": {"reasoningText": text}}


def _decode(data: str, what: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessageError(f"{what} is not valid base64") from None


def _write_image(block: ImageBlock) -> dict[str, Any]:
    data, media_type = block.data, block.media_type
    if block.url is not None:
        head, comma, payload = block.url.partition(",")
        if not (block.url.startswith("data:") and head.endswith(";base64") and comma):
            raise InvalidMessageError(
                "Strands takes images as bytes, not URLs; download the image and pass "
                "ImageBlock(data=<base64>, media_type=...)"
            )
        data, media_type = payload, media_type or head[5:].removesuffix(";base64")
    assert data is not None  # an ImageBlock has exactly one of url and data
    kind = _FORMATS.get(media_type or "") or next(
        (k for magic, k in _MAGIC.items() if data.startswith(magic)), None
    )
    if kind is None:
        raise InvalidMessageError(
            f"image of type {media_type!r}: Strands takes png, jpeg, gif or webp; set media_type"
        )
    return {"format": kind, "source": {"bytes": _decode(data, "image data")}}


def read_block(raw: object, where: str) -> tuple[Block | None, dict[str, Any] | None]:
    """One content block as a `Block` (None when kept whole) and its layout entry."""
    if not isinstance(raw, Mapping):
        raise InvalidMessageError(f"{where} must be a dict, got {type(raw).__name__}")
    try:
        block = _parse_block(raw)
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{where}: {exc}") from None
    if block is None:
        return None, {"opaque": copy_json(dict(raw))}
    try:
        plain = _write_block(block) == raw
    except InvalidMessageError:
        plain = False
    return block, None if plain else {"raw": copy_json(dict(raw))}


def write_blocks(blocks: Sequence[Block], layout: object) -> list[dict[str, Any]]:
    """The content list of ``blocks``, with the layout put back when it still fits them."""
    entries = layout if isinstance(layout, list) else []
    own = [e for e in entries if not (isinstance(e, Mapping) and "opaque" in e)]
    if len(own) != len(blocks):
        return [_write_block(block) for block in blocks]
    written: list[dict[str, Any]] = []
    remaining = iter(blocks)
    for entry in entries:
        if isinstance(entry, Mapping) and "opaque" in entry:
            written.append(copy_json(entry["opaque"]))
            continue
        block = next(remaining)
        raw = entry.get("raw") if isinstance(entry, Mapping) else None
        if isinstance(raw, Mapping) and _same_block(raw, block):
            written.append(copy_json(raw))
        else:
            written.append(_write_block(block))
    return written


def _same_block(raw: Mapping[str, Any], block: Block) -> bool:
    try:
        return _parse_block(raw) == block
    except InvalidMessageError:
        return False


def layout_meta(layout: list[Any]) -> dict[str, Any]:
    """The metadata holding ``layout``, or none when every entry is plain."""
    return {BLOCKS_KEY: layout} if any(layout) else {}


def read_run(raw: Sequence[Any], what: str) -> tuple[list[Block], list[Any]]:
    """Blocks of a list of content blocks and the layout entry of each."""
    blocks: list[Block] = []
    layout: list[Any] = []
    for number, item in enumerate(raw):
        block, entry = read_block(item, f"{what} {number}")
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    return blocks, layout


# --------------------------------------------------------------------- messages


def read_user_pieces(content: Sequence[Any]) -> list[Message]:
    """Tool results and runs of other blocks; blocks kept whole attach to a neighbour."""
    pieces: list[Message] = []
    waiting: list[Any] = []  # kept-whole blocks before the first message
    run: list[tuple[Block | None, Any]] = []

    def add(piece: Message) -> None:
        if waiting:
            piece = attrs.evolve(piece, metadata={**piece.metadata, BEFORE_KEY: list(waiting)})
            waiting.clear()
        pieces.append(piece)

    def flush() -> None:
        if any(block is not None for block, _ in run):
            blocks = [block for block, _ in run if block is not None]
            add(Message("user", blocks, metadata=layout_meta([entry for _, entry in run])))
        elif run and pieces:
            last = pieces[-1]
            after = [*last.metadata.get(AFTER_KEY, ()), *(e["opaque"] for _, e in run)]
            pieces[-1] = attrs.evolve(last, metadata={**last.metadata, AFTER_KEY: after})
        else:
            waiting.extend(entry["opaque"] for _, entry in run)
        run.clear()

    for number, raw in enumerate(content):
        if isinstance(raw, Mapping) and "toolResult" in raw:
            flush()
            add(read_tool_result(raw["toolResult"], f"content block {number} (toolResult)"))
        else:
            run.append(read_block(raw, f"content block {number}"))
    flush()
    if not pieces:
        return [Message("user", (), metadata=layout_meta([{"opaque": b} for b in waiting]))]
    return pieces


def read_tool_result(result: object, where: str) -> Message:
    """A ``toolResult`` block as a ``tool`` message."""
    if not isinstance(result, Mapping):
        raise InvalidMessageError(f"{where} must be a dict")
    call_id = result.get("toolUseId")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{where} needs a non-empty str 'toolUseId'")
    items = result.get("content")
    if not isinstance(items, (list, tuple)):
        raise InvalidMessageError(f"{where}: content must be a list of items")
    blocks, layout = read_run(items, f"{where} item")
    metadata = layout_meta(layout)
    status = result.get("status")
    if status != "success":
        metadata[STATUS_KEY] = copy_json(status)
    extra = {
        k: copy_json(v) for k, v in result.items() if k not in ("toolUseId", "status", "content")
    }
    if extra:
        metadata[TOOL_RESULT_KEY] = extra
    return Message("tool", blocks, tool_call_id=call_id, metadata=metadata)


def write_piece(message: Message) -> list[dict[str, Any]]:
    """The content blocks of one message, kept-whole neighbours included."""
    meta = message.metadata
    if message.role == "tool":
        own = [write_tool_result(message)]
    else:
        own = write_blocks(message.content, meta.get(BLOCKS_KEY))
    return [*copy_json(meta.get(BEFORE_KEY) or []), *own, *copy_json(meta.get(AFTER_KEY) or [])]


def write_tool_result(message: Message) -> dict[str, Any]:
    """A ``tool`` message as a ``toolResult`` block."""
    meta = message.metadata
    for block in message.content:
        if isinstance(block, ThinkingBlock):
            raise InvalidMessageError("a tool result holds a thinking block; Strands has none")
    result: dict[str, Any] = {"toolUseId": message.tool_call_id}
    status = meta.get(STATUS_KEY, "success")
    if status is not None:
        result["status"] = copy_json(status)
    result["content"] = write_blocks(message.content, meta.get(BLOCKS_KEY))
    for key, value in (meta.get(TOOL_RESULT_KEY) or {}).items():
        result.setdefault(key, copy_json(value))
    return {"toolResult": result}


def write_usage(usage: Usage, raw: object) -> dict[str, Any]:
    """The usage dict: ``raw`` as written while it still says ``usage``, else rendered."""
    if isinstance(raw, Mapping):
        try:
            if usage_from_strands(raw) == usage:
                return dict(copy_json(raw))
        except InvalidMessageError:
            pass
    return usage_to_strands(usage)
