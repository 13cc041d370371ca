"""Strategies that ask the provider to manage the context instead of rewriting it.

Each one gives the request options its provider understands (see
`RequestOptions`); the engine puts the options of every native strategy of
the pipeline on `Projection.request_options` on every call, since the
provider applies them only past its own trigger. In the pipeline itself a
context-editing strategy is a no-op, so the client-side strategies around it
work as before; a compaction strategy cuts the view before the newest
compaction checkpoint its provider returned (the provider ignores what comes
before it), archiving the messages it drops.

Mixed pipelines: list the client-side strategies you want to run first; the
native directives go only to the provider that understands them
(`apply_request_options(..., provider=...)`), so a pipeline serving another
provider keeps working with the client-side strategies alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

import attrs

from context_engine._validate import positive_int
from context_engine.errors import ConfigurationError
from context_engine.messages import Message
from context_engine.native.checkpoint import newest_native_checkpoint
from context_engine.native.options import NativeProvider, RequestOptions
from context_engine.strategies.base import Budget, Removal, StrategyResult

__all__ = [
    "COMPACTION_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "AnthropicClearThinking",
    "AnthropicClearToolUses",
    "AnthropicCompaction",
    "NativeStrategy",
    "OpenAICompaction",
]

CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
"""Anthropic's beta flag for clearing tool uses and thinking."""
COMPACTION_BETA = "compact-2026-01-12"
"""Anthropic's beta flag for the ``compact_20260112`` edit."""


@runtime_checkable
class NativeStrategy(Protocol):
    """A strategy whose work is a directive to the provider."""

    name: str
    provider: NativeProvider

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """The request options to send with ``view``."""
        ...


def _tokens(value: int) -> dict[str, Any]:
    return {"type": "input_tokens", "value": value}


def _tool_names(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigurationError(f"exclude_tools must be a list of tool names, got {value!r}")
    if not all(isinstance(name, str) and name for name in value):
        raise ConfigurationError(f"exclude_tools must hold non-empty tool names, got {value!r}")
    return tuple(value)


def _clear_inputs(value: object) -> bool | tuple[str, ...] | None:
    if value is None or isinstance(value, bool):
        return value
    return _tool_names(value)


class _NoRewrite:
    uses_llm: ClassVar[bool] = False

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Hands the view on: the provider edits its copy of the context, not ours."""
        return StrategyResult.unchanged(view)


@attrs.frozen(kw_only=True)
class AnthropicClearToolUses(_NoRewrite):
    """Anthropic context editing: the server clears old tool results past a trigger.

    Attributes:
        trigger_tokens: Input tokens above which the server clears; None: the
            server's default.
        trigger_tool_uses: Trigger on a number of tool uses instead of tokens.
        keep_tool_uses: Most recent tool uses the server keeps; None: its default.
        clear_at_least_tokens: Clear only when at least this many tokens go,
            so that breaking the prompt cache is worth it; None: no minimum.
        exclude_tools: Tools whose uses are never cleared.
        clear_tool_inputs: Also clear the calls' inputs: True for every tool,
            or the tool names; None leaves the server's default.
    """

    name: ClassVar[str] = "anthropic_clear_tool_uses"
    provider: ClassVar[NativeProvider] = "anthropic"
    trigger_tokens: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    trigger_tool_uses: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    keep_tool_uses: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    clear_at_least_tokens: int | None = attrs.field(
        default=None, validator=positive_int(optional=True)
    )
    exclude_tools: tuple[str, ...] = attrs.field(default=(), converter=_tool_names)
    clear_tool_inputs: bool | tuple[str, ...] | None = attrs.field(
        default=None, converter=_clear_inputs
    )

    def __attrs_post_init__(self) -> None:
        if self.trigger_tokens is not None and self.trigger_tool_uses is not None:
            raise ConfigurationError(
                "AnthropicClearToolUses takes trigger_tokens or trigger_tool_uses, not both"
            )

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """A ``clear_tool_uses_20250919`` edit and its beta flag."""
        edit: dict[str, Any] = {"type": "clear_tool_uses_20250919"}
        if self.trigger_tokens is not None:
            edit["trigger"] = _tokens(self.trigger_tokens)
        elif self.trigger_tool_uses is not None:
            edit["trigger"] = {"type": "tool_uses", "value": self.trigger_tool_uses}
        if self.keep_tool_uses is not None:
            edit["keep"] = {"type": "tool_uses", "value": self.keep_tool_uses}
        if self.clear_at_least_tokens is not None:
            edit["clear_at_least"] = _tokens(self.clear_at_least_tokens)
        if self.exclude_tools:
            edit["exclude_tools"] = list(self.exclude_tools)
        if self.clear_tool_inputs is not None:
            inputs = self.clear_tool_inputs
            edit["clear_tool_inputs"] = inputs if isinstance(inputs, bool) else list(inputs)
        return RequestOptions(provider="anthropic", edits=(edit,), betas=(CONTEXT_MANAGEMENT_BETA,))


def _keep_turns(value: object) -> int | Literal["all"] | None:
    if value is None or value == "all":
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"AnthropicClearThinking.keep_turns must be a positive int or 'all', got {value!r}"
        )
    return value


@attrs.frozen(kw_only=True)
class AnthropicClearThinking(_NoRewrite):
    """Anthropic context editing: the server drops thinking blocks of older turns.

    Attributes:
        keep_turns: Most recent assistant turns whose thinking stays, or
            ``"all"`` to keep every one (which keeps the cached prefix intact);
            None: the server's default.
    """

    name: ClassVar[str] = "anthropic_clear_thinking"
    provider: ClassVar[NativeProvider] = "anthropic"
    keep_turns: int | Literal["all"] | None = attrs.field(default=None, converter=_keep_turns)

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """A ``clear_thinking_20251015`` edit and its beta flag."""
        edit: dict[str, Any] = {"type": "clear_thinking_20251015"}
        if self.keep_turns == "all":
            edit["keep"] = {"type": "all"}
        elif self.keep_turns is not None:
            edit["keep"] = {"type": "thinking_turns", "value": self.keep_turns}
        return RequestOptions(provider="anthropic", edits=(edit,), betas=(CONTEXT_MANAGEMENT_BETA,))


class _CutBeforeCheckpoint:
    uses_llm: ClassVar[bool] = False
    provider: ClassVar[NativeProvider]

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Drop the messages before the newest compaction checkpoint (the provider ignores them).

        Leading system and developer messages stay; the checkpoint's message is
        kept whole; the dropped messages are archived under one reference.
        """
        view = tuple(view)
        newest = newest_native_checkpoint(view, self.provider)
        lead = 0
        while lead < len(view) and view[lead].role in ("system", "developer"):
            lead += 1
        if newest is None or newest <= lead:
            return StrategyResult.unchanged(view)
        kept = (*view[:lead], *view[newest:])
        return StrategyResult(
            messages=kept,
            applied=True,
            tokens_saved=max(0, budget.tokens - budget.measure(kept)),
            removed=(Removal("messages", view[lead:newest]),),
        )


@attrs.frozen(kw_only=True)
class AnthropicCompaction(_CutBeforeCheckpoint):
    """Anthropic server-side compaction (``compact_20260112``).

    The server summarizes older context past the trigger and returns a
    ``compaction`` block; keep the response in the transcript as it came
    (`formats.anthropic.from_anthropic` holds the block whole).

    Attributes:
        trigger_tokens: Input tokens at which the server compacts; None: the
            server's default (150,000 per the SDK).
        instructions: Extra instructions for the server's summary.
        pause_after_compaction: The server stops after compacting and returns
            the block alone.
    """

    name: ClassVar[str] = "anthropic_compaction"
    provider: ClassVar[NativeProvider] = "anthropic"
    trigger_tokens: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    instructions: str | None = None
    pause_after_compaction: bool = False

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """A ``compact_20260112`` edit and its beta flag."""
        edit: dict[str, Any] = {"type": "compact_20260112"}
        if self.trigger_tokens is not None:
            edit["trigger"] = _tokens(self.trigger_tokens)
        if self.instructions:
            edit["instructions"] = self.instructions
        if self.pause_after_compaction:
            edit["pause_after_compaction"] = True
        return RequestOptions(provider="anthropic", edits=(edit,), betas=(COMPACTION_BETA,))


@attrs.frozen(kw_only=True)
class OpenAICompaction(_CutBeforeCheckpoint):
    """OpenAI Responses server-side compaction (``context_management``).

    The server compacts past the threshold and returns an encrypted
    ``compaction`` item; keep it in the transcript as it came
    (`formats.openai_agents.from_openai_agents` holds it whole).

    Attributes:
        compact_threshold: Input tokens at which the server compacts; None:
            the server's default.
    """

    name: ClassVar[str] = "openai_compaction"
    provider: ClassVar[NativeProvider] = "openai"
    compact_threshold: int | None = attrs.field(default=None, validator=positive_int(optional=True))

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """One ``compaction`` context-management entry."""
        entry: dict[str, Any] = {"type": "compaction"}
        if self.compact_threshold is not None:
            entry["compact_threshold"] = self.compact_threshold
        return RequestOptions(provider="openai", edits=(entry,))
