"""Tool calls and usage of LangChain AI messages, for `context_engine.formats.langchain`.

LangChain keeps tool calls apart from the content: ``tool_calls`` hold parsed
arguments, ``invalid_tool_calls`` the text the model wrote when it did not
parse. A `ToolCall` holds the argument text; a text that parsing and dumping
would not give back travels alongside, by call id. ``usage_metadata`` counts
cached tokens inside ``input_tokens``, as `Usage` does.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError
from context_engine.formats._usage import render_usage
from context_engine.messages import ToolCall, Usage

__all__ = [
    "raw_arguments",
    "read_tool_calls",
    "usage_from_langchain",
    "usage_to_langchain",
    "write_tool_calls",
    "write_usage",
]

_NOT_A_CALL: Final = "arguments are not a JSON object"


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# ------------------------------------------------------------------ tool calls


def _usable(entry: Mapping[str, Any]) -> bool:
    """An invalid tool call that can be a `ToolCall`: it has an id and a name."""
    return all(isinstance(entry.get(key), str) and entry.get(key) for key in ("id", "name"))


def _json_object(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _read_call(call: Mapping[str, Any], raw_arguments: Mapping[str, Any]) -> ToolCall:
    call_id, name = call.get("id"), call.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidMessageError(
            f"tool call {name!r} has no id; the engine pairs calls and results by id, "
            "so give every tool call a non-empty id"
        )
    raw = raw_arguments.get(call_id)
    if isinstance(raw, str) and _json_object(raw) == call.get("args"):
        return ToolCall(call_id, str(name), raw)
    try:
        arguments = json.dumps(call.get("args", {}), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(
            f"tool call {call_id!r}: args are not JSON-serialisable ({exc})"
        ) from None
    return ToolCall(call_id, str(name), arguments)


def read_tool_calls(
    tool_calls: Sequence[Mapping[str, Any]],
    invalid_tool_calls: Sequence[Mapping[str, Any]],
    raw_arguments: Mapping[str, Any],
) -> tuple[list[ToolCall], list[dict[str, Any]] | None]:
    """The calls of an AI message as `ToolCall` blocks, and its invalid calls kept whole.

    A call's arguments are its ``args`` as JSON text, or the text in
    ``raw_arguments`` (by call id) when that text still parses to ``args``.
    Invalid calls with an id and a name become blocks too (LangChain answers
    them with tool messages), after the valid ones.
    """
    calls = [_read_call(call, raw_arguments) for call in tool_calls]
    if not invalid_tool_calls:
        return calls, None
    stored = [copy.deepcopy(dict(entry)) for entry in invalid_tool_calls]
    calls.extend(
        ToolCall(entry["id"], entry["name"], _str(entry.get("args")) or "")
        for entry in stored
        if _usable(entry)
    )
    return calls, stored


def raw_arguments(calls: Sequence[ToolCall]) -> dict[str, str]:
    """The argument texts that parsing and dumping would not give back, by call id."""
    raw: dict[str, str] = {}
    for call in calls:
        parsed = _json_object(call.arguments)
        if parsed is not None and json.dumps(parsed, ensure_ascii=False) != call.arguments:
            raw[call.id] = call.arguments
    return raw


def _stored_invalid(entries: Sequence[Any], calls: Mapping[str, ToolCall]) -> list[dict[str, Any]]:
    """The stored invalid calls whose block is still there (and those that had none), in order."""
    written: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        if not _usable(entry):
            written.append(copy.deepcopy(dict(entry)))
        elif (call := calls.get(entry["id"])) is not None:
            kept = copy.deepcopy(dict(entry))
            if call.arguments != (_str(entry.get("args")) or ""):
                kept["args"] = call.arguments
            written.append(kept)
    return written


def write_tool_calls(
    calls: Sequence[ToolCall], stored: object
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``tool_calls`` and ``invalid_tool_calls``: stored invalid calls stay invalid, in order.

    A call whose arguments are not a JSON object cannot be a LangChain tool
    call; it is written as an invalid one.
    """
    entries = list(stored) if isinstance(stored, list) else []
    invalid_ids = {e["id"] for e in entries if isinstance(e, Mapping) and _usable(e)}
    valid: list[dict[str, Any]] = []
    invalid = _stored_invalid(entries, {call.id: call for call in calls})
    for call in calls:
        if call.id in invalid_ids:
            continue
        args = _json_object(call.arguments)
        if args is None:
            invalid.append(
                {
                    "type": "invalid_tool_call",
                    "name": call.name,
                    "args": call.arguments,
                    "id": call.id,
                    "error": _NOT_A_CALL,
                }
            )
        else:
            valid.append({"type": "tool_call", "name": call.name, "args": args, "id": call.id})
    return valid, invalid


# ----------------------------------------------------------------------- usage


def _count(value: object, where: str) -> int:
    if value is None:
        return 0
    if not is_int(value) or value < 0:
        raise InvalidMessageError(f"{where} must be a non-negative int, got {value!r}")
    return value


def usage_from_langchain(usage: Mapping[str, Any]) -> Usage:
    """Normalise a LangChain ``usage_metadata`` dict.

    ``input_tokens`` is already the sum of every input token type, cached ones
    included, so it becomes ``input_tokens`` as is;
    ``input_token_details.cache_read`` becomes ``cache_read_tokens`` and
    ``input_token_details.cache_creation`` ``cache_write_tokens``.

    Raises:
        InvalidMessageError: ``input_tokens`` is missing, or a count is negative
            or not an int.
    """
    if not isinstance(usage, Mapping):
        raise InvalidMessageError(f"usage_metadata must be a dict, got {type(usage).__name__}")
    if "input_tokens" not in usage:
        raise InvalidMessageError("usage_metadata has no input_tokens")
    details = usage.get("input_token_details") or {}
    if not isinstance(details, Mapping):
        raise InvalidMessageError("usage_metadata.input_token_details must be a dict")
    return Usage(
        input_tokens=_count(usage["input_tokens"], "usage_metadata.input_tokens"),
        output_tokens=_count(usage.get("output_tokens"), "usage_metadata.output_tokens"),
        cache_read_tokens=_count(details.get("cache_read"), "input_token_details.cache_read"),
        cache_write_tokens=_count(
            details.get("cache_creation"), "input_token_details.cache_creation"
        ),
    )


def usage_to_langchain(usage: Usage) -> dict[str, Any]:
    """Render `Usage` as a LangChain ``usage_metadata`` dict (cache details only when non-zero)."""
    return render_usage(
        usage,
        input_key="input_tokens",
        output_key="output_tokens",
        details_key="input_token_details",
        read_key="cache_read",
        write_key="cache_creation",
    )


def write_usage(usage: Usage, raw: object) -> dict[str, Any]:
    """`Usage` as ``usage_metadata``: ``raw`` (the dict as read) while it still says the same."""
    if isinstance(raw, Mapping):
        try:
            if usage_from_langchain(raw) == usage:
                return dict(copy.deepcopy(raw))
        except InvalidMessageError:
            pass
    return usage_to_langchain(usage)
