"""Writing pydantic-ai histories, for `context_engine.formats.pydantic_ai`.

Consecutive non-assistant messages are collected into one request until an
assistant message or the start of another original request closes it; the
request fields, kept parts and records of the reading side are put back.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any, Final, get_args

import attrs
import pydantic
from pydantic_ai import messages as pm

from context_engine.errors import InvalidMessageError
from context_engine.formats import _pydantic_ai_parts as parts
from context_engine.messages import ImageBlock, Message, TextBlock, ThinkingBlock

__all__ = [
    "FOLLOWERS_KEY",
    "LEADERS_KEY",
    "PART_KEY",
    "RECORD_KEY",
    "REQUEST_KEY",
    "RESPONSE_KEY",
    "Group",
    "slot",
    "write_history",
]

Group = tuple[Any, tuple[Message, ...]]
"""A pydantic-ai message and the messages read from it."""

PART_KEY: Final = "pydantic_ai.part"
"""Metadata key: fields of the request part a message came from that blocks cannot hold."""
REQUEST_KEY: Final = "pydantic_ai.request"
"""Metadata key, on the first message of a request: its fields and the parts kept whole."""
RESPONSE_KEY: Final = "pydantic_ai.response"
"""Metadata key of an assistant message: response fields, per-part details, full usage."""
LEADERS_KEY: Final = "pydantic_ai.leaders"
"""Metadata key: whole requests with nothing to read (framework-only) that come before it."""
FOLLOWERS_KEY: Final = "pydantic_ai.followers"
"""Metadata key: whole requests with nothing to read that come after its request or response."""
RECORD_KEY: Final = "context_engine"
"""Key in a `ModelRequest`/`ModelResponse` ``metadata``: what pydantic-ai has no field for."""


def slot(part: Any, ordinals: dict[str, int]) -> str:
    """Where a request part's record is kept: by call id for results, else by kind and position."""
    if isinstance(part, pm.ToolReturnPart):
        return f"tool:{part.tool_call_id}"
    kind = str(part.part_kind)
    ordinals[kind] = ordinals.get(kind, -1) + 1
    return f"{kind}:{ordinals[kind]}"


_OWN_PREFIX: Final = "pydantic_ai."
_FINISH_REASONS: Final = frozenset(get_args(pm.FinishReason))
_DATETIME: Final = pydantic.TypeAdapter(_dt.datetime)


def write_history(
    messages: Sequence[Message],
    groups: Sequence[Group],
    *,
    sources: list[tuple[Message, ...]] | None = None,
) -> list[pm.ModelMessage]:
    """The body of `to_pydantic_ai`, with ``reuse`` already read into ``groups``.

    Args:
        messages: The messages to write.
        groups: Originals and what they read as, for reuse.
        sources: When given, receives for each written pydantic-ai message the
            messages it was written from (empty for a kept framework message).
    """
    known: dict[Message, list[Group]] = {}
    spares: list[Any] = []
    for original, group in groups:
        if group:
            known.setdefault(group[0], []).append((original, group))
        else:
            spares.append(original)
    writer = _Writer(spares)
    index = 0
    while index < len(messages):
        message = messages[index]
        if not isinstance(message, Message):
            kind = type(message).__name__
            raise InvalidMessageError(f"expected a Message, got {kind}", index=index)
        match = _match(known.get(message, []), messages, index)
        try:
            if match is not None and writer.can_reuse(match, messages, index):
                writer.reuse(*match)
                index += len(match[1])
                continue
            writer.add(message)
        except InvalidMessageError as exc:
            raise InvalidMessageError(str(exc), index=index) from None
        index += 1
    writer.flush()
    if sources is not None:
        sources.extend(writer.sources)
    return writer.out


def _match(candidates: list[Group], messages: Sequence[Message], start: int) -> Group | None:
    """The first original whose messages start here; each original is used once, in order."""
    for number, (original, group) in enumerate(candidates):
        if tuple(messages[start : start + len(group)]) == group:
            del candidates[: number + 1]
            return original, group
    return None


def _foreign(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metadata.items() if not key.startswith(_OWN_PREFIX)}


def _record(message: Message, *, name_field: bool) -> dict[str, Any]:
    """What the pydantic-ai form has no field for, to read back exactly."""
    record: dict[str, Any] = {}
    foreign = _foreign(message.metadata)
    if foreign:
        record["metadata"] = foreign
    if message.timestamp is None:
        record["timestamp"] = None
    if (message.name is not None) != name_field:
        record["name"] = message.name
    if message.role != "assistant":
        if message.stop_reason is not None:
            record["stop_reason"] = message.stop_reason
        if message.usage is not None:
            record["usage"] = attrs.asdict(message.usage)
    return record


def _stamp(message: Message, extras: Mapping[str, Any]) -> _dt.datetime:
    stored = extras.get("timestamp")
    if isinstance(stored, str):
        return _DATETIME.validate_python(stored)
    return message.timestamp or _dt.datetime.now(_dt.timezone.utc)


class _Writer:
    """Builds the history: open requests collect parts until something closes them."""

    def __init__(self, spares: list[Any]) -> None:
        self.out: list[pm.ModelMessage] = []
        self.sources: list[tuple[Message, ...]] = []
        self.request: _Request | None = None
        self.names: dict[str, str] = {}
        self.spares = spares

    def flush(self) -> None:
        if self.request is not None:
            self.out.append(self.request.build())
            self.sources.append(tuple(self.request.messages))
            self.request = None

    def _extra(self, message: Message, key: str) -> None:
        """Put back the whole messages kept on ``message``: the originals when known."""
        kept = message.metadata.get(key)
        if kept:
            self.flush()
            for item in kept:
                self.out.append(self._original(item))
                self.sources.append(())

    def _original(self, data: Any) -> Any:
        for number, spare in enumerate(self.spares):
            if parts.dump(parts.MESSAGE, spare, ()) == data:
                del self.spares[: number + 1]
                return spare
        return parts.load(parts.MESSAGE, data)

    def can_reuse(self, match: Group, messages: Sequence[Message], start: int) -> bool:
        """Whether an original fits here as it is: a request must not touch another request.

        Two requests in a row would be merged by pydantic-ai, which keeps the
        first one's metadata only; merging them here keeps every record.
        """
        original, group = match
        if not isinstance(original, pm.ModelRequest):
            return True
        after = start + len(group)
        previous = self.out[-1] if self.out else None
        return (
            self.request is None
            and not isinstance(previous, pm.ModelRequest)
            and (after == len(messages) or messages[after].role == "assistant")
        )

    def reuse(self, original: pm.ModelMessage, group: tuple[Message, ...]) -> None:
        self.flush()
        self._extra(group[0], LEADERS_KEY)
        self.out.append(original)
        self.sources.append(group)
        for message in group:
            self.names.update((call.id, call.name) for call in message.tool_calls)
        self._extra(group[-1], FOLLOWERS_KEY)

    def add(self, message: Message) -> None:
        self._extra(message, LEADERS_KEY)
        if message.role == "assistant":
            self.flush()
            self.out.append(_write_response(message))
            self.sources.append((message,))
            self.names.update((call.id, call.name) for call in message.tool_calls)
        else:
            head = message.metadata.get(REQUEST_KEY)
            if isinstance(head, Mapping) and self.request and not self.request.joins(head):
                self.flush()
            if self.request is None:
                self.request = _Request()
            if isinstance(head, Mapping):
                self.request.adopt(head)
            self.request.add(message, *_write_request_part(message, self.names))
        self._extra(message, FOLLOWERS_KEY)


class _Request:
    """A request being assembled from consecutive non-assistant messages.

    Messages that came from different requests are merged as pydantic-ai
    merges consecutive requests: the first request's fields win, and requests
    with different instructions stay apart.
    """

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}
        self.segments: list[tuple[int, list[Any]]] = []
        self.has_head = False
        self.parts: list[tuple[Any, dict[str, Any]]] = []
        self.messages: list[Message] = []

    def joins(self, head: Mapping[str, Any]) -> bool:
        if not self.has_head:
            return True
        mine = self.fields.get("instructions")
        theirs = (head.get("fields") or {}).get("instructions")
        return not mine or not theirs or mine == theirs

    def adopt(self, head: Mapping[str, Any]) -> None:
        if not self.has_head:
            self.fields = dict(head.get("fields") or {})
            self.has_head = True
        self.segments.append((len(self.parts), list(head.get("parts") or [])))

    def add(self, message: Message, part: Any, record: dict[str, Any]) -> None:
        self.messages.append(message)
        self.parts.append((part, record))

    def _ordered(self) -> list[Any]:
        """The written parts with each head's kept parts put back around them."""
        written = [part for part, _ in self.parts]
        bounds = [base for base, _ in self.segments] + [len(written)]
        ordered = written[: bounds[0]]
        for (base, layout), end in zip(self.segments, bounds[1:], strict=True):
            chunk, position = written[base:end], 0
            for entry in layout:
                if entry is not None:
                    ordered.append(parts.load(parts.REQUEST_PART, entry))
                elif position < len(chunk):
                    ordered.append(chunk[position])
                    position += 1
            ordered.extend(chunk[position:])
        return ordered

    def build(self) -> pm.ModelRequest:
        ordered = self._ordered()
        records = {id(part): record for part, record in self.parts}
        slots: dict[str, Any] = {}
        ordinals: dict[str, int] = {}
        for part in ordered:
            if id(part) in records:
                key = slot(part, ordinals)
                if records[id(part)]:
                    slots[key] = records[id(part)]
        record: dict[str, Any] = {} if self.has_head else {"implicit": True}
        if slots:
            record["slots"] = slots
        metadata = self.fields.get("metadata")
        if record:
            metadata = {**(metadata or {}), RECORD_KEY: record}
        data = {**self.fields, "kind": "request", "parts": [], "metadata": metadata}
        request: pm.ModelRequest = parts.replace_parts(parts.load(parts.MESSAGE, data), ordered)
        return request


def _write_request_part(message: Message, names: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """The request part for a system, user or tool message, and its record."""
    extras = dict(message.metadata.get(PART_KEY) or {})
    stamp = _stamp(message, extras)
    record = _record(message, name_field=message.role == "tool")
    if extras.pop("timestamp", None) is not None:
        record.pop("timestamp", None)
    if message.role == "developer":
        record["role"] = "developer"
    derived = extras.get("derived")
    if isinstance(derived, Mapping) and extras.get("digest") == parts.digest(message.text):
        return parts.load(parts.REQUEST_PART, {**derived, "timestamp": stamp}), record
    if message.role in ("system", "developer"):
        _only_text(message)
        data = {"part_kind": "system-prompt", **extras, "content": message.text, "timestamp": stamp}
        return parts.load(parts.REQUEST_PART, data), record
    if message.role == "user":
        return pm.UserPromptPart(_user_content(message, extras), timestamp=stamp), record
    return _write_tool_return(message, extras, stamp, names), record


def _only_text(message: Message) -> None:
    if any(not isinstance(block, TextBlock) for block in message.content):
        raise InvalidMessageError(
            f"a {message.role} message holds a non-text block; pydantic-ai system prompts are text"
        )


def _user_content(message: Message, extras: Mapping[str, Any]) -> str | list[Any]:
    layout = extras.get("items")
    blocks = message.content
    if layout is None and all(isinstance(block, TextBlock) for block in blocks) and len(blocks) < 2:
        return message.text
    return parts.write_items(blocks, layout or [])


def _write_tool_return(
    message: Message, extras: dict[str, Any], stamp: _dt.datetime, names: Mapping[str, str]
) -> Any:
    call_id = message.tool_call_id or ""
    name = message.name or names.get(call_id) or "tool"
    layout = extras.pop("items", None)
    kept = extras.pop("digest", None)
    if kept is not None and kept != parts.digest(message.text):
        extras.pop("content", None)
        extras.pop("content_file_digests", None)
    own = {"tool_name": name, "tool_call_id": call_id, "timestamp": stamp}
    if "content" in extras:
        return parts.load(parts.REQUEST_PART, {"part_kind": "tool-return", **extras, **own})
    blocks = message.content
    content: Any = message.text
    if layout is not None or any(isinstance(block, ImageBlock) for block in blocks):
        content = parts.write_items(blocks, layout or [])
    data = {"part_kind": "tool-return", **extras, **own, "content": ""}
    part = parts.load(parts.REQUEST_PART, data)
    return parts.replace_content(part, content) if content != "" else part


def _write_response(message: Message) -> pm.ModelResponse:
    shape = message.metadata.get(RESPONSE_KEY) or {}
    fields = dict(shape.get("fields") or {})
    record = _record(message, name_field=False)
    stop = message.stop_reason
    if stop is not None and stop not in _FINISH_REASONS:
        record["stop_reason"] = stop
        stop = None
    redacted = [
        i for i, b in enumerate(message.content) if isinstance(b, ThinkingBlock) and b.redacted
    ]
    if redacted:
        record["redacted"] = redacted
    metadata = fields.pop("metadata", None)
    if record:
        metadata = {**(metadata or {}), RECORD_KEY: record}
    data = {
        **fields,
        "kind": "response",
        "parts": parts.write_response_parts(message.content, shape.get("parts") or []),
        "timestamp": message.timestamp or _dt.datetime.now(_dt.timezone.utc),
        "finish_reason": stop,
        "metadata": metadata,
    }
    response: pm.ModelResponse = parts.load(parts.MESSAGE, data)
    response.usage = parts.write_usage(message.usage, shape.get("usage"))
    return response
