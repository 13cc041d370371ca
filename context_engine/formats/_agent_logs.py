"""Session logs of coding agents, for `context_engine.formats.readers`.

Two logs are read, each a JSONL file with one record per line:

* Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``): each
  line is ``{"timestamp", "type", "payload"}`` as defined by ``RolloutLine``,
  ``RolloutItem`` and ``ResponseItem`` in openai/codex
  (``codex-rs/protocol/src/protocol.rs`` and ``models.rs``).
* Claude Code sessions (``~/.claude/projects/<project>/<session>.jsonl``):
  ``user`` and ``assistant`` lines wrap an Anthropic Messages API ``message``;
  Anthropic documents where the files are but calls the record format internal.

Both readers take the lines already parsed, as ``(line number, object)`` pairs,
and keep only what the model was sent or wrote.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, cast

import attrs

from context_engine.errors import InvalidMessageError
from context_engine.formats.anthropic import message_from_anthropic
from context_engine.formats.openai import TOOL_CALLS_KEY
from context_engine.messages import (
    ROLES,
    Block,
    ContextSummary,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)

__all__ = ["CODEX_LINE_TYPES", "Fail", "is_claude_code_line", "read_claude_code", "read_codex"]

CODEX_LINE_TYPES: Final = frozenset(
    {"session_meta", "response_item", "turn_context", "event_msg", "compacted"}
)
_CLAUDE_CODE_KEYS: Final = ("message", "sessionId", "uuid", "leafUuid", "messageId")

Fail = Callable[[int, str], Exception]
"""Builds the error for a problem on a numbered line."""

Lines = Iterable[tuple[int, Mapping[str, Any]]]


def is_claude_code_line(obj: Mapping[str, Any]) -> bool:
    """Whether a JSONL record looks like a line of a Claude Code session."""
    return isinstance(obj.get("type"), str) and any(key in obj for key in _CLAUDE_CODE_KEYS)


def _timestamp(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _stamped(message: Message, stamp: dt.datetime | None) -> Message:
    # A checkpoint's text renders its own timestamp; leave it as written.
    if stamp is None or message.is_summary:
        return message
    return attrs.evolve(message, timestamp=stamp)


# ------------------------------------------------------------------ Claude Code


def read_claude_code(lines: Lines, fail: Fail, origins: list[int] | None = None) -> list[Message]:
    """The conversation of a Claude Code session, in file order.

    ``user`` and ``assistant`` lines are read with `message_from_anthropic`;
    sidechain lines (sub-agents), bookkeeping lines and the API-error notes
    Claude Code writes as assistant lines (``isApiErrorMessage``) are skipped.
    A ``compact_boundary`` system line drops everything before it, as Claude
    Code did, and the summary written after it (``isCompactSummary``) becomes a
    `ContextSummary` checkpoint. Claude Code
    writes one line per content block of a streamed answer, all with the same
    message id: these are joined into one assistant message again.

    ``origins``, when given, receives the line number of each message returned.
    """
    out: list[Message] = []
    where: list[int] = [] if origins is None else origins
    pending: list[tuple[int, Any, dict[str, Any]]] = []
    pending_id: object = None
    for number, obj in lines:
        if obj.get("type") == "system" and obj.get("subtype") == "compact_boundary":
            # Claude Code compacted here: the model saw nothing before this line again.
            pending.clear()
            out.clear()
            where.clear()
            pending_id = None
            continue
        if obj.get("type") not in ("user", "assistant") or obj.get("isSidechain") is True:
            continue
        if obj.get("isApiErrorMessage") is True:
            continue  # Claude Code's note that a call failed; the model never wrote it
        message = obj.get("message")
        if not isinstance(message, Mapping):
            raise fail(number, f"a {obj['type']} line needs a 'message' object")
        if obj.get("isCompactSummary") is True and obj["type"] == "user":
            _flush_claude_code(pending, out, fail, where)
            out.append(_compact_summary(number, message, fail))
            where.append(number)
            continue
        message_id = message.get("id") if obj["type"] == "assistant" else None
        if obj["type"] == "assistant":
            if pending and message_id is not None and message_id == pending_id:
                pending[0] = (pending[0][0], pending[0][1], _joined(pending[0][2], message))
                continue
            _flush_claude_code(pending, out, fail, where)
            pending_id = message_id
        pending.append((number, obj.get("timestamp"), dict(message)))
    _flush_claude_code(pending, out, fail, where)
    return out


def _compact_summary(number: int, message: Mapping[str, Any], fail: Fail) -> Message:
    """The summary Claude Code wrote after a boundary, as the checkpoint it is."""
    texts = [
        block["text"]
        for block in _blocks_of(message)
        if isinstance(block, Mapping) and isinstance(block.get("text"), str)
    ]
    if not texts:
        raise fail(number, "a compact summary line needs the summary text")
    return ContextSummary(summary="\n".join(texts))


def _blocks_of(message: Mapping[str, Any]) -> list[Any]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content) if isinstance(content, list) else []


def _joined(first: Mapping[str, Any], later: Mapping[str, Any]) -> dict[str, Any]:
    return {**first, **later, "content": _blocks_of(first) + _blocks_of(later)}


def _flush_claude_code(
    pending: list[tuple[int, Any, dict[str, Any]]],
    out: list[Message],
    fail: Fail,
    where: list[int],
) -> None:
    for number, stamp, message in pending:
        try:
            pieces = message_from_anthropic(message)
        except InvalidMessageError as exc:
            raise fail(number, str(exc)) from None
        when = _timestamp(stamp)
        out.extend(_stamped(piece, when) for piece in pieces)
        where.extend(number for _ in pieces)
    pending.clear()


# ------------------------------------------------------------------ Codex CLI


def read_codex(lines: Lines, fail: Fail, origins: list[int] | None = None) -> list[Message]:
    """The conversation of a Codex CLI rollout, in file order.

    The session's base instructions become a system message. Each
    ``response_item`` line adds to the transcript: ``message`` items become
    messages of their role; ``reasoning`` (its readable summary),
    ``function_call``, ``custom_tool_call`` and ``local_shell_call`` items
    build the assistant message that ends at the next user message or tool
    output; ``function_call_output`` and ``custom_tool_call_output`` items
    become tool messages. Other lines and items are skipped.

    ``origins``, when given, receives the line number of each message returned
    (for an assistant message built from several items, its first item's line).
    """
    out: list[Message] = []
    where: list[int] = [] if origins is None else origins
    pending: list[Block] = []
    pending_line = 0
    pending_stamp: dt.datetime | None = None
    custom: set[str] = set()
    seen_meta = False
    for number, obj in lines:
        payload = obj.get("payload")
        if obj.get("type") == "session_meta" and not seen_meta:
            seen_meta = True
            instructions = _instructions(payload)
            if instructions:
                stamp = _timestamp(obj.get("timestamp"))
                out.append(_stamped(Message.system(instructions), stamp))
                where.append(number)
            continue
        if obj.get("type") != "response_item":
            continue
        if not isinstance(payload, Mapping):
            raise fail(number, "a response_item line needs a 'payload' object")
        try:
            item = _codex_item(payload)
        except InvalidMessageError as exc:
            raise fail(number, str(exc)) from None
        stamp = _timestamp(obj.get("timestamp"))
        if isinstance(item, Message):
            _flush_codex(pending, pending_stamp, custom, out, where, pending_line)
            out.append(_stamped(item, stamp))
            where.append(number)
        elif item:
            pending_line = pending_line if pending else number
            pending_stamp = pending_stamp if pending else stamp
            pending.extend(item)
            if payload.get("type") == "custom_tool_call":
                custom.update(b.id for b in item if isinstance(b, ToolCall))
    _flush_codex(pending, pending_stamp, custom, out, where, pending_line)
    return out


def _flush_codex(
    pending: list[Block],
    stamp: dt.datetime | None,
    custom: set[str],
    out: list[Message],
    where: list[int],
    line: int,
) -> None:
    if not pending:
        return
    # Freeform (custom) tool calls keep their kind for to_openai, as from_openai would.
    overlays = [
        {"id": b.id, "type": "custom"} if b.id in custom else None
        for b in pending
        if isinstance(b, ToolCall)
    ]
    metadata = {TOOL_CALLS_KEY: overlays} if any(overlays) else {}
    out.append(_stamped(Message("assistant", tuple(pending), metadata=metadata), stamp))
    where.append(line)
    pending.clear()
    custom.clear()


def _instructions(payload: object) -> str | None:
    if not isinstance(payload, Mapping):
        return None
    base = payload.get("base_instructions")
    if isinstance(base, Mapping) and isinstance(base.get("text"), str):
        return str(base["text"])
    text = payload.get("instructions")
    return text if isinstance(text, str) else None


def _text(payload: Mapping[str, Any], key: str, kind: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise InvalidMessageError(f"a {kind} item needs a str {key!r}")
    return value


def _codex_item(payload: Mapping[str, Any]) -> Message | list[Block]:
    """A whole message, or blocks of the assistant message under way."""
    kind = payload.get("type")
    if kind == "message":
        role = payload.get("role")
        blocks = _content_items(payload.get("content"))
        if role == "assistant":
            return blocks
        # A role from the file may be any JSON value; only a known str is a role.
        if not isinstance(role, str) or role not in ROLES or role == "tool":
            raise InvalidMessageError(f"a message item has an unknown role {_shown(role)}")
        return Message(cast(Role, role), tuple(blocks))
    if kind == "reasoning":
        parts = [*_texts(payload.get("summary")), *_texts(payload.get("content"))]
        return [ThinkingBlock("\n".join(parts))] if parts else []
    if kind in ("function_call", "custom_tool_call"):
        key = "arguments" if kind == "function_call" else "input"
        call_id = _text(payload, "call_id", kind)
        return [ToolCall(call_id, _text(payload, "name", kind), _text(payload, key, kind))]
    if kind == "local_shell_call":
        shell_id = payload.get("call_id") or payload.get("id")
        if not isinstance(shell_id, str) or not shell_id:
            raise InvalidMessageError("a local_shell_call item needs a str 'call_id'")
        return [ToolCall(shell_id, "local_shell", json.dumps(payload.get("action") or {}))]
    if kind in ("function_call_output", "custom_tool_call_output"):
        call_id = _text(payload, "call_id", kind)
        return Message("tool", tuple(_output(payload.get("output"))), tool_call_id=call_id)
    return []


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _texts(items: object) -> list[str]:
    if not isinstance(items, list):
        return []
    return [i["text"] for i in items if isinstance(i, Mapping) and isinstance(i.get("text"), str)]


def _content_items(items: object) -> list[Block]:
    if isinstance(items, str):
        return [TextBlock(items)] if items else []
    if not isinstance(items, list):
        raise InvalidMessageError("a message item needs a 'content' list")
    blocks: list[Block] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise InvalidMessageError(f"content items must be objects, got {type(item).__name__}")
        if isinstance(item.get("text"), str):
            blocks.append(TextBlock(item["text"]))
        elif item.get("type") == "input_image" and isinstance(item.get("image_url"), str):
            blocks.append(ImageBlock(url=item["image_url"]))
    return blocks


def _output(output: object) -> list[Block]:
    # Older rollouts wrote {"content": ..., "success": ...}; newer a str or a list of items.
    value = output.get("content") if isinstance(output, Mapping) else output
    if isinstance(value, (str, list)):
        return _content_items(value)
    raise InvalidMessageError(
        f"a tool output must be a str, a list of items or an object, got {type(output).__name__}"
    )
