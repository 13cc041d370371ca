"""Content parts of LangChain messages, for `context_engine.formats.langchain`.

LangChain content is a str or a list of str and dict parts in several
dialects: OpenAI's (``image_url``), LangChain's standard blocks (``image``
with ``url`` or ``base64``, ``reasoning``), the older standard (``image`` with
``source_type`` and ``data``) and Anthropic's (``image`` with a ``source``,
``thinking``, ``redacted_thinking``). A part that holds a text, an image or
reasoning becomes a block, and its *entry* records the dialect and the keys
the block cannot hold, so that `write_content` gives the same part back. Parts
of other types (``tool_use``, ``file``, ``audio``, ...) are kept whole.

The layout of entries is kept only when the default rendering would not
reproduce the content, and used only while it still fits the blocks: a
rewritten message (a trimmed text, a cleared tool result) falls back to the
default rendering where the recorded dialect cannot hold its blocks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from context_engine.errors import InvalidMessageError
from context_engine.messages import Block, ImageBlock, TextBlock, ThinkingBlock

__all__ = ["default_content", "read_content", "write_content"]

Entry = dict[str, Any]
_Read = tuple[Block, Entry]


def _rest(part: Mapping[str, Any], *consumed: str) -> dict[str, Any]:
    """The keys of ``part`` a block does not hold, deep-copied."""
    return {key: copy.deepcopy(value) for key, value in part.items() if key not in consumed}


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# --------------------------------------------------------------------- reading


def _read_text(part: Mapping[str, Any]) -> _Read | None:
    text = part.get("text")
    if not isinstance(text, str):
        raise InvalidMessageError(f"text part needs a str 'text', got {type(text).__name__}")
    return TextBlock(text), {"form": "text", "rest": _rest(part, "text")}


def _read_image_url(part: Mapping[str, Any]) -> _Read | None:
    image = part.get("image_url")
    if isinstance(image, str):
        return ImageBlock(url=image), {"form": "image_url", "rest": _rest(part, "image_url")}
    if not isinstance(image, Mapping) or not isinstance(image.get("url"), str):
        raise InvalidMessageError("image_url part needs an image_url str or a dict with a 'url'")
    detail = _str(image.get("detail"))
    inner = _rest(image, "url", "detail") if detail is not None else _rest(image, "url")
    entry = {"form": "image_url", "rest": _rest(part, "image_url"), "inner": inner}
    return ImageBlock(url=image["url"], detail=detail), entry


def _read_image(part: Mapping[str, Any]) -> _Read | None:
    source = part.get("source")
    if isinstance(source, Mapping):
        return _read_source(part, source)
    key = next((k for k in ("url", "base64", "data") if isinstance(part.get(k), str)), None)
    if key is None:
        return None  # a file id or another reference: kept whole
    media_type, detail = _str(part.get("mime_type")), _str(part.get("detail"))
    consumed = [key]
    consumed += ["mime_type"] if media_type is not None else []
    consumed += ["detail"] if detail is not None else []
    value = part[key]
    block = (
        ImageBlock(url=value, media_type=media_type, detail=detail)
        if key == "url"
        else ImageBlock(data=value, media_type=media_type, detail=detail)
    )
    return block, {"form": "image", "key": key, "rest": _rest(part, *consumed)}


def _read_source(part: Mapping[str, Any], source: Mapping[str, Any]) -> _Read | None:
    kind = source.get("type")
    if kind == "base64" and isinstance(source.get("data"), str):
        media_type = _str(source.get("media_type"))
        consumed = ("data", "media_type") if media_type is not None else ("data",)
        block = ImageBlock(data=source["data"], media_type=media_type)
    elif kind == "url" and isinstance(source.get("url"), str):
        consumed = ("url",)
        block = ImageBlock(url=source["url"])
    else:
        return None
    entry = {"form": "source", "rest": _rest(part, "source"), "inner": _rest(source, *consumed)}
    return block, entry


def _read_thinking(part: Mapping[str, Any]) -> _Read | None:
    thinking = _str(part.get("thinking"))
    if thinking is None:
        return None
    signature = _str(part.get("signature"))
    consumed = ("thinking", "signature") if signature is not None else ("thinking",)
    entry = {"form": "thinking", "rest": _rest(part, *consumed)}
    return ThinkingBlock(thinking, signature=signature), _in_order(part, entry, *consumed)


def _read_redacted(part: Mapping[str, Any]) -> _Read | None:
    data = _str(part.get("data"))
    if data is None:
        return None
    entry = {"form": "redacted", "rest": _rest(part, "data")}
    return ThinkingBlock(data, redacted=True), _in_order(part, entry, "data")


def _read_reasoning(part: Mapping[str, Any]) -> _Read | None:
    reasoning = _str(part.get("reasoning"))
    if reasoning is None:
        return None  # e.g. OpenAI Responses reasoning items with a summary list: kept whole
    entry = {"form": "reasoning", "rest": _rest(part, "reasoning")}
    return ThinkingBlock(reasoning), _in_order(part, entry, "reasoning")


_READERS: Final[Mapping[str, Callable[[Mapping[str, Any]], _Read | None]]] = {
    "text": _read_text,
    "image_url": _read_image_url,
    "image": _read_image,
    "thinking": _read_thinking,
    "redacted_thinking": _read_redacted,
    "reasoning": _read_reasoning,
}


def _read_part(part: object, number: int) -> tuple[Block | None, Entry]:
    if isinstance(part, str):
        return TextBlock(part), {"form": "str"}
    if not isinstance(part, Mapping):
        raise InvalidMessageError(
            f"content part {number} must be a str or a dict, got {type(part).__name__}"
        )
    reader = _READERS.get(part.get("type"))  # type: ignore[arg-type]  # any key may miss
    try:
        read = reader(part) if reader is not None else None
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"content part {number}: {exc}") from None
    if read is None:
        return None, {"opaque": copy.deepcopy(dict(part))}
    return read


def read_content(content: object) -> tuple[list[Block], list[Entry] | None]:
    """The blocks of a message's ``content``, and its layout when the default would differ."""
    if isinstance(content, str):
        return ([TextBlock(content)] if content else []), None
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(
            f"content must be a str or a list of parts, got {type(content).__name__}"
        )
    blocks: list[Block] = []
    layout: list[Entry] = []
    for number, part in enumerate(content):
        block, entry = _read_part(part, number)
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    if default_content(blocks) == list(content):
        return blocks, None
    return blocks, layout


# --------------------------------------------------------------------- writing


def _default_part(block: Block) -> str | dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        if block.redacted:
            return {"type": "redacted_thinking", "data": block.thinking}
        part = {"type": "thinking", "thinking": block.thinking}
        return part if block.signature is None else {**part, "signature": block.signature}
    if not isinstance(block, ImageBlock):
        raise InvalidMessageError(f"{type(block).__name__} is not a content part")
    if block.url is not None and block.media_type is None:
        image = {"url": block.url}
        return {"type": "image_url", "image_url": _with_detail(image, block)}
    key = "url" if block.url is not None else "base64"
    return _image_fields({"type": "image", key: block.url or block.data}, block)


def _with_detail(image: dict[str, Any], block: ImageBlock) -> dict[str, Any]:
    return image if block.detail is None else {**image, "detail": block.detail}


def _image_fields(part: dict[str, Any], block: ImageBlock) -> dict[str, Any]:
    if block.media_type is not None:
        part["mime_type"] = block.media_type
    return _with_detail(part, block)


def default_content(visible: Sequence[Block]) -> str | list[str | dict[str, Any]]:
    """``content`` as `to_langchain` writes it without a layout: a str for one text."""
    if not visible:
        return ""
    if len(visible) == 1 and isinstance(visible[0], TextBlock):
        return visible[0].text
    return [_default_part(block) for block in visible]


def _write_image(block: ImageBlock, entry: Mapping[str, Any]) -> dict[str, Any] | None:
    rest = copy.deepcopy(dict(entry.get("rest") or {}))
    inner = entry.get("inner")
    form = entry["form"]
    if form == "image_url":
        if block.url is None or block.media_type is not None:
            return None
        if inner is None and block.detail is None:
            return {**rest, "image_url": block.url}
        image = {**copy.deepcopy(dict(inner or {})), "url": block.url}
        return {**rest, "image_url": _with_detail(image, block)}
    if form == "image":
        key = str(entry.get("key"))
        if (key == "url") != (block.url is not None):
            return None
        return _image_fields({**rest, key: block.url or block.data}, block)
    if block.detail is not None:  # Anthropic sources have no detail
        return None
    source = copy.deepcopy(dict(inner or {}))
    if block.url is not None and block.media_type is None and source.get("type") == "url":
        return {**rest, "source": {**source, "url": block.url}}
    if block.data is not None and source.get("type") == "base64":
        media = {"media_type": block.media_type} if block.media_type is not None else {}
        return {**rest, "source": {**source, "data": block.data, **media}}
    return None


def _write_form(block: Block, entry: Mapping[str, Any]) -> str | dict[str, Any] | None:
    """``block`` in the dialect ``entry`` recorded, or None when that dialect cannot hold it."""
    form = entry.get("form")
    rest = copy.deepcopy(dict(entry.get("rest") or {}))
    if isinstance(block, TextBlock):
        if form == "str":
            return block.text
        return {**rest, "text": block.text} if form == "text" else None
    if isinstance(block, ImageBlock):
        return _write_image(block, entry) if form in ("image_url", "image", "source") else None
    if not isinstance(block, ThinkingBlock):
        return None
    part: dict[str, Any] | None = None
    if form == "redacted" and block.redacted:
        part = {**rest, "data": block.thinking}
    elif form == "reasoning" and not block.redacted and block.signature is None:
        part = {**rest, "reasoning": block.thinking}
    elif form == "thinking" and not block.redacted:
        signed = {"signature": block.signature} if block.signature is not None else {}
        part = {**rest, "thinking": block.thinking, **signed}
    order = entry.get("order")
    if part is not None and isinstance(order, list) and sorted(order) == sorted(part):
        part = {key: part[key] for key in order}
    return part


def _in_order(part: Mapping[str, Any], entry: dict[str, Any], *consumed: str) -> dict[str, Any]:
    """``entry`` with the part's key order when writing ``rest`` then ``consumed`` differs."""
    written = [*_rest(part, *consumed), *(key for key in consumed if key in part)]
    if list(part) != written:
        entry["order"] = list(part)
    return entry


def _fits(layout: object, visible: Sequence[Block]) -> bool:
    if not isinstance(layout, list) or not all(isinstance(e, Mapping) for e in layout):
        return False
    return sum(1 for e in layout if "opaque" not in e) == len(visible)


def write_content(visible: Sequence[Block], layout: object) -> str | list[str | dict[str, Any]]:
    """``content`` for the text, image and thinking blocks, with the layout when it fits."""
    if not _fits(layout, visible):
        return default_content(visible)
    assert isinstance(layout, list)
    parts: list[str | dict[str, Any]] = []
    blocks = iter(visible)
    for entry in layout:
        if "opaque" in entry:
            parts.append(copy.deepcopy(entry["opaque"]))
            continue
        block = next(blocks)
        written = _write_form(block, entry)
        parts.append(written if written is not None else _default_part(block))
    return parts
