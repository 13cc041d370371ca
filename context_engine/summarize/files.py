"""Which files the agent read and modified, read from its tool calls.

A checkpoint names the files the summarized history touched, so that the agent
knows what it had open and what it changed after the details are gone.
`track_files` reads that from the tool calls of a transcript; `merge` folds the
lists of an older checkpoint in.

A tool counts as a file tool when its name is a key of the ``tools`` mapping
(exact, case-sensitive match). The value says what the tool does:

* ``"read"`` or ``"modified"``: every call of the tool does that;
* ``"shell"`` or ``"python"``: the call runs a shell command or Python code
  (found by `context_engine.summarize.shell.command_text`); the files it
  writes (`context_engine.summarize.shell`: ``sed -i``, redirections, ``tee``,
  ``python -c`` writes, ``git apply``, ``mv``/``cp`` targets, ``rm``, ...) count
  as modified, and a call that writes none is not a file tool call;
* a mapping from the value of the call's ``command`` argument to ``"read"`` or
  ``"modified"``: for editor tools whose one name covers both
  (``str_replace_editor`` with ``command="view"`` reads, with
  ``command="str_replace"`` modifies). A command not in the mapping is ignored.

The paths come from the arguments ``file_path``, ``path``, ``filename``,
``notebook_path`` and ``target_file`` (a string each) and ``paths`` (a list of
strings). A call that names no path this way may still carry a patch (an
``input``, ``patch`` or ``diff`` argument, or raw non-JSON arguments as a
free-form ``apply_patch`` tool sends them): the file names in its
``*** Update File:`` style or ``+++ b/...`` headers count.

Decisions:

* Searching is not reading. ``grep``, ``glob``, ``find_file``, ``ls`` and the
  like are not in `DEFAULT_FILE_TOOLS`: they touch many files without reading
  any in full, and their ``path`` is usually a directory.
* Every call counts, whatever its result: a failed write still shows what the
  agent was working on, a pending call has no result yet, and telling an error
  from file content by its text is guesswork.
* Paths are kept as written (only surrounding whitespace is stripped); a path
  that is empty, longer than 4096 characters or holds control characters
  (a newline would break the checkpoint's file lists) is ignored.
* Shell commands are parsed for the files they write and for the files they
  show the agent (`context_engine.summarize.shell_reads`: ``cat f``, ``head``,
  ``sed -n '1,9p' f``, ``grep x f.py`` on a named file). Other files a shell
  touches (``ls``, ``find``, ``grep -r`` over a directory, test runs) are not
  read as far as the lists go. A deletion is a modification, as for
  ``delete_file``. `files_in_call` reports a command's writes only.
* A script or patch written earlier in ``messages`` (``cat > fix.py <<EOF``)
  and run later (``python fix.py``, ``git apply fix.patch``) counts the files
  its text writes.
* A `ContextSummary` among the messages contributes its own file lists, at its
  position: it stands for the history it replaced.
* Tolerant: arguments that are not JSON, or JSON that is not an object, or
  values of the wrong type are ignored; `track_files` never raises on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Literal, TypeAlias

import attrs
import regex

from context_engine.errors import ConfigurationError
from context_engine.messages import ContextSummary, Message, ToolCall
from context_engine.summarize.shell import (
    DEFAULT_PYTHON_TOOLS,
    DEFAULT_SHELL_TOOLS,
    command_text,
    patch_paths,
    python_writes,
    shell_writes,
)
from context_engine.summarize.shell_reads import shell_reads

__all__ = [
    "DEFAULT_FILE_TOOLS",
    "PATH_ARGUMENTS",
    "CommandKind",
    "FileAction",
    "FileActivity",
    "FileToolRule",
    "check_file_tools",
    "files_in_call",
    "merge",
    "parse_arguments",
    "track_files",
]

FileAction: TypeAlias = Literal["read", "modified"]
"""What a file tool call does to the files it names."""

CommandKind: TypeAlias = Literal["shell", "python"]
"""A tool whose calls run a command: the files it writes are read from its text."""

FileToolRule: TypeAlias = "FileAction | CommandKind | Mapping[str, FileAction]"
"""A fixed action, a command tool, or an action chosen by the call's ``command`` argument."""

_EDITOR: Mapping[str, FileAction] = MappingProxyType(
    {
        "view": "read",
        "create": "modified",
        "str_replace": "modified",
        "insert": "modified",
        "undo_edit": "modified",
    }
)

DEFAULT_FILE_TOOLS: Mapping[str, FileToolRule] = MappingProxyType(
    {
        # Reading.
        "read_file": "read",
        "read_many_files": "read",
        "read_multiple_files": "read",
        "view": "read",
        "view_file": "read",
        "cat": "read",
        "open": "read",
        "open_file": "read",
        "Read": "read",
        "NotebookRead": "read",
        # Modifying.
        "write_file": "modified",
        "write_to_file": "modified",
        "edit_file": "modified",
        "edit": "modified",
        "create_file": "modified",
        "create": "modified",
        "delete_file": "modified",
        "replace": "modified",
        "replace_in_file": "modified",
        "search_replace": "modified",
        "apply_patch": "modified",
        "Write": "modified",
        "Edit": "modified",
        "MultiEdit": "modified",
        "NotebookEdit": "modified",
        # Editors whose ``command`` argument decides.
        "str_replace_editor": _EDITOR,
        "str_replace_based_edit_tool": _EDITOR,
        # Commands, parsed for the files they write.
        **dict.fromkeys(sorted(DEFAULT_SHELL_TOOLS), "shell"),
        **dict.fromkeys(sorted(DEFAULT_PYTHON_TOOLS), "python"),
    }
)
"""File, shell and Python tools of common agent frameworks and what they do (searching
tools excluded)."""

PATH_ARGUMENTS: tuple[str, ...] = ("file_path", "path", "filename", "notebook_path", "target_file")
"""Argument names holding one path; ``paths`` holds a list of them."""

_PATCH_ARGUMENTS = ("input", "patch", "diff")
_CONTROL = regex.compile(r"[\x00-\x1f\x7f]")
_MAX_PATH = 4096


def _to_paths(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class FileActivity:
    """Files a stretch of history read and modified, each in first-seen order.

    A file both read and modified appears only in ``modified``.

    Attributes:
        read: Files only read.
        modified: Files created, changed or deleted.
    """

    read: tuple[str, ...] = attrs.field(default=(), converter=_to_paths)
    modified: tuple[str, ...] = attrs.field(default=(), converter=_to_paths)
    open_file: str | None = None
    """The file a SWE-agent style editor had open at the end (its ``edit`` acts on it)."""


@attrs.define
class _State:
    """What tracking learns as it goes: scripts written by commands, the editor's open file."""

    scripts: dict[str, str] = attrs.field(factory=dict)
    open_file: str | None = None


# SWE-agent's editor: ``open f``, ``create f`` name the file; ``edit 3:5`` acts on it.
_CURSOR_VERBS: Mapping[str, FileAction] = MappingProxyType(
    {"open": "read", "create": "modified", "edit": "modified", "insert": "modified",
     "append": "modified"}
)  # fmt: skip


def check_file_tools(tools: Mapping[str, object]) -> None:
    """Check that every rule of a file-tools mapping is one `track_files` understands.

    Raises:
        ConfigurationError: a rule is neither ``"read"``, ``"modified"``,
            ``"shell"``, ``"python"`` nor a mapping from command names to
            ``"read"`` or ``"modified"``.
    """
    for name, rule in tools.items():
        if isinstance(rule, Mapping):
            valid = all(action in ("read", "modified") for action in rule.values())
        else:
            valid = rule in ("read", "modified", "shell", "python")
        if not valid:
            raise ConfigurationError(
                f"file tool {name!r} has the rule {rule!r}; use 'read', 'modified', 'shell', "
                "'python' or a mapping from the call's command argument to 'read' or "
                "'modified', e.g. {'view': 'read'}"
            )


def _clean_path(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    path = value.strip()
    if not path or len(path) > _MAX_PATH or _CONTROL.search(path):
        return None
    return path


def _patch_paths(text: str) -> list[str]:
    found = (_clean_path(path) for path in patch_paths(text))
    return [path for path in found if path is not None]


def _argument_paths(arguments: Mapping[str, object]) -> list[str]:
    paths = [_clean_path(arguments.get(key)) for key in PATH_ARGUMENTS]
    listed = arguments.get("paths")
    if isinstance(listed, list):
        paths.extend(_clean_path(item) for item in listed)
    found = [path for path in paths if path is not None]
    if found:
        return found
    for key in _PATCH_ARGUMENTS:
        text = arguments.get(key)
        if isinstance(text, str):
            found.extend(_patch_paths(text))
    return found


def parse_arguments(raw: str) -> Mapping[str, object] | None:
    """A tool call's arguments as a JSON object, or None when they are not one."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def files_in_call(
    call: ToolCall, tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
) -> tuple[FileAction, tuple[str, ...]] | None:
    """What one tool call does to which files.

    Args:
        call: The tool call.
        tools: File tools by name (see the module docstring for the rules).

    Returns:
        ``(action, paths)`` for a call of a file tool (``paths`` may be empty
        when the arguments name none) or a command that writes files, or None
        when the tool is not a file tool, its ``command`` is not one the rule
        knows, or its command writes no file.
    """
    return _files_in_call(call, tools, _State())


def _files_in_call(
    call: ToolCall, tools: Mapping[str, FileToolRule], state: _State
) -> tuple[FileAction, tuple[str, ...]] | None:
    rule = tools.get(call.name)
    if rule is None:
        return None
    arguments = parse_arguments(call.arguments)
    if rule == "shell" or rule == "python":
        return _command_writes(rule, command_text(arguments or call.arguments), state.scripts)
    if call.name in _CURSOR_VERBS and arguments is not None and not _argument_paths(arguments):
        found = _editor_command(call.name, arguments.get("command"), state)
        if found is not None:
            return found
    if isinstance(rule, str):
        action: FileAction = "read" if rule == "read" else "modified"
    else:
        command = arguments.get("command") if arguments is not None else None
        if not isinstance(command, str) or command not in rule:
            return None
        action = rule[command]
    if arguments is None:
        return action, tuple(dict.fromkeys(_patch_paths(call.arguments)))
    return action, tuple(dict.fromkeys(_argument_paths(arguments)))


def _editor_command(
    name: str, command: object, state: _State
) -> tuple[FileAction, tuple[str, ...]] | None:
    """A SWE-agent editor command line: ``open f 293``, ``create f``, ``edit 3:5`` (open file)."""
    if not isinstance(command, str):
        return None
    words = command.strip().split(None, 2)
    if not words or words[0] != name:
        return None
    if name in ("open", "create"):
        target = _clean_path(words[1].strip("\"'")) if len(words) > 1 else None
        if target is None:
            return None
        state.open_file = target
    if state.open_file is None:
        return None
    return _CURSOR_VERBS[name], (state.open_file,)


def _command_writes(
    kind: CommandKind, text: str | None, scripts: dict[str, str]
) -> tuple[FileAction, tuple[str, ...]] | None:
    """The files a command writes; ``scripts`` learns the texts it writes."""
    if text is None:
        return None
    if kind == "python":
        written = python_writes(text)
    else:
        found = shell_writes(text, scripts=scripts)
        scripts.update(found.contents)
        written = found.modified
    paths = tuple(dict.fromkeys(p for p in map(_clean_path, written) if p is not None))
    return ("modified", paths) if paths else None


def _shell_reads(call: ToolCall, tools: Mapping[str, FileToolRule]) -> tuple[str, ...]:
    """The files a shell tool's command shows (``cat f``, ``sed -n 1,9p f``); () for other tools."""
    if tools.get(call.name) != "shell":
        return ()
    text = command_text(parse_arguments(call.arguments) or call.arguments)
    if text is None:
        return ()
    return tuple(path for path in map(_clean_path, shell_reads(text)) if path is not None)


def track_files(
    messages: Sequence[Message],
    tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS,
    *,
    open_file: str | None = None,
) -> FileActivity:
    """The files the tool calls in ``messages`` read and modified.

    Args:
        messages: Any messages; only assistant tool calls and `ContextSummary`
            file lists are looked at.
        tools: File tools by name and what they do; extend the defaults with
            ``{**DEFAULT_FILE_TOOLS, "my_tool": "read"}``.
        open_file: The file a SWE-agent style editor had open before ``messages``
            (`FileActivity.open_file` of the stretch before), for its ``edit`` calls.

    Returns:
        The files in first-seen order; a file both read and modified is listed
        only as modified. The same messages always give the same result.
    """
    read: dict[str, None] = {}
    modified: dict[str, None] = {}
    state = _State(open_file=open_file)  # scripts written earlier, the editor's open file
    for message in messages:
        if isinstance(message, ContextSummary):
            read.update(dict.fromkeys(message.read_files))
            modified.update(dict.fromkeys(message.modified_files))
            continue
        for call in message.tool_calls:
            found = _files_in_call(call, tools, state)
            if found is not None:
                action, paths = found
                (read if action == "read" else modified).update(dict.fromkeys(paths))
            read.update(dict.fromkeys(_shell_reads(call, tools)))
    return FileActivity(
        read=(p for p in read if p not in modified), modified=modified, open_file=state.open_file
    )


def merge(
    previous_read: Iterable[str], previous_modified: Iterable[str], activity: FileActivity
) -> FileActivity:
    """Combine the file lists of an older checkpoint with newer activity.

    The older entries come first, the newer ones follow in their order;
    duplicates are dropped, and a file modified in either part is listed only
    as modified.

    Args:
        previous_read: The older checkpoint's read files.
        previous_modified: The older checkpoint's modified files.
        activity: What the newer history did.

    Returns:
        The combined lists.
    """
    modified = dict.fromkeys((*previous_modified, *activity.modified))
    read = dict.fromkeys((*previous_read, *activity.read))
    return FileActivity(
        read=(p for p in read if p not in modified),
        modified=modified,
        open_file=activity.open_file,
    )
