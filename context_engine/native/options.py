"""Request options a native strategy asks the caller to send with the view.

A native strategy does not rewrite the view: it asks the provider to manage
the context on the server (Anthropic context editing and compaction, OpenAI
Responses compaction). What it asks for is a `RequestOptions`: the request
fields in the SDK's own shape, the beta flags they need, and the provider
that understands them. `Projection.request_options` holds the options of
every native strategy of the pipeline; `apply_request_options` merges the
ones meant for a provider into the keyword arguments of its SDK call.

Shapes, as the installed SDKs type them (anthropic 2.14.0, openai 3.57.0):

* Anthropic: ``client.beta.messages.create(context_management={"edits": [...]},
  betas=[...])``; edits are ``clear_tool_uses_20250919``,
  ``clear_thinking_20251015`` and ``compact_20260112``
  (``BetaContextManagementConfigParam``).
* OpenAI: ``client.responses.create(context_management=[{"type": "compaction",
  "compact_threshold": ...}])`` (``response_create_params.ContextManagement``);
  the Responses API only: Chat Completions has no such field.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import attrs

from context_engine.errors import ConfigurationError

__all__ = [
    "COMPACT_CALL_BETA",
    "NativeProvider",
    "RequestOptions",
    "apply_request_options",
    "merge_request_options",
]

NativeProvider: TypeAlias = Literal["anthropic", "openai"]

COMPACT_CALL_BETA: Final = "compact-2026-09-04"
"""Anthropic's beta flag for the top-level ``compaction`` request parameter."""

_PROVIDERS: Final = ("anthropic", "openai")
# Anthropic processes edits in order; clearing thinking must come first.
_ANTHROPIC_EDIT_ORDER: Final = {"clear_thinking_20251015": 0}


def _provider(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in _PROVIDERS:
        raise ConfigurationError(
            f"RequestOptions.provider must be one of {_PROVIDERS}, got {value!r}"
        )


def _edits(value: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    out = tuple(value)
    for edit in out:
        if not isinstance(edit, Mapping) or not isinstance(edit.get("type"), str):
            raise ConfigurationError(f"each edit must be a dict with a 'type', got {edit!r}")
    return out


def _betas(value: Iterable[str]) -> tuple[str, ...]:
    out = tuple(value)
    if not all(isinstance(beta, str) and beta for beta in out):
        raise ConfigurationError(f"betas must be non-empty strings, got {out!r}")
    return out


@attrs.frozen(kw_only=True)
class RequestOptions:
    """Request fields one native strategy asks for, for one provider.

    Attributes:
        provider: ``anthropic`` or ``openai``: the provider that understands them.
        edits: Context-management entries: Anthropic ``context_management.edits``
            entries, or OpenAI ``context_management`` list entries.
        betas: Anthropic beta flags the entries need (the ``anthropic-beta`` header).
    """

    provider: NativeProvider = attrs.field(validator=_provider)
    edits: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_edits)
    betas: tuple[str, ...] = attrs.field(default=(), converter=_betas)

    def arguments(self) -> dict[str, Any]:
        """The SDK keyword arguments these options add (fresh objects, safe to change)."""
        edits = [copy.deepcopy(dict(edit)) for edit in self.edits]
        if self.provider == "openai":
            return {"context_management": edits} if edits else {}
        arguments: dict[str, Any] = {}
        if edits:
            arguments["context_management"] = {"edits": edits}
        if self.betas:
            arguments["betas"] = list(self.betas)
        return arguments


def merge_request_options(options: Iterable[RequestOptions]) -> tuple[RequestOptions, ...]:
    """One `RequestOptions` per provider, edits in order, betas without repeats.

    Raises:
        ConfigurationError: two strategies asked for the same kind of edit for
            one provider (the provider accepts each kind once), or Anthropic's
            on-demand compaction meets its ``compact_20260112`` edit.
    """
    merged: dict[str, tuple[list[Mapping[str, Any]], list[str]]] = {}
    for option in options:
        edits, betas = merged.setdefault(option.provider, ([], []))
        for edit in option.edits:
            kind = edit.get("type")
            if any(seen.get("type") == kind for seen in edits):
                raise ConfigurationError(
                    f"two native strategies ask {option.provider} for a {kind!r} edit; "
                    "keep one of them in the pipeline"
                )
            edits.append(edit)
        betas.extend(beta for beta in option.betas if beta not in betas)
    out = []
    for provider, (edits, betas) in merged.items():
        if provider == "anthropic":
            _check_compaction_kinds(edits, betas)
            edits = sorted(edits, key=lambda edit: _ANTHROPIC_EDIT_ORDER.get(edit["type"], 1))
        out.append(RequestOptions(provider=provider, edits=edits, betas=betas))  # type: ignore[arg-type]
    return tuple(out)


def _check_compaction_kinds(edits: Sequence[Mapping[str, Any]], betas: Sequence[str]) -> None:
    # The SDK's tool runner refuses the same pair (`_check_can_compact`): the API rejects
    # a request holding an on-demand compaction block together with a compaction edit.
    if COMPACT_CALL_BETA in betas and any(e.get("type") == "compact_20260112" for e in edits):
        raise ConfigurationError(
            "AnthropicCompactCall and a compact_20260112 edit (AnthropicCompaction) cannot be "
            "used together: Anthropic does not accept a compaction block with a compaction "
            "edit; keep one of them"
        )


def apply_request_options(
    arguments: Mapping[str, Any], options: Sequence[RequestOptions], provider: NativeProvider
) -> dict[str, Any]:
    """``arguments`` (SDK keyword arguments) with the options meant for ``provider`` merged in.

    Options for another provider are left out, so one pipeline can serve
    several providers: the native directives reach only the one that
    understands them. The caller's own ``context_management`` entries come
    first; its ``betas`` are kept. ``arguments`` is not modified.

    Raises:
        ConfigurationError: ``provider`` is unknown, or the caller's
            ``context_management`` already holds an edit of a kind the options add.
    """
    if provider not in _PROVIDERS:
        raise ConfigurationError(f"provider must be one of {_PROVIDERS}, got {provider!r}")
    out = dict(arguments)
    own = _own_edits(arguments, provider)
    chosen = [option for option in options if option.provider == provider]
    if not chosen:
        return out
    caller = RequestOptions(provider=provider, edits=own, betas=_own_betas(arguments))
    (merged,) = merge_request_options([caller, *chosen])
    out.update(merged.arguments())
    if provider == "anthropic" and "context_management" in arguments and own:
        out["context_management"] = {
            **copy.deepcopy(dict(arguments["context_management"])),
            "edits": out["context_management"]["edits"],
        }
    return out


def _own_edits(arguments: Mapping[str, Any], provider: str) -> list[Mapping[str, Any]]:
    value = arguments.get("context_management")
    if value is None:
        return []
    if provider == "anthropic":
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                "Anthropic's context_management must be a dict with an 'edits' list, got "
                f"{type(value).__name__}"
            )
        value = value.get("edits") or []
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise ConfigurationError(f"context_management entries must be a list, got {value!r}")
    return list(value)


def _own_betas(arguments: Mapping[str, Any]) -> list[str]:
    betas = arguments.get("betas") or []
    if isinstance(betas, str):
        raise ConfigurationError("betas must be a list of beta names, not one string")
    return list(betas)
