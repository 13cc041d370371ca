"""Which files the agent read and modified, read from its tool calls.

A checkpoint names the files the summarized history touched, so that the agent
knows what it had open and what it changed after the details are gone.
`track_files` reads that from the tool calls of a transcript; `merge` folds the
lists of an older checkpoint in.

A tool counts as a file tool when its name is a key of the ``tools`` mapping
(exact, case-sensitive match). The value says what the tool does:

* ``"read"`` or ``"modified"``: every call of the tool does that;
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
* Shell commands (``sed -i``, ``cat > file``) are not parsed for files.
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

__all__ = [
    "DEFAULT_FILE_TOOLS",
    "PATH_ARGUMENTS",
    "FileAction",
    "FileActivity",
    "FileToolRule",
    "check_file_tools",
    "files_in_call",
    "merge",
    "track_files",
]

FileAction: TypeAlias = Literal["read", "modified"]
"""What a file tool call does to the files it names."""

FileToolRule: TypeAlias = "FileAction | Mapping[str, FileAction]"
"""A fixed action, or an action chosen by the call's ``command`` argument."""

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
    }
)
"""File tools of common agent frameworks and what they do (searching tools excluded)."""

PATH_ARGUMENTS: tuple[str, ...] = ("file_path", "path", "filename", "notebook_path", "target_file")
"""Argument names holding one path; ``paths`` holds a list of them."""

_PATCH_ARGUMENTS = ("input", "patch", "diff")
# An apply_patch envelope names its files in "*** Update File:" lines; a unified
# diff in "+++ b/..." lines (read only outside an envelope, where an added line
# may start with "++").
_ENVELOPE_HEADER = regex.compile(
    r"^\*\*\* (?:(?:Add|Update|Delete) File|Move to): (?P<path>.+?)[ \t]*$", regex.MULTILINE
)
_DIFF_HEADER = regex.compile(r"^\+\+\+ (?:b/)?(?P<path>[^\t\n]+?)[ \t]*(?:\t.*)?$", regex.MULTILINE)
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


def check_file_tools(tools: Mapping[str, object]) -> None:
    """Check that every rule of a file-tools mapping is one `track_files` understands.

    Raises:
        ConfigurationError: a rule is neither ``"read"``, ``"modified"`` nor a
            mapping from command names to one of them.
    """
    for name, rule in tools.items():
        actions = rule.values() if isinstance(rule, Mapping) else (rule,)
        if not all(action in ("read", "modified") for action in actions):
            raise ConfigurationError(
                f"file tool {name!r} has the rule {rule!r}; use 'read', 'modified' or a mapping "
                "from the call's command argument to one of them, e.g. {'view': 'read'}"
            )


def _clean_path(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    path = value.strip()
    if not path or len(path) > _MAX_PATH or _CONTROL.search(path):
        return None
    return path


def _patch_paths(text: str) -> list[str]:
    header = _ENVELOPE_HEADER if "*** Begin Patch" in text else _DIFF_HEADER
    found = (_clean_path(match["path"]) for match in header.finditer(text))
    return [path for path in found if path is not None and path != "/dev/null"]


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


def _parse_arguments(raw: str) -> Mapping[str, object] | None:
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
        when the arguments name none), or None when the tool is not a file tool
        or its ``command`` is not one the rule knows.
    """
    rule = tools.get(call.name)
    if rule is None:
        return None
    arguments = _parse_arguments(call.arguments)
    if isinstance(rule, str):
        action: FileAction = rule
    else:
        command = arguments.get("command") if arguments is not None else None
        if not isinstance(command, str) or command not in rule:
            return None
        action = rule[command]
    if arguments is None:
        return action, tuple(dict.fromkeys(_patch_paths(call.arguments)))
    return action, tuple(dict.fromkeys(_argument_paths(arguments)))


def track_files(
    messages: Sequence[Message], tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
) -> FileActivity:
    """The files the tool calls in ``messages`` read and modified.

    Args:
        messages: Any messages; only assistant tool calls and `ContextSummary`
            file lists are looked at.
        tools: File tools by name and what they do; extend the defaults with
            ``{**DEFAULT_FILE_TOOLS, "my_tool": "read"}``.

    Returns:
        The files in first-seen order; a file both read and modified is listed
        only as modified. The same messages always give the same result.
    """
    read: dict[str, None] = {}
    modified: dict[str, None] = {}
    for message in messages:
        if isinstance(message, ContextSummary):
            read.update(dict.fromkeys(message.read_files))
            modified.update(dict.fromkeys(message.modified_files))
            continue
        for call in message.tool_calls:
            found = files_in_call(call, tools)
            if found is not None:
                action, paths = found
                (read if action == "read" else modified).update(dict.fromkeys(paths))
    return FileActivity(read=(p for p in read if p not in modified), modified=modified)


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
    return FileActivity(read=(p for p in read if p not in modified), modified=modified)
