"""Which files a shell command (or a Python snippet) writes, read from its text.

Agents edit through their shell as often as through editor tools: ``sed -i``,
``cat > f <<EOF``, ``tee``, ``python -c "open('f', 'w')..."``, ``git apply``,
``mv``/``cp``. `shell_writes` finds the files such a command creates, changes
or deletes, so that a checkpoint's "Files modified" does not stay empty for
them. `context_engine.summarize.files` uses it for the tools its mapping marks
``"shell"`` or ``"python"``.

Decisions:

* Writes only. A command that only reads (``cat f``, ``grep x f``,
  ``sed -n``) names no file here; `context_engine.summarize.shell_reads`
  finds those.
* A deletion (``rm``, ``unlink``, ``git rm``, the source of ``mv``) counts as
  a modification, as a ``delete_file`` tool call does.
* ``cd DIR`` (a literal directory) applies to the paths of the commands after
  it in the same text: ``cd /testbed && sed -i s/a/b/ src/x.py`` modifies
  ``/testbed/src/x.py``. Paths are normalised (``./a/../b`` is ``b``).
* A word holding an expansion or a glob (``$f``, ``*.py``) names no file: its
  value is unknown. ``/dev/null``, ``/dev/stdout`` and descriptor duplications
  (``2>&1``, ``>&2``) are not files.
* A script whose text the same history shows (written with ``cat > fix.py
  <<EOF``) and that is run later (``python fix.py``) writes what its text
  writes; a patch file applied later (``git apply fix.patch``) modifies the
  files its headers name. Pass the texts seen so far as ``scripts``.
* Python code is read with `ast` (``open(path, 'w')``, ``Path(path).write_text``,
  ``os.remove``, ``shutil.copy`` targets, OpenHands' ``edit_file_by_replace``
  and friends; a name bound once to a string literal counts as that string);
  code that does not parse is searched with patterns for the first two forms.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Iterable, Mapping, Sequence

import attrs
import regex

from context_engine.summarize._python_writes import code_writes
from context_engine.summarize._shell_words import SimpleCommand, simple_commands

__all__ = [
    "DEFAULT_PYTHON_TOOLS",
    "DEFAULT_SHELL_TOOLS",
    "ShellWrites",
    "command_text",
    "patch_paths",
    "python_writes",
    "shell_writes",
    "split_options",
]

DEFAULT_SHELL_TOOLS: frozenset[str] = frozenset(
    {
        "bash", "Bash", "shell", "sh", "run", "execute", "execute_bash", "execute_command",
        "exec", "run_command", "run_shell_command", "run_terminal_cmd", "terminal",
        "run_tests", "local_shell", "shell_command",
    }
)  # fmt: skip
"""Tool names whose calls run a shell command."""

DEFAULT_PYTHON_TOOLS: frozenset[str] = frozenset(
    {"execute_ipython_cell", "ipython", "python", "run_python", "execute_python", "python_repl"}
)
"""Tool names whose calls run Python code (IPython cells included)."""

_COMMAND_KEYS = ("command", "cmd", "commands", "script", "code", "input")

_NOT_FILES = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty", "-"})
_WRITE_REDIRECTS = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_PREFIXES = frozenset({"sudo", "env", "nohup", "command", "exec", "nice", "stdbuf", "builtin"})
_PYTHON = regex.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)?)?$")
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh"})
_SHELL_C = frozenset({"-c", "-lc", "-ic", "-ec", "-xc"})
# An apply_patch envelope names its files in "*** Update File:" lines; a unified
# diff in "+++ b/..." lines (read only outside an envelope, where an added line
# may start with "++").
_ENVELOPE_HEADER = regex.compile(
    r"^\*\*\* (?:(?:Add|Update|Delete) File|Move to): (?P<path>.+?)[ \t]*$", regex.MULTILINE
)
_DIFF_HEADER = regex.compile(r"^\+\+\+ (?:b/)?(?P<path>[^\t\n]+?)[ \t]*(?:\t.*)?$", regex.MULTILINE)


@attrs.frozen
class ShellWrites:
    """What one command text writes.

    Attributes:
        modified: Files created, changed or deleted, in first-seen order.
        contents: Files whose whole new text the command shows (a
            here-document or ``echo`` written to them), for later runs of them.
    """

    modified: tuple[str, ...] = ()
    contents: Mapping[str, str] = attrs.field(factory=dict)


@attrs.define
class _State:
    scripts: Mapping[str, str]
    cwd: str = ""
    modified: dict[str, None] = attrs.field(factory=dict)
    contents: dict[str, str] = attrs.field(factory=dict)

    def path(self, word: str | None) -> str | None:
        if word is None or word in _NOT_FILES or not word.strip() or word.startswith("&"):
            return None
        joined = posixpath.join(self.cwd, word) if self.cwd else word
        return posixpath.normpath(joined)

    def write(self, words: Iterable[str | None]) -> None:
        for word in words:
            path = self.path(word)
            if path is not None:
                self.modified[path] = None

    def script(self, word: str | None) -> str | None:
        path = self.path(word)
        if path is None:
            return None
        return self.contents.get(path, self.scripts.get(path))


def _operands(
    words: Sequence[str | None], with_value: frozenset[str] = frozenset()
) -> list[str | None]:
    """The words after the command name that are not options (or option values)."""
    return split_options(words, with_value)[0]


def split_options(
    words: Sequence[str | None], with_value: frozenset[str] = frozenset()
) -> tuple[list[str | None], list[str]]:
    """(the operands after the command name, the options), option values skipped.

    ``with_value`` names the options that take the next word as their value.
    """
    found: list[str | None] = []
    options: list[str] = []
    skip = False
    in_options = True
    for word in words[1:]:
        if skip:
            skip = False
        elif in_options and word == "--":
            in_options = False
        elif in_options and word is not None and word.startswith("-") and word != "-":
            options.append(word)
            skip = word in with_value
        else:
            found.append(word)
    return found, options


def _sed(words: Sequence[str | None], state: _State) -> None:
    in_place = any(
        w is not None
        and (
            w.startswith("--in-place")
            or (regex.match(r"^-[a-zA-Z]*i", w) is not None and not w.startswith("--"))
        )
        for w in words[1:]
    )
    if not in_place:
        return
    has_script = any(
        w in ("-e", "-f", "--expression", "--file")
        or (w or "").startswith(("--expression=", "--file="))
        for w in words[1:]
    )
    operands = _operands(
        words, frozenset({"-e", "-f", "-l", "--expression", "--file", "--line-length"})
    )
    state.write(operands if has_script else operands[1:])


def _perl(words: Sequence[str | None], state: _State) -> None:
    in_place, script_given, operands = False, False, []
    rest = iter(words[1:])
    for word in rest:
        if word is None or not word.startswith("-") or word in ("-", "--"):
            operands.append(word)
            continue
        cluster = word[1:].split(".")[0]
        if word[1:2] in ("M", "m", "I"):
            continue
        in_place = in_place or "i" in cluster
        if cluster.endswith(("e", "E")):
            script_given = True
            next(rest, None)  # the script
    if in_place:
        state.write(operands if script_given else operands[1:])


def _move(words: Sequence[str | None], state: _State, *, remove_source: bool) -> None:
    operands = _operands(words, frozenset({"-t", "--target-directory", "-S", "--suffix"}))
    target = next(
        (words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-t", "--target-directory")), None
    )
    if target is None:
        if len(operands) < 2:
            return
        *sources, target = operands
        if len(sources) == 1:
            state.write([target])
        else:
            state.write(
                posixpath.join(target, posixpath.basename(s)) if target and s else None
                for s in sources
            )
    else:
        sources = operands
        state.write(
            posixpath.join(target, posixpath.basename(s)) if target and s else None for s in sources
        )
    if remove_source:
        state.write(sources)


def _patch(words: Sequence[str | None], stdin: str | None, state: _State) -> None:
    with_value = frozenset(
        {
            "-p",
            "-i",
            "--input",
            "-o",
            "--output",
            "-d",
            "--directory",
            "-B",
            "-D",
            "-F",
            "-r",
            "-V",
            "-z",
        }
    )
    patch_file = next(
        (words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-i", "--input")), None
    )
    operands = _operands(words, with_value)
    if words[0] == "git":
        patch_text = stdin or next((state.script(w) for w in operands if state.script(w)), None)
        targets: list[str | None] = []
    else:
        if patch_file is None and len(operands) >= 2:
            patch_file = operands[1]
        patch_text = stdin or state.script(patch_file)
        targets = operands[:1]
    if patch_text:
        targets = list(patch_paths(patch_text))
    state.write(targets)


def _python(words: Sequence[str | None], stdin: str | None, state: _State) -> None:
    operands = _operands(words, frozenset({"-W", "-X", "-Q"}))
    code_at = next((i for i, w in enumerate(words) if w == "-c"), None)
    if code_at is not None:
        code = words[code_at + 1] if code_at + 1 < len(words) else None
    elif any(w == "-m" for w in words):
        code = None
    elif not operands or operands[0] == "-":
        code = stdin
    else:
        code = state.script(operands[0])
    if code:
        state.write(python_writes(code))


def _git(words: Sequence[str | None], stdin: str | None, state: _State) -> None:
    rest = list(words[1:])
    sub = next((w for w in rest if w is not None and not w.startswith("-")), None)
    after = rest[rest.index(sub) + 1 :] if sub is not None else []
    if sub == "apply":
        _patch(("git", *after), stdin, state)
    elif sub in ("rm", "restore"):
        state.write(_operands(("git", *after), frozenset({"-s", "--source"})))
    elif sub == "mv":
        _move(("mv", *after), state, remove_source=True)
    elif sub == "checkout" and "--" in after:
        state.write(after[after.index("--") + 1 :])


def _command(command: SimpleCommand, state: _State, before_pipe: str | None) -> str | None:
    """Record what ``command`` writes; return the text it shows on stdout when known."""
    stdin = before_pipe
    for redirect in command.redirects:
        if redirect.operator in ("<<", "<<-", "<<<"):
            stdin = redirect.target
        elif redirect.operator == "<":
            stdin = state.script(redirect.target if redirect.literal else None)
    words = list(command.words)
    while (
        words
        and words[0] is not None
        and (words[0] in _PREFIXES or regex.match(r"^[A-Za-z_]\w*=", words[0]))
    ):
        words.pop(0)
    name = posixpath.basename(words[0]) if words and words[0] else ""
    shown = _run(name, words, stdin, state)
    for redirect in command.redirects:
        if redirect.operator in _WRITE_REDIRECTS or (
            redirect.operator == ">&" and not redirect.target.isdigit()
        ):
            path = state.path(redirect.target if redirect.literal else None)
            if path is not None:
                state.modified[path] = None
                if shown is not None:
                    state.contents[path] = shown
    return shown


def _run(name: str, words: list[str | None], stdin: str | None, state: _State) -> str | None:
    if name == "cd":
        target = words[1] if len(words) > 1 else None
        state.cwd = "" if target is None else (state.path(target) or "")
    elif name == "sed":
        _sed(words, state)
    elif name == "perl":
        _perl(words, state)
    elif name == "tee":
        targets = _operands(words)
        state.write(targets)
        for target in targets:
            path = state.path(target)
            if path is not None and stdin is not None:
                state.contents[path] = stdin
        return stdin
    elif name in ("touch", "rm", "unlink", "rmdir", "truncate", "shred"):
        state.write(
            _operands(words, frozenset({"-d", "-t", "-r", "-s", "--size", "--reference", "--date"}))
        )
    elif name in ("mv", "cp", "install"):
        _move(words, state, remove_source=name == "mv")
    elif name == "patch":
        _patch(words, stdin, state)
    elif name == "git":
        _git(words, stdin, state)
    elif _PYTHON.match(name):
        _python(words, stdin, state)
    elif name in _SHELLS and any(w in _SHELL_C for w in words[1:]):
        at = next(i for i, w in enumerate(words) if w in _SHELL_C)
        script = words[at + 1] if at + 1 < len(words) else None
        if script:
            _walk(script, state)
    elif name == "cat":
        files = _operands(words)
        return stdin if not files else None
    elif name in ("echo", "printf") and all(w is not None for w in words[1:]):
        text = " ".join(
            w for w in words[1:] if w is not None and not (name == "echo" and w in ("-n", "-e"))
        )
        return text + "\n"
    return None


def _walk(text: str, state: _State) -> None:
    piped: str | None = None
    for command in simple_commands(text):
        piped = _command(command, state, piped)


def command_text(arguments: Mapping[str, object] | str) -> str | None:
    """The command (or code) a shell or Python tool call carries, as one text.

    The shapes agents use: ``{"command": "..."}`` (also ``cmd``, ``commands``,
    ``script``, ``code``, ``input``), a list of words (``["bash", "-lc",
    "..."]`` gives the script, other lists are joined), a list of commands, or
    raw arguments that are not JSON (a free-form tool sends the text itself).
    """
    if isinstance(arguments, str):
        return arguments if arguments.strip() else None
    value = next((arguments[key] for key in _COMMAND_KEYS if key in arguments), None)
    if isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        if (
            len(value) >= 3
            and value[0] in _SHELLS | {"/bin/sh", "/bin/bash"}
            and value[1] in _SHELL_C
        ):
            return str(value[2])
        return shlex.join(value) if value[0] in _SHELLS or " " not in value[0] else "\n".join(value)
    return value if isinstance(value, str) and value.strip() else None


def shell_writes(command: str, *, scripts: Mapping[str, str] | None = None) -> ShellWrites:
    """The files a shell command text creates, changes or deletes.

    Args:
        command: The command as the agent sent it (several lines, lists,
            pipelines and here-documents welcome).
        scripts: Texts of files written earlier in the same history, by path
            as `ShellWrites.contents` gives them; a script run or a patch
            applied from one of them counts what its text writes.

    Returns:
        The written paths and the texts it wrote; never raises on odd input.
    """
    state = _State(scripts=scripts or {})
    _walk(command, state)
    return ShellWrites(modified=tuple(state.modified), contents=dict(state.contents))


def patch_paths(text: str) -> tuple[str, ...]:
    """The files a patch names: ``*** Update File:`` lines of an envelope, else ``+++`` headers."""
    header = _ENVELOPE_HEADER if "*** Begin Patch" in text else _DIFF_HEADER
    found = (match["path"].strip() for match in header.finditer(text))
    return tuple(dict.fromkeys(path for path in found if path and path != "/dev/null"))


def python_writes(code: str) -> tuple[str, ...]:
    """The files a Python snippet opens for writing, writes, moves, copies to or deletes.

    IPython shell lines (``!cmd``) are read as shell commands; other magics are skipped.
    """
    shell = [line.lstrip()[1:] for line in code.splitlines() if line.lstrip().startswith("!")]
    python = "\n".join(
        line for line in code.splitlines() if not line.lstrip().startswith(("!", "%"))
    )
    found = code_writes(python)
    for line in shell:
        found.extend(shell_writes(line).modified)
    paths = (posixpath.normpath(p) for p in found if p and p.strip() and p not in _NOT_FILES)
    return tuple(dict.fromkeys(paths))
