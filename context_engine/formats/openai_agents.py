"""Convert between the OpenAI Agents SDK's Responses input items and `Message`.

The Agents SDK (``openai-agents``) holds a run's history as Responses API input
items (``TResponseInputItem``): what ``RunResult.to_input_list()`` returns, what
a ``Session`` stores and what ``RunConfig.call_model_input_filter`` receives.
Where Chat Completions nests tool calls inside an assistant message, Responses
lists every model output as an item of its own. The mapping:

* A message item with role ``user``, ``system`` or ``developer`` (the easy
  ``{"role", "content"}`` form or a ``"type": "message"`` item) is one message
  of that role: ``input_text`` parts are `TextBlock` s, ``input_image`` parts
  with an ``image_url`` are `ImageBlock` s (a ``data:`` URL gives ``data`` and
  ``media_type``). ``input_file`` parts and file-id images have no block; they
  are carried along.
* Consecutive model items are one assistant message, blocks in item order: the
  ``output_text`` and ``refusal`` parts of an assistant message, a
  `ThinkingBlock` per ``reasoning`` item (its reasoning or summary text, the
  ``encrypted_content`` as signature, or as a redacted payload when there is no
  text), a `ToolCall` per ``function_call`` (the ``call_id`` is the id) and per
  other client-side call (``custom_tool_call``, ``computer_call``,
  ``shell_call``, ``local_shell_call``, ``apply_patch_call``,
  ``mcp_approval_request``). Hosted tool items (``web_search_call``,
  ``mcp_call``, ...) and unknown items have no block.
* Each call output (``function_call_output`` and the outputs of the calls
  above) is a ``tool`` message answering the call id.
* Provider usage is a ``usage`` key, in the Responses usage shape, on the last
  model item. Items never carry it in the SDK; `to_openai_agents` writes it
  only with ``include_usage=True`` (for storage: the API rejects the key).

The round trip is exact. When `to_openai_agents` would not write a message back
as the items it came from, the items are kept under `ITEMS_KEY` and written
verbatim while the message's blocks are unchanged. A message a strategy
rewrote is written from its blocks, each item keeping its ids and other fields
where they still apply. A user message holding a rendered ``<context-summary>``
becomes a `ContextSummary` again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

import attrs

from context_engine.errors import InvalidMessageError
from context_engine.formats._openai_agents_items import (
    CALL_ID_KEYS,
    NAMED_CALLS,
    PART_OUTPUTS,
    TEXT_OUTPUTS,
    Item,
    as_item,
    group_items,
    item_kind,
    model_blocks,
    read_group,
    read_part,
    usage_from_openai_agents,
    usage_to_openai_agents,
)
from context_engine.formats._openai_parts import _image_url, copy_json
from context_engine.messages import Block, ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall

try:
    from agents.items import TResponseInputItem
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "context_engine.formats.openai_agents needs the OpenAI Agents SDK; "
        "install it with: pip install 'context-engine[openai-agents]'"
    ) from exc

__all__ = [
    "ITEMS_KEY",
    "from_openai_agents",
    "group_items",
    "message_from_openai_agents",
    "message_to_openai_agents",
    "to_openai_agents",
    "usage_from_openai_agents",
    "usage_to_openai_agents",
]

logger = logging.getLogger(__name__)

ITEMS_KEY: Final = "openai_agents.items"
"""Metadata key: the items a message came from, when the default writing differs."""


# --------------------------------------------------------------------- reading


def from_openai_agents(items: str | Iterable[Any]) -> list[Message]:
    """Convert Agents SDK input items to messages.

    Args:
        items: The items, in order (dicts, or SDK output objects, read with
            ``model_dump(exclude_unset=True)``). A str is one user message, as
            ``Runner.run`` reads it. Nothing is modified.

    Raises:
        InvalidMessageError: An item is malformed; the message names which one.
    """
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    elif isinstance(items, (Mapping, bytes)) or not isinstance(items, Iterable):
        raise InvalidMessageError(
            f"from_openai_agents takes a list of input items, got {type(items).__name__}"
        )
    messages: list[Message] = []
    start = 0
    for group in group_items(items):
        try:
            messages.append(message_from_openai_agents(group))
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"item {start}: {exc}", index=len(messages)) from None
        start += len(group)
    return messages


def message_from_openai_agents(items: Sequence[Any]) -> Message:
    """Convert the items of one run (see `group_items`) to one message.

    Raises:
        InvalidMessageError: The items are malformed or are not one run.
    """
    group = [as_item(item) for item in items]
    if not group or len(group_items(group)) != 1:
        raise InvalidMessageError("message_from_openai_agents takes the items of one run")
    message = read_group(group)
    if _write(message, include_usage=True) != group:
        message = attrs.evolve(message, metadata={ITEMS_KEY: copy_json(group)})
    return message


# --------------------------------------------------------------------- writing


def to_openai_agents(
    messages: Iterable[Message], *, include_usage: bool = False
) -> list[TResponseInputItem]:
    """Convert messages to Agents SDK input items.

    Args:
        messages: The messages, in order.
        include_usage: Write provider usage of assistant messages as a ``usage``
            key. Only for storage: the Responses API rejects the key.

    Raises:
        InvalidMessageError: An item is not a `Message`; ``.index`` names which one.
    """
    if isinstance(messages, Message):
        raise InvalidMessageError(
            "to_openai_agents takes a list of messages; "
            "use message_to_openai_agents for one message"
        )
    items: list[TResponseInputItem] = []
    for index, message in enumerate(messages):
        items.extend(message_to_openai_agents(message, include_usage=include_usage, index=index))
    return items


def message_to_openai_agents(
    message: Message, *, include_usage: bool = False, index: int | None = None
) -> list[TResponseInputItem]:
    """Convert one `Message` to the input items it stands for.

    Args:
        message: The message.
        include_usage: See `to_openai_agents`.
        index: Position in the transcript, quoted by errors.

    Raises:
        InvalidMessageError: ``message`` is not a `Message`.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"expected a Message, got {type(message).__name__}", index=index)
    return cast(list[TResponseInputItem], _write(message, include_usage))


def _template(message: Message) -> tuple[list[Item], Message] | None:
    """The items the message came from and the message they read as, if still usable."""
    items = message.metadata.get(ITEMS_KEY)
    if not isinstance(items, list) or not items or not all(isinstance(i, dict) for i in items):
        return None
    try:
        original = read_group(items) if len(group_items(items)) == 1 else None
    except InvalidMessageError:
        return None
    if original is None or original.role != message.role:
        return None
    return items, original


def _write(message: Message, include_usage: bool) -> list[Item]:
    found = _template(message)
    same_usage = False
    if found is None:
        items = _render(message)
    elif (found[1].content, found[1].tool_call_id, found[1].name) == (
        message.content,
        message.tool_call_id,
        message.name,
    ):
        items = copy_json(found[0])
        same_usage = found[1].usage == message.usage
    else:
        items = _rewrite(message, found[0])
    if not (same_usage and include_usage):
        items = [{k: v for k, v in item.items() if k != "usage"} for item in items]
    usage = message.usage if message.role == "assistant" else None
    if include_usage and not same_usage and usage is not None and items:
        items[-1]["usage"] = usage_to_openai_agents(usage)
    return items


def _visible(blocks: Iterable[Block]) -> list[Block]:
    return [b for b in blocks if isinstance(b, (TextBlock, ImageBlock))]


def _render(message: Message) -> list[Item]:
    if message.role == "assistant":
        return _render_model(message.content)
    if message.role == "tool":
        item: Item = {
            "type": "function_call_output",
            "call_id": message.tool_call_id,
            "output": _render_content(_visible(message.content), "tool"),
        }
        if message.name is not None:
            item["name"] = message.name
        return [item]
    return [{"role": message.role, "content": _render_content(message.content, message.role)}]


def _render_content(blocks: Sequence[Block], role: str) -> str | list[Item]:
    if not blocks:
        return ""
    if len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        return blocks[0].text
    return [_render_part(block, role) for block in blocks]


def _render_part(block: Block, role: str) -> Item:
    if isinstance(block, ImageBlock):
        part: Item = {"type": "input_image", "image_url": _image_url(block)}
        if block.detail is not None:
            part["detail"] = block.detail
        return part
    if not isinstance(block, TextBlock):
        raise InvalidMessageError(f"a {role} message cannot hold a {type(block).__name__}")
    if role == "assistant":
        return {"type": "output_text", "text": block.text, "annotations": []}
    return {"type": "input_text", "text": block.text}


def _render_model(blocks: Sequence[Block]) -> list[Item]:
    items: list[Item] = []
    visible: list[Block] = []
    for block in [*blocks, None]:
        if isinstance(block, (TextBlock, ImageBlock)):
            visible.append(block)
            continue
        if visible:
            items.append({"role": "assistant", "content": _render_content(visible, "assistant")})
            visible = []
        if isinstance(block, ThinkingBlock):
            items.append(_render_reasoning(block))
        elif isinstance(block, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": block.arguments,
                }
            )
    return items or [{"role": "assistant", "content": ""}]


def _render_reasoning(block: ThinkingBlock) -> Item:
    if block.redacted:
        return {"type": "reasoning", "summary": [], "encrypted_content": block.thinking}
    item: Item = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": block.thinking}],
    }
    if block.signature is not None:
        item["encrypted_content"] = block.signature
    return item


def _rewrite(message: Message, template: list[Item]) -> list[Item]:
    """Write a rewritten message, keeping each item's other fields where they still fit."""
    first = template[0]
    kind = item_kind(first)
    if kind == "input":
        item = copy_json(first)
        item["content"] = _rewrite_content(message.content, first.get("content"), message.role)
        return [item]
    if kind == "output":
        return [_rewrite_output(message, first)]
    template, pieces = _without_dropped_reasoning(template, message.content)
    if [type(b) for p in pieces for b in p] != [type(b) for b in message.content]:
        return _render_model(message.content)
    written: list[Item] = []
    blocks = iter(message.content)
    for item, old in zip(template, pieces, strict=True):
        new = [next(blocks) for _ in old]
        written.append(copy_json(item) if new == old else _rewrite_model_item(item, new))
    return written


def _without_dropped_reasoning(
    template: list[Item], blocks: Sequence[Block]
) -> tuple[list[Item], list[list[Block]]]:
    """The template's items less the reasoning items whose block the message no longer has.

    A reasoning item is dropped whole (the engine drops reasoning whose prefix
    a rewrite changed); the items around it keep their ids and fields.
    """
    items: list[Item] = []
    pieces: list[list[Block]] = []
    position = 0
    for item in template:
        old = model_blocks(item)
        here = blocks[position : position + len(old)]
        if item.get("type") == "reasoning" and list(here) != old:
            continue
        items.append(item)
        pieces.append(old)
        position += len(old)
    return items, pieces


def _rewrite_content(blocks: Sequence[Block], old: object, role: str) -> str | list[Item]:
    visible = _visible(blocks)
    if isinstance(old, str) and len(visible) <= 1:
        first = visible[0] if visible else TextBlock("")
        if isinstance(first, TextBlock):
            return first.text
    parts: list[Item] = [_render_part(block, role) for block in visible]
    for position, part in enumerate(old if isinstance(old, list) else []):
        if isinstance(part, Mapping) and read_part(part, "part") is None:
            parts.insert(min(position, len(parts)), copy_json(dict(part)))
    return parts


def _rewrite_output(message: Message, old: Item) -> Item:
    kind = old.get("type")
    item: Item = copy_json(old)
    if kind in PART_OUTPUTS:
        item["output"] = _rewrite_content(message.content, old.get("output"), "tool")
    elif kind in TEXT_OUTPUTS:
        item["output"] = message.text
    else:
        logger.debug("item=<%s> | output kept as it was: it cannot hold a rewritten text", kind)
    if message.name is not None:
        item["name"] = message.name
    return item


def _rewrite_model_item(item: Item, new: list[Block]) -> Item:
    kind = item.get("type")
    fresh: Item = copy_json(item)
    if kind == "reasoning" and isinstance(new[0], ThinkingBlock):
        for key in ("summary", "content", "encrypted_content"):
            fresh.pop(key, None)
        fresh.update(_render_reasoning(new[0]))
    elif kind in ("function_call", "custom_tool_call", "mcp_approval_request"):
        call = cast(ToolCall, new[0])
        fresh[CALL_ID_KEYS[kind]] = call.id
        fresh["name"] = call.name
        fresh[NAMED_CALLS.get(kind, "input")] = call.arguments
    elif kind not in CALL_ID_KEYS:
        fresh["content"] = _rewrite_content(new, item.get("content"), "assistant")
    return fresh
