"""Reading Agents SDK input items, for `context_engine.formats.openai_agents`.

Which items make one message (`group_items`), how a run of items reads as a
`Message` (`read_group`), and usage in the Responses shape. Nothing here needs
the SDK installed: items are plain dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, cast

from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError
from context_engine.formats._usage import render_usage
from context_engine.messages import (
    Block,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
    parse_context_summary,
)

__all__ = [
    "CALL_ID_KEYS",
    "NAMED_CALLS",
    "OUTPUT_ID_KEYS",
    "PART_OUTPUTS",
    "TEXT_OUTPUTS",
    "Item",
    "as_item",
    "group_items",
    "item_kind",
    "model_blocks",
    "read_group",
    "read_part",
    "usage_from_openai_agents",
    "usage_to_openai_agents",
]

# Call item type -> key of its id; output item type -> key of the call id it answers.
CALL_ID_KEYS: Final[Mapping[str, str]] = {
    "function_call": "call_id",
    "custom_tool_call": "call_id",
    "computer_call": "call_id",
    "local_shell_call": "call_id",
    "shell_call": "call_id",
    "apply_patch_call": "call_id",
    "mcp_approval_request": "id",
}
OUTPUT_ID_KEYS: Final[Mapping[str, str]] = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "call_id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}
PART_OUTPUTS: Final = frozenset({"function_call_output", "custom_tool_call_output"})
TEXT_OUTPUTS: Final = PART_OUTPUTS | {"local_shell_call_output", "apply_patch_call_output"}
NAMED_CALLS: Final = {"function_call": "arguments", "mcp_approval_request": "arguments"}
_BOOKKEEPING: Final = ("type", "id", "call_id", "approval_request_id", "status", "usage")
_TEXT_PARTS: Final = {"input_text": "text", "output_text": "text", "refusal": "refusal"}

Item = dict[str, Any]
"""An input item as a plain dict."""


def as_item(value: object) -> Item:
    """The item as a dict (an SDK output object is dumped as the SDK replays it)."""
    if isinstance(value, Mapping):
        return dict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # an SDK output object (ResponseOutputMessage, ...)
        return dict(dump(exclude_unset=True))
    raise InvalidMessageError(f"an input item must be a dict, got {type(value).__name__}")


def item_kind(item: Mapping[str, Any]) -> str:
    """``input`` (a user/system/developer message), ``output`` (a call output) or ``model``."""
    kind = item.get("type")
    if kind == "message" or (kind is None and "role" in item):
        return "model" if item.get("role") == "assistant" else "input"
    return "output" if kind in OUTPUT_ID_KEYS else "model"


def group_items(items: Iterable[Any]) -> list[list[Item]]:
    """Split items into the runs that become one message each.

    Every input message and every call output is a run of its own; consecutive
    model items (assistant messages, reasoning, calls, hosted tool items) are
    one run.

    Raises:
        InvalidMessageError: An item is neither a dict nor an SDK output object.
    """
    groups: list[list[Item]] = []
    for position, raw in enumerate(items):
        try:
            item = as_item(raw)
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"item {position}: {exc}") from None
        if item_kind(item) == "model" and groups and item_kind(groups[-1][-1]) == "model":
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def read_group(group: Sequence[Item]) -> Message:
    """The message one run of items reads as (no metadata: the caller adds it)."""
    first = group[0]
    kind = item_kind(first)
    if kind == "input":
        return _read_input(first)
    if kind == "output":
        return _read_output(first)
    blocks: list[Block] = []
    usage = None
    for item in group:
        blocks.extend(model_blocks(item))
        if item.get("usage") is not None:
            usage = usage_from_openai_agents(item["usage"])
    return Message("assistant", tuple(blocks), usage=usage)


def _read_input(item: Item) -> Message:
    role = item.get("role")
    if role not in ("user", "system", "developer"):
        raise InvalidMessageError(f"unknown message role {role!r}")
    if "content" not in item:
        raise InvalidMessageError(f"{role} message item has no 'content'")
    blocks = _read_content(item["content"], f"{role} message")
    if role == "user" and len(blocks) == 1 and isinstance(blocks[0], TextBlock):
        summary = parse_context_summary(blocks[0].text)
        if summary is not None and summary.text == blocks[0].text:
            return summary
    return Message(role, tuple(blocks))


def model_blocks(item: Item) -> list[Block]:
    """The blocks one model item gives (none for hosted tool and unknown items)."""
    kind = item.get("type")
    if kind == "reasoning":
        return [_read_reasoning(item)]
    if isinstance(kind, str) and kind in CALL_ID_KEYS:
        return [_read_call(item, kind)]
    if item_kind(item) == "model" and "role" in item:
        return _read_content(item.get("content"), "assistant message")
    return []  # a hosted tool item or an unknown item: carried, no block


def _read_reasoning(item: Item) -> ThinkingBlock:
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, (list, tuple)):
        raise InvalidMessageError("reasoning item: summary and content must be lists")
    texts = [part.get("text") if isinstance(part, Mapping) else None for part in parts]
    if not all(isinstance(text, str) for text in texts):
        raise InvalidMessageError("reasoning item: every summary/content part needs a str 'text'")
    secret = item.get("encrypted_content")
    if secret is not None and not isinstance(secret, str):
        raise InvalidMessageError("reasoning item: encrypted_content must be a str")
    if not texts and secret:
        return ThinkingBlock(secret, redacted=True)
    return ThinkingBlock("\n".join(cast(list[str], texts)), signature=secret)


def _read_call(item: Item, kind: str) -> ToolCall:
    call_id = item.get(CALL_ID_KEYS[kind])
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{kind} item has no {CALL_ID_KEYS[kind]!r} (a non-empty str)")
    if kind in NAMED_CALLS or kind == "custom_tool_call":
        name, arguments = item.get("name"), item.get(NAMED_CALLS.get(kind, "input"))
    else:  # computer, shell, patch calls: the item type names the tool
        rest = {key: value for key, value in item.items() if key not in _BOOKKEEPING}
        name, arguments = kind, json.dumps(rest, sort_keys=True)
    if not isinstance(name, str) or not name or not isinstance(arguments, str):
        raise InvalidMessageError(f"{kind} item {call_id!r} needs a str name and arguments")
    return ToolCall(call_id, name, arguments)


def _read_output(item: Item) -> Message:
    kind = cast(str, item["type"])
    call_id = item.get(OUTPUT_ID_KEYS[kind])
    if call_id is None and kind == "local_shell_call_output":
        call_id = item.get("id")  # the API's own spelling
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(f"{kind} item has no {OUTPUT_ID_KEYS[kind]!r}")
    output = item.get("output")
    blocks: list[Block]
    if kind in PART_OUTPUTS:
        if "output" not in item:
            raise InvalidMessageError(f"{kind} item {call_id!r} has no 'output'")
        blocks = _read_content(output, f"{kind} item {call_id!r}")
    elif isinstance(output, str) or (output is None and kind in TEXT_OUTPUTS):
        blocks = [TextBlock(output)] if output else []
    elif isinstance(output, Mapping) and isinstance(output.get("image_url"), str):
        blocks = [_read_image(output["image_url"], None)]  # a computer screenshot
    else:
        rest = {key: value for key, value in item.items() if key not in _BOOKKEEPING}
        blocks = [TextBlock(json.dumps(rest, sort_keys=True))]
    name = item.get("name")
    return Message(
        "tool", tuple(blocks), tool_call_id=call_id, name=name if isinstance(name, str) else None
    )


def _read_content(content: object, where: str) -> list[Block]:
    if isinstance(content, str):
        return [TextBlock(content)] if content else []
    if not isinstance(content, (list, tuple)):
        raise InvalidMessageError(
            f"{where}: content must be a str or a list of parts, got {type(content).__name__}"
        )
    blocks: list[Block] = []
    for number, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise InvalidMessageError(f"{where}: part {number} must be a dict")
        block = read_part(part, f"{where}: part {number}")
        if block is not None:
            blocks.append(block)
    return blocks


def read_part(part: Mapping[str, Any], where: str) -> Block | None:
    """The block of one content part, or None for a part carried without one."""
    kind = part.get("type")
    if isinstance(kind, str) and kind in _TEXT_PARTS:
        text = part.get(_TEXT_PARTS[kind])
        if not isinstance(text, str):
            raise InvalidMessageError(f"{where} ({kind}) needs a str {_TEXT_PARTS[kind]!r}")
        return TextBlock(text)
    if kind == "input_image" and part.get("image_url") is not None:
        url, detail = part["image_url"], part.get("detail")
        if not isinstance(url, str) or not (detail is None or isinstance(detail, str)):
            raise InvalidMessageError(f"{where} (input_image) needs a str image_url and detail")
        return _read_image(url, detail)
    return None  # input_file, a file-id image, audio: carried, no block


def _read_image(url: str, detail: str | None) -> ImageBlock:
    head, base64, data = url.partition(";base64,")
    if head.startswith("data:") and base64 and data and "," not in head:
        return ImageBlock(data=data, media_type=head[5:] or None, detail=detail)
    return ImageBlock(url=url, detail=detail)


def _count(value: object, where: str) -> int:
    if value is None:
        return 0
    if not is_int(value) or value < 0:
        raise InvalidMessageError(f"usage.{where} must be a non-negative int, got {value!r}")
    return value


def usage_from_openai_agents(usage: Any) -> Usage:
    """Normalise usage as the Agents SDK reports it.

    Accepts ``agents.usage.Usage`` (``ModelResponse.usage``), the Responses
    API's ``ResponseUsage``, or their dict form. ``input_tokens`` already holds
    the cached part, so it is kept as is; ``input_tokens_details.cached_tokens``
    becomes ``cache_read_tokens`` and ``cache_write_tokens`` ``cache_write_tokens``.

    Raises:
        InvalidMessageError: A count is negative or not an int.
    """

    def get(source: Any, key: str) -> Any:
        return source.get(key) if isinstance(source, Mapping) else getattr(source, key, None)

    details = get(usage, "input_tokens_details")
    return Usage(
        input_tokens=_count(get(usage, "input_tokens"), "input_tokens"),
        output_tokens=_count(get(usage, "output_tokens"), "output_tokens"),
        cache_read_tokens=_count(get(details, "cached_tokens"), "cached_tokens"),
        cache_write_tokens=_count(get(details, "cache_write_tokens"), "cache_write_tokens"),
    )


def usage_to_openai_agents(usage: Usage) -> dict[str, Any]:
    """Render `Usage` in the Responses usage shape (details only when non-zero)."""
    return render_usage(
        usage,
        input_key="input_tokens",
        output_key="output_tokens",
        details_key="input_tokens_details",
        read_key="cached_tokens",
        write_key="cache_write_tokens",
    )
