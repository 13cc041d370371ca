"""Convert between OpenAI Chat Completions message dicts and `Message`.

`from_openai` reads the dicts an agent sends to (or gets back from) the Chat
Completions API; `to_openai` writes them again. The round trip
``to_openai(from_openai(dicts)) == dicts`` is exact: whatever the message model
has no field for is kept under these metadata keys and put back.

* ``openai.extra``: top-level keys the model has no field for (``refusal``,
  ``annotations``, ``audio``, a ``name: null``, ...), verbatim.
* ``openai.content_form``: ``"string"``, ``"parts"``, ``"null"`` or ``"absent"``,
  set only when the content was written in another form than `to_openai`
  would choose by default.
* ``openai.parts``: one entry per content part when a part carried extra keys,
  was a ``refusal`` part, or was a part without a block (``input_audio``, ``file``).
* ``openai.tool_calls``: one entry per tool call when a call carried extra keys,
  had no ``type`` or was a ``custom`` call.
* ``openai.usage``: the usage dict as written, when it held more than
  `usage_to_openai` renders (``total_tokens`` is rendered, DeepSeek's
  ``prompt_cache_hit_tokens`` is not).

DeepSeek's ``reasoning_content`` on an assistant message becomes a
`ThinkingBlock`, and ``usage`` a `Usage` (see `usage_from_openai`). A user
message whose text is a rendered ``<context-summary>`` checkpoint becomes a
`ContextSummary` again. Malformed dicts raise `InvalidMessageError` naming the
index of the message and what is wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError
from context_engine.formats._openai_parts import (
    copy_json,
    read_part,
    read_tool_calls,
    write_parts,
    write_tool_calls,
)
from context_engine.formats._usage import render_usage
from context_engine.messages import (
    ROLES,
    Block,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
    parse_context_summary,
)

__all__ = [
    "CONTENT_FORM_KEY",
    "EXTRA_KEY",
    "KEY_ORDER_KEY",
    "PARTS_KEY",
    "TOOL_CALLS_KEY",
    "USAGE_KEY",
    "from_openai",
    "message_from_openai",
    "message_to_openai",
    "to_openai",
    "usage_from_openai",
    "usage_to_openai",
]

EXTRA_KEY: Final = "openai.extra"
"""Metadata key: top-level message keys the model has no field for."""
CONTENT_FORM_KEY: Final = "openai.content_form"
"""Metadata key: how ``content`` was written, when not the default form."""
PARTS_KEY: Final = "openai.parts"
"""Metadata key: per-part details of a ``content`` list that blocks cannot hold."""
TOOL_CALLS_KEY: Final = "openai.tool_calls"
"""Metadata key: per-call details of ``tool_calls`` that `ToolCall` cannot hold."""
USAGE_KEY: Final = "openai.usage"
"""Metadata key: the ``usage`` dict as written, when it differs from the rendered one."""
KEY_ORDER_KEY: Final = "openai.key_order"
"""Metadata key: the keys of a message with ``reasoning_content`` in the order read,
when `to_openai` would order them otherwise (so reasoning is written back byte for byte)."""
_WRITE_ORDER: Final = ("role", "content", "name", "tool_call_id", "tool_calls")
_WRITE_ORDER_END: Final = ("reasoning_content", "usage")

_ROLE_KEYS: Final[Mapping[str, frozenset[str]]] = {
    "assistant": frozenset({"name", "tool_calls", "reasoning_content", "usage"}),
    "tool": frozenset({"name", "tool_call_id"}),
}
_OTHER_ROLE_KEYS: Final = frozenset({"name"})
_ABSENT: Final = object()


# --------------------------------------------------------------------- reading


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """Convert Chat Completions message dicts to messages.

    Args:
        messages: The dicts, in transcript order. They are not modified.

    Returns:
        One `Message` per dict (a `ContextSummary` for a rendered checkpoint).

    Raises:
        InvalidMessageError: A dict is malformed; ``.index`` names which one.
    """
    if isinstance(messages, (Mapping, str, bytes)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            "from_openai takes a list of message dicts, got "
            f"{type(messages).__name__}; use message_from_openai for one dict"
        )
    return [message_from_openai(item, index=i) for i, item in enumerate(messages)]


def message_from_openai(data: Mapping[str, Any], *, index: int | None = None) -> Message:
    """Convert one Chat Completions message dict to a `Message`.

    Args:
        data: The message dict. It is not modified.
        index: Position in the transcript, quoted by errors.

    Raises:
        InvalidMessageError: The dict is malformed.
    """
    try:
        return _read_message(data)
    except InvalidMessageError as exc:
        if index is None or exc.index is not None:
            raise
        raise InvalidMessageError(str(exc), index=index) from None


def _read_message(data: object) -> Message:
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"expected a message dict, got {type(data).__name__}")
    role = _read_role(data)
    fields, extra = _split_keys(data, role)
    metadata: dict[str, Any] = {EXTRA_KEY: extra} if extra else {}
    order = _key_order(data) if "reasoning_content" in data else None
    if order is not None:
        metadata[KEY_ORDER_KEY] = order
    visible, form, layout = _read_content(data, role)
    if layout is not None:
        metadata[PARTS_KEY] = layout
    calls: list[ToolCall] = []
    if "tool_calls" in fields:
        calls, overlays = read_tool_calls(fields["tool_calls"])
        if overlays is not None:
            metadata[TOOL_CALLS_KEY] = overlays
    if form != _default_form(role, visible, bool(calls)):
        metadata[CONTENT_FORM_KEY] = form
    blocks: list[Block] = [*_read_reasoning(fields.get("reasoning_content")), *visible, *calls]
    name, tool_call_id = _read_ids(fields, role)
    usage = _read_usage(fields["usage"], metadata) if "usage" in fields else None
    if role == "user" and len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        summary = parse_context_summary(blocks[0].text, metadata=metadata)
        if summary is not None and summary.text == blocks[0].text:
            return attrs.evolve(summary, name=name)
    return Message(
        role, tuple(blocks), tool_call_id=tool_call_id, name=name, usage=usage, metadata=metadata
    )


def _key_order(data: Mapping[str, Any]) -> list[str] | None:
    """The keys in the order read, when they are not in the order they are written."""
    keys = list(data)
    written = [k for k in (*_WRITE_ORDER, *_WRITE_ORDER_END) if k in data]
    written += [k for k in keys if k not in written]
    return keys if keys != written else None


def _read_role(data: Mapping[str, Any]) -> Role:
    if "role" not in data:
        raise InvalidMessageError("message dict has no 'role'")
    role = data["role"]
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidMessageError(
            f"unknown role {role!r}; expected one of {', '.join(sorted(ROLES))}"
        )
    return role  # type: ignore[return-value]  # checked against ROLES


def _split_keys(data: Mapping[str, Any], role: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Fields the model holds, and the rest verbatim (empty values of known keys included)."""
    known = _ROLE_KEYS.get(role, _OTHER_ROLE_KEYS)
    extra = {
        key: copy_json(value)
        for key, value in data.items()
        if key not in ("role", "content")
        and (key not in known or value is None or (key == "tool_calls" and value == []))
    }
    if role != "assistant" and extra.get("tool_calls"):
        raise InvalidMessageError(
            f"a {role} message carries tool_calls; only assistant messages may call tools"
        )
    fields = {key: value for key, value in data.items() if key in known and key not in extra}
    return fields, extra


def _read_ids(fields: Mapping[str, Any], role: str) -> tuple[str | None, str | None]:
    name = fields.get("name")
    if name is not None and not isinstance(name, str):
        raise InvalidMessageError(f"name must be a str, got {type(name).__name__}")
    tool_call_id = fields.get("tool_call_id")
    if role == "tool" and tool_call_id is None:
        raise InvalidMessageError("tool message without tool_call_id")
    if role == "tool" and not (isinstance(tool_call_id, str) and tool_call_id):
        raise InvalidMessageError(f"tool_call_id must be a non-empty str, got {tool_call_id!r}")
    return name, tool_call_id


def _read_reasoning(value: object) -> list[Block]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise InvalidMessageError(f"reasoning_content must be a str, got {type(value).__name__}")
    return [ThinkingBlock(value)]


def _read_content(data: Mapping[str, Any], role: str) -> tuple[list[Block], str, list[Any] | None]:
    if "content" not in data:
        return [], "absent", None
    content = data["content"]
    if content is None:
        return [], "null", None
    if isinstance(content, str):
        return ([TextBlock(content)] if content else []), "string", None
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(
            f"content must be a str, a list of parts or null, got {type(content).__name__}"
        )
    blocks: list[Block] = []
    layout: list[Any] = []
    for number, part in enumerate(content):
        block, entry = read_part(part, number, role)
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    return blocks, "parts", layout if any(layout) else None


def _read_usage(raw: Any, metadata: dict[str, Any]) -> Usage:
    usage = usage_from_openai(raw)
    if usage_to_openai(usage) != raw:
        metadata[USAGE_KEY] = copy_json(dict(raw))
    return usage


def _count(value: object, where: str, *, default: int | None = 0) -> int:
    if value is None and default is not None:
        return default
    if not is_int(value) or value < 0:
        raise InvalidMessageError(f"{where} must be a non-negative int, got {value!r}")
    return value


def usage_from_openai(usage: Mapping[str, Any]) -> Usage:
    """Normalise a Chat Completions ``usage`` dict.

    ``prompt_tokens`` already includes cached tokens, so it becomes
    ``input_tokens`` as is; ``prompt_tokens_details.cached_tokens`` (or DeepSeek's
    ``prompt_cache_hit_tokens``) becomes ``cache_read_tokens``, and
    ``prompt_tokens_details.cache_write_tokens`` ``cache_write_tokens``.

    Raises:
        InvalidMessageError: A count is missing, negative or not an int.
    """
    if not isinstance(usage, Mapping):
        raise InvalidMessageError(f"usage must be a dict, got {type(usage).__name__}")
    details = usage.get("prompt_tokens_details") or {}
    if not isinstance(details, Mapping):
        raise InvalidMessageError("usage.prompt_tokens_details must be a dict")
    cached = details.get("cached_tokens")
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")
    return Usage(
        input_tokens=_count(usage.get("prompt_tokens"), "usage.prompt_tokens", default=None),
        output_tokens=_count(usage.get("completion_tokens"), "usage.completion_tokens"),
        cache_read_tokens=_count(cached, "usage.prompt_tokens_details.cached_tokens"),
        cache_write_tokens=_count(
            details.get("cache_write_tokens"), "usage.prompt_tokens_details.cache_write_tokens"
        ),
    )


def usage_to_openai(usage: Usage) -> dict[str, Any]:
    """Render `Usage` as a Chat Completions ``usage`` dict (details only when non-zero)."""
    return render_usage(
        usage,
        input_key="prompt_tokens",
        output_key="completion_tokens",
        details_key="prompt_tokens_details",
        read_key="cached_tokens",
        write_key="cache_write_tokens",
    )


def _default_form(role: str, visible: Sequence[Block], has_calls: bool) -> str:
    if not visible:
        return "null" if role == "assistant" and has_calls else "string"
    if len(visible) == 1 and isinstance(visible[0], TextBlock):
        return "string"
    return "parts"


# --------------------------------------------------------------------- writing


def to_openai(
    messages: Iterable[Message], *, include_reasoning: bool = True, include_usage: bool = True
) -> list[dict[str, Any]]:
    """Convert messages to Chat Completions message dicts.

    Args:
        messages: The messages, in transcript order.
        include_reasoning: Write thinking blocks of assistant messages as
            ``reasoning_content``. Turn off for APIs that reject the key.
        include_usage: Write provider usage of assistant messages as ``usage``.
            Turn off when the dicts go to an API rather than to storage.

    Raises:
        InvalidMessageError: An item is not a `Message`, or a block cannot be
            written; ``.index`` names which one.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError(
            "to_openai takes a list of messages; use message_to_openai for one message"
        )
    return [
        message_to_openai(
            message, index=i, include_reasoning=include_reasoning, include_usage=include_usage
        )
        for i, message in enumerate(messages)
    ]


def message_to_openai(
    message: Message,
    *,
    index: int | None = None,
    include_reasoning: bool = True,
    include_usage: bool = True,
) -> dict[str, Any]:
    """Convert one `Message` to a Chat Completions message dict.

    Args:
        message: The message.
        index: Position in the transcript, quoted by errors.
        include_reasoning: See `to_openai`.
        include_usage: See `to_openai`.

    Raises:
        InvalidMessageError: ``message`` is not a `Message` or cannot be written.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}", index=index)
    try:
        return _write_message(message, include_reasoning, include_usage)
    except InvalidMessageError as exc:
        if index is None or exc.index is not None:
            raise
        raise InvalidMessageError(str(exc), index=index) from None


def _write_message(message: Message, reasoning: bool, with_usage: bool) -> dict[str, Any]:
    meta = message.metadata
    out: dict[str, Any] = {"role": message.role}
    visible = [b for b in message.content if isinstance(b, (TextBlock, ImageBlock))]
    calls = message.tool_calls
    content = _write_content(message.role, visible, bool(calls), meta)
    if content is not _ABSENT:
        out["content"] = content
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if calls:
        out["tool_calls"] = write_tool_calls(calls, meta.get(TOOL_CALLS_KEY))
    if message.role == "assistant":
        thinking = [
            b.thinking for b in message.content if isinstance(b, ThinkingBlock) and not b.redacted
        ]
        if thinking and reasoning:
            out["reasoning_content"] = "\n".join(thinking)
        if message.usage is not None and with_usage:
            out["usage"] = _write_usage(message.usage, meta.get(USAGE_KEY))
    extra = meta.get(EXTRA_KEY)
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            if key not in out and key != "role":
                out[key] = copy_json(value)
    order = meta.get(KEY_ORDER_KEY)
    if isinstance(order, list) and len(order) == len(out) and set(order) == set(out):
        out = {key: out[key] for key in order}
    return out


def _write_usage(usage: Usage, raw: object) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        try:
            if usage_from_openai(raw) == usage:
                return dict(copy_json(raw))
        except InvalidMessageError:
            pass
    return usage_to_openai(usage)


def _form_fits(form: object, visible: Sequence[Block]) -> bool:
    if form == "parts":
        return True
    if form == "string":
        return len(visible) <= 1 and all(isinstance(b, TextBlock) for b in visible)
    return form in ("null", "absent") and not visible


def _write_content(
    role: str, visible: Sequence[Block], has_calls: bool, meta: Mapping[str, Any]
) -> Any:
    form = meta.get(CONTENT_FORM_KEY)
    if not _form_fits(form, visible):
        form = _default_form(role, visible, has_calls)
    if form == "absent":
        return _ABSENT
    if form == "null":
        return None
    if form == "string":
        return visible[0].text if visible else ""  # type: ignore[union-attr]  # checked by fits
    return write_parts(visible, meta.get(PARTS_KEY))
