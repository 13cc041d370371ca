"""Convert pydantic-ai message histories (``list[ModelMessage]``) to and from messages.

pydantic-ai keeps a run's history as `ModelRequest` and `ModelResponse`
objects, each a list of parts. A request becomes one message per part the
model reads (a system prompt, a user prompt, a tool result); a response
becomes one assistant message:

    ModelRequest([SystemPromptPart, UserPromptPart])      -> system, user
    ModelResponse([TextPart, ThinkingPart, ToolCallPart]) -> assistant (text, thinking, tool call)
    ModelRequest([ToolReturnPart, ToolReturnPart])        -> tool, tool

Text, images (``ImageUrl`` and image ``BinaryContent``), tool calls and
results with their ids, thinking with its signature, ``usage``
(``input_tokens`` already includes cached tokens, as `Usage` expects),
``finish_reason`` (as ``stop_reason``) and timestamps map onto the message
model. Everything else (part ids, provider details, request fields, native
tool parts, files, framework parts) is kept as JSON in the metadata keys below
and written back where it still fits, so ``to_pydantic_ai(from_pydantic_ai(h))``
equals ``h``. A rendered ``<context-summary>`` user prompt comes back as a
`ContextSummary`. Messages written from scratch carry their own metadata and
the fields pydantic-ai has no place for in the ``"context_engine"`` entry of
the request's or response's ``metadata`` (never sent to the model), so
``from_pydantic_ai(to_pydantic_ai(m))`` equals ``m``.

Importing this module needs pydantic-ai: ``pip install 'context-engine[pydantic-ai]'``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

try:
    import pydantic_core
    from pydantic_ai import messages as pm
except ImportError as exc:  # pragma: no cover - exercised by hiding the package in a test
    raise ImportError(
        "context_engine.formats.pydantic_ai needs pydantic-ai; "
        "install it with: pip install 'context-engine[pydantic-ai]'"
    ) from exc

from context_engine.errors import InvalidMessageError
from context_engine.formats import _pydantic_ai_parts as parts
from context_engine.formats._pydantic_ai_write import (
    FOLLOWERS_KEY,
    LEADERS_KEY,
    PART_KEY,
    RECORD_KEY,
    REQUEST_KEY,
    RESPONSE_KEY,
    Group,
    slot,
    write_history,
)
from context_engine.messages import (
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    Usage,
    parse_context_summary,
)

__all__ = [
    "FOLLOWERS_KEY",
    "LEADERS_KEY",
    "PART_KEY",
    "RECORD_KEY",
    "REQUEST_KEY",
    "RESPONSE_KEY",
    "from_pydantic_ai",
    "read_groups",
    "to_pydantic_ai",
    "write_history",
]

_FRESH_REQUEST: Final = pm.ModelRequest(parts=[])
_FRESH_RESPONSE: Final = pm.ModelResponse(parts=[])
_FRESH_SYSTEM: Final = pm.SystemPromptPart("")
_FRESH_RETURN: Final = pm.ToolReturnPart("tool", "", tool_call_id="call")
_RESPONSE_OWN: Final = ("parts", "usage", "timestamp", "finish_reason", "metadata")

# --------------------------------------------------------------------- reading


def from_pydantic_ai(history: Iterable[pm.ModelMessage]) -> list[Message]:
    """Convert a pydantic-ai history to messages.

    Args:
        history: ``ModelRequest`` and ``ModelResponse`` objects in order, e.g.
            ``result.all_messages()``. They are not modified.

    Returns:
        The messages, in order. A request holding only framework parts is kept
        whole on a neighbouring message.

    Raises:
        InvalidMessageError: An item is not a pydantic-ai message; ``.index`` says which.
    """
    return [message for _, group in read_groups(history) for message in group]


def read_groups(history: Iterable[pm.ModelMessage]) -> list[Group]:
    """Each pydantic-ai message with the messages read from it.

    A message with nothing to read (only framework parts) reads as no
    messages; a JSON copy of it rides on its neighbour's metadata.
    """
    if isinstance(history, (pm.ModelRequest, pm.ModelResponse, str, bytes)):
        raise InvalidMessageError("from_pydantic_ai takes a list of ModelMessage objects")
    groups: list[Group] = []
    waiting: list[dict[str, Any]] = []
    for index, item in enumerate(history):
        try:
            read = _read_item(item)
        except InvalidMessageError as exc:
            raise InvalidMessageError(str(exc), index=index) from None
        if not read:
            kept = parts.dump(parts.MESSAGE, item, ())
            host = next((i for i in range(len(groups) - 1, -1, -1) if groups[i][1]), None)
            if host is not None:
                original, group = groups[host]
                last = _append_meta(group[-1], FOLLOWERS_KEY, kept)
                groups[host] = (original, (*group[:-1], last))
            else:
                waiting.append(kept)
            groups.append((item, ()))
            continue
        if waiting:
            read[0] = _with_meta(read[0], LEADERS_KEY, waiting)
            waiting = []
        groups.append((item, tuple(read)))
    return groups


def _read_item(item: object) -> list[Message]:
    if isinstance(item, pm.ModelResponse):
        return [_read_response(item)]
    if isinstance(item, pm.ModelRequest):
        return _read_request(item)
    raise InvalidMessageError(
        f"expected a ModelRequest or ModelResponse, got {type(item).__name__}"
    )


def _with_meta(message: Message, key: str, value: Any) -> Message:
    return attrs.evolve(message, metadata={**message.metadata, key: value})


def _append_meta(message: Message, key: str, value: Any) -> Message:
    return _with_meta(message, key, [*message.metadata.get(key, ()), value])


def _split_record(metadata: Mapping[str, Any] | None) -> tuple[dict[str, Any], Any]:
    """Our record in a request's or response's metadata, and the metadata without it."""
    if not isinstance(metadata, Mapping) or RECORD_KEY not in metadata:
        return {}, metadata
    record = metadata[RECORD_KEY]
    rest = {key: value for key, value in metadata.items() if key != RECORD_KEY}
    return (dict(record) if isinstance(record, Mapping) else {}), (rest or None)


def _read_request(request: pm.ModelRequest) -> list[Message]:
    record, metadata = _split_record(request.metadata)
    slots = record.get("slots") or {}
    messages: list[Message] = []
    layout: list[dict[str, Any] | None] = []
    ordinals: dict[str, int] = {}
    for part in request.parts:
        read = _read_request_part(part)
        if read is None:
            layout.append(parts.dump(parts.REQUEST_PART, part, ()))
            continue
        layout.append(None)
        stamp = getattr(part, "timestamp", None)
        messages.append(_finish(read, slots.get(slot(part, ordinals)), stamp))
    if not messages:
        return []
    fields = parts.differing(parts.MESSAGE, request, _FRESH_REQUEST, ("parts", "metadata"))
    if metadata is not None:
        fields["metadata"] = pydantic_core.to_jsonable_python(metadata)
    head: dict[str, Any] = {"fields": fields} if fields else {}
    if any(entry is not None for entry in layout):
        head["parts"] = layout
    if head or not record.get("implicit"):
        messages[0] = _with_meta(messages[0], REQUEST_KEY, head)
    return messages


def _read_request_part(part: Any) -> Message | None:
    stamp: _dt.datetime | None = getattr(part, "timestamp", None)
    if isinstance(part, pm.SystemPromptPart):
        extras = parts.differing(parts.REQUEST_PART, part, _FRESH_SYSTEM, ("content", "timestamp"))
        return Message("system", part.content, metadata=_part_meta(extras), timestamp=stamp)
    if isinstance(part, pm.UserPromptPart):
        if isinstance(part.content, str):
            return Message("user", part.content, timestamp=stamp)
        blocks, layout = parts.read_user_items(part.content)
        meta = {} if parts.plain_layout(blocks, layout) else _part_meta({"items": layout})
        return Message("user", tuple(blocks), metadata=meta, timestamp=stamp)
    if isinstance(part, pm.ToolReturnPart):
        blocks, extras = _read_tool_content(part)
        return Message(
            "tool",
            tuple(blocks),
            tool_call_id=part.tool_call_id,
            name=part.tool_name,
            metadata=_part_meta(extras),
            timestamp=stamp,
        )
    if isinstance(part, (pm.RetryFeedbackPart, pm.RetryPromptPart)):
        return _read_retry(part, stamp)
    return None


def _read_retry(part: pm.RetryFeedbackPart | pm.RetryPromptPart, stamp: Any) -> Message:
    """A retry prompt as the text the model reads; the part itself is kept whole."""
    text = part.model_response()
    extras: dict[str, Any] = {"derived": parts.dump(parts.REQUEST_PART, part, ("timestamp",))}
    extras["digest"] = parts.digest(text)
    meta = _part_meta(extras)
    if isinstance(part, pm.RetryPromptPart) and part.tool_name is not None:
        return Message(
            "tool", text, tool_call_id=part.tool_call_id, name=part.tool_name, metadata=meta,
            timestamp=stamp,
        )  # fmt: skip
    return Message("user", text, metadata=meta, timestamp=stamp)


def _read_tool_content(part: pm.ToolReturnPart) -> tuple[list[Block], dict[str, Any]]:
    own = ("content", "tool_name", "tool_call_id", "timestamp")
    content = part.content
    if isinstance(content, str):
        extras = parts.differing(parts.REQUEST_PART, part, _FRESH_RETURN, own)
        return ([TextBlock(content)] if content else []), extras
    items = parts.read_items(content) if isinstance(content, list) else None
    if items is not None:
        extras = parts.differing(parts.REQUEST_PART, part, _FRESH_RETURN, own)
        if not parts.plain_layout(*items):
            extras["items"] = items[1]
        return items[0], extras
    text = part.model_response_str()
    extras = parts.differing(parts.REQUEST_PART, part, _FRESH_RETURN, own[1:])
    extras["digest"] = parts.digest(text)
    return ([TextBlock(text)] if text else []), extras


def _part_meta(extras: Mapping[str, Any]) -> dict[str, Any]:
    return {PART_KEY: dict(extras)} if extras else {}


def _finish(message: Message, record: Any, stamp: _dt.datetime | None) -> Message:
    """Apply the record of fields pydantic-ai had no place for; recognise a checkpoint."""
    message = _apply_record(message, record if isinstance(record, Mapping) else {})
    if message.role == "user" and len(message.content) == 1:
        (block,) = message.content
        if isinstance(block, TextBlock):
            summary = parse_context_summary(block.text, metadata=message.metadata)
            if summary is not None and summary.text == block.text:
                kept = summary if record and "timestamp" in record else _keep_stamp(summary, stamp)
                return attrs.evolve(kept, name=message.name)
    return message


def _keep_stamp(summary: Message, stamp: _dt.datetime | None) -> Message:
    if stamp is None or summary.timestamp == stamp:
        return summary
    extras = {**summary.metadata.get(PART_KEY, {}), "timestamp": stamp.isoformat()}
    return _with_meta(summary, PART_KEY, extras)


def _apply_record(message: Message, record: Mapping[str, Any]) -> Message:
    if not record:
        return message
    changes: dict[str, Any] = {}
    if isinstance(record.get("metadata"), Mapping):
        changes["metadata"] = {**message.metadata, **record["metadata"]}
    if "timestamp" in record:
        changes["timestamp"] = None
    for name in ("name", "stop_reason"):
        if name in record:
            changes[name] = record[name]
    if record.get("role") == "developer" and message.role == "system":
        changes["role"] = "developer"
    if isinstance(record.get("usage"), Mapping):
        changes["usage"] = Usage(**record["usage"])
    redacted = set(record.get("redacted") or ())
    if redacted:
        changes["content"] = tuple(
            attrs.evolve(b, redacted=True) if i in redacted and isinstance(b, ThinkingBlock) else b
            for i, b in enumerate(message.content)
        )
    return attrs.evolve(message, **changes)


def _read_response(response: pm.ModelResponse) -> Message:
    record, metadata = _split_record(response.metadata)
    blocks: list[Block] = []
    layout: list[dict[str, Any]] = []
    for part in response.parts:
        block, entry = parts.read_response_part(part)
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    fields = parts.differing(parts.MESSAGE, response, _FRESH_RESPONSE, _RESPONSE_OWN)
    if metadata is not None:
        fields["metadata"] = pydantic_core.to_jsonable_python(metadata)
    usage, raw_usage = parts.read_usage(response.usage)
    shape: dict[str, Any] = {"fields": fields} if fields else {}
    if any(len(entry) > 1 for entry in layout):
        shape["parts"] = layout
    if raw_usage is not None:
        shape["usage"] = raw_usage
    message = Message(
        "assistant",
        tuple(blocks),
        usage=usage,
        stop_reason=response.finish_reason,
        metadata={RESPONSE_KEY: shape} if shape else {},
        timestamp=response.timestamp,
    )
    return _apply_record(message, record)


# --------------------------------------------------------------------- writing


def to_pydantic_ai(
    messages: Iterable[Message], *, reuse: Sequence[pm.ModelMessage] = ()
) -> list[pm.ModelMessage]:
    """Convert messages to a pydantic-ai history.

    Consecutive system, user and tool messages become one ``ModelRequest``
    (split where the messages came from separate requests); each assistant
    message becomes one ``ModelResponse``.

    Args:
        messages: The messages, in order.
        reuse: pydantic-ai messages the ``messages`` were read from. A run of
            messages still equal to what one of them reads as is returned as
            that very object, so unchanged history keeps its identity.

    Raises:
        InvalidMessageError: An item is not a `Message`, or holds a block
            pydantic-ai cannot carry there; ``.index`` says which.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError("to_pydantic_ai takes a list of messages")
    return write_history(list(messages), read_groups(reuse) if reuse else [])
