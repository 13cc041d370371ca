"""Convert between Anthropic Messages API bodies and `Message`.

`from_anthropic` reads a request body (``{"system": ..., "messages": [...]}``)
or a list of message dicts; `to_anthropic` writes the body again. The round
trip ``to_anthropic(from_anthropic(body)) == body`` is exact for the
``system`` and ``messages`` of a body: whatever the message model has no field
for is kept under these metadata keys and put back.

* ``anthropic.extra``: top-level keys of a message dict the model has no field
  for (``id``, ``model``, ``type``, ``stop_sequence``, ...), verbatim.
* ``anthropic.content_form``: ``"string"``, ``"blocks"`` or (tool results only)
  ``"absent"``, set only when ``content`` was written in another form than
  `to_anthropic` would choose by default.
* ``anthropic.blocks``: one entry per content block when a block carried extra
  keys (``cache_control``, ``citations``), a ``tool_use`` input that its JSON
  text does not reproduce, or was a block without a `Block` (``document``,
  ``server_tool_use``, an image from the Files API), kept whole.
* ``anthropic.tool_result``: extra keys of a ``tool_result`` block.
* ``anthropic.is_error``: the ``is_error`` flag of a ``tool_result`` block, when given.
* ``anthropic.usage``: the ``usage`` dict as written, when it held more than
  `usage_to_anthropic` renders.
* ``anthropic.new_message``: True on a message that began a new message dict
  although the one before had the same role (so it is not merged into it).

The Messages API keeps tool results inside user messages: each ``tool_result``
block becomes a ``tool`` `Message`, and `to_anthropic` puts consecutive tool
results and user text back into one user message. A user text block that is a
rendered ``<context-summary>`` becomes a `ContextSummary`. Malformed dicts
raise `InvalidMessageError` naming the index of the message and the problem.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from context_engine.errors import InvalidMessageError
from context_engine.formats._anthropic_blocks import (
    BLOCKS_KEY,
    CONTENT_FORM_KEY,
    EXTRA_KEY,
    IS_ERROR_KEY,
    NEW_MESSAGE_KEY,
    TOOL_RESULT_KEY,
    USAGE_KEY,
    Form,
    default_form,
    read_block,
)
from context_engine.formats._anthropic_write import (
    usage_from_anthropic,
    usage_to_anthropic,
    write_body,
)
from context_engine.formats._openai_parts import copy_json
from context_engine.messages import (
    Block,
    Message,
    TextBlock,
    parse_context_summary,
)

_TOOL_RESULT_FIELDS: Final = ("type", "tool_use_id", "content", "is_error")

__all__ = [
    "BLOCKS_KEY",
    "CONTENT_FORM_KEY",
    "EXTRA_KEY",
    "IS_ERROR_KEY",
    "NEW_MESSAGE_KEY",
    "TOOL_RESULT_KEY",
    "USAGE_KEY",
    "from_anthropic",
    "message_from_anthropic",
    "to_anthropic",
    "usage_from_anthropic",
    "usage_to_anthropic",
]

# --------------------------------------------------------------------- reading


def from_anthropic(
    body_or_messages: Mapping[str, Any] | Iterable[Mapping[str, Any]],
    system: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[Message]:
    """Convert a Messages API request body, or its message dicts, to messages.

    Args:
        body_or_messages: A body with ``messages`` (and optionally ``system``;
            other request keys such as ``model`` or ``tools`` are ignored), or
            the list of message dicts. Nothing is modified.
        system: The ``system`` parameter, when passing message dicts: a str or a
            list of text blocks. It becomes the leading system message.

    Returns:
        The messages: a system message first when there is system text, then
        one message per message dict, except that a user message dict yields a
        ``tool`` message per ``tool_result`` block and a `ContextSummary` per
        rendered checkpoint, with its other blocks as user messages between them.

    Raises:
        InvalidMessageError: The input is malformed; ``.index`` names the message dict.
    """
    messages: object = body_or_messages
    if isinstance(body_or_messages, Mapping):
        if "messages" not in body_or_messages:
            raise InvalidMessageError("a Messages API body needs a 'messages' list")
        if system is not None and body_or_messages.get("system") is not None:
            raise InvalidMessageError("system= was given and the body has 'system' too; pass one")
        messages = body_or_messages["messages"]
        if system is None:
            system = body_or_messages.get("system")
    if not isinstance(messages, Iterable) or isinstance(messages, (str, bytes, Mapping)):
        raise InvalidMessageError(
            f"messages must be a list of message dicts, got {type(messages).__name__}"
        )
    out = [_read_system(system)] if system is not None else []
    previous: object = None
    for index, item in enumerate(messages):
        pieces = message_from_anthropic(item, index=index)
        role = item["role"]
        if role == previous:
            first = pieces[0]
            pieces[0] = attrs.evolve(first, metadata={**first.metadata, NEW_MESSAGE_KEY: True})
        previous = role
        out.extend(pieces)
    return out


def message_from_anthropic(data: Mapping[str, Any], *, index: int | None = None) -> list[Message]:
    """Convert one Messages API message dict to messages.

    An assistant dict gives one message; a user dict gives one message per run
    of ordinary blocks, one ``tool`` message per ``tool_result`` block and one
    `ContextSummary` per rendered checkpoint, in block order.

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


def _read_system(system: object) -> Message:
    if isinstance(system, str):
        return Message("system", system)
    if not isinstance(system, (list, tuple)):
        raise InvalidMessageError(
            f"system must be a str or a list of text blocks, got {type(system).__name__}"
        )
    blocks, layout = _read_blocks(system, "system")
    metadata: dict[str, Any] = {BLOCKS_KEY: layout} if any(layout) else {}
    if default_form(list(system)) != "blocks":
        metadata[CONTENT_FORM_KEY] = "blocks"
    return Message("system", tuple(blocks), metadata=metadata)


def _read_blocks(raw: Sequence[Any], place: str, what: str = "") -> tuple[list[Block], list[Any]]:
    blocks: list[Block] = []
    layout: list[Any] = []
    for number, item in enumerate(raw):
        block, entry = read_block(item, f"{what or place + ' '}block {number}", place)
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    return blocks, layout


def _read_message(data: object) -> list[Message]:
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"expected a message dict, got {type(data).__name__}")
    role = data.get("role")
    if role not in ("user", "assistant"):
        hint = "; pass system text as system=" if role == "system" else ""
        raise InvalidMessageError(f"role must be 'user' or 'assistant', got {role!r}{hint}")
    if "content" not in data:
        raise InvalidMessageError("message dict has no 'content'")
    content = data["content"]
    if isinstance(content, str):
        raw: list[Any] = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, (list, tuple)):
        raw = list(content)
    else:
        raise InvalidMessageError(
            f"content must be a str or a list of blocks, got {type(content).__name__}"
        )
    head: dict[str, Any] = {}
    if isinstance(content, (list, tuple)) and default_form(raw) == "string":
        head[CONTENT_FORM_KEY] = "blocks"
    if role == "assistant":
        return [_read_assistant(data, raw, head)]
    extra = _extra_keys(data, ())
    if extra:
        head[EXTRA_KEY] = extra
    pieces = _read_user_pieces(raw)
    pieces[0] = attrs.evolve(pieces[0], metadata={**head, **pieces[0].metadata})
    return pieces


def _extra_keys(data: Mapping[str, Any], known: Sequence[str]) -> dict[str, Any]:
    return {
        key: copy_json(value)
        for key, value in data.items()
        if key not in ("role", "content") and (key not in known or value is None)
    }


def _read_assistant(data: Mapping[str, Any], raw: list[Any], head: dict[str, Any]) -> Message:
    blocks, layout = _read_blocks(raw, "assistant", "content ")
    metadata = dict(head)
    if any(layout):
        metadata[BLOCKS_KEY] = layout
    stop_reason = data.get("stop_reason")
    known = ("usage", "stop_reason") if isinstance(stop_reason, str) else ("usage",)
    extra = _extra_keys(data, known)
    if extra:
        metadata[EXTRA_KEY] = extra
    usage = None
    if data.get("usage") is not None:
        usage = usage_from_anthropic(data["usage"])
        if usage_to_anthropic(usage) != data["usage"]:
            metadata[USAGE_KEY] = copy_json(dict(data["usage"]))
    return Message(
        "assistant",
        tuple(blocks),
        usage=usage,
        stop_reason=stop_reason if "stop_reason" in known else None,
        metadata=metadata,
    )


def _read_user_pieces(raw: list[Any]) -> list[Message]:
    pieces: list[Message] = []
    blocks: list[Block] = []
    layout: list[Any] = []

    def flush() -> None:
        if layout:
            meta = {BLOCKS_KEY: list(layout)} if any(layout) else {}
            pieces.append(Message("user", tuple(blocks), metadata=meta))
        blocks.clear()
        layout.clear()

    for number, item in enumerate(raw):
        if isinstance(item, Mapping) and item.get("type") == "tool_result":
            flush()
            pieces.append(_read_tool_result(item, f"content block {number} (tool_result)"))
            continue
        block, entry = read_block(item, f"content block {number}", "user")
        summary = _as_summary(block, entry)
        if summary is not None:
            flush()
            pieces.append(summary)
            continue
        if block is not None:
            blocks.append(block)
        layout.append(entry)
    flush()
    return pieces or [Message("user", ())]


def _as_summary(block: Block | None, entry: dict[str, Any] | None) -> Message | None:
    if not isinstance(block, TextBlock):
        return None
    metadata = {BLOCKS_KEY: [entry]} if entry else {}
    summary = parse_context_summary(block.text, metadata=metadata)
    if summary is None or summary.text != block.text:
        return None
    return summary


def _read_tool_result(item: Mapping[str, Any], what: str) -> Message:
    call_id = item.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{what} needs a non-empty str 'tool_use_id'")
    metadata: dict[str, Any] = {}
    extra = {k: copy_json(v) for k, v in item.items() if k not in _TOOL_RESULT_FIELDS}
    if extra:
        metadata[TOOL_RESULT_KEY] = extra
    if "is_error" in item:
        metadata[IS_ERROR_KEY] = copy_json(item["is_error"])
    content = item.get("content")
    form: Form = "string"
    blocks: list[Block] = []
    if "content" not in item:
        form = "absent"
    elif isinstance(content, str):
        blocks = [TextBlock(content)] if content else []
    elif isinstance(content, (list, tuple)):
        form = "blocks"
        blocks, layout = _read_blocks(content, "tool_result", f"{what} content ")
        if any(layout):
            metadata[BLOCKS_KEY] = layout
        if default_form(list(content)) != "blocks":
            metadata[CONTENT_FORM_KEY] = "blocks"
    else:
        raise InvalidMessageError(
            f"{what}: content must be a str or a list of blocks, got {type(content).__name__}"
        )
    if form == "absent":
        metadata[CONTENT_FORM_KEY] = "absent"
    return Message("tool", tuple(blocks), tool_call_id=call_id, metadata=metadata)


# --------------------------------------------------------------------- writing


def to_anthropic(messages: Iterable[Message], *, request: bool = False) -> dict[str, Any]:
    """Convert messages to a Messages API body: ``{"system": ..., "messages": [...]}``.

    Leading system and developer messages become ``system`` (left out when
    there are none). Tool messages become ``tool_result`` blocks of a user
    message; consecutive messages of the same side (user and tool, or
    assistant) are merged into one message dict, as the API requires.

    Args:
        messages: The messages, in transcript order.
        request: Write only what a request accepts: no ``usage``, ``stop_reason``
            or other response keys on message dicts, and no thinking block
            without a signature (the API rejects those).

    Raises:
        InvalidMessageError: An item is not a `Message`, a system message comes
            after the conversation started, a tool call's arguments are not a
            JSON object, or a block cannot be written; ``.index`` names which one.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError("to_anthropic takes a list of messages, not one message")
    items = list(messages)
    for index, item in enumerate(items):
        if not isinstance(item, Message):
            raise InvalidMessageError(f"expected a Message, got {type(item).__name__}", index=index)
    return write_body(items, request)
