"""Ground truth of `fidelity.py`: what an agent did, read off the original transcript.

Written for the benchmark and independent of the engine's own parsers (it never
imports ``context_engine.summarize``): which files the agent edited (editor
tools and shell writes), which it read, which commands it ran and how each
ended, its most recent failure and that failure's key line, and the constraint
sentences of the user's messages. Every function is pure, so the tests check
them on a table of real-looking commands.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from context_engine import Message, ToolCall

__all__ = [
    "Failure",
    "Step",
    "Truth",
    "call_arguments",
    "constraint_sentences",
    "failure_line",
    "shell_reads",
    "shell_writes",
    "truth_of",
]

# -- shell commands ---------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")
_SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_REDIRECTS = frozenset({">", ">>", "&>", "&>>", ">|"})
_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "-"})
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "command", "builtin", "exec", "xargs"})
_PY_WRITE = re.compile(
    r"""open\(\s*[rbf]?(['"])(?P<a>[^'"\n]+)\1\s*,\s*(?:mode\s*=\s*)?[rbf]?(['"])[^'"]*[wax+]"""
    r"""|Path\(\s*[rbf]?(['"])(?P<b>[^'"\n]+)\4\s*\)\s*\.\s*write_(?:text|bytes)"""
)
_DIFF_TARGET = re.compile(r"^\+\+\+ (?:b/)?(?P<path>[^\t\n]+?)(?:\t.*)?$", re.MULTILINE)
_READERS = frozenset({"cat", "head", "tail", "less", "more", "nl", "bat", "view", "vim", "vi"})


def _strip_heredocs(command: str) -> tuple[str, list[str]]:
    """The command without its here-document bodies, and the bodies."""
    lines = command.split("\n")
    kept: list[str] = []
    bodies: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        kept.append(line)
        i += 1
        for match in _HEREDOC.finditer(line):
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != match[2]:
                body.append(lines[i])
                i += 1
            i += 1  # the terminator
            bodies.append("\n".join(body))
    return "\n".join(kept), bodies


def _tokens(command: str) -> list[str]:
    """Shell tokens with operators apart; a quoting error falls back to splitting on blanks."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return re.findall(r"[;&|()<>]+|[^\s;&|()<>]+", command)


def _simple_commands(command: str) -> list[list[str]]:
    """The simple commands of ``command`` (heredoc bodies removed), newlines separating too."""
    text, _ = _strip_heredocs(command)
    found: list[list[str]] = []
    for line in re.split(r"\n", text):
        current: list[str] = []
        for token in _tokens(line):
            if token in _SEPARATORS:
                if current:
                    found.append(current)
                current = []
            else:
                current.append(token)
        if current:
            found.append(current)
    return found


def _program(words: list[str]) -> tuple[str, list[str]]:
    """The program name (wrappers and ``VAR=value`` skipped) and its arguments."""
    i = 0
    while i < len(words) and (re.match(r"^[A-Za-z_]\w*=", words[i]) or words[i] in _WRAPPERS):
        i += 1
    if i >= len(words):
        return "", []
    return words[i].rsplit("/", 1)[-1], words[i + 1 :]


def _redirect_targets(words: list[str]) -> tuple[list[str], list[str]]:
    """(files written by ``>``-style redirections, the words without any redirection)."""
    targets: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        op = word
        if re.fullmatch(r"\d", word) and i + 1 < len(words) and words[i + 1] in _REDIRECTS:
            i += 1  # "2 >" : the descriptor number before an operator
            op = words[i]
        if op in _REDIRECTS and i + 1 < len(words):
            target = words[i + 1]
            if not target.startswith("&") and target not in _NOT_FILES:
                targets.append(target)
            i += 2
            continue
        if op in {"<", "<<", "<<<", ">&", "<&", "<<-"}:
            i += 2  # an input or a descriptor duplication and its word
            continue
        rest.append(word)
        i += 1
    return targets, rest


def _operands(args: list[str], takes_value: frozenset[str] = frozenset()) -> list[str]:
    """The non-option arguments (``--`` ends the options; listed flags consume a value)."""
    found: list[str] = []
    skip = False
    options = True
    for arg in args:
        if skip:
            skip = False
            continue
        if options and arg == "--":
            options = False
        elif options and arg.startswith("-") and arg != "-":
            skip = arg in takes_value
        else:
            found.append(arg)
    return found


def _sed_files(args: list[str]) -> tuple[bool, list[str]]:
    """(edits in place, the files of a ``sed`` command)."""
    in_place = any(a == "--in-place" or re.match(r"^-[a-zA-Z]*i", a) for a in args)
    has_script = any(a in ("-e", "-f") or a.startswith("--expression") for a in args)
    operands = _operands(args, frozenset({"-e", "-f", "--expression", "-l"}))
    return in_place, operands if has_script else operands[1:]


def _perl_files(args: list[str]) -> list[str]:
    if not any(re.match(r"^-[a-zA-Z]*i", a) for a in args):
        return []
    operands = _operands(args, frozenset({"-e", "-E", "-M"}))
    has_script = any(re.match(r"^-[a-zA-Z]*[eE]$", a) for a in args)
    return operands if has_script else operands[1:]


def _copy_target(args: list[str]) -> list[str]:
    """The destination of ``cp``/``mv``/``install`` (``-t DIR`` or the last operand)."""
    for i, arg in enumerate(args):
        if arg in ("-t", "--target-directory") and i + 1 < len(args):
            sources = _operands(args[:i] + args[i + 2 :])
            return [f"{args[i + 1].rstrip('/')}/{s.rsplit('/', 1)[-1]}" for s in sources]
    operands = _operands(args, frozenset({"-S", "--suffix", "-m", "--mode"}))
    if len(operands) < 2:
        return []
    *sources, target = operands
    if target.endswith("/") or target == ".":
        return [f"{target.rstrip('/')}/{s.rsplit('/', 1)[-1]}".lstrip("./") for s in sources]
    return [target]


def _python_writes(code: str) -> list[str]:
    return [m["a"] or m["b"] for m in _PY_WRITE.finditer(code)]


def _diff_targets(text: str) -> list[str]:
    return [m["path"].strip() for m in _DIFF_TARGET.finditer(text) if m["path"] != "/dev/null"]


def shell_writes(command: str) -> list[str]:
    """The files a shell command writes, in order, without repeats.

    Covers redirections (``>``, ``>>``, ``cat > f <<EOF``), ``tee``, ``sed -i``,
    ``perl -i``, ``cp``/``mv``/``install`` targets, ``touch``, ``dd of=``,
    ``python -c`` / ``python - <<EOF`` code that opens a file for writing, and
    ``git apply`` / ``patch`` fed a diff in a here-document.
    """
    written: list[str] = []
    _, bodies = _strip_heredocs(command)
    for words in _simple_commands(command):
        targets, words = _redirect_targets(words)
        written += targets
        program, args = _program(words)
        if program == "tee":
            written += _operands(args)
        elif program == "sed":
            in_place, files = _sed_files(args)
            written += files if in_place else []
        elif program == "perl":
            written += _perl_files(args)
        elif program in ("cp", "mv", "install", "rsync"):
            written += _copy_target(args)
        elif program == "touch":
            written += _operands(args, frozenset({"-d", "-r", "-t"}))
        elif program == "dd":
            written += [a[3:] for a in args if a.startswith("of=")]
        elif re.fullmatch(r"python[\d.]*", program):
            code = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "-c"), "")
            written += _python_writes(code)
    if re.search(r"\bpython[\d.]*\b", command):
        for body in bodies:
            written += _python_writes(body)
    if re.search(r"\b(?:git\s+apply|patch)\b", command):
        for body in bodies:
            written += _diff_targets(body)
    return list(dict.fromkeys(p for p in written if p and not p.startswith("-")))


def _looks_like_file(word: str) -> bool:
    return bool(re.search(r"[\w-]\.[A-Za-z0-9]{1,8}$", word)) and not word.startswith("-")


def shell_reads(command: str) -> list[str]:
    """The files a shell command shows the agent: ``cat``, ``head``, ``nl``..., ``sed -n``."""
    read: list[str] = []
    for words in _simple_commands(command):
        _, words = _redirect_targets(words)
        program, args = _program(words)
        if program in _READERS:
            counted = frozenset({"-n", "-c"}) if program in ("head", "tail") else frozenset()
            read += [a for a in _operands(args, counted) if _looks_like_file(a)]
        elif program == "sed":
            in_place, files = _sed_files(args)
            read += [] if in_place else [f for f in files if _looks_like_file(f)]
        elif program in ("grep", "egrep", "rg", "awk"):
            operands = _operands(args, frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "-F"}))
            read += [a for a in operands[1:] if _looks_like_file(a)]
    return list(dict.fromkeys(read))


# -- tool calls -------------------------------------------------------------------------------

_SHELL_KEYS = ("command", "cmd", "code", "script")
_PATH_KEYS = ("path", "file_path", "filename", "file", "target_file", "notebook_path")
_EDIT_COMMANDS = frozenset({"create", "str_replace", "insert", "undo_edit", "write", "append"})
# OpenHands' file helpers inside an IPython cell, by what they do to their first argument.
_CELL_EDIT = re.compile(
    r"\b(?:edit_file_by_replace|create_file|append_file|insert_content_at_line|edit_file)"
    r"\(\s*(['\"])(?P<path>[^'\"]+)\1"
)
_CELL_READ = re.compile(r"\bopen_file\(\s*(['\"])(?P<path>[^'\"]+)\1")


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as a dict (``{"_raw": text}`` when they are not a JSON object)."""
    try:
        value = json.loads(call.arguments)
    except ValueError:
        return {"_raw": call.arguments}
    return value if isinstance(value, dict) else {"_raw": call.arguments}


def _first_str(args: dict[str, Any], keys: Sequence[str]) -> str | None:
    for key in keys:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


@dataclass
class _Cursor:
    """SWE-agent's editor state: ``edit`` and ``insert`` act on the file ``open`` last showed."""

    current: str | None = None


@dataclass(frozen=True)
class CallFacts:
    """What one tool call did, by this module's reading."""

    step: str  # the command string, or the tool name with its leading scalar arguments
    values: tuple[str, ...]  # scalar argument values a structured call is recognised by
    edited: tuple[str, ...]
    read: tuple[str, ...]


def _editor_command(name: str, text: str, cursor: _Cursor) -> tuple[list[str], list[str]]:
    """(edited, read) of a SWE-agent style command line (``open f``, ``create f``, ``edit 3:5``)."""
    words = text.split()
    verb = words[0] if words else name
    target = words[1] if len(words) > 1 else None
    if verb == "open" and target:
        cursor.current = target.strip("\"'")
        return [], [cursor.current]
    if verb == "create" and target:
        cursor.current = target.strip("\"'")
        return [cursor.current], []
    if verb in ("edit", "insert", "append") and cursor.current:
        return [cursor.current], []
    return [], []


def _facts(call: ToolCall, cursor: _Cursor) -> CallFacts:
    args = call_arguments(call)
    name = call.name
    script = _first_str(args, _SHELL_KEYS)
    path = _first_str(args, _PATH_KEYS)
    edited: list[str] = []
    read: list[str] = []
    if name in ("str_replace_editor", "str_replace_based_edit_tool", "editor") and path:
        verb = str(args.get("command", "view"))
        (edited if verb in _EDIT_COMMANDS else read).append(path)
        return CallFacts(f"{name} {verb} {path}", (), tuple(edited), tuple(read))
    if name in ("open", "create", "edit", "insert", "append") and script is None:
        # SWE-agent's function-calling editor: the path is an argument or the open file.
        line = f"{name} {path}" if path else name
        edited, read = _editor_command(name, line, cursor)
        return CallFacts(line, (), tuple(edited), tuple(read))
    if script is not None:
        first = script.strip().split(None, 1)[0] if script.strip() else ""
        if name not in ("bash", "execute_bash", "shell") and first in (
            "open",
            "create",
            "edit",
            "insert",
            "append",
        ):
            edited, read = _editor_command(name, script.strip(), cursor)
        elif name == "execute_ipython_cell":
            edited = [m["path"] for m in _CELL_EDIT.finditer(script)] + _python_writes(script)
            read = [m["path"] for m in _CELL_READ.finditer(script)]
        else:
            edited, read = shell_writes(script), shell_reads(script)
            return CallFacts(_one_line(script), (), tuple(edited), tuple(read))
        return CallFacts(_opening(script), (), tuple(edited), tuple(read))
    if path and re.search(r"(?i)write|edit|create|replace|insert|patch|append", name):
        edited.append(path)
    elif path and re.search(r"(?i)read|view|open|cat", name):
        read.append(path)
    values = tuple(
        str(v) for v in args.values() if isinstance(v, str | int | float) and str(v).strip()
    )[:2]
    return CallFacts(name, values, tuple(edited), tuple(read))


def _one_line(text: str) -> str:
    """The first non-blank line of a command, blanks collapsed."""
    for line in text.strip().split("\n"):
        if line.strip():
            return " ".join(line.split())
    return ""


def _opening(code: str, least: int = 30) -> str:
    """The first lines of a code cell, blanks collapsed, until they say ``least`` characters.

    A shell command is its first line (a heredoc after it is data); a cell of code
    often opens with a bare ``edit_file_by_replace(``, which names no step yet.
    """
    opening = ""
    for line in code.strip().split("\n"):
        opening = " ".join(f"{opening} {line}".split())
        if len(opening) >= least:
            break
    return opening


# -- tool results -----------------------------------------------------------------------------

_RETURN_CODE = re.compile(
    r"<returncode>\s*(-?\d+)\s*</returncode>"
    r"|\b(?:exit code|exit status|exited with code)\W{0,3}(-?\d+)",
    re.IGNORECASE,
)
_EXCEPTION_LINE = re.compile(
    r"^\W{0,4}(?:[A-Z]\d{3}\s+)?[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)\b:?.*\S"
)
_ERROR_LINE = re.compile(
    r"(?i)^(?:error|fatal|e\s{2,}|failed\b|failure)\b.*\S"
    r"|\b(?:command not found|no such file or directory|permission denied|"
    r"syntax error|traceback \(most recent call last\))"
)
_TAG = re.compile(r"^\s*</?[A-Za-z_][\w-]*>\s*$|^\s*<returncode>.*</returncode>\s*$")


@dataclass(frozen=True)
class Failure:
    """A tool result that reports a failure, and the line that says what went wrong."""

    index: int
    call_id: str | None
    key_line: str


def _content_lines(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.strip() and not _TAG.match(line)]


def failure_line(text: str) -> str | None:
    """The key line of a failed tool result, or None when the result does not report a failure.

    A failure is a nonzero exit status, a Python traceback, or (no exit status
    given) output opening with an error line. The key line is the exception
    line closing the last traceback, else the first error-looking line, else
    (a nonzero exit with no error line) the last line of output; stripped.
    """
    codes = [int(a or b) for a, b in _RETURN_CODE.findall(text)]
    lines = _content_lines(text)
    traceback = "Traceback (most recent call last)" in text
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    errors = [line for line in lines if _ERROR_LINE.search(line)]
    if codes and codes[-1] == 0 and not traceback:
        return None
    if not codes and not traceback:
        opening = lines[:3]
        if not any(_ERROR_LINE.search(x) or _EXCEPTION_LINE.match(x) for x in opening):
            return None
    if traceback:
        # The exception line closes the traceback; a cut-off one ends on its deepest frame.
        return (exceptions or lines)[-1].strip()
    candidates = exceptions or errors
    if candidates:
        return candidates[0].strip()
    return lines[-1].strip() if lines and codes else None


# -- user messages ----------------------------------------------------------------------------

_CONSTRAINT = re.compile(
    r"(?i)\b(?:must(?:n't| not)?|don't|do not|never|always|only|should(?:n't| not)?|"
    r"shall not|cannot|can't|make sure|ensure|required|avoid|no need to|not allowed|"
    r"is forbidden|important)\b"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_MARKUP = re.compile(r"^[\s>*#\-\d.)]+|[*_`]+")


def constraint_sentences(text: str) -> list[str]:
    """The sentences of a user message that state a constraint (must, don't, never, only...).

    Sentences end at ``.``, ``!`` or ``?`` followed by a blank, and at line
    breaks; list markers and emphasis are dropped; sentences under four words
    are left out (a heading, a lone "IMPORTANT").
    """
    found = []
    for piece in _SENTENCE_END.split(text):
        sentence = _MARKUP.sub("", piece).strip()
        if len(sentence.split()) >= 4 and _CONSTRAINT.search(sentence):
            found.append(sentence)
    return list(dict.fromkeys(found))


# -- the truth of a whole transcript ----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One command or tool call the agent made, with the index of its assistant message."""

    index: int
    call_id: str
    key: str
    values: tuple[str, ...]
    failed: bool | None  # None: no result seen


@dataclass
class Truth:
    """Everything the probes ask about, each item stamped with the message that holds it."""

    edits: list[tuple[int, str, str]] = field(default_factory=list)  # (index, call id, path)
    reads: list[tuple[int, str]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    constraints: list[tuple[int, str]] = field(default_factory=list)
    users: list[tuple[int, str]] = field(default_factory=list)

    def before(self, point: int) -> Truth:
        """The truth of the messages before index ``point``."""
        return Truth(
            edits=[e for e in self.edits if e[0] < point],
            reads=[r for r in self.reads if r[0] < point],
            steps=[s for s in self.steps if s.index < point],
            failures=[f for f in self.failures if f.index < point],
            constraints=[c for c in self.constraints if c[0] < point],
            users=[u for u in self.users if u[0] < point],
        )

    def edited_paths(self) -> list[str]:
        return list(dict.fromkeys(path for _, _, path in self.edits))

    def read_paths(self) -> list[str]:
        return list(dict.fromkeys(path for _, path in self.reads))

    def last_status(self) -> dict[tuple[str, tuple[str, ...]], Step]:
        """Each distinct step with its latest run."""
        latest: dict[tuple[str, tuple[str, ...]], Step] = {}
        for step in self.steps:
            latest[(step.key, step.values)] = step
        return latest


def _is_user(message: Message) -> bool:
    return message.role == "user" and not message.tool_call_id


def truth_of(messages: Sequence[Message]) -> Truth:
    """The ground truth of a whole transcript; `Truth.before` cuts it at a call point."""
    truth = Truth()
    cursor = _Cursor()
    pending: dict[str, tuple[int, CallFacts]] = {}
    for index, message in enumerate(messages):
        if _is_user(message) and message.text.strip():
            truth.users.append((index, message.text))
            truth.constraints += [(index, s) for s in constraint_sentences(message.text)]
        for call in message.tool_calls:
            facts = _facts(call, cursor)
            pending[call.id] = (index, facts)
            truth.edits += [(index, call.id, p) for p in facts.edited]
            truth.reads += [(index, p) for p in facts.read]
        if message.role == "tool" and message.tool_call_id in pending:
            at, facts = pending.pop(message.tool_call_id)
            key_line = failure_line(message.text)
            if key_line is not None:
                truth.failures.append(Failure(index, message.tool_call_id, key_line))
            step = Step(
                at, message.tool_call_id or "", facts.step, facts.values, key_line is not None
            )
            truth.steps.append(step)
    for call_id, (at, facts) in pending.items():
        truth.steps.append(Step(at, call_id, facts.step, facts.values, None))
    truth.steps.sort(key=lambda s: s.index)
    return truth
