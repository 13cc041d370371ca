"""How a tool call ended, read from its result: exit status, failure, key error line.

Shared by everything that reports a call after its output is gone: the
placeholder microcompact leaves (`context_engine.strategies._placeholder`),
the checkpoint's command list and its most recent failure
(`context_engine.summarize.ledger`). One reading, so a call is never "ok" in
one place and "failed" in another.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import attrs

from context_engine._memo import memoized
from context_engine.formats._anthropic_blocks import IS_ERROR_KEY
from context_engine.formats._strands_blocks import STATUS_KEY
from context_engine.messages import Message

__all__ = ["ENDED_KEY", "ERROR_LINE", "Outcome", "content_lines", "one_line", "outcome"]

ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)"
    r"|(?:Error|Exception)\b"  # ValueError, AssertionError, RuntimeException
    r"|\b(?:error|fatal|panic)(?:\[\w+\])?:"  # compilers, git: "error: ...", "error[E0308]:"
    r"|\b(?:ERROR|FATAL|FAILED|FAIL|FAILURE|CRITICAL)\b"
    r"|\b[Ee]xception\b|\bpanicked at\b|Segmentation fault"
    r"|\b[Ee]xit (?:code|status)\b|\bexited with\b|\breturned non-zero\b"
)
"""Matches a line that reports an error (a traceback, ``FAILED``, ``error:``, an exit status)."""

_EXIT = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|\b(?:[Ee]xit(?:ed)? (?:with )?(?i:code|status)|returned non-zero exit status)[:=\s]*(-?\d+)"
    r'|"exit_code"\s*:\s*(-?\d+)'  # Codex's exec output: {"output": ..., "metadata": {...}}
)
_TRACEBACK = "Traceback (most recent call last)"
# The header of a Python traceback matches ERROR_LINE but says nothing: the
# exception line below it is the one worth quoting.
# nor does a line that only states the exit status (the status says it already).
_NOT_KEY = re.compile(
    r"^\s*Traceback \(most recent call last\)|^\s*<returncode>"
    r"|^\W*(?:[Ee]xit(?:ed)? (?:with )?(?:code|status)|[Rr]eturn ?code)\W*-?\d+\W*$"
)
# A raised exception's own line ("NameError: name 'Query' is not defined"), the
# best key line when there is one: a traceback's source lines may also match.
# A linter's listing of one ("- E999 SyntaxError: unmatched ')'") and pytest's
# explanation ("E   AssertionError: ...") count too.
_EXCEPTION_LINE = re.compile(
    r"^\s*(?:[-*]\s+|E\s{2,})?(?:[A-Z]\d{3,4}\s+)?(?:[\w.]+\.)?\w*"
    r"(?:Error|Exception|Exit|Interrupt)\b(?::|$)"
)
# What closes a Python traceback: an exception's (dotted) class name, its message after ": ".
_RAISED = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::(?:\s.*)?)?$")
# Pytest's explanation of a failed test, under the source line it failed on.
_PYTEST_E = re.compile(r"^E\s{2,}\S")
# Tools that state a failure in words, first thing: an editor refusing an edit, a shell.
_REPORTED = re.compile(
    r"(?i)\bsyntax error|command not found|no such file or directory|permission denied"
    r"|\b(?:has|have|was|were) not been applied\b"
)
_OPENING_LINES = 3
_SUMMARY_FAILED = re.compile(r"\b[1-9]\d* (?:failed|errors?)\b")
_TAG_LINE = re.compile(r"^\s*(?:</?[A-Za-z_][\w-]*>\s*)+$|^\s*<returncode>.*</returncode>\s*$")
_LINE_CHARS = 240
_OUTCOME_KEY = ("context_engine.summarize.outcome",)
ENDED_KEY = "context_engine.ended"
"""Metadata key on a cleared tool result: how its original ended (`Outcome.as_metadata`).

A placeholder's own words ("exit status 0, error; key line: ...") are not
its original's output: a checkpoint written later, from a transcript that
kept the placeholder, reads the outcome from here (`outcome`)."""
# `context_engine.formats.langchain.MESSAGE_KEY`: that module needs the langchain extra.
_LANGCHAIN_MESSAGE_KEY = "langchain.message"


def _flagged(result: Message) -> bool:
    """Whether the runtime itself marked the result as an error.

    Anthropic's ``is_error`` on a ``tool_result`` (Claude Code sets it on a
    refused edit as on a failed command), a Strands ``toolResult`` with status
    ``error``, a LangChain ``ToolMessage`` with status ``error``: the converters
    keep them in the message's metadata.
    """
    meta = result.metadata
    langchain = meta.get(_LANGCHAIN_MESSAGE_KEY)
    return (
        meta.get(IS_ERROR_KEY) is True
        or meta.get(STATUS_KEY) == "error"
        or (isinstance(langchain, Mapping) and langchain.get("status") == "error")
    )


@attrs.frozen
class Outcome:
    """How a tool call ended, as far as its result text tells.

    Attributes:
        exit_status: The exit status the output states, or None.
        failed: Whether the result looks like a failure (a non-zero exit
            status or a traceback; without a status, a traceback, an error-like first or last line,
            or an error stated in words in the first lines: "syntax error",
            "command not found", "not been applied"), or the runtime marked
            it as an error (Anthropic's ``is_error``, a Strands or LangChain
            tool result with status ``error``, kept in the metadata by the
            converters).
        key_line: The key line of a failure, or None: the exception line that
            closes the last traceback (what was finally raised, even when more
            output with "Error" in it follows), else the first exception line,
            else pytest's first explanation line (``E   assert 3 == 4``), else
            the first error-like line, else (a non-zero exit status and no
            error line) the last line of output.
    """

    exit_status: int | None
    failed: bool
    key_line: str | None

    def as_metadata(self) -> dict[str, object]:
        """The JSON form stored under `ENDED_KEY`."""
        return {"exit_status": self.exit_status, "failed": self.failed, "key_line": self.key_line}

    @classmethod
    def of(cls, recorded: object) -> Outcome | None:
        """The outcome ``recorded`` under `ENDED_KEY`; None when it is not one."""
        if not isinstance(recorded, Mapping) or not isinstance(recorded.get("failed"), bool):
            return None
        status, key = recorded.get("exit_status"), recorded.get("key_line")
        return cls(
            status if isinstance(status, int) and not isinstance(status, bool) else None,
            recorded["failed"],
            key if isinstance(key, str) else None,
        )

    @property
    def status(self) -> str:
        """``ok``, ``failed``, ``failed, exit N`` or ``exit N, no output``.

        An exit status of 0 with a Python traceback in the output is a failure
        too: ``failed, exit 0 with a traceback``.
        """
        if not self.failed:
            return "ok"
        if self.exit_status is None:
            return "failed"
        if self.exit_status == 0:
            return "failed, exit 0 with a traceback"
        if self.key_line is None:
            # grep finding nothing, test -f saying no: a negative answer, not an error.
            return f"exit {self.exit_status}, no output"
        return f"failed, exit {self.exit_status}"


def one_line(text: str, limit: int) -> str:
    """``text`` with its blanks collapsed, clipped to ``limit`` characters with "…"."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def content_lines(text: str) -> list[str]:
    """The non-blank lines of a result, without lone markup tags (``<output>``)."""
    return [line for line in text.splitlines() if line.strip() and not _TAG_LINE.match(line)]


def _reports_error(line: str) -> bool:
    return bool(ERROR_LINE.search(line) or _REPORTED.search(line))


def _raised(text: str, header: int) -> str | None:
    """The line that closes the traceback whose header starts at ``header``, or None.

    A traceback's frames are indented under its header; the first line back at
    the header's own indentation names what was raised (``TypeError: ...``,
    ``pkg.errors.ConfigError``, ``KeyboardInterrupt``). Output printed after it
    (a log line "  Error: ...", a summary) comes later and is not it. None when
    that line does not name an exception or no frame came before it (the output
    was cut inside the traceback and went on, or holds it escaped on one line).
    Output that ends inside the traceback (``| head -5``) gives its last line:
    the deepest frame shown, where it was raised.
    """
    start = text.rfind("\n", 0, header) + 1
    prefix = text[start:header]
    # An indented traceback (a tool's report) keeps its frames deeper still; one
    # behind a log prefix ("ERROR root: Traceback ...") has its frames indented from 0.
    indent = len(prefix) if not prefix.strip() else 0
    frame = None
    for line in text[header:].splitlines()[1:]:
        stripped = line.strip()
        if not stripped or _TAG_LINE.match(line):
            continue
        if len(line) - len(line.lstrip()) > indent:
            frame = line  # "  File ...", its source line, "    ^^^^"
            continue
        return line if frame is not None and _RAISED.match(stripped) else None
    # The output ends inside the traceback (``| head``): its deepest frame says where.
    return frame


def _pytest_explanation(lines: list[str]) -> str | None:
    """Pytest's first explanation line (``E       assert 3 == 4``) when the output has one."""
    return next((line for line in lines if _PYTEST_E.match(line)), None)


def _key_line(text: str, lines: list[str]) -> str | None:
    errors = [line for line in lines if _reports_error(line) and not _NOT_KEY.match(line)]
    last = text.rfind(_TRACEBACK)
    if last >= 0:
        # What a traceback ends on is what was raised; chained ones end on the last.
        raised = _raised(text, last)
        if raised is not None:
            return raised
        after = [line for line in text[last:].splitlines() if _EXCEPTION_LINE.match(line)]
        if after:
            return after[-1]
    key = next((line for line in errors if _EXCEPTION_LINE.match(line)), None)
    if key is None:
        key = _pytest_explanation(lines)
    return key if key is not None else next(iter(errors), None)


def _outcome(result: Message) -> Outcome:
    recorded = Outcome.of(result.metadata.get(ENDED_KEY))
    if recorded is not None:
        return recorded  # a placeholder standing for its original
    text = result.text
    found = _EXIT.search(text)
    status = int(found[1] or found[2] or found[3]) if found is not None else None
    lines = content_lines(text)
    flagged = _flagged(result)
    if status is not None:
        # A script that catches and prints its traceback still exits 0: it raised all the same.
        failed = status != 0 or _TRACEBACK in text or flagged
    else:
        ends = lines[:1] + lines[-1:]
        failed = (
            flagged
            or _TRACEBACK in text
            or any(ERROR_LINE.search(line) or _SUMMARY_FAILED.search(line) for line in ends)
            or any(_REPORTED.search(line) for line in lines[:_OPENING_LINES])
        )
    key = _key_line(text, lines) if failed else None
    if key is None and failed and lines:
        if status is not None:
            key = lines[-1]  # a non-zero exit and no error line: what it said last
        elif flagged:
            key = lines[0]  # the runtime said it failed: its first words say why
    return Outcome(status, failed, one_line(key, _LINE_CHARS) if key is not None else None)


def outcome(result: Message) -> Outcome:
    """How the call ``result`` answers ended; computed once per result message.

    A cleared result that records its original's outcome (`ENDED_KEY`) ended
    as that original did, whatever its placeholder text says.
    """
    return memoized(result, _OUTCOME_KEY, _outcome)
