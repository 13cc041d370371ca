"""The checkpoint's work log: every command and tool call with its last status, the last failure.

A summarizer, model or not, may leave a call out or call a failed one "ok";
a checkpoint updated ten times forgets what each update had to hide. The
`Ledger` is the part of a checkpoint written by code: each distinct call (its
command line, or tool and arguments) with how its latest run ended, how many
times it ran and, for a failure, the key error line; and the most recent
failure with its output's last lines verbatim. It lives whole in the
checkpoint's metadata under `LEDGER_KEY` and is merged with the next stretch
of history on every update, so a call the text had no room for comes back in
the next checkpoint instead of being lost; the text shows what fits
(`render`), newest first, and says how many it leaves to the metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from context_engine.messages import Message, ToolCall
from context_engine.structure import TRUNCATION_KEY
from context_engine.summarize.files import (
    DEFAULT_FILE_TOOLS,
    FileToolRule,
    files_in_call,
    parse_arguments,
)
from context_engine.summarize.ledger_text import OK_LEGEND, render_ledger
from context_engine.summarize.outcome import content_lines, one_line, outcome
from context_engine.summarize.shell import DEFAULT_SHELL_TOOLS, command_text

__all__ = [
    "COMMANDS",
    "FAILURE",
    "LEDGER_KEY",
    "LEDGER_TITLES",
    "OK",
    "OK_LEGEND",
    "OK_MARK",
    "RAN_MARK",
    "TOOLS",
    "Failure",
    "Ledger",
    "Run",
    "call_label",
    "names_scripts",
]

LEDGER_KEY = "context_engine.ledger"
"""Metadata key on a checkpoint: its whole `Ledger` (`Ledger.as_metadata`)."""

COMMANDS = "Commands run"
TOOLS = "Other tool calls"
FAILURE = "Most recent failure"
LEDGER_TITLES: tuple[str, ...] = (COMMANDS, TOOLS, FAILURE)
"""The section headings the ledger writes; code owns them in a checkpoint."""

_LABEL_CHARS = 160
_CONTINUED = ("(", "[", "{", ",", "\\")
_ARGUMENT_CHARS = 120
_NAMING_CHARS = 30  # a typed command line shorter than this names no step yet
_WORD_SLACK = 40  # characters a short form may run on to end its last word
_FAILURE_LINES = 6
_FAILURE_CHARS = 600
_FAILURE_LINE_CHARS = 400
_NO_RESULT = "no result yet"
OK = "ok"
"""The status of a call that ended well."""
OK_MARK = "✓"
"""How the work log marks a call whose latest run ended ok."""
RAN_MARK = "ran"
"""How it marks an inline script's opening line whose latest script ended ok.

That label names every script the agent runs behind the same opening
(``python -c " …``), not one program: a check mark on it would vouch for the
next script too, which the checkpoint has not seen run."""


def _code(label: str) -> str:
    return f"`` {label} ``" if "`" in label else f"`{label}`"


def _quote_left_open(text: str) -> bool:
    """Whether ``text`` ends inside a shell quote (``python -c "`` and its script below)."""
    quote = ""
    escaped = False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
    return bool(quote)


def names_scripts(label: str) -> bool:
    """Whether ``label`` is an opening line standing for the inline scripts run behind it."""
    return label.endswith(" …") and _quote_left_open(label[:-2])


def _opening(text: str, least: int = 0, *, shell: bool = False) -> str:
    """A command's first line, and the next ones while it is left open.

    A code cell often opens with a bare ``edit_file_by_replace(``, which names
    nothing yet: lines ending in an opening bracket, a comma or a backslash
    continue on the next, and so do lines inside a quote the first one opened.
    A shell command's first line is the command: a heredoc after it is data,
    and so is an inline script in a quote the line leaves open (``python -c "``
    and the script below it): the scripts an agent runs behind one opening
    line are one item with the last run's status and a run count, so a failed
    last run is never read off an older script's check mark. Lines continue
    too until the label has ``least`` characters (an editor's bare ``edit
    287:295`` is named by the first line of its new text).
    """
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = ""
    for count, line in enumerate(lines, 1):
        shown = " ".join(f"{shown} {line}".split())
        quoted = _quote_left_open(shown)
        open_ = not (shell and quoted) and (
            shown.endswith(_CONTINUED) or quoted or len(shown) < least
        )
        if not open_ or len(shown) >= _LABEL_CHARS:
            return shown + (" …" if count < len(lines) else "")
    return shown


def call_label(call: ToolCall, shell_tools: frozenset[str] = DEFAULT_SHELL_TOOLS) -> str:
    """How a call is named in a checkpoint: a command's opening, else ``tool(arguments)``.

    A tool that takes its own command line (SWE-agent's ``{"command":
    "find_file x.py"}``) is named by that line, as a shell command is.
    """
    arguments = parse_arguments(call.arguments)
    if call.name in shell_tools:
        text = command_text(call.arguments if arguments is None else arguments)
        if text is not None and text.strip():
            return one_line(_opening(text, shell=True), _LABEL_CHARS)
    line = _typed_line(call, arguments)
    if line is not None:
        return one_line(_opening(line, _NAMING_CHARS), _LABEL_CHARS)
    return f"{call.name}({one_line(call.arguments, _ARGUMENT_CHARS)})"


def _clip_words(label: str, chars: int) -> str:
    """``label`` cut after the word that reaches ``chars`` characters, and "…".

    A cut inside a word (``pytest tests/t…``) reads as the start of any later
    command that shares those letters; a whole last word (``tests/test_a.py…``)
    does not. A word that would add more than `_WORD_SLACK` characters is cut.
    """
    flat = " ".join(label.split())
    if len(flat) <= chars:
        return flat
    end = flat.find(" ", chars - 1)
    end = len(flat) if end < 0 else end
    if end >= len(flat) and len(flat) <= chars + _WORD_SLACK:
        return flat
    if end - chars + 1 > _WORD_SLACK:
        return one_line(flat, chars)
    return flat[:end].rstrip() + "…"


def _clip_at(label: str, chars: int) -> str:
    """``label`` cut to ``chars`` characters, "…" included (a blank is never the last kept)."""
    flat = " ".join(label.split())
    if len(flat) <= chars:
        return flat
    kept = flat[: chars - 1]
    return (flat[:chars] if kept.endswith(" ") else kept) + "…"


def _typed_line(call: ToolCall, arguments: Mapping[str, object] | None) -> str | None:
    """The command line of a tool that takes its own (``{"command": "open x.py 20"}``)."""
    line = arguments.get("command") if arguments is not None and len(arguments) == 1 else None
    if isinstance(line, str) and line.split(None, 1)[:1] == [call.name]:
        return line
    return None


@attrs.frozen
class Run:
    """One distinct call and how its latest run ended.

    Attributes:
        label: The call as `call_label` names it.
        command: Whether it is a shell command (else another tool's call).
        status: ``ok``, ``failed``, ``failed, exit N``, ``exit N, no output``,
            ``failed, exit 0 with a traceback`` or ``no result yet``.
        key_line: The key error line of the latest run when it failed.
        runs: How many times it ran (calls with the same label count as one:
            an agent re-running a command or a script it edits between runs).
    """

    label: str
    command: bool
    status: str
    key_line: str | None = None
    runs: int = 1

    def head(
        self, label_chars: int | None = None, *, whole_words: bool = True, ok_mark: bool = True
    ) -> str:
        """The label (clipped to ``label_chars`` with "…" when given) and the status, one line.

        ``cmd ✓`` for a call that ended ok, ``cmd (failed, exit 1)`` otherwise,
        the number of runs added when it ran more than once: ``cmd ✓ (3 runs)``;
        an inline script's opening line that ended ok gets no check mark
        (``python -c " … (ran, 3 runs)``, `RAN_MARK`).
        A work log lists hundreds of calls: a check mark and the bare label keep
        each item short, so more of them fit. The label is clipped after a whole
        word, or (``whole_words=False``, the densest form) right at
        ``label_chars``. With ``ok_mark=False`` a call that ended ok has no
        mark at all (``cmd``, ``cmd (3 runs)``): the work log says once, under
        its heading, that an item with no status ended ok (`OK_LEGEND`).
        """
        if label_chars is None:
            label = self.label
        elif whole_words:
            label = _clip_words(self.label, label_chars)
        else:
            label = _clip_at(self.label, label_chars)
        times = f"{self.runs} runs" if self.runs > 1 else ""
        mark = self.mark
        if mark == RAN_MARK:
            return f"{label} ({RAN_MARK}{', ' + times if times else ''})"
        if mark == OK_MARK:
            return (f"{label} {OK_MARK}" if ok_mark else label) + (f" ({times})" if times else "")
        return f"{label} ({self.status}{', ' + times if times else ''})"

    @property
    def mark(self) -> str:
        """How the latest run ended, as an item says it.

        `OK_MARK` for a call that ended ok, `RAN_MARK` for an inline script's
        opening line that did (the label stands for every script behind it,
        the next one too), else the status.
        """
        if self.status != OK:
            return self.status
        return RAN_MARK if names_scripts(self.label) else OK_MARK

    def item(self, *, key_line: bool = True) -> str:
        """The checkpoint item: label, status (and runs), key error line indented below."""
        head = self.head()
        return f"{head}\n  - {self.key_line}" if self.key_line and key_line else head


@attrs.frozen
class Failure:
    """The most recent failed call: its label and the last lines of its output, verbatim."""

    label: str
    output: str

    def item(self) -> str:
        """The checkpoint item: the label, then the output indented (one item, kept whole)."""
        lines = "\n".join(f"    {line}" for line in self.output.splitlines())
        return f"{_code(self.label)} failed with:\n{lines}"


def _tail(text: str) -> str:
    """The last lines of a failed output, bounded; the key line is almost always among them."""
    lines = [line.rstrip() for line in content_lines(text)]
    kept: list[str] = []
    size = 0
    for line in reversed(lines[-_FAILURE_LINES:]):
        line = line if len(line) <= _FAILURE_LINE_CHARS else line[: _FAILURE_LINE_CHARS - 1] + "…"
        if kept and size + len(line) > _FAILURE_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(reversed(kept))


def _failure_output(text: str, key_line: str | None) -> str:
    tail = _tail(text)
    if key_line and key_line not in " ".join(tail.split()):
        # The key line is further up (a long log after it): quote it first.
        return f"{key_line}\n…\n{tail}" if tail else key_line
    return tail


@attrs.frozen
class Ledger:
    """The calls of the summarized history with their last status, and the most recent failure.

    Attributes:
        runs: Distinct calls, in the order of their latest run (oldest first).
        failure: The most recent failure, or None.
        open_file: The file a SWE-agent style editor had open (its ``edit``
            calls act on it), handed to the next update's file tracking.
    """

    runs: tuple[Run, ...] = ()
    failure: Failure | None = None
    open_file: str | None = None

    @classmethod
    def of(cls, message: Message | None) -> Ledger:
        """The ledger a checkpoint carries in its metadata; empty when it has none."""
        recorded = message.metadata.get(LEDGER_KEY) if message is not None else None
        if not isinstance(recorded, Mapping):
            return cls()
        runs = tuple(
            Run(
                str(run["label"]),
                bool(run.get("command", True)),
                str(run.get("status", _NO_RESULT)),
                str(run["key_line"]) if run.get("key_line") else None,
                max(1, int(run.get("runs", 1))),
            )
            for run in recorded.get("runs", ())
            if isinstance(run, Mapping) and isinstance(run.get("label"), str)
        )
        failure = recorded.get("failure")
        last = (
            Failure(str(failure.get("label", "")), str(failure.get("output", "")))
            if isinstance(failure, Mapping)
            else None
        )
        open_file = recorded.get("open_file")
        return cls(runs, last, open_file if isinstance(open_file, str) else None)

    def as_metadata(self) -> dict[str, object]:
        """The JSON form stored under `LEDGER_KEY`."""
        found: dict[str, object] = {"runs": [attrs.asdict(run) for run in self.runs]}
        if self.failure is not None:
            found["failure"] = attrs.asdict(self.failure)
        if self.open_file is not None:
            found["open_file"] = self.open_file
        return found

    def __bool__(self) -> bool:
        return bool(self.runs or self.failure or self.open_file)

    def update(
        self,
        messages: Sequence[Message],
        *,
        shell_tools: frozenset[str] = DEFAULT_SHELL_TOOLS,
        file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS,
    ) -> Ledger:
        """This ledger followed by the calls of ``messages`` (a later stretch of history).

        A call run again moves to the end with its new status and one more run.
        A checkpoint among ``messages`` contributes its own ledger where it
        stands. A file tool's call (an edit, a read) is listed only when it
        failed or was typed as a command line (``open f 40``): the file
        lists say the rest.
        """
        runs = {run.label: run for run in self.runs}
        failure = self.failure
        results = {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}
        for message in messages:
            if message.is_summary:
                earlier = Ledger.of(message)
                for kept in earlier.runs:
                    runs.pop(kept.label, None)
                    runs[kept.label] = kept
                failure = earlier.failure or failure
                continue
            if TRUNCATION_KEY in message.metadata:
                continue
            for call in message.tool_calls:
                run, failed = _run(call, results.get(call.id), shell_tools, file_tools)
                if failed is not None:
                    failure = failed
                if run is None:
                    continue
                before = runs.pop(run.label, None)
                runs[run.label] = attrs.evolve(run, runs=run.runs + (before.runs if before else 0))
        return Ledger(tuple(runs.values()), failure, self.open_file)

    def render(self, max_chars: int, *, others: Sequence[str] = ()) -> str:
        """The ledger's sections in about ``max_chars`` characters ("" when empty).

        The most recent failure is placed first in the budget (and shown
        last), then as many calls as fit, newest first, briefly before in
        full (`context_engine.summarize.ledger_text`); a section that cannot
        show every call says ``(+N more)`` (the rest stays in the metadata).
        ``others`` are the labels of calls the view shows elsewhere: no call
        is shortened to a prefix one of them shares.
        """
        return render_ledger(self, max_chars, others=others)


def _run(
    call: ToolCall,
    result: Message | None,
    shell_tools: frozenset[str],
    file_tools: Mapping[str, FileToolRule],
) -> tuple[Run | None, Failure | None]:
    """The call's entry (None for a file tool call that did not fail) and its failure, if any."""
    label = call_label(call, shell_tools)
    command = call.name in shell_tools
    if result is None:
        status, key, failure = _NO_RESULT, None, None
    else:
        ended = outcome(result)
        status, key = ended.status, ended.key_line
        # A failure with nothing to quote (no output) does not replace an earlier one.
        failed = ended.failed and key is not None
        failure = Failure(label, _failure_output(result.text, key)) if failed else None
    # A file tool's call is in the file lists; one typed as a command line (an
    # editor's ``open f 40``, ``edit 3:5``) is a step of its own, listed as typed.
    file_call = not command and files_in_call(call, file_tools) is not None
    if file_call and failure is None and _typed_line(call, parse_arguments(call.arguments)) is None:
        return None, None
    return Run(label, command, status, key), failure
