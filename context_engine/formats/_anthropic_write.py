"""Writing Anthropic Messages API bodies and usage dicts, for `context_engine.formats.anthropic`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError
from context_engine.formats._anthropic_blocks import (
    BLOCKS_KEY,
    CONTENT_FORM_KEY,
    EXTRA_KEY,
    IS_ERROR_KEY,
    NEW_MESSAGE_KEY,
    TOOL_RESULT_KEY,
    USAGE_KEY,
    default_form,
    write_blocks,
)
from context_engine.formats._openai_parts import copy_json
from context_engine.messages import Block, Message, TextBlock, ThinkingBlock, Usage

__all__ = ["usage_from_anthropic", "usage_to_anthropic", "write_body"]


def _count(usage: Mapping[str, Any], key: str, *, required: bool = False) -> int:
    value = usage.get(key)
    if value is None and not required:
        return 0
    if not is_int(value) or value < 0:
        raise InvalidMessageError(f"usage.{key} must be a non-negative int, got {value!r}")
    return value


def usage_from_anthropic(usage: Mapping[str, Any]) -> Usage:
    """Normalise a Messages API ``usage`` dict.

    Anthropic's ``input_tokens`` counts only the uncached part of the prompt,
    so ``Usage.input_tokens`` is ``input_tokens + cache_read_input_tokens +
    cache_creation_input_tokens``: the whole prompt, as `Usage` defines it.

    Raises:
        InvalidMessageError: A count is missing, negative or not an int.
    """
    if not isinstance(usage, Mapping):
        raise InvalidMessageError(f"usage must be a dict, got {type(usage).__name__}")
    read = _count(usage, "cache_read_input_tokens")
    written = _count(usage, "cache_creation_input_tokens")
    return Usage(
        input_tokens=_count(usage, "input_tokens", required=True) + read + written,
        output_tokens=_count(usage, "output_tokens"),
        cache_read_tokens=read,
        cache_write_tokens=written,
    )


def usage_to_anthropic(usage: Usage) -> dict[str, Any]:
    """Render `Usage` as a Messages API ``usage`` dict (cache counts only when non-zero).

    ``input_tokens`` is the uncached part again, never below zero.
    """
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    rendered: dict[str, Any] = {
        "input_tokens": max(0, usage.input_tokens - cached),
        "output_tokens": usage.output_tokens,
    }
    if usage.cache_read_tokens:
        rendered["cache_read_input_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        rendered["cache_creation_input_tokens"] = usage.cache_write_tokens
    return rendered


def write_body(items: Sequence[Message], request: bool) -> dict[str, Any]:
    """The body for checked messages; see `context_engine.formats.anthropic.to_anthropic`."""
    lead = 0
    while lead < len(items) and items[lead].role in ("system", "developer"):
        lead += 1
    body: dict[str, Any] = {}
    if lead:
        body["system"] = _write_system(items[:lead])
    body["messages"] = [_write_group(group, request) for group in _groups(items, lead)]
    return body


def _groups(items: Sequence[Message], start: int) -> list[list[tuple[int, Message]]]:
    groups: list[list[tuple[int, Message]]] = []
    for index in range(start, len(items)):
        message = items[index]
        if message.role in ("system", "developer"):
            raise InvalidMessageError(
                f"a {message.role} message after the conversation started; Anthropic takes "
                "system text only in the system parameter: move it to the front or make it "
                "a user message",
                index=index,
            )
        joins = groups and _side(groups[-1][0][1]) == _side(message)
        if joins and not message.metadata.get(NEW_MESSAGE_KEY):
            groups[-1].append((index, message))
            continue
        groups.append([(index, message)])
    return groups


def _side(message: Message) -> str:
    return "assistant" if message.role == "assistant" else "user"


def _write_system(messages: Sequence[Message]) -> str | list[dict[str, Any]]:
    written: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        for block in message.content:
            if not isinstance(block, TextBlock):
                raise InvalidMessageError(
                    f"a {message.role} message holds a {type(block).__name__}; "
                    "Anthropic's system parameter takes only text",
                    index=index,
                )
        written.extend(write_blocks(message.content, message.metadata.get(BLOCKS_KEY)))
    form = messages[0].metadata.get(CONTENT_FORM_KEY) if len(messages) == 1 else None
    if form != "blocks" and default_form(written) == "string":
        return str(written[0]["text"]) if written else ""
    return written


def _write_group(group: Sequence[tuple[int, Message]], request: bool) -> dict[str, Any]:
    written: list[dict[str, Any]] = []
    for index, message in group:
        try:
            written.extend(_write_content(message, request))
        except InvalidMessageError as exc:
            if exc.index is not None:
                raise
            raise InvalidMessageError(str(exc), index=index) from None
    first = group[0][1]
    form = first.metadata.get(CONTENT_FORM_KEY) if first.role != "tool" else None
    content: Any = written
    if form != "blocks" and default_form(written) == "string":
        content = written[0]["text"] if written else ""
    out: dict[str, Any] = {"role": _side(first), "content": content}
    if not request:
        _write_response_keys(out, [message for _, message in group])
    return out


def _write_content(message: Message, request: bool) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [_write_tool_result(message)]
    blocks = message.content
    if request:
        blocks = tuple(b for b in blocks if not _unsigned(b))
        if len(blocks) != len(message.content):
            return write_blocks(blocks, None)
    return write_blocks(blocks, message.metadata.get(BLOCKS_KEY))


def _unsigned(block: Block) -> bool:
    return isinstance(block, ThinkingBlock) and not block.redacted and block.signature is None


def _write_tool_result(message: Message) -> dict[str, Any]:
    assert message.tool_call_id is not None  # a tool message always has one
    meta = message.metadata
    for block in message.content:
        if isinstance(block, ThinkingBlock):
            raise InvalidMessageError("a tool result holds a thinking block; Anthropic has none")
    out: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    written = write_blocks(message.content, meta.get(BLOCKS_KEY))
    form = meta.get(CONTENT_FORM_KEY)
    if form == "absent" and not written:
        pass
    elif form != "blocks" and default_form(written) == "string":
        out["content"] = written[0]["text"] if written else ""
    else:
        out["content"] = written
    if IS_ERROR_KEY in meta:
        out["is_error"] = copy_json(meta[IS_ERROR_KEY])
    for key, value in (meta.get(TOOL_RESULT_KEY) or {}).items():
        out.setdefault(key, copy_json(value))
    return out


def _write_response_keys(out: dict[str, Any], messages: Sequence[Message]) -> None:
    if out["role"] == "assistant":
        usages = [m for m in messages if m.usage is not None]
        if usages:
            last = usages[-1]
            assert last.usage is not None
            out["usage"] = _write_usage(last.usage, last.metadata.get(USAGE_KEY))
        reasons = [m.stop_reason for m in messages if m.stop_reason is not None]
        if reasons:
            out["stop_reason"] = reasons[-1]
    for message in messages:
        extra = message.metadata.get(EXTRA_KEY)
        if isinstance(extra, Mapping):
            for key, value in extra.items():
                if key not in ("role", "content"):
                    out.setdefault(key, copy_json(value))


def _write_usage(usage: Usage, raw: object) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        try:
            if usage_from_anthropic(raw) == usage:
                return dict(copy_json(raw))
        except InvalidMessageError:
            pass
    return usage_to_anthropic(usage)
