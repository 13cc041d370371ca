"""Keep the conversation out of the text of a summarizer's error.

A summarizer that fails may quote what it was sent: a provider's 400 echoing
part of the prompt, a client library putting the request body in its
exception, a user's own summarizer raising ``ValueError(f"bad input {prompt}")``.
That text becomes `RewriteStep.error`, the engine's log lines, span statuses
and `CompactionError` messages, and docs/observability.md promises message
contents never reach a log above DEBUG. So before an error's text leaves the
summarizer call, every run of it that also occurs in the request's content
is replaced by `QUOTE_MARK`; the original exception stays the ``__cause__``
for the caller to inspect.
"""

from __future__ import annotations

from collections.abc import Iterable

import regex

from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.serialize import serialize_message

__all__ = ["QUOTE_MARK", "request_sources", "scrub_quotes"]

QUOTE_MARK = "[conversation text removed]"
"""What a quoted run of the conversation becomes in an error's text."""

_MIN_QUOTE_CHARS = 20
"""Shorter runs are left: common words and error boilerplate appear in transcripts too."""
_MAX_ERROR_CHARS = 2_000
"""An error's text is cut to this many characters before it is scrubbed."""
_STARTS = regex.compile(r"(?:^|(?<=[\s\"'`(\[{<:=,;]))\S")
"""Where a quote is looked for: at word starts, which keeps the scan cheap."""


def request_sources(request: SummaryRequest) -> list[str]:
    """Every text of ``request`` a quote could come from: messages, prompt, instructions."""
    sources = [serialize_message(m, max_tool_result_chars=0) for m in request.messages]
    sources += [m.text for m in request.prompt_messages]
    sources += [text for text in (request.previous_summary, request.instructions) if text]
    return sources


def scrub_quotes(text: str, sources: Iterable[str]) -> str:
    """``text`` with each run of at least 20 characters found in ``sources`` replaced.

    The text is cut to 2,000 characters first. A run starts at a word start
    and is extended as far as it still occurs in one of ``sources``.
    """
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS] + "…"
    haystack = "\x00".join(sources)
    if len(text) < _MIN_QUOTE_CHARS or not haystack:
        return text
    out: list[str] = []
    done = 0
    for start in _STARTS.finditer(text):
        i = start.start()
        if i < done:
            continue
        if i + _MIN_QUOTE_CHARS > len(text):
            break
        if text[i : i + _MIN_QUOTE_CHARS] not in haystack:
            continue
        end = _longest_quote(text, i, haystack)
        while text[end - 1].isspace():  # the space after a quote stays with the error text
            end -= 1
        out.append(text[done:i])
        out.append(QUOTE_MARK)
        done = end
    out.append(text[done:])
    return "".join(out)


def _longest_quote(text: str, start: int, haystack: str) -> int:
    """The largest end with ``text[start:end]`` in ``haystack`` (a prefix of a quote is one)."""
    low, high = start + _MIN_QUOTE_CHARS, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if text[start:middle] in haystack:
            low = middle
        else:
            high = middle - 1
    return low
