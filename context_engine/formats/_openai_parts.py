"""Content parts and tool calls of Chat Completions dicts, for `context_engine.formats.openai`.

Each reader returns blocks plus *overlays*: per-part or per-call details that
the blocks cannot hold (extra keys, a refusal part, a ``custom`` call). The
writers put the overlays back when they still fit the blocks, so a round trip
is exact and a rewritten message (a trimmed text, a cleared image) still
converts cleanly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from context_engine.errors import InvalidMessageError
from context_engine.messages import Block, ImageBlock, TextBlock, ToolCall

__all__ = ["copy_json", "read_part", "read_tool_calls", "write_parts", "write_tool_calls"]

_OPAQUE_PART_TYPES: Final = frozenset({"input_audio", "file"})
_PART_TYPES: Final = "text, image_url, refusal (assistant only), input_audio or file"
_ABSENT: Final = object()
# Leading base64 characters of common image formats, for ImageBlock(data=...).
_MAGIC: Final = {
    "iVBORw0KGgo": "image/png",
    "/9j/": "image/jpeg",
    "R0lGOD": "image/gif",
    "UklGR": "image/webp",
}


def copy_json(value: Any) -> Any:
    """A deep copy, so that messages never share mutable data with the caller."""
    return copy.deepcopy(value)


def read_part(part: object, number: int, role: str) -> tuple[Block | None, dict[str, Any] | None]:
    """One content part as a block (None for a part kept whole) and its overlay (None if plain)."""
    if not isinstance(part, Mapping):
        raise InvalidMessageError(
            f"content part {number} must be a dict, got {type(part).__name__}"
        )
    kind = part.get("type")
    entry: dict[str, Any] = {}
    block: Block
    if kind == "text" or kind == "refusal":
        if kind == "refusal" and role != "assistant":
            raise InvalidMessageError(
                f"content part {number} is a refusal; only assistant messages may refuse"
            )
        text = part.get(kind)
        if not isinstance(text, str):
            raise InvalidMessageError(f"content part {number} ({kind}) needs a str {kind!r}")
        block = TextBlock(text)
        if kind == "refusal":
            entry["type"] = "refusal"
    elif kind == "image_url":
        block = _read_image(part.get("image_url"), number, entry)
    elif isinstance(kind, str) and kind in _OPAQUE_PART_TYPES:
        return None, {"opaque": copy_json(dict(part))}
    else:
        raise InvalidMessageError(
            f"content part {number} has unknown type {kind!r}; expected {_PART_TYPES}"
        )
    extra = {key: copy_json(value) for key, value in part.items() if key not in ("type", kind)}
    if extra:
        entry["extra"] = extra
    return block, entry or None


def _read_image(image: object, number: int, entry: dict[str, Any]) -> ImageBlock:
    if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
        raise InvalidMessageError(
            f"content part {number} (image_url) needs an image_url object with a str 'url'"
        )
    detail = image.get("detail")
    if detail is not None and not isinstance(detail, str):
        raise InvalidMessageError(f"content part {number}: image_url.detail must be a str")
    inner = {
        key: copy_json(value)
        for key, value in image.items()
        if key != "url" and (key != "detail" or value is None)
    }
    if inner:
        entry["image_extra"] = inner
    return ImageBlock(url=image["url"], detail=detail)


def read_tool_calls(value: object) -> tuple[list[ToolCall], list[Any] | None]:
    """The ``tool_calls`` list as tool calls and their overlays (None when all are plain)."""
    if not isinstance(value, (list, tuple)):
        raise InvalidMessageError(f"tool_calls must be a list, got {type(value).__name__}")
    calls: list[ToolCall] = []
    overlays: list[Any] = []
    for number, raw in enumerate(value):
        call, overlay = _read_tool_call(raw, number)
        calls.append(call)
        overlays.append(overlay)
    return calls, overlays if any(overlays) else None


def _read_tool_call(raw: object, number: int) -> tuple[ToolCall, dict[str, Any] | None]:
    if not isinstance(raw, Mapping):
        raise InvalidMessageError(f"tool call {number} must be a dict, got {type(raw).__name__}")
    call_id = raw.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"tool call {number} has no id (a non-empty str)")
    kind = raw.get("type", _ABSENT)
    if kind not in ("function", "custom", _ABSENT):
        raise InvalidMessageError(
            f"tool call {call_id!r} has unknown type {kind!r}; expected 'function' or 'custom'"
        )
    key, args_key = ("custom", "input") if kind == "custom" else ("function", "arguments")
    body = raw.get(key)
    if not isinstance(body, Mapping):
        raise InvalidMessageError(f"tool call {call_id!r} has no {key!r} object")
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidMessageError(f"tool call {call_id!r} has no {key}.name (a non-empty str)")
    arguments = body.get(args_key)
    if not isinstance(arguments, str):
        raise InvalidMessageError(
            f"tool call {call_id!r}: {key}.{args_key} must be the raw JSON text (a str), "
            f"got {type(arguments).__name__}"
        )
    overlay: dict[str, Any] = {}
    if kind is _ABSENT:
        overlay["type"] = None
    elif kind == "custom":
        overlay["type"] = "custom"
    extra = {k: copy_json(v) for k, v in raw.items() if k not in ("id", "type", key)}
    body_extra = {k: copy_json(v) for k, v in body.items() if k not in ("name", args_key)}
    if extra:
        overlay["extra"] = extra
    if body_extra:
        overlay["body_extra"] = body_extra
    if overlay:
        overlay["id"] = call_id
    return ToolCall(call_id, name, arguments), overlay or None


def _layout_fits(layout: object, visible: Sequence[Block]) -> bool:
    if not isinstance(layout, list):
        return False
    consuming = [e for e in layout if not (isinstance(e, Mapping) and "opaque" in e)]
    if len(consuming) != len(visible):
        return False
    return all(
        entry is None
        or (
            isinstance(entry, Mapping)
            and not (entry.get("type") == "refusal" and isinstance(block, ImageBlock))
        )
        for entry, block in zip(consuming, visible, strict=True)
    )


def write_parts(visible: Sequence[Block], layout: object) -> list[dict[str, Any]]:
    """The ``content`` list for text and image blocks, with the layout when it still fits."""
    if not _layout_fits(layout, visible):
        return [_write_part(block, None) for block in visible]
    assert isinstance(layout, list)
    parts: list[dict[str, Any]] = []
    blocks = iter(visible)
    for entry in layout:
        if isinstance(entry, Mapping) and "opaque" in entry:
            parts.append(copy_json(entry["opaque"]))
        else:
            parts.append(_write_part(next(blocks), entry))
    return parts


def _write_part(block: Block, entry: Mapping[str, Any] | None) -> dict[str, Any]:
    entry = entry or {}
    part: dict[str, Any]
    if isinstance(block, ImageBlock):
        image: dict[str, Any] = {"url": _image_url(block)}
        if block.detail is not None:
            image["detail"] = block.detail
        for key, value in (entry.get("image_extra") or {}).items():
            image.setdefault(key, copy_json(value))
        part = {"type": "image_url", "image_url": image}
    elif entry.get("type") == "refusal":
        part = {"type": "refusal", "refusal": block.text}  # type: ignore[union-attr]
    else:
        part = {"type": "text", "text": block.text}  # type: ignore[union-attr]
    for key, value in (entry.get("extra") or {}).items():
        part.setdefault(key, copy_json(value))
    return part


def _image_url(block: ImageBlock) -> str:
    if block.url is not None:
        return block.url
    data = block.data or ""
    media_type = block.media_type or next(
        (kind for magic, kind in _MAGIC.items() if data.startswith(magic)), None
    )
    if media_type is None:
        raise InvalidMessageError(
            "image block has base64 data of an unknown format; set ImageBlock.media_type"
        )
    return f"data:{media_type};base64,{data}"


def write_tool_calls(calls: Sequence[ToolCall], overlays: object) -> list[dict[str, Any]]:
    """The ``tool_calls`` list, with the overlays that still match their call ids."""
    if not (isinstance(overlays, list) and len(overlays) == len(calls)):
        overlays = [None] * len(calls)
    written: list[dict[str, Any]] = []
    for call, overlay in zip(calls, overlays, strict=True):
        if not (isinstance(overlay, Mapping) and overlay.get("id") == call.id):
            overlay = {}
        kind = overlay.get("type", "function")
        key, args_key = ("custom", "input") if kind == "custom" else ("function", "arguments")
        body: dict[str, Any] = {"name": call.name, args_key: call.arguments}
        for extra_key, value in (overlay.get("body_extra") or {}).items():
            body.setdefault(extra_key, copy_json(value))
        item: dict[str, Any] = {"id": call.id}
        if kind is not None:
            item["type"] = kind
        item[key] = body
        for extra_key, value in (overlay.get("extra") or {}).items():
            item.setdefault(extra_key, copy_json(value))
        written.append(item)
    return written
