"""`RecallTool`: lets the agent fetch archived originals back by reference.

Give the model `RecallTool.openai_schema` (Chat Completions / Responses function
tool) or `RecallTool.anthropic_schema` (Messages API tool) next to its other
tools, and answer its calls with ``await tool(arguments)``. The answer is the
original text: a cleared tool result comes back as it was, a range of
messages as labelled lines. Long originals come in pages of ``page_chars``
characters so a recall cannot flood the window it was removed to protect.

The model may also pass the id of a tool call whose result was cleared, as an
agent reads ``tool-results/{id}.txt``: the newest archived result of that call
comes back.

What the model sends is untrusted: arguments of any shape get a sentence back,
a reference longer than `MAX_REFERENCE_CHARS` is refused without being echoed,
logs quote it escaped (no forged log lines), and no answer names the store's
path or host.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from context_engine._aio import run_blocking
from context_engine._originals import recall_tool_result
from context_engine._validate import int_at_least, is_int
from context_engine.archive.reference import REFERENCE_PATTERN
from context_engine.errors import ArchiveError, ConfigurationError, RecallError
from context_engine.messages import Message, TextBlock
from context_engine.summarize.serialize import serialize_message

if TYPE_CHECKING:
    from context_engine.engine import ContextEngine

__all__ = ["MAX_REFERENCE_CHARS", "RECALL_TOOL_NAME", "RecallTool"]

logger = logging.getLogger(__name__)

RECALL_TOOL_NAME = "recall_context"
"""The tool name placeholders and markers tell the agent to call."""

MAX_REFERENCE_CHARS = 128
"""Longest reference the tool accepts: an ``arc-`` reference is 24 characters and
provider tool-call ids stay well under this."""

_DESCRIPTION = (
    "Fetch content that was removed from this conversation to save context space. "
    "Cleared tool outputs, trimmed texts, truncation notes and context summaries name "
    "a reference such as arc-0123456789abcdef0123; pass it here to read the original. "
    "The id of a tool call whose output was cleared works too. "
    "Long originals come in pages: call again with the offset the answer gives."
)


def _parameters() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reference": {
                "type": "string",
                "maxLength": MAX_REFERENCE_CHARS,
                "description": "The arc-… reference named in the conversation, or the id "
                "of a tool call whose output was cleared.",
            },
            "offset": {
                "type": "integer",
                "minimum": 0,
                "description": "Character offset of the page to read (0 for the first).",
            },
        },
        "required": ["reference"],
        "additionalProperties": False,
    }


def render_originals(messages: tuple[Message, ...]) -> str:
    """The originals as the model reads them back: a lone tool result as its own text."""
    if len(messages) == 1 and messages[0].role == "tool":
        only = messages[0]
        if all(isinstance(block, TextBlock) for block in only.content):
            return only.text
    return "\n\n".join(serialize_message(m, max_tool_result_chars=0) for m in messages)


@attrs.frozen(kw_only=True)
class RecallTool:
    """The recall tool of one engine: schemas for the model and the handler for its calls.

    Answers are always text for the model: an unknown reference, a reference
    of another session, bad arguments or an unavailable store come back as a
    sentence saying so, never as an exception inside the agent loop.
    """

    engine: ContextEngine
    """The engine whose archive and session the references belong to."""
    page_chars: int = attrs.field(
        default=20_000, validator=int_at_least(200, fix="it is the number of characters per page")
    )
    """Characters returned per call; longer originals are paged."""

    name: str = attrs.field(default=RECALL_TOOL_NAME, init=False)
    """The tool's name as the model sees it: the name placeholders and markers tell it to call."""

    def __attrs_post_init__(self) -> None:
        if self.engine.archive is None:
            raise ConfigurationError(
                "RecallTool needs an engine built with archive= and session_id=; this one "
                "keeps no archive, so there is nothing to recall"
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
    def anthropic_schema(self) -> dict[str, Any]:
        """The tool for Anthropic's Messages API ``tools=`` list."""
        return {"name": self.name, "description": _DESCRIPTION, "input_schema": _parameters()}

    async def __call__(self, arguments: str | Mapping[str, Any]) -> str:
        """Answer one call: ``arguments`` as the model sent them (JSON text or a mapping)."""
        parsed = _parse(arguments)
        if isinstance(parsed, str):
            return parsed
        reference, offset = parsed
        try:
            originals = await self._lookup(reference)
        except RecallError:
            return (
                f"No archived content for {reference!r} in this conversation. Use a "
                "reference exactly as it appears in the conversation."
            )
        except ArchiveError as exc:
            # %r: the reference is the model's text, and a newline in it must not forge a
            # log line. The store's path or host is for the operator, not the model.
            logger.warning("reference=<%r> | recall failed: %s", reference, exc)
            return "The archive is unavailable right now; try again later."
        return self._page(render_originals(originals), offset)

    async def _lookup(self, reference: str) -> tuple[Message, ...]:
        if REFERENCE_PATTERN.fullmatch(reference):
            return await self.engine.recall(reference)
        archive, session_id = self.engine.archive, self.engine.session_id
        assert archive is not None  # checked at construction
        assert session_id is not None
        return await recall_tool_result(archive, session_id, reference)

    def call_sync(self, arguments: str | Mapping[str, Any]) -> str:
        """Blocking twin of calling the tool; raises inside a running event loop."""
        answer: str = run_blocking(lambda: self(arguments), "RecallTool")
        return answer

    def _page(self, text: str, offset: int) -> str:
        if offset >= len(text) and text:
            return f"The original has {len(text)} characters; offset {offset} is past its end."
        page = text[offset : offset + self.page_chars]
        rest = len(text) - offset - len(page)
        if rest <= 0:
            return page
        return (
            f"{page}\n[{rest} more characters; call {self.name} again with "
            f"offset={offset + len(page)} to continue.]"
        )


def _parse(arguments: object) -> tuple[str, int] | str:
    """``(reference, offset)`` from the model's arguments, or a sentence naming the problem."""
    if isinstance(arguments, (str, bytes)):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):  # RecursionError: "[[[[…" nested too deep
            return 'The arguments must be JSON like {"reference": "arc-…"}.'
    if not isinstance(arguments, Mapping):
        return 'The arguments must be an object like {"reference": "arc-…"}.'
    reference = arguments.get("reference")
    offset = arguments.get("offset", 0)
    if not isinstance(reference, str) or not reference.strip():
        return 'Pass the reference to recall, like {"reference": "arc-…"}.'
    reference = reference.strip()
    if len(reference) > MAX_REFERENCE_CHARS:
        return (
            f"That reference is {len(reference):,} characters long; a reference is arc- and "
            f"20 hex digits (a tool-call id at most {MAX_REFERENCE_CHARS} characters), "
            "exactly as the conversation names it."
        )
    if not is_int(offset) or offset < 0:
        return "offset must be a whole number of characters, 0 or more."
    return reference, offset
