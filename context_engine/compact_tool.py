"""`CompactTool`: lets the model ask for a checkpoint, with a focus, as a tool call.

LangChain's deepagents, OpenHands and Strands' agentic mode let the agent
decide when its history is worth summarizing (a phase of work ended, long
outputs were read and acted on). Give the model `CompactTool.openai_schema`
(Chat Completions), `CompactTool.responses_schema` (Responses API) or
`CompactTool.anthropic_schema` (Messages API) next to its other tools, and
answer its calls with ``await tool(arguments, transcript)``, where the
transcript ends with the assistant message that made the call.

The handler runs ``engine.compact(transcript, focus, requested_by="agent")``:
the summarizer gets the focus as ``instructions``, the request's per-request
cap (``max_llm_rewrites_per_request``) and the circuit breaker bound it, and
a successful checkpoint counts as one LLM rewrite of the request. What comes
back is a `CompactToolResult`: the text to send as the tool's result, and the
transcript to keep (``commit``, the checkpoint followed by the pending call),
so the next ``project`` works on the committed history. A refusal, a failed
summary or arguments of the wrong shape come back as text for the model,
never as an exception inside the agent loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from context_engine._aio import run_blocking
from context_engine.errors import CompactionError, CompactionRefusedError, ConfigurationError
from context_engine.messages import Message
from context_engine.pipeline import BREAKER_OPEN
from context_engine.results import CompactResult
from context_engine.strategies.base import ForceCompactionStrategy

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine

__all__ = ["COMPACT_TOOL_NAME", "MAX_FOCUS_CHARS", "CompactTool", "CompactToolResult"]

logger = logging.getLogger(__name__)

COMPACT_TOOL_NAME = "compact_context"
"""The tool's name as the model sees it."""

MAX_FOCUS_CHARS = 2_000
"""Longest focus the tool accepts: a sentence or a short list, not a document."""

_DESCRIPTION = (
    "Summarize the earlier part of this conversation into a checkpoint to free context "
    "space. Use it when the history holds much you no longer need verbatim: a phase of "
    "the task is finished, or long tool outputs were read and acted on. The current "
    "request and the most recent steps stay as they are; the summary replaces the rest. "
    "Pass focus to name what the summary must keep (file names, failing tests, decisions). "
    "Context is also managed automatically, so call this only at a natural break."
)


def _parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "focus": {
                "type": "string",
                "maxLength": MAX_FOCUS_CHARS,
                "description": "What the summary must keep, e.g. 'the failing test names and "
                "the fix planned for parser.py'. Leave out for a general summary.",
            },
        },
        "additionalProperties": False,
    }


@attrs.frozen(kw_only=True)
class CompactToolResult:
    """What one call of the tool did.

    Attributes:
        content: The tool result to send back to the model.
        result: The compaction's result when the engine ran it (a checkpoint
            was written, or there was nothing to compact), else None.
        refused: Why no checkpoint was written (refused, failed, bad
            arguments), or None when one was.
    """

    content: str
    result: CompactResult | None = None
    refused: str | None = None

    @property
    def commit(self) -> tuple[Message, ...] | None:
        """The transcript to keep from now on (it ends with the pending call), or None."""
        return self.result.commit if self.result is not None else None

    def transcript(self, messages: Sequence[Message], tool_call_id: str) -> tuple[Message, ...]:
        """The transcript to continue with: ``commit`` (or ``messages``), then the tool's answer."""
        kept = self.commit if self.commit is not None else tuple(messages)
        return (*kept, Message.tool(tool_call_id, self.content, name=COMPACT_TOOL_NAME))


@attrs.frozen(kw_only=True)
class CompactTool:
    """The compaction tool of one engine: schemas for the model and the handler for its calls.

    Raises:
        ConfigurationError: the engine has no force-capable strategy
            (`FullSummary`, `SessionMemory`), so nothing could write a checkpoint.
    """

    engine: ContextEngine
    """The engine whose strategies write the checkpoint and whose cap and breaker bound it."""

    name: str = attrs.field(default=COMPACT_TOOL_NAME, init=False)
    """The tool's name as the model sees it."""

    def __attrs_post_init__(self) -> None:
        if not any(isinstance(s, ForceCompactionStrategy) for s in self.engine.strategies):
            raise ConfigurationError(
                "CompactTool needs an engine with a strategy that can write a checkpoint on "
                "demand (FullSummary with a summarizer, or SessionMemory); this engine has none"
            )

    @property
    def openai_schema(self) -> dict[str, Any]:
        """The tool for OpenAI's Chat Completions ``tools=`` list."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": _DESCRIPTION,
                "parameters": _parameters(),
            },
        }

    @property
    def responses_schema(self) -> dict[str, Any]:
        """The tool for OpenAI's Responses API ``tools=`` list.

        ``strict`` is off: strict mode would make ``focus`` required (nullable),
        and a model should be able to leave it out.
        """
        return {
            "type": "function",
            "name": self.name,
            "description": _DESCRIPTION,
            "parameters": _parameters(),
            "strict": False,
        }

    @property
    def anthropic_schema(self) -> dict[str, Any]:
        """The tool for Anthropic's Messages API ``tools=`` list."""
        return {"name": self.name, "description": _DESCRIPTION, "input_schema": _parameters()}

    async def __call__(
        self, arguments: str | Mapping[str, Any], messages: Sequence[Message]
    ) -> CompactToolResult:
        """Answer one call.

        Args:
            arguments: The call's arguments as the model sent them (JSON text or a mapping).
            messages: The transcript, ending with the assistant message that made the call.

        Raises:
            InvalidMessageError: ``messages`` is not a sequence of `Message` (a
                bug of the caller's, not something the model did).
        """
        focus = _parse(arguments)
        if isinstance(focus, _Problem):
            return CompactToolResult(content=focus.text, refused=focus.text)
        try:
            result = await self.engine.compact(messages, focus, requested_by="agent")
        except CompactionRefusedError as exc:
            return CompactToolResult(content=_refusal_text(exc.reason), refused=exc.reason)
        except CompactionError as exc:
            logger.warning(
                "strategy=<%s> | compaction the agent asked for failed: %s", exc.strategy, exc
            )
            return CompactToolResult(
                content="No checkpoint was written: the summary could not be made this time. "
                "The conversation continues unchanged; carry on with the task.",
                refused=str(exc),
            )
        return CompactToolResult(content=_done_text(result, focus), result=result)

    def call_sync(
        self, arguments: str | Mapping[str, Any], messages: Sequence[Message]
    ) -> CompactToolResult:
        """Blocking twin of calling the tool; raises inside a running event loop."""
        answer: CompactToolResult = run_blocking(lambda: self(arguments, messages), "CompactTool")
        return answer


@attrs.frozen
class _Problem:
    text: str


def _parse(arguments: object) -> str | _Problem | None:
    """The focus (None for none), or the sentence naming what is wrong with the arguments."""
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # RecursionError: "[[[[…" nested too deep
            return _Problem('The arguments must be JSON like {"focus": "…"} or {}.')
    if not isinstance(arguments, Mapping):
        return _Problem('The arguments must be an object like {"focus": "…"} or {}.')
    focus = arguments.get("focus")
    if focus is None:
        return None
    if not isinstance(focus, str):
        return _Problem("focus must be text saying what the summary must keep, or left out.")
    focus = focus.strip()
    if len(focus) > MAX_FOCUS_CHARS:
        return _Problem(
            f"focus is {len(focus):,} characters long; name what the summary must keep in at "
            f"most {MAX_FOCUS_CHARS:,} characters."
        )
    return focus or None


def _refusal_text(reason: str) -> str:
    if reason == BREAKER_OPEN:
        why = "summaries are paused after repeated failures"
    else:
        why = "this request already had as many summaries as it may have"
    return (
        f"No checkpoint was written: {why}. The conversation continues unchanged and is "
        "still kept within the context window automatically; carry on with the task."
    )


def _done_text(result: CompactResult, focus: str | None) -> str:
    if not result.changed:
        return "Nothing to compact: the history is already short. Carry on with the task."
    info = result.info
    if info is None:  # a strategy shortened the history without writing a checkpoint
        return "The earlier history was shortened. Carry on with the task."
    kept = " with the focus you gave" if focus else ""
    text = (
        f"Checkpoint written{kept}: {info.compacted_count} earlier messages are now a summary, "
        f"and the context went from {info.tokens_before:,} to {info.tokens_after:,} tokens. "
        "Carry on from the summary."
    )
    if result.event is not None and result.event.references:
        text += " The summary names a reference that fetches the originals if you need them."
    return text
