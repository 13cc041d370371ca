"""Which files a Python snippet writes, read from its syntax tree (`shell.python_writes`)."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping

import regex

__all__ = ["code_writes"]

_OPEN_WRITE = regex.compile(
    r"""\bopen\(\s*(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*,\s*(?:mode\s*=\s*)?['"][rbt]*[wax+]"""
)
_PATH_WRITE = regex.compile(
    r"""\bPath\(\s*(?P<q>['"])(?P<path>[^'"\n]+)(?P=q)\s*\)\.write_(?:text|bytes)\("""
)
# OpenHands' agent skills, called by name in IPython cells: the first argument
# (or ``file_name``) is the file they write.
_AGENT_FUNCTIONS = frozenset(
    {"edit_file_by_replace", "create_file", "append_file", "insert_content_at_line", "edit_file"}
)


def _strings(tree: ast.AST) -> dict[str, str]:
    """Names bound exactly once, at any depth, to a string literal."""
    bound: dict[str, list[object]] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            value = node.value.value if isinstance(node.value, ast.Constant) else None
            bound.setdefault(node.targets[0].id, []).append(value)
    return {
        name: values[0]
        for name, values in bound.items()
        if len(values) == 1 and isinstance(values[0], str)
    }


def _literal(node: ast.AST | None, names: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if (
        isinstance(node, ast.Call)
        and _called(node) in ("Path", "PurePath", "PosixPath")
        and node.args
    ):
        return _literal(node.args[0], names)
    return None


def _called(node: ast.Call) -> str:
    func = node.func
    return (
        func.id
        if isinstance(func, ast.Name)
        else func.attr
        if isinstance(func, ast.Attribute)
        else ""
    )


def _argument(node: ast.Call, position: int, *keywords: str) -> ast.AST | None:
    if len(node.args) > position:
        return node.args[position]
    return next((k.value for k in node.keywords if k.arg in keywords), None)


def _ast_writes(tree: ast.AST) -> Iterator[str | None]:
    names = _strings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        called = _called(node)
        owner = node.func.value if isinstance(node.func, ast.Attribute) else None
        if called == "open" and owner is not None and _literal(owner, names) is not None:
            mode = _literal(_argument(node, 0, "mode"), names) or "r"
            if set(mode) & set("wax+"):
                yield _literal(owner, names)
        elif called == "open":
            mode = _literal(_argument(node, 1, "mode"), names) or "r"
            if set(mode) & set("wax+"):
                yield _literal(_argument(node, 0, "file"), names)
        elif called in ("write_text", "write_bytes", "touch", "unlink") and owner is not None:
            yield _literal(owner, names)
        elif called in _AGENT_FUNCTIONS and owner is None:
            yield _literal(_argument(node, 0, "file_name", "path", "file"), names)
        elif isinstance(owner, ast.Name) and owner.id in ("os", "shutil"):
            yield from _os_writes(node, called, names)
        elif called in ("rename", "replace") and _literal(owner, names) is not None:
            yield _literal(owner, names)
            yield _literal(_argument(node, 0, "target"), names)


def _os_writes(node: ast.Call, called: str, names: Mapping[str, str]) -> Iterator[str | None]:
    """``os.remove(path)``, ``shutil.copy(src, dst)``, ``os.rename(src, dst)`` and the like."""
    if called in ("remove", "unlink", "rmtree", "truncate"):
        yield _literal(_argument(node, 0, "path"), names)
    elif called in ("copy", "copy2", "copyfile", "copytree", "move", "rename", "replace"):
        yield _literal(_argument(node, 1, "dst"), names)
        if called in ("move", "rename", "replace"):
            yield _literal(_argument(node, 0, "src"), names)


def code_writes(code: str) -> list[str | None]:
    """Paths ``code`` writes (None for a value it cannot know); patterns when it does not parse."""
    try:
        return list(_ast_writes(ast.parse(code)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        patterns = (_OPEN_WRITE, _PATH_WRITE)
        return [match["path"] for pattern in patterns for match in pattern.finditer(code)]
