"""What a summarizer is given and how its answer is read back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Literal, TypeAlias

import attrs
import regex

from context_engine.errors import SummarizerError
from context_engine.messages import Message

__all__ = [
    "Summarizer",
    "SummaryKind",
    "SummaryReason",
    "SummaryRequest",
    "parse_summary_text",
    "summary_reason",
]

SummaryReason: TypeAlias = Literal[
    "reactive_full", "reactive_micro", "request_boundary", "manual", "overflow"
]
"""Why the summary is written (seed 001's ``reason``): a caller may pick a cheaper model
for ``reactive_micro``. ``reactive_full``: the view is above the threshold in ``project``;
``reactive_micro``: the micro tier folds the oldest rounds; ``request_boundary``:
`ContextEngine.compact_if_needed` at the start of a request; ``manual``: ``/compact``;
``overflow``: the provider rejected the prompt as too long."""
SummaryKind: TypeAlias = Literal["history", "turn_prefix", "condense"]


@attrs.frozen(kw_only=True)
class SummaryRequest:
    """One call to a summarizer.

    Attributes:
        messages: The canonical messages to summarize (images already replaced
            by placeholders), oldest first.
        prompt_messages: Ready-to-send prompt for a chat model: a system message
            and a user message holding the serialized conversation as data.
        previous_summary: The text being updated (the running checkpoint, or the
            earlier summary of the current request for ``turn_prefix``), or None.
        instructions: What the user asked the checkpoint to focus on (``/compact``), or None.
        reason: Why the summary is written (`SummaryReason`).
        kind: ``history`` (the checkpoint itself), ``turn_prefix`` (the short
            summary of the early part of a turn the cut fell inside) or
            ``condense`` (``previous_summary`` is too long for the checkpoint's
            share of the window: shorten it to ``max_tokens``, oldest detail
            first; ``messages`` is empty).
        max_tokens: Output budget for the answer.
        max_tool_result_chars: How long a tool result (or reasoning, or tool
            call arguments) may be in the serialized conversation before it is
            clipped to head and tail.
        redact: What the strategy's redactor does to text, or None when the
            messages were not redacted (the summarizer must then send no
            text of its own that the redactor would change).
    """

    messages: tuple[Message, ...]
    prompt_messages: tuple[Message, ...]
    previous_summary: str | None = None
    instructions: str | None = None
    reason: SummaryReason = "reactive_full"
    kind: SummaryKind = "history"
    max_tokens: int = 4096
    max_tool_result_chars: int = 2000
    redact: Callable[[str], str] | None = attrs.field(default=None, eq=False, repr=False)
    rebuild: Callable[[Sequence[Message]], SummaryRequest] | None = attrs.field(
        default=None, eq=False, repr=False
    )
    """Rebuilds the request, prompt included, for fewer messages (set by `build_request`)."""

    def with_messages(self, messages: Sequence[Message]) -> SummaryRequest:
        """The same request over ``messages`` (used to retry with the oldest turns dropped).

        Raises:
            SummarizerError: the request was built by hand, without a ``rebuild``.
        """
        if self.rebuild is None:
            raise SummarizerError(
                "this SummaryRequest cannot be rebuilt for fewer messages; "
                "create it with context_engine.summarize.prompts.build_request"
            )
        return self.rebuild(messages)


def summary_reason(pipeline_reason: str, *, micro: bool = False) -> SummaryReason:
    """The `SummaryReason` of a summary written for a pipeline run with ``pipeline_reason``.

    A ``threshold`` run is reactive: ``reactive_micro`` for the micro tier,
    ``reactive_full`` otherwise; the other reasons are passed on as they are.
    """
    if pipeline_reason == "manual":
        return "manual"
    if pipeline_reason == "overflow":
        return "overflow"
    if pipeline_reason == "request_boundary":
        return "request_boundary"
    return "reactive_micro" if micro else "reactive_full"


Summarizer: TypeAlias = Callable[[SummaryRequest], "str | Awaitable[str]"]
"""Any callable, plain or coroutine function, that takes a `SummaryRequest` and returns text."""

_ANALYSIS = regex.compile(r"<analysis>.*?(?:</analysis>|\Z)", regex.DOTALL | regex.IGNORECASE)
_SUMMARY = regex.compile(r"<summary>(.*?)(?:</summary>|\Z)", regex.DOTALL | regex.IGNORECASE)


def parse_summary_text(answer: object) -> str:
    """The checkpoint text in a summarizer's answer.

    An ``<analysis>`` block (the model's scratchpad) is dropped; when a
    ``<summary>`` block is present its content is taken, otherwise the whole
    remaining answer.

    Raises:
        SummarizerError: the answer is not text, or nothing is left of it.
    """
    if not isinstance(answer, str):
        raise SummarizerError(
            f"summarizer returned {type(answer).__name__}; it must return the checkpoint text (str)"
        )
    text = _ANALYSIS.sub("", answer)
    found = _SUMMARY.search(text)
    if found is not None:
        text = found.group(1)
    text = text.strip()
    if not text:
        raise SummarizerError("summarizer returned an empty summary")
    return text
