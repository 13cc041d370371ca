"""Convert between LangChain messages and `Message`.

`from_langchain` reads the ``langchain_core.messages`` objects an agent keeps
in its state (``SystemMessage``, ``HumanMessage``, ``AIMessage``,
``ToolMessage``); `to_langchain` builds them again. The round trip
``to_langchain(from_langchain(messages)) == messages`` is exact: whatever the
message model has no field for is kept under these metadata keys and put back.

* ``langchain.message``: message fields the model has no field for (``id``,
  ``additional_kwargs``, ``response_metadata``, a tool message's ``artifact``
  and ``status``, extra fields), each only when it is not the default.
* ``langchain.content``: one entry per content part when ``content`` was a
  list that `to_langchain` would not write by default: the part's form and
  the keys its block cannot hold, or the whole part when it has no block
  (``tool_use``, ``file``, ...).
* ``langchain.usage``: ``usage_metadata`` as written, when it held more than
  `usage_to_langchain` renders (audio or reasoning details).
* ``langchain.invalid_tool_calls``: the message's ``invalid_tool_calls``. Those
  with an id and a name are also `ToolCall` blocks (with their raw argument
  text), because LangChain answers them with tool messages.

LangChain's tool calls hold parsed arguments; an argument text that
``json.dumps`` would not write back the same travels by call id too.

A `SystemMessage` whose ``additional_kwargs`` hold ``__openai_role__:
developer`` (LangChain's spelling of OpenAI's developer role) is a
``developer`` message. ``usage_metadata`` becomes `Usage` (LangChain's
``input_tokens`` already counts cached tokens), a ``stop_reason`` or
``finish_reason`` in ``response_metadata`` the ``stop_reason``, and a human
message whose text is a rendered ``<context-summary>`` a `ContextSummary`.
Metadata of other keys (the engine's own markers, such as a cleared tool
result) and the timestamp travel in ``response_metadata["context_engine"]``,
which chat models do not send to the provider, so a committed view read back
from the agent state is recognised by the strategies that wrote it.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from context_engine.errors import InvalidMessageError
from context_engine.formats._langchain_calls import (
    raw_arguments,
    read_tool_calls,
    usage_from_langchain,
    usage_to_langchain,
    write_tool_calls,
    write_usage,
)
from context_engine.formats._langchain_parts import read_content, write_content
from context_engine.messages import (
    Block,
    Message,
    Role,
    TextBlock,
    ToolCall,
    Usage,
    parse_context_summary,
)

try:
    from langchain_core.messages import (
        AIMessage,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
    )
except ImportError as exc:  # pragma: no cover - a test hides the package to check the message
    raise ImportError(
        "context_engine.formats.langchain needs langchain-core; "
        "install the extra with: pip install 'context-engine[langchain]'"
    ) from exc

__all__ = [
    "CONTENT_KEY",
    "ENGINE_KEY",
    "INVALID_CALLS_KEY",
    "MESSAGE_KEY",
    "USAGE_KEY",
    "from_langchain",
    "message_from_langchain",
    "message_to_langchain",
    "to_langchain",
    "usage_from_langchain",
    "usage_to_langchain",
]

MESSAGE_KEY: Final = "langchain.message"
"""Metadata key: message fields the model has no field for, when not the default."""
CONTENT_KEY: Final = "langchain.content"
"""Metadata key: per-part details of a ``content`` list that blocks cannot hold."""
USAGE_KEY: Final = "langchain.usage"
"""Metadata key: ``usage_metadata`` as written, when it differs from the rendered one."""
INVALID_CALLS_KEY: Final = "langchain.invalid_tool_calls"
"""Metadata key: the ``invalid_tool_calls`` of an AI message."""
ENGINE_KEY: Final = "context_engine"
"""``response_metadata`` key carrying the other metadata keys, the timestamp, argument texts."""

_OWN_PREFIX: Final = "langchain."
_DEVELOPER: Final = {"__openai_role__": "developer"}
_TYPES: Final = "SystemMessage, HumanMessage, AIMessage or ToolMessage"


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


# --------------------------------------------------------------------- reading


def from_langchain(messages: Iterable[BaseMessage]) -> list[Message]:
    """Convert LangChain messages to messages.

    Args:
        messages: The messages, in transcript order. They are not modified.

    Returns:
        One `Message` per message (a `ContextSummary` for a rendered checkpoint).

    Raises:
        InvalidMessageError: A message cannot be read; ``.index`` names which one.
    """
    if isinstance(messages, (BaseMessage, str, bytes, Mapping)) or not isinstance(
        messages, Iterable
    ):
        raise InvalidMessageError(
            f"from_langchain takes a list of LangChain messages, got {type(messages).__name__}; "
            "use message_from_langchain for one message"
        )
    return [message_from_langchain(item, index=i) for i, item in enumerate(messages)]


def message_from_langchain(message: BaseMessage, *, index: int | None = None) -> Message:
    """Convert one LangChain message to a `Message`.

    Args:
        message: A ``SystemMessage``, ``HumanMessage``, ``AIMessage`` or ``ToolMessage``.
        index: Position in the transcript, quoted by errors.

    Raises:
        InvalidMessageError: The message is of another type or malformed.
    """
    try:
        return _read_message(message)
    except InvalidMessageError as exc:
        if index is None or exc.index is not None:
            raise
        raise InvalidMessageError(str(exc), index=index) from None


def _role_of(message: object) -> Role:
    if isinstance(message, SystemMessage):
        developer = message.additional_kwargs.get("__openai_role__") == "developer"
        return "developer" if developer else "system"
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, AIMessage):
        return "assistant"
    if isinstance(message, ToolMessage):
        return "tool"
    hint = (
        "; convert dicts and tuples with langchain_core.messages.convert_to_messages first"
        if not isinstance(message, BaseMessage)
        else ""
    )
    raise InvalidMessageError(f"expected a {_TYPES}, got {type(message).__name__}{hint}")


def _read_message(message: BaseMessage) -> Message:
    role = _role_of(message)
    response_metadata = dict(message.response_metadata)
    carried = _Carried.read(response_metadata.pop(ENGINE_KEY, None))
    metadata = carried.metadata
    blocks, layout = read_content(message.content)
    if layout is not None:
        metadata[CONTENT_KEY] = layout
    stop_reason = _stop_reason(response_metadata) if role == "assistant" else None
    fields = _read_fields(message, role, response_metadata, stop_reason)
    usage: Usage | None = None
    tool_call_id: str | None = None
    if isinstance(message, AIMessage):
        calls, invalid = read_tool_calls(
            message.tool_calls, message.invalid_tool_calls, carried.arguments
        )
        blocks.extend(calls)
        if invalid is not None:
            metadata[INVALID_CALLS_KEY] = invalid
        usage = _read_usage(message.usage_metadata, metadata)
    elif isinstance(message, ToolMessage):
        tool_call_id = message.tool_call_id
    if fields:
        metadata[MESSAGE_KEY] = fields
    if role == "user" and layout is None and len(blocks) == 1:
        summary = _read_summary(blocks[0], message.name, metadata)
        if summary is not None:
            return summary
    return Message(
        role,
        tuple(blocks),
        tool_call_id=tool_call_id,
        name=message.name,
        usage=usage,
        stop_reason=stop_reason,
        metadata=metadata,
        timestamp=carried.timestamp,
    )


@attrs.frozen
class _Carried:
    """What travels in ``response_metadata["context_engine"]``."""

    metadata: dict[str, Any]
    timestamp: dt.datetime | None = None
    arguments: Mapping[str, Any] = attrs.field(factory=dict)

    @classmethod
    def read(cls, carried: object) -> _Carried:
        if carried is None:
            return cls({})
        if not isinstance(carried, Mapping):
            raise InvalidMessageError(
                f"response_metadata[{ENGINE_KEY!r}] is reserved for context-engine; "
                f"expected a dict, got {type(carried).__name__}"
            )
        stamp = carried.get("timestamp")
        try:
            timestamp = dt.datetime.fromisoformat(stamp) if isinstance(stamp, str) else None
        except ValueError:
            raise InvalidMessageError(f"carried timestamp {stamp!r} is not ISO 8601") from None
        arguments = carried.get("arguments")
        return cls(
            dict(_copy(carried.get("metadata") or {})),
            timestamp,
            arguments if isinstance(arguments, Mapping) else {},
        )

    def write(self) -> dict[str, Any]:
        written: dict[str, Any] = {}
        if self.metadata:
            written["metadata"] = _copy(self.metadata)
        if self.timestamp is not None:
            written["timestamp"] = self.timestamp.isoformat()
        if self.arguments:
            written["arguments"] = dict(self.arguments)
        return written


def _read_summary(block: Block, name: str | None, metadata: dict[str, Any]) -> Message | None:
    if not isinstance(block, TextBlock):
        return None
    summary = parse_context_summary(block.text, metadata=metadata)
    if summary is None or summary.text != block.text:
        return None
    return attrs.evolve(summary, name=name)


def _stop_reason(response_metadata: Mapping[str, Any]) -> str | None:
    for key in ("stop_reason", "finish_reason"):
        value = response_metadata.get(key)
        if isinstance(value, str):
            return value
    return None


def _default_response_metadata(stop_reason: str | None) -> dict[str, Any]:
    return {"stop_reason": stop_reason} if stop_reason is not None else {}


def _read_fields(
    message: BaseMessage,
    role: Role,
    response_metadata: dict[str, Any],
    stop_reason: str | None,
) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    if message.id is not None:
        fields["id"] = message.id
    if message.additional_kwargs != (_DEVELOPER if role == "developer" else {}):
        fields["additional_kwargs"] = _copy(message.additional_kwargs)
    if response_metadata != _default_response_metadata(stop_reason):
        fields["response_metadata"] = _copy(response_metadata)
    if message.model_extra:
        fields["extra"] = dict(message.model_extra)
    if isinstance(message, ToolMessage):
        if message.artifact is not None:
            fields["artifact"] = message.artifact  # any object: kept by reference
        if message.status != "success":
            fields["status"] = message.status
    return fields


def _read_usage(raw: Mapping[str, Any] | None, metadata: dict[str, Any]) -> Usage | None:
    if raw is None:
        return None
    usage = usage_from_langchain(raw)
    if usage_to_langchain(usage) != raw:
        metadata[USAGE_KEY] = _copy(dict(raw))
    return usage


# --------------------------------------------------------------------- writing


def to_langchain(messages: Iterable[Message]) -> list[BaseMessage]:
    """Convert messages to LangChain messages.

    Args:
        messages: The messages, in transcript order.

    Returns:
        One LangChain message per message: ``system`` and ``developer`` give a
        ``SystemMessage``, ``user`` (a checkpoint too) a ``HumanMessage``,
        ``assistant`` an ``AIMessage`` and ``tool`` a ``ToolMessage``.

    Raises:
        InvalidMessageError: An item is not a `Message`; ``.index`` names which one.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError(
            "to_langchain takes a list of messages; use message_to_langchain for one message"
        )
    return [message_to_langchain(message, index=i) for i, message in enumerate(messages)]


def message_to_langchain(message: Message, *, index: int | None = None) -> BaseMessage:
    """Convert one `Message` to a LangChain message.

    Args:
        message: The message.
        index: Position in the transcript, quoted by errors.

    Raises:
        InvalidMessageError: ``message`` is not a `Message`.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}", index=index)
    meta = message.metadata
    fields = meta.get(MESSAGE_KEY)
    fields = fields if isinstance(fields, Mapping) else {}
    kwargs = _common_fields(message, fields)
    if message.role in ("system", "developer"):
        return SystemMessage(**kwargs)
    if message.role == "user":
        return HumanMessage(**kwargs)
    if message.role == "tool":
        for key in ("artifact", "status"):
            if key in fields:
                kwargs[key] = fields[key]
        return ToolMessage(tool_call_id=message.tool_call_id, **kwargs)
    kwargs["tool_calls"], kwargs["invalid_tool_calls"] = write_tool_calls(
        message.tool_calls, meta.get(INVALID_CALLS_KEY)
    )
    if message.usage is not None:
        kwargs["usage_metadata"] = write_usage(message.usage, meta.get(USAGE_KEY))
    return AIMessage(**kwargs)


def _common_fields(message: Message, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The constructor arguments every LangChain message type takes."""
    visible = [b for b in message.content if not isinstance(b, ToolCall)]
    extra = fields.get("extra") or {}
    written: dict[str, Any] = {k: v for k, v in extra.items() if isinstance(k, str)}
    written["content"] = write_content(visible, message.metadata.get(CONTENT_KEY))
    written["additional_kwargs"] = _copy(
        fields.get("additional_kwargs", _DEVELOPER if message.role == "developer" else {})
    )
    written["response_metadata"] = _write_response_metadata(message, fields)
    if message.name is not None:
        written["name"] = message.name
    if fields.get("id") is not None:
        written["id"] = fields["id"]
    return written


def _write_response_metadata(message: Message, fields: Mapping[str, Any]) -> dict[str, Any]:
    written = dict(_copy(fields.get("response_metadata") or {}))
    reason = message.stop_reason
    if reason is not None and _stop_reason(written) != reason:
        written["stop_reason"] = reason
    others = {k: v for k, v in message.metadata.items() if not k.startswith(_OWN_PREFIX)}
    # A checkpoint's timestamp is in its text already.
    stamp = message.timestamp if not message.is_summary else None
    carried = _Carried(others, stamp, raw_arguments(message.tool_calls)).write()
    if carried:
        written[ENGINE_KEY] = carried
    return written
