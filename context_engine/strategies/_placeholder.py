"""Self-describing placeholders for cleared tool results, and how a result ended.

A cleared result should still tell the model what the call was and how it
ended, so it need not run the call again to find out: the tool, a short
preview of its arguments, the exit status when the output states one (or
"error" when it looks like a failure) and its key error line. The text is a
pure function of the call and the result, so the same original always gets the
same placeholder (the provider's prompt cache depends on it), and it is
bounded in length whatever the input.
"""

from __future__ import annotations

import json

from context_engine.messages import Message, ToolCall
from context_engine.summarize.files import PATH_ARGUMENTS
from context_engine.summarize.outcome import Outcome, one_line, outcome
from context_engine.summarize.shell import command_text

__all__ = ["MAX_PLACEHOLDER_CHARS", "Outcome", "describe", "outcome"]

_TOOL_CHARS = 40
_PREVIEW_CHARS = 80
_LINE_CHARS = 240  # a whole exception line, most of the time
MAX_PLACEHOLDER_CHARS = _TOOL_CHARS + _PREVIEW_CHARS + _LINE_CHARS + 140
"""Longest placeholder `describe` writes (the archive note comes on top)."""


def _preview(call: ToolCall) -> str:
    try:
        arguments = json.loads(call.arguments)
    except (ValueError, RecursionError):
        arguments = None
    if not isinstance(arguments, dict):
        return one_line(call.arguments, _PREVIEW_CHARS)
    text = command_text(arguments)
    if text is None:
        text = next(
            (arguments[k] for k in PATH_ARGUMENTS if isinstance(arguments.get(k), str)), None
        )
    if text is None:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        text = text.removeprefix("{").removesuffix("}")
    lines = text.strip().splitlines() or [""]
    return one_line(lines[0] + (" …" if len(lines) > 1 else ""), _PREVIEW_CHARS)


def describe(call: ToolCall | None, result: Message) -> str:
    """The placeholder of ``result``: tool, argument preview, outcome, key error line.

    Deterministic (a pure function of ``call`` and ``result``) and at most
    `MAX_PLACEHOLDER_CHARS` characters.
    """
    tool = one_line(call.name if call is not None else result.name or "a tool", _TOOL_CHARS)
    what = f"{tool} {_preview(call)}".rstrip() if call is not None else tool
    ended = outcome(result)
    if ended.exit_status is not None:
        status = f"exit status {ended.exit_status}" + (", error" if ended.failed else "")
    elif ended.failed:
        status = "error"
    else:
        count = len(result.text.splitlines())
        status = f"{count:,} line{'s' if count != 1 else ''} of output"
    key = f"; key line: {one_line(ended.key_line, _LINE_CHARS)}" if ended.key_line else ""
    return (
        f"[Output of `{what}` cleared to save context space ({status}{key}). "
        "Run the tool again if you need it.]"
    )
