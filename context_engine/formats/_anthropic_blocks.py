"""Content blocks of Anthropic Messages API dicts, for `context_engine.formats.anthropic`.

`read_block` turns one content block into a `Block` plus an *entry*: the
details the block cannot hold (extra keys such as ``cache_control``, the
original ``tool_use`` input, a block kept whole). `write_blocks` puts the
entries back while they still fit the blocks, so a round trip is exact and a
rewritten message still converts cleanly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from context_engine.errors import InvalidMessageError
from context_engine.formats._openai_parts import _MAGIC, copy_json
from context_engine.messages import Block, ImageBlock, TextBlock, ThinkingBlock, ToolCall

__all__ = [
    "ANTHROPIC_BLOCK_TYPES",
    "BLOCKS_KEY",
    "CONTENT_FORM_KEY",
    "EXTRA_KEY",
    "IS_ERROR_KEY",
    "NEW_MESSAGE_KEY",
    "TOOL_RESULT_KEY",
    "USAGE_KEY",
    "Form",
    "arguments_text",
    "default_form",
    "layout_fits",
    "read_block",
    "write_block",
    "write_blocks",
]

EXTRA_KEY: Final = "anthropic.extra"
"""Metadata key: top-level message keys the model has no field for."""
CONTENT_FORM_KEY: Final = "anthropic.content_form"
"""Metadata key: how ``content`` was written, when not the default form."""
BLOCKS_KEY: Final = "anthropic.blocks"
"""Metadata key: per-block details of ``content`` that blocks cannot hold."""
TOOL_RESULT_KEY: Final = "anthropic.tool_result"
"""Metadata key: extra keys of the ``tool_result`` block a tool message came from."""
IS_ERROR_KEY: Final = "anthropic.is_error"
"""Metadata key: the ``is_error`` flag of the ``tool_result`` block, when given."""
USAGE_KEY: Final = "anthropic.usage"
"""Metadata key: the ``usage`` dict as written, when it differs from the rendered one."""
NEW_MESSAGE_KEY: Final = "anthropic.new_message"
"""Metadata key: True when the message began a message dict of the same role as the one before."""

Form = Literal["string", "blocks", "absent"]

ANTHROPIC_BLOCK_TYPES: Final = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document"}
)
"""Content block types only the Messages API uses (``text`` is shared with OpenAI)."""

_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "text": frozenset({"text"}),
    "thinking": frozenset({"thinking", "signature"}),
    "redacted_thinking": frozenset({"data"}),
    "tool_use": frozenset({"id", "name", "input"}),
    "image": frozenset({"source"}),
}
# Block types a given place cannot hold; anything else unknown is kept whole.
_FORBIDDEN: Final[Mapping[str, frozenset[str]]] = {
    "user": frozenset({"tool_use"}),
    "assistant": frozenset({"tool_result"}),
    "tool_result": frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking"}),
    "system": frozenset(_FIELDS) - {"text"} | {"tool_result"},
}

_PLACES: Final[Mapping[str, str]] = {
    "user": "a user message",
    "assistant": "an assistant message",
    "tool_result": "a tool_result",
    "system": "the system parameter",
}


def arguments_text(value: object) -> str:
    """The JSON text a ``tool_use`` input becomes as `ToolCall.arguments`."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(f"tool_use input is not JSON data ({exc})") from None


def _same_json(a: object, b: object) -> bool:
    """Equal values of the same JSON types, dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def default_form(written: Sequence[Any]) -> Form:
    """``string`` for no block or one plain text block, else ``blocks``."""
    if not written:
        return "string"
    only = written[0]
    plain = (
        len(written) == 1
        and isinstance(only, Mapping)
        and set(only) == {"type", "text"}
        and only["type"] == "text"
        and isinstance(only["text"], str)
    )
    return "string" if plain else "blocks"


def _str_field(raw: Mapping[str, Any], key: str, what: str, *, empty: bool = True) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or (not empty and not value):
        kind = "a non-empty str" if not empty else "a str"
        raise InvalidMessageError(f"{what} needs {kind} {key!r}")
    return value


def read_block(raw: object, what: str, place: str) -> tuple[Block | None, dict[str, Any] | None]:
    """One content block as a block (None when kept whole) and its entry (None when plain).

    Args:
        raw: The block dict.
        what: How errors name the block (``content block 2``).
        place: ``user``, ``assistant``, ``tool_result`` or ``system``.
    """
    if not isinstance(raw, Mapping):
        raise InvalidMessageError(f"{what} must be a dict, got {type(raw).__name__}")
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        raise InvalidMessageError(f"{what} has no 'type'")
    what = f"{what} ({kind})"
    if kind in _FORBIDDEN[place]:
        raise InvalidMessageError(f"{what} cannot appear in {_PLACES[place]}")
    fields = _FIELDS.get(kind)
    if fields is None:
        return None, {"opaque": copy_json(dict(raw))}
    entry: dict[str, Any] = {}
    block = _read_known(raw, kind, what, entry)
    if block is None:
        return None, {"opaque": copy_json(dict(raw))}
    extra = {
        key: copy_json(value)
        for key, value in raw.items()
        if key != "type" and (key not in fields or value is None)
    }
    if extra:
        entry["extra"] = extra
    return block, entry or None


def _read_known(
    raw: Mapping[str, Any], kind: str, what: str, entry: dict[str, Any]
) -> Block | None:
    if kind == "text":
        return TextBlock(_str_field(raw, "text", what))
    if kind == "thinking":
        signature = raw.get("signature")
        if signature is not None and not isinstance(signature, str):
            raise InvalidMessageError(f"{what}: signature must be a str")
        return ThinkingBlock(_str_field(raw, "thinking", what), signature=signature)
    if kind == "redacted_thinking":
        return ThinkingBlock(_str_field(raw, "data", what), redacted=True)
    if kind == "tool_use":
        call_id = _str_field(raw, "id", what, empty=False)
        name = _str_field(raw, "name", what, empty=False)
        value = raw.get("input")
        if not isinstance(value, Mapping):
            raise InvalidMessageError(f"{what} {call_id!r} needs an 'input' object")
        arguments = arguments_text(value)
        if not _same_json(json.loads(arguments), value):
            entry["input"] = copy_json(value)
        return ToolCall(call_id, name, arguments)
    return _read_image(raw.get("source"), what, entry)


def _read_image(source: object, what: str, entry: dict[str, Any]) -> ImageBlock | None:
    if not isinstance(source, Mapping):
        raise InvalidMessageError(f"{what} needs a 'source' object")
    kind = source.get("type")
    if kind == "base64":
        block = ImageBlock(
            data=_str_field(source, "data", f"{what} source"),
            media_type=_str_field(source, "media_type", f"{what} source"),
        )
        known: tuple[str, ...] = ("type", "data", "media_type")
    elif kind == "url":
        block = ImageBlock(url=_str_field(source, "url", f"{what} source"))
        known = ("type", "url")
    else:
        return None  # a file or other source the model has no field for: kept whole
    extra = {key: copy_json(value) for key, value in source.items() if key not in known}
    if extra:
        entry["source_extra"] = extra
    return block


def _media_type(block: ImageBlock) -> str:
    data = block.data or ""
    media_type = block.media_type or next(
        (kind for magic, kind in _MAGIC.items() if data.startswith(magic)), None
    )
    if media_type is None:
        raise InvalidMessageError(
            "image block has base64 data of an unknown format; set ImageBlock.media_type"
        )
    return media_type


def _image_source(block: ImageBlock) -> dict[str, Any]:
    url = block.url
    if url is None:
        return {"type": "base64", "media_type": _media_type(block), "data": block.data}
    header, _, data = url.partition(",")
    if header.startswith("data:") and header.endswith(";base64") and data:
        return {"type": "base64", "media_type": header[5:-7], "data": data}
    return {"type": "url", "url": url}


def _tool_input(call: ToolCall, entry: Mapping[str, Any]) -> Any:
    if "input" in entry and arguments_text(entry["input"]) == call.arguments:
        return copy_json(entry["input"])
    if not call.arguments.strip():
        return {}
    try:
        value = json.loads(call.arguments)
    except ValueError as exc:
        raise InvalidMessageError(
            f"tool call {call.id!r}: arguments are not valid JSON ({exc}); "
            "Anthropic's tool_use input must be a JSON object"
        ) from None
    if not isinstance(value, dict):
        raise InvalidMessageError(
            f"tool call {call.id!r}: arguments are a JSON {type(value).__name__}, not an "
            "object; Anthropic's tool_use input must be a JSON object"
        )
    return value


def write_block(block: Block, entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """One block as a content block dict, with the details of ``entry`` where they fit."""
    entry = entry or {}
    out: dict[str, Any]
    if isinstance(block, TextBlock):
        out = {"type": "text", "text": block.text}
    elif isinstance(block, ThinkingBlock) and block.redacted:
        out = {"type": "redacted_thinking", "data": block.thinking}
    elif isinstance(block, ThinkingBlock):
        out = {"type": "thinking", "thinking": block.thinking}
        if block.signature is not None:
            out["signature"] = block.signature
    elif isinstance(block, ToolCall):
        out = {"type": "tool_use", "id": block.id, "name": block.name}
        out["input"] = _tool_input(block, entry)
    else:
        source = _image_source(block)
        for key, value in (entry.get("source_extra") or {}).items():
            source.setdefault(key, copy_json(value))
        out = {"type": "image", "source": source}
    for key, value in (entry.get("extra") or {}).items():
        out.setdefault(key, copy_json(value))
    return out


def layout_fits(layout: object, blocks: Sequence[Block]) -> bool:
    """Whether a block layout still matches ``blocks`` (the writer ignores one that does not)."""
    if not isinstance(layout, list):
        return False
    consuming = [e for e in layout if not (isinstance(e, Mapping) and "opaque" in e)]
    return len(consuming) == len(blocks) and all(
        e is None or isinstance(e, Mapping) for e in consuming
    )


def write_blocks(blocks: Sequence[Block], layout: object) -> list[dict[str, Any]]:
    """The content block dicts for ``blocks``, with the layout when it still fits them.

    A layout that no longer fits (a strategy removed or added blocks) is ignored,
    and the blocks kept whole in it are dropped with it.
    """
    if not layout_fits(layout, blocks):
        return [write_block(block, None) for block in blocks]
    assert isinstance(layout, list)
    written: list[dict[str, Any]] = []
    remaining = iter(blocks)
    for entry in layout:
        if isinstance(entry, Mapping) and "opaque" in entry:
            written.append(copy_json(entry["opaque"]))
        else:
            written.append(write_block(next(remaining), entry))
    return written
