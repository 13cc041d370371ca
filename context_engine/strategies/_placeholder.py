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
import re

import attrs

from context_engine._memo import memoized
from context_engine.messages import Message, ToolCall
from context_engine.strategies._preview import ERROR_LINE
from context_engine.summarize.files import PATH_ARGUMENTS
from context_engine.summarize.shell import command_text

__all__ = ["MAX_PLACEHOLDER_CHARS", "Outcome", "describe", "outcome"]

_TOOL_CHARS = 40
_PREVIEW_CHARS = 80
_LINE_CHARS = 120
MAX_PLACEHOLDER_CHARS = _TOOL_CHARS + _PREVIEW_CHARS + _LINE_CHARS + 140
"""Longest placeholder `describe` writes (the archive note comes on top)."""

_EXIT = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|\b(?:[Ee]xit(?:ed)? (?:with )?(?:code|status)|returned non-zero exit status)[:=\s]*(-?\d+)"
)
# The header of a Python traceback matches ERROR_LINE but says nothing: the
# exception line below it is the one worth quoting.
_NOT_KEY = re.compile(r"^\s*Traceback \(most recent call last\)|^\s*<returncode>")
# A raised exception's own line ("NameError: name 'Query' is not defined"), the
# best key line when there is one: a traceback's source lines may also match.
_EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)")
_SUMMARY_FAILED = re.compile(r"\b[1-9]\d* (?:failed|errors?)\b")
_OUTCOME_KEY = ("context_engine.strategies.placeholder.outcome",)


@attrs.frozen
class Outcome:
    """How a tool call ended, as far as its result text tells.

    Attributes:
        exit_status: The exit status the output states, or None.
        failed: Whether the result looks like a failure (a non-zero exit
            status; without one, a traceback, or an error-like first or last line).
        key_line: The key line of a failure: the first raised exception's line
            (``NameError: ...``), else the first error-like line (a traceback's
            header skipped), or None.
    """

    exit_status: int | None
    failed: bool
    key_line: str | None


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _outcome(result: Message) -> Outcome:
    text = result.text
    found = _EXIT.search(text)
    status = int(found[1] or found[2]) if found is not None else None
    lines = [line for line in text.splitlines() if line.strip()]
    if status is not None:
        failed = status != 0
    else:
        ends = lines[:1] + lines[-1:]
        failed = "Traceback (most recent call last)" in text or any(
            ERROR_LINE.search(line) or _SUMMARY_FAILED.search(line) for line in ends
        )
    key = None
    if failed:
        errors = [line for line in lines if ERROR_LINE.search(line) and not _NOT_KEY.match(line)]
        key = next((line for line in errors if _EXCEPTION_LINE.match(line)), None)
        key = key if key is not None else next(iter(errors), None)
    return Outcome(status, failed, _one_line(key, _LINE_CHARS) if key is not None else None)


def outcome(result: Message) -> Outcome:
    """How the call ``result`` answers ended; computed once per result message."""
    return memoized(result, _OUTCOME_KEY, _outcome)


def _preview(call: ToolCall) -> str:
    try:
        arguments = json.loads(call.arguments)
    except (ValueError, RecursionError):
        arguments = None
    if not isinstance(arguments, dict):
        return _one_line(call.arguments, _PREVIEW_CHARS)
    text = command_text(arguments)
    if text is None:
        text = next(
            (arguments[k] for k in PATH_ARGUMENTS if isinstance(arguments.get(k), str)), None
        )
    if text is None:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        text = text.removeprefix("{").removesuffix("}")
    lines = text.strip().splitlines() or [""]
    return _one_line(lines[0] + (" …" if len(lines) > 1 else ""), _PREVIEW_CHARS)


def describe(call: ToolCall | None, result: Message) -> str:
    """The placeholder of ``result``: tool, argument preview, outcome, key error line.

    Deterministic (a pure function of ``call`` and ``result``) and at most
    `MAX_PLACEHOLDER_CHARS` characters.
    """
    tool = _one_line(call.name if call is not None else result.name or "a tool", _TOOL_CHARS)
    what = f"{tool} {_preview(call)}".rstrip() if call is not None else tool
    ended = outcome(result)
    if ended.exit_status is not None:
        status = f"exit status {ended.exit_status}" + (", error" if ended.failed else "")
    elif ended.failed:
        status = "error"
    else:
        count = len(result.text.splitlines())
        status = f"{count:,} line{'s' if count != 1 else ''} of output"
    key = f"; key line: {ended.key_line}" if ended.key_line else ""
    return (
        f"[Output of `{what}` cleared to save context space ({status}{key}). "
        "Run the tool again if you need it.]"
    )
