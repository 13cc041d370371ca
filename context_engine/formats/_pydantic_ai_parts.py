"""Parts, content items and usage of pydantic-ai messages, for `context_engine.formats.pydantic_ai`.

Each reader returns blocks plus *extras*: the fields of a part or item that
blocks cannot hold, as JSON, and only where they differ from what the writer
would produce on its own. The writers put the extras back while they still fit
the blocks, so a round trip is exact, a rewritten message (a trimmed text, a
cleared result) still converts cleanly, and a message written from scratch
reads back without extras.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import pydantic
import pydantic_core
from pydantic_ai import messages as pm
from pydantic_ai.usage import RequestUsage

from context_engine.errors import InvalidMessageError
from context_engine.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall, Usage

__all__ = [
    "MESSAGE",
    "REQUEST_PART",
    "RESPONSE_PART",
    "differing",
    "digest",
    "dump",
    "load",
    "plain_layout",
    "read_items",
    "read_response_part",
    "read_usage",
    "read_usage_counts",
    "read_user_items",
    "replace_content",
    "replace_parts",
    "write_items",
    "write_response_parts",
    "write_usage",
]

MESSAGE: Final = pydantic.TypeAdapter(pm.ModelMessage)
REQUEST_PART: Final = pydantic.TypeAdapter(pm.ModelRequestPart)
RESPONSE_PART: Final = pydantic.TypeAdapter(pm.ModelResponsePart)
_USER_CONTENT: Final = pydantic.TypeAdapter(pm.UserContent)
_USAGE: Final = pydantic.TypeAdapter(RequestUsage)
_USAGE_FIELDS: Final = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
# Fields a provider ties to the exact content of a part: dropped once a strategy rewrote it.
_CONTENT_BOUND: Final = ("id", "provider_details")
_defaults: dict[tuple[type, frozenset[str]], dict[str, Any]] = {}
_field_names: dict[tuple[type, frozenset[str]], tuple[str, ...]] = {}


def dump(adapter: pydantic.TypeAdapter[Any], value: Any, exclude: Iterable[str]) -> dict[str, Any]:
    """``value`` as JSON data without the ``exclude`` fields."""
    data: dict[str, Any] = adapter.dump_python(value, mode="json", exclude=set(exclude))
    return data


def load(adapter: pydantic.TypeAdapter[Any], data: Any) -> Any:
    """Rebuild an object from JSON data (bytes as base64, datetimes as text)."""
    try:
        return adapter.validate_json(pydantic_core.to_json(data, bytes_mode="base64"))
    except (pydantic.ValidationError, pydantic_core.PydanticSerializationError) as exc:
        raise InvalidMessageError(f"cannot rebuild a pydantic-ai object: {exc}") from None


def differing(
    adapter: pydantic.TypeAdapter[Any], value: Any, fresh: Any, exclude: Iterable[str]
) -> dict[str, Any]:
    """The fields of ``value`` that differ from those of ``fresh``, a part the writer would make.

    Fields are compared as objects first, so the common case (nothing
    differs) costs no serialization.
    """
    excluded = frozenset(exclude)
    kind = type(value)
    if kind is type(fresh) and all(
        getattr(value, name) == getattr(fresh, name) for name in _compared(kind, excluded)
    ):
        return {}
    key = (type(fresh), excluded)
    base = _defaults.get(key)
    if base is None:
        base = _defaults[key] = dump(adapter, fresh, excluded)
    data = dump(adapter, value, excluded)
    return {name: item for name, item in data.items() if name not in base or base[name] != item}


def _compared(kind: Any, excluded: frozenset[str]) -> tuple[str, ...]:
    """The compared fields of a dataclass type, minus ``excluded`` (computed once per pair)."""
    names = _field_names.get((kind, excluded))
    if names is None:
        fields = dataclasses.fields(kind)
        names = tuple(f.name for f in fields if f.compare and f.name not in excluded)
        _field_names[(kind, excluded)] = names
    return names


def digest(text: str) -> str:
    """A short fingerprint of ``text``, to notice that a strategy rewrote it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# ----------------------------------------------------------------------- images


def _read_image(item: object) -> tuple[ImageBlock, dict[str, Any]] | None:
    if isinstance(item, pm.ImageUrl):
        vendor = item.vendor_metadata
        extras: dict[str, Any] = {}
        if item.force_download is not False:
            extras["force_download"] = item.force_download
        if item._identifier is not None:
            extras["identifier"] = item._identifier
        url, media_type = item.url, item._media_type
        block_data: str | None = None
    elif isinstance(item, pm.BinaryContent) and item.is_image:
        vendor = item.vendor_metadata
        extras = {"identifier": item._identifier} if item._identifier is not None else {}
        if type(item) is pm.BinaryContent:
            extras["plain"] = True
        url, media_type, block_data = None, item.media_type, item.base64
    else:
        return None
    detail = vendor.get("detail") if vendor else None
    if not isinstance(detail, str):
        detail = None
    if vendor is not None:
        rest = {k: v for k, v in vendor.items() if not (k == "detail" and detail is not None)}
        if rest or detail is None:
            extras["vendor_metadata"] = pydantic_core.to_jsonable_python(rest)
    block = ImageBlock(url=url, data=block_data, media_type=media_type, detail=detail)
    return block, extras


def _write_image(block: ImageBlock, extras: Mapping[str, Any]) -> pm.ImageUrl | pm.BinaryContent:
    vendor: dict[str, Any] | None = None
    if "vendor_metadata" in extras or block.detail is not None:
        vendor = dict(extras.get("vendor_metadata") or {})
        if block.detail is not None:
            vendor["detail"] = block.detail
    identifier = extras.get("identifier")
    if block.url is not None:
        return pm.ImageUrl(
            block.url,
            media_type=block.media_type,
            identifier=identifier,
            force_download=extras.get("force_download", False),
            vendor_metadata=vendor,
        )
    if block.media_type is None:
        raise InvalidMessageError(
            "an ImageBlock with data= needs a media_type for pydantic-ai; "
            "pass media_type='image/png' (or the real type)"
        )
    kind = pm.BinaryContent if extras.get("plain") else pm.BinaryImage
    return kind(
        data=base64.b64decode(block.data or ""),
        media_type=block.media_type,
        identifier=identifier,
        vendor_metadata=vendor,
    )


# ------------------------------------------------------------ content item lists


def read_items(items: Sequence[Any]) -> tuple[list[Block], list[dict[str, Any]]] | None:
    """A content list as blocks and its layout; None when it holds more than text and images."""
    blocks: list[Block] = []
    layout: list[dict[str, Any]] = []
    for item in items:
        image = _read_image(item)
        if isinstance(item, str):
            blocks.append(TextBlock(item))
            layout.append({"kind": "text"})
        elif type(item) is pm.TextContent:
            blocks.append(TextBlock(item.content))
            entry: dict[str, Any] = {"kind": "text"}
            entry["metadata"] = pydantic_core.to_jsonable_python(item.metadata)
            layout.append(entry)
        elif image is not None:
            blocks.append(image[0])
            layout.append({"kind": "image", **image[1]})
        else:
            return None
    return blocks, layout


def read_user_items(items: Sequence[Any]) -> tuple[list[Block], list[dict[str, Any]]]:
    """A user prompt's content list as blocks and layout; other items are kept whole."""
    blocks: list[Block] = []
    layout: list[dict[str, Any]] = []
    for item in items:
        read = read_items([item])
        if read is None:
            layout.append({"kind": "opaque", "item": dump(_USER_CONTENT, item, ())})
        else:
            blocks.extend(read[0])
            layout.extend(read[1])
    return blocks, layout


def plain_layout(blocks: Sequence[Block], layout: Sequence[Mapping[str, Any]]) -> bool:
    """Whether writing ``blocks`` without the layout gives the same list back."""
    as_text = len(blocks) < 2 and all(isinstance(block, TextBlock) for block in blocks)
    return not as_text and all(len(entry) == 1 for entry in layout)


def _block_kind(block: Block) -> str:
    if isinstance(block, TextBlock):
        return "text"
    if isinstance(block, ImageBlock):
        return "image"
    return "thinking" if isinstance(block, ThinkingBlock) else "tool_call"


def _write_item(block: Block, entry: Mapping[str, Any]) -> Any:
    if isinstance(block, TextBlock):
        if "metadata" in entry:
            return pm.TextContent(block.text, metadata=entry["metadata"])
        return block.text
    if isinstance(block, ImageBlock):
        return _write_image(block, entry)
    raise InvalidMessageError(
        f"a {type(block).__name__} cannot go into pydantic-ai request content; "
        "only assistant messages carry thinking and tool calls"
    )


def write_items(blocks: Sequence[Block], layout: Sequence[Mapping[str, Any]]) -> list[Any]:
    """A content list from blocks, with the layout's extras and kept items where they still fit."""
    out: list[Any] = []
    position = 0
    for entry in layout:
        if entry.get("kind") == "opaque":
            out.append(load(_USER_CONTENT, entry["item"]))
        elif position < len(blocks) and _block_kind(blocks[position]) == entry.get("kind"):
            out.append(_write_item(blocks[position], entry))
            position += 1
    out.extend(_write_item(block, {}) for block in blocks[position:])
    return out


# ------------------------------------------------------------------ response parts


_FRESH_TEXT: Final = pm.TextPart("")
_FRESH_THINKING: Final = pm.ThinkingPart("")
_FRESH_CALL: Final = pm.ToolCallPart("tool", tool_call_id="call")


def read_response_part(part: Any) -> tuple[Block | None, dict[str, Any]]:
    """A response part as a block and its layout entry, or None and the part kept whole."""
    if isinstance(part, pm.TextPart):
        block: Block = TextBlock(part.content)
        extras = differing(RESPONSE_PART, part, _FRESH_TEXT, ("content",))
        kind, text = "text", part.content
    elif isinstance(part, pm.ThinkingPart):
        block = ThinkingBlock(part.content, signature=part.signature)
        extras = differing(RESPONSE_PART, part, _FRESH_THINKING, ("content", "signature"))
        kind, text = "thinking", part.content
    elif isinstance(part, pm.ToolCallPart):
        arguments, form = _read_arguments(part.args)
        block = ToolCall(part.tool_call_id, part.tool_name, arguments)
        extras = differing(RESPONSE_PART, part, _FRESH_CALL, ("tool_name", "args", "tool_call_id"))
        if form is not None:
            extras["args_form"] = form
        kind, text = "tool_call", arguments
    else:
        return None, {"kind": "opaque", "part": dump(RESPONSE_PART, part, ())}
    if any(name in extras for name in _CONTENT_BOUND):
        extras["digest"] = digest(text)
    return block, {"kind": kind, **extras}


def _read_arguments(args: str | dict[str, Any] | None) -> tuple[str, str | None]:
    if isinstance(args, str):
        return args, None
    if args is None:
        return "{}", "none"
    return pydantic_core.to_json(args).decode(), "dict"


def _write_arguments(call: ToolCall, form: object) -> str | dict[str, Any] | None:
    if form == "none" and call.arguments == "{}":
        return None
    if form == "dict":
        try:
            parsed = json.loads(call.arguments)
        except ValueError:
            return call.arguments
        if isinstance(parsed, dict):
            return parsed
    return call.arguments


def _block_text(block: Block) -> str:
    if isinstance(block, TextBlock):
        return block.text
    if isinstance(block, ThinkingBlock):
        return block.thinking
    return block.arguments if isinstance(block, ToolCall) else ""


def _write_response_part(block: Block, entry: Mapping[str, Any]) -> dict[str, Any]:
    extras = {k: v for k, v in entry.items() if k not in ("kind", "digest", "args_form")}
    if "digest" in entry and entry["digest"] != digest(_block_text(block)):
        for name in _CONTENT_BOUND:
            extras.pop(name, None)
    if isinstance(block, TextBlock):
        return {"part_kind": "text", **extras, "content": block.text}
    if isinstance(block, ThinkingBlock):
        fields = {"content": block.thinking, "signature": block.signature}
        return {"part_kind": "thinking", **extras, **fields}
    if isinstance(block, ToolCall):
        call = {"tool_name": block.name, "tool_call_id": block.id}
        args = _write_arguments(block, entry.get("args_form"))
        return {"part_kind": "tool-call", **extras, **call, "args": args}
    raise InvalidMessageError(
        "an assistant ImageBlock has no pydantic-ai form here; "
        "keep generated images in the original ModelResponse (FilePart)"
    )


def write_response_parts(
    blocks: Sequence[Block], layout: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Response parts as JSON data, with the layout's extras and kept parts where they still fit."""
    out: list[dict[str, Any]] = []
    position = 0
    for entry in layout:
        if entry.get("kind") == "opaque":
            out.append(dict(entry["part"]))
        elif position < len(blocks) and _block_kind(blocks[position]) == entry.get("kind"):
            out.append(_write_response_part(blocks[position], entry))
            position += 1
    out.extend(_write_response_part(block, {}) for block in blocks[position:])
    return out


# -------------------------------------------------------------------------- usage


def read_usage(usage: RequestUsage) -> tuple[Usage | None, dict[str, Any] | None]:
    """A response's usage, and its full JSON form when `Usage` cannot hold all of it.

    pydantic-ai's ``input_tokens`` already includes cached tokens, as `Usage`
    expects. A response without input tokens, or marked ``unmeasured_requests``
    (the provider reported nothing), gives no `Usage`: it would be a false anchor.
    """
    ours = read_usage_counts(usage)
    if usage == write_usage(ours, None):
        return ours, None
    return ours, dump(_USAGE, usage, ())


def write_usage(usage: Usage | None, raw: Mapping[str, Any] | None) -> RequestUsage:
    """`RequestUsage` for ``usage``; the stored full form when it still says the same."""
    if raw is not None:
        stored: RequestUsage = load(_USAGE, raw)
        if read_usage_counts(stored) == usage:
            return stored
    if usage is None:
        return RequestUsage()
    return RequestUsage(**{name: getattr(usage, name) for name in _USAGE_FIELDS})


def read_usage_counts(usage: RequestUsage) -> Usage | None:
    """The `Usage` a `RequestUsage` maps to (None without input tokens, or when unmeasured)."""
    if usage.input_tokens <= 0 or usage.unmeasured_requests:
        return None
    return Usage(**{name: getattr(usage, name) for name in _USAGE_FIELDS})


def replace_content(part: Any, content: Any) -> Any:
    """``part`` with ``content`` (objects, not JSON), built again so its checks run."""
    return dataclasses.replace(part, content=content)


def replace_parts(message: Any, new_parts: list[Any]) -> Any:
    """``message`` with ``new_parts``, built again so pydantic-ai's part checks run."""
    return dataclasses.replace(message, parts=new_parts)
