"""The layout of a checkpoint's text: its body and one section on the current request.

When the cut falls inside a turn, the early part of that turn is summarized
on its own and added under `PREFIX_HEADING`, its headings nested one level
deeper, always last. A later checkpoint inside the same turn folds that
section (updates it), so a request compacted many times keeps exactly one.
"""

from __future__ import annotations

import regex

__all__ = ["PREFIX_HEADING", "join_prefix", "split_prefix"]

PREFIX_HEADING = "## Earlier in the current request"
"""The heading of the summary of the current request's early part."""

_NEST = regex.compile(r"^(#{1,5} )", regex.MULTILINE)
_UNNEST = regex.compile(r"^#(#{1,6} )", regex.MULTILINE)
_SECTION = regex.compile(rf"(?:^|\n\n?){regex.escape(PREFIX_HEADING)}[ \t]*(?:\n|\Z)")


def split_prefix(text: str | None) -> tuple[str | None, str | None]:
    """``(body, prefix)`` of a checkpoint text; either is None when absent.

    ``prefix`` is the summary under the first `PREFIX_HEADING`, its headings
    un-nested (as the summarizer wrote them); everything after that heading
    belongs to it, further prefix headings of older checkpoints included.
    """
    if text is None:
        return None, None
    found = _SECTION.search(text)
    if found is None:
        return text, None
    body = text[: found.start()].strip() or None
    prefix = _UNNEST.sub(r"\1", text[found.end() :]).strip() or None
    return body, prefix


def join_prefix(body: str | None, prefix: str) -> str:
    """``body`` followed by ``prefix`` as the section on the current request."""
    nested = _NEST.sub(r"#\1", prefix)
    section = f"{PREFIX_HEADING}\n{nested}"
    return f"{body}\n\n{section}" if body else section
