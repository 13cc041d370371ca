"""Convert between Strands Agents messages and `Message`.

Strands keeps a conversation as ``agent.messages``: dicts with a ``role``
(``user`` or ``assistant``) and a list of content blocks (``text``, ``image``,
``toolUse``, ``toolResult``, ``reasoningContent``, ...), plus a
``tracking_id`` and a ``metadata`` dict that Strands strips before each model
call. `from_strands` reads them, `to_strands` writes them again; the round trip
``to_strands(from_strands(messages)) == messages`` is exact. What the message
model has no field for is kept under these metadata keys and put back.

* ``strands.tracking_id``: the message's ``tracking_id``.
* ``strands.metadata``: the message's ``metadata`` dict (``metrics``,
  ``custom``), without the ``usage`` of an assistant message, which becomes
  `Message.usage` (see `usage_from_strands`).
* ``strands.usage``: the ``usage`` dict as written, when it differs from the
  one `usage_to_strands` renders (Anthropic-style counts that leave the cache
  out), or when it reports no input tokens: Strands stores zeros for a
  provider that reported no usage, and a zero prompt is no measurement, so
  `Message.usage` stays None.
* ``strands.extra``: other top-level keys of a message dict, verbatim.
* ``strands.blocks``: one entry per content block when a block carried more than
  its `Block` renders (a ``reasoningSignature``, a ``json`` tool result item) or
  has no `Block` at all (``cachePoint``, ``document``, ``video``, ...), kept whole.
* ``strands.before`` / ``strands.after``: blocks without a `Block` that sat
  between tool results, written before or after this message's own blocks.
* ``strands.status`` / ``strands.tool_result``: a tool result's ``status`` when
  it is not ``success``, and its other keys.
* ``strands.joins``: True on a message that continued the dict of the one
  before it (user text next to tool results).
* ``strands.new_message``: True on a tool message that began a new dict
  although the one before was a tool message too.
* ``strands.system_form``: ``"blocks"`` on a system message read from a list of
  system content blocks.

The other metadata of a message (context-engine's own markers of a cleared
result or a trimmed text, the caller's keys) travels in the dict's
``metadata["custom"]["context_engine"]``, one entry per message written into
the dict: Strands persists it with the session and never sends it to a model.

A user message holds tool results as ``toolResult`` blocks: each becomes a
``tool`` `Message` and the other blocks user messages between them.
`to_strands` puts consecutive tool messages in one dict (providers want every
result of a turn in the message after it) and joins the messages marked as
continuing one; any other message gets a dict of its own, so a checkpoint or a
marker the engine inserts never merges into a neighbour. A user message whose
only block is a rendered ``<context-summary>`` is a `ContextSummary`.
Image bytes become base64 ``ImageBlock.data``; tool inputs become the JSON text
of ``ToolCall.arguments``. The system prompt lives on the agent, not in its
messages: pass it to `from_strands` as ``system_prompt=`` and get it back with
`to_strands_system_prompt`; `to_strands` leaves leading system messages out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from context_engine.errors import InvalidMessageError
from context_engine.formats._openai_parts import copy_json
from context_engine.formats._strands_blocks import (
    AFTER_KEY,
    BEFORE_KEY,
    BLOCKS_KEY,
    CUSTOM_KEY,
    EXTRA_KEY,
    JOINS_KEY,
    METADATA_KEY,
    NEW_MESSAGE_KEY,
    STATUS_KEY,
    SYSTEM_FORM_KEY,
    TOOL_RESULT_KEY,
    TRACKING_ID_KEY,
    USAGE_KEY,
    layout_meta,
    read_run,
    read_user_pieces,
    usage_from_strands,
    usage_to_strands,
    write_blocks,
    write_piece,
    write_usage,
)
from context_engine.messages import (
    Message,
    TextBlock,
    Usage,
    parse_context_summary,
)

try:
    import strands  # noqa: F401  (the guard: fail here with the install line)
    from strands.types.content import Message as StrandsMessage
    from strands.types.content import SystemContentBlock
except ImportError as exc:
    raise ImportError(
        "context_engine.formats.strands needs Strands Agents; "
        "install it with: pip install 'context-engine[strands]'"
    ) from exc

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
    "from_strands",
    "message_from_strands",
    "system_from_strands",
    "to_strands",
    "to_strands_system_prompt",
    "usage_from_strands",
    "usage_to_strands",
]

_HEAD_KEYS: Final = ("role", "content", "tracking_id", "metadata")
_ABSENT: Final = object()


# --------------------------------------------------------------------- reading


def from_strands(
    messages: Iterable[Mapping[str, Any]],
    system_prompt: str | Sequence[Mapping[str, Any]] | None = None,
) -> list[Message]:
    """Convert Strands message dicts (``agent.messages``) to messages.

    Args:
        messages: The dicts, in conversation order. They are not modified.
        system_prompt: The agent's system prompt (a str or a list of system
            content blocks); when given it becomes the leading system message.

    Returns:
        The messages: one per assistant dict; for a user dict, one ``tool``
        message per ``toolResult`` block and a user message per run of other
        blocks (a `ContextSummary` for a rendered checkpoint).

    Raises:
        InvalidMessageError: A dict is malformed; ``.index`` names which one.
    """
    if isinstance(messages, (Mapping, str, bytes)) or not isinstance(messages, Iterable):
        raise InvalidMessageError(
            f"from_strands takes a list of message dicts, got {type(messages).__name__}"
        )
    out = [] if system_prompt is None else [system_from_strands(system_prompt)]
    for index, item in enumerate(messages):
        out.extend(message_from_strands(item, previous=out[-1] if out else None, index=index))
    return out


def message_from_strands(
    data: Mapping[str, Any], *, previous: Message | None = None, index: int | None = None
) -> list[Message]:
    """Convert one Strands message dict to messages (see `from_strands`).

    Args:
        data: The message dict. It is not modified.
        previous: The last message converted from the dict before it, if any:
            it decides whether the first message is marked as a new dict.
        index: Position in the conversation, quoted by errors.

    Raises:
        InvalidMessageError: The dict is malformed.
    """
    try:
        pieces = _read_message(data)
    except InvalidMessageError as exc:
        if index is None or exc.index is not None:
            raise
        raise InvalidMessageError(str(exc), index=index) from None
    for number in range(1, len(pieces)):
        if not _tool_after_tool(pieces[number - 1], pieces[number]):
            pieces[number] = _flagged(pieces[number], JOINS_KEY)
    if previous is not None and _tool_after_tool(previous, pieces[0]):
        pieces[0] = _flagged(pieces[0], NEW_MESSAGE_KEY)
    return pieces


def _tool_after_tool(previous: Message, message: Message) -> bool:
    return previous.role == "tool" and message.role == "tool"


def _flagged(message: Message, key: str) -> Message:
    return attrs.evolve(message, metadata={**message.metadata, key: True})


def system_from_strands(system_prompt: str | Sequence[Mapping[str, Any]]) -> Message:
    """The system message for an agent's system prompt (a str or system content blocks).

    Raises:
        InvalidMessageError: The prompt is neither, or a block is malformed.
    """
    system: object = system_prompt
    if isinstance(system, str):
        return Message("system", system)
    if not isinstance(system, (list, tuple)):
        raise InvalidMessageError(
            f"system_prompt must be a str or a list of content blocks, got {type(system).__name__}"
        )
    blocks, layout = read_run(system, "system prompt block")
    return Message("system", blocks, metadata={**layout_meta(layout), SYSTEM_FORM_KEY: "blocks"})


def _read_message(item: object) -> list[Message]:
    if not isinstance(item, Mapping):
        raise InvalidMessageError(f"expected a message dict, got {type(item).__name__}")
    role = item.get("role")
    if role not in ("user", "assistant"):
        raise InvalidMessageError(f"role must be 'user' or 'assistant', got {role!r}")
    content = item.get("content")
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(f"content must be a list of blocks, got {type(content).__name__}")
    head, usage, carried = _read_head(item, role)
    if role == "assistant":
        blocks, layout = read_run(content, "content block")
        pieces = [
            Message("assistant", blocks, usage=usage, metadata={**head, **layout_meta(layout)})
        ]
        return _with_carried(pieces, carried)
    if len(content) == 1 and isinstance(content[0], Mapping) and set(content[0]) == {"text"}:
        summary = parse_context_summary(str(content[0]["text"]), metadata=head)
        if summary is not None and summary.text == content[0]["text"]:
            return _with_carried([summary], carried)
    pieces = read_user_pieces(content)
    pieces[0] = attrs.evolve(pieces[0], metadata={**head, **pieces[0].metadata})
    return _with_carried(pieces, carried)


def _with_carried(pieces: list[Message], carried: object) -> list[Message]:
    """Give each message the metadata `to_strands` carried for it in ``custom``."""
    if not isinstance(carried, list) or len(carried) != len(pieces):
        return pieces
    return [
        attrs.evolve(piece, metadata={**entry, **piece.metadata})
        if isinstance(entry, Mapping) and entry
        else piece
        for piece, entry in zip(pieces, carried, strict=True)
    ]


def _read_head(item: Mapping[str, Any], role: str) -> tuple[dict[str, Any], Usage | None, Any]:
    """Metadata for the first message of a dict, its usage, and the carried metadata."""
    head: dict[str, Any] = {}
    if "tracking_id" in item:
        head[TRACKING_ID_KEY] = item["tracking_id"]
    usage = carried = None
    if "metadata" in item:
        meta = item["metadata"]
        if not isinstance(meta, Mapping):
            raise InvalidMessageError(f"metadata must be a dict, got {type(meta).__name__}")
        rest = {k: copy_json(v) for k, v in meta.items() if role != "assistant" or k != "usage"}
        custom = rest.get("custom")
        if isinstance(custom, dict) and CUSTOM_KEY in custom:
            carried = custom.pop(CUSTOM_KEY)
            if not custom:
                del rest["custom"]
        if rest or carried is None:
            head[METADATA_KEY] = rest
        if role == "assistant" and "usage" in meta:
            usage = usage_from_strands(meta["usage"])
            if usage.input_tokens == 0:  # the provider reported none; Strands stored zeros
                usage = None
            if usage is None or usage_to_strands(usage) != meta["usage"]:
                head[USAGE_KEY] = copy_json(dict(meta["usage"]))
    extra = {k: copy_json(v) for k, v in item.items() if k not in _HEAD_KEYS}
    if extra:
        head[EXTRA_KEY] = extra
    return head, usage, carried


# --------------------------------------------------------------------- writing


def to_strands(messages: Iterable[Message]) -> list[StrandsMessage]:
    """Convert messages to Strands message dicts, ready for ``agent.messages``.

    Leading system and developer messages are left out: Strands keeps the
    system prompt on the agent (see `to_strands_system_prompt`). Tool messages
    become ``toolResult`` blocks of a user message; consecutive tool messages
    share one dict, as do messages read from one dict; every other message, a
    `ContextSummary` among them, gets a dict of its own.

    Raises:
        InvalidMessageError: An item is not a `Message`, a system message comes
            after the conversation started, or a block cannot be written;
            ``.index`` names which one.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError("to_strands takes a list of messages, not one message")
    items = list(messages)
    for index, item in enumerate(items):
        if not isinstance(item, Message):
            raise InvalidMessageError(f"expected a Message, got {type(item).__name__}", index=index)
    lead = _lead(items)
    groups: list[list[tuple[int, Message]]] = []
    for index in range(lead, len(items)):
        message = items[index]
        if message.role in ("system", "developer"):
            raise InvalidMessageError(
                f"a {message.role} message after the conversation started; Strands keeps "
                "system text in the agent's system_prompt: move it to the front or make it "
                "a user message",
                index=index,
            )
        if groups and _joins(groups[-1][-1][1], message):
            groups[-1].append((index, message))
        else:
            groups.append([(index, message)])
    return [_write_group(group) for group in groups]


def _lead(items: Sequence[Message]) -> int:
    lead = 0
    while lead < len(items) and items[lead].role in ("system", "developer"):
        lead += 1
    return lead


def _joins(previous: Message, message: Message) -> bool:
    """Whether ``message`` goes into the same dict as ``previous``."""
    if previous.is_summary or message.is_summary or message.metadata.get(NEW_MESSAGE_KEY):
        return False
    if (previous.role == "assistant") != (message.role == "assistant"):
        return False
    return bool(message.metadata.get(JOINS_KEY)) or _tool_after_tool(previous, message)


def _write_group(group: Sequence[tuple[int, Message]]) -> StrandsMessage:
    content: list[dict[str, Any]] = []
    for index, message in group:
        try:
            content.extend(write_piece(message))
        except InvalidMessageError as exc:
            raise InvalidMessageError(str(exc), index=index) from None
    messages = [message for _, message in group]
    out: dict[str, Any] = {"role": "assistant" if messages[0].role == "assistant" else "user"}
    out["content"] = content
    tracking_id = _first(messages, TRACKING_ID_KEY)
    if tracking_id is not _ABSENT:
        out["tracking_id"] = copy_json(tracking_id)
    stored = _first(messages, METADATA_KEY)
    with_usage = [m for m in messages if m.usage is not None and m.role == "assistant"]
    carried = [
        {k: v for k, v in m.metadata.items() if not k.startswith("strands.")} for m in messages
    ]
    unreported = _first(messages, USAGE_KEY) if messages[0].role == "assistant" else _ABSENT
    if stored is not _ABSENT or with_usage or unreported is not _ABSENT or any(carried):
        meta = dict(copy_json(stored)) if isinstance(stored, Mapping) else {}
        if with_usage:
            last = with_usage[-1]
            assert last.usage is not None
            meta["usage"] = write_usage(last.usage, last.metadata.get(USAGE_KEY))
        elif unreported is not _ABSENT:
            meta["usage"] = copy_json(unreported)
        if any(carried):
            custom = meta.get("custom")
            meta["custom"] = {**(custom if isinstance(custom, Mapping) else {})}
            meta["custom"][CUSTOM_KEY] = [copy_json(c) or None for c in carried]
        out["metadata"] = meta
    extra = _first(messages, EXTRA_KEY)
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            out.setdefault(key, copy_json(value))
    return cast(StrandsMessage, out)


def _first(messages: Sequence[Message], key: str) -> Any:
    return next((m.metadata[key] for m in messages if key in m.metadata), _ABSENT)


def to_strands_system_prompt(
    messages: Iterable[Message],
) -> str | list[SystemContentBlock] | None:
    """The agent's system prompt from the leading system and developer messages.

    Returns:
        None without leading system messages; a str for one message read from a
        str; otherwise a list of system content blocks.

    Raises:
        InvalidMessageError: A system message holds a block other than text.
    """
    items = list(messages)
    lead = items[: _lead(items)]
    if not lead:
        return None
    for message in lead:
        if any(not isinstance(block, TextBlock) for block in message.content):
            raise InvalidMessageError(f"a {message.role} message holds a non-text block")
    first = lead[0]
    if (
        len(lead) == 1
        and first.metadata.get(SYSTEM_FORM_KEY) != "blocks"
        and len(first.content) <= 1
    ):
        return first.text
    blocks: list[dict[str, Any]] = []
    for message in lead:
        blocks.extend(write_blocks(message.content, message.metadata.get(BLOCKS_KEY)))
    return cast("list[SystemContentBlock]", blocks)
