"""LangChain's ``ClearToolUsesEdit`` settings as the engine's `ToolResultMicrocompact`.

``ContextEditingMiddleware(edits=[ClearToolUsesEdit(...)])`` clears old tool
results; the engine's `ToolResultMicrocompact` is the same idea, run on the
view rather than the state. `from_clear_tool_uses` carries a user's edit
over, field by field:

* ``exclude_tools`` → a classifier that never clears those tools' results
  (the result's ``name``, else its call's, as LangChain matches);
* ``keep`` → ``keep_recent`` (the engine counts distinct calls: a call made
  again with the same arguments supersedes the older result);
* ``placeholder`` → ``placeholder``; LangChain's default ``"[cleared]"``
  becomes the engine's default, a placeholder that names the tool, its
  arguments and how the call ended;
* ``trigger`` and ``clear_at_least`` are not carried: the engine clears only
  while the view is above its threshold (set with the middleware's
  ``trigger=``), and in steps of ``clearing_step`` of it, so the prompt
  prefix stays the same for many calls;
* ``clear_tool_inputs=True`` is refused: the engine keeps every call's
  arguments (the placeholder describes the call from them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from langchain.agents.middleware import ClearToolUsesEdit
from langchain.agents.middleware.context_editing import DEFAULT_TOOL_PLACEHOLDER

from context_engine.errors import ConfigurationError
from context_engine.messages import Message, ToolCall
from context_engine.strategies.microcompact import ToolResultMicrocompact

__all__ = ["ExcludeTools", "from_clear_tool_uses"]


class ExcludeTools:
    """A `ToolResultMicrocompact` classifier: every tool may be cleared but the named ones.

    Args:
        names: The tools whose results are never cleared.

    Raises:
        ConfigurationError: ``names`` is a single string or holds something else than strings.
    """

    def __init__(self, names: Iterable[str]) -> None:
        if isinstance(names, str) or not all(isinstance(n, str) for n in names):
            raise ConfigurationError(
                f"exclude_tools must be a list of tool names, got {names!r}; "
                'for one tool write ["name"]'
            )
        self.names = frozenset(names)

    def __call__(self, call: ToolCall, result: Message) -> bool:
        """Whether ``result`` may be cleared: its tool is not one of the named ones."""
        return (result.name or call.name) not in self.names

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExcludeTools) and other.names == self.names

    def __hash__(self) -> int:
        return hash(self.names)

    def __repr__(self) -> str:
        return f"ExcludeTools({sorted(self.names)!r})"


def from_clear_tool_uses(
    edit: ClearToolUsesEdit | None = None, **options: Any
) -> ToolResultMicrocompact:
    """A `ToolResultMicrocompact` that clears tool results the way ``edit`` configures.

    Put it in the engine's strategies where the default pipeline has its
    microcompact (after the tool-result cap).

    Args:
        edit: LangChain's settings; None takes ``ClearToolUsesEdit()``'s
            (``keep=3``, no excluded tools).
        **options: Further `ToolResultMicrocompact` settings
            (``min_result_tokens``, ``idle_threshold`` ...); they win over
            what ``edit`` maps to.

    Raises:
        ConfigurationError: ``edit`` is not a ``ClearToolUsesEdit``, it sets
            ``clear_tool_inputs=True``, or an option is invalid.
    """
    edit = ClearToolUsesEdit() if edit is None else edit
    if not isinstance(edit, ClearToolUsesEdit):
        raise ConfigurationError(
            f"edit must be langchain's ClearToolUsesEdit, got {edit!r}; "
            "pass ToolResultMicrocompact settings as keywords instead"
        )
    if edit.clear_tool_inputs:
        raise ConfigurationError(
            "clear_tool_inputs=True is not supported: context-engine keeps every tool call's "
            "arguments (the placeholder describes the call from them); leave it False"
        )
    mapped: dict[str, Any] = {"keep_recent": edit.keep}
    if edit.exclude_tools:
        mapped["classifier"] = ExcludeTools(edit.exclude_tools)
    if edit.placeholder != DEFAULT_TOOL_PLACEHOLDER:
        mapped["placeholder"] = edit.placeholder
    return ToolResultMicrocompact(**{**mapped, **options})
