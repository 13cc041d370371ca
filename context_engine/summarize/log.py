"""Putting the ledger into a checkpoint's text: its sections are written by code, not the model.

The summarizer writes the narrative (goal, decisions, progress); the calls
with their status and the most recent failure come from the `Ledger`, so a
model cannot drop them or call a failure "ok". Sections of the summarizer's
own with the ledger's titles are removed first (the extractive summarizer
writes them too), then the ledger's sections go at the end of the body,
before the section on the current request.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import regex

from context_engine.messages import ContextSummary
from context_engine.summarize.bound import bound_checkpoint
from context_engine.summarize.ledger import LEDGER_KEY, LEDGER_TITLES, Ledger
from context_engine.summarize.ledger_text import HIDDEN_NOTE
from context_engine.summarize.sections import join_prefix, split_prefix
from context_engine.tokens import TokenCounter

__all__ = ["fit_ledger", "with_ledger", "without_ledger", "without_listed_files"]

_HEADING = regex.compile(r"^(#{1,6})\s+(.*\S)\s*$")
_TITLES = frozenset(title.lower() for title in LEDGER_TITLES)
_FITS = 8  # renderings tried to bring the log close under its budget
_MAX_CHARS_PER_TOKEN = 8  # no log is sparser: the bisection's upper bound
_CLOSE_ENOUGH = 50  # within 2 % of the budget: stop
_FILE_TITLES = frozenset({"files modified", "files read"})
_ITEM = regex.compile(r"^\s*[-*]\s+(.*\S)\s*$")


def fit_ledger(
    ledger: Ledger, max_tokens: int, counter: TokenCounter, *, others: Sequence[str] = ()
) -> str:
    """``ledger``'s sections in at most about ``max_tokens`` tokens ("" when empty).

    ``others`` are labels of calls shown elsewhere in the view (`Ledger.render`).
    """
    if not ledger:
        return ""
    high = max(1, max_tokens) * _MAX_CHARS_PER_TOKEN
    whole = ledger.render(high, others=others)
    if counter.count_text(whole) <= max_tokens and not _hides(whole):
        return whole
    # The largest character budget whose rendering fits: start from 4 characters a
    # token, then bisect between the best that fitted and the least that did not. A
    # short rendering does not mean all is shown: one long item (a command with many
    # variants) that misses the budget leaves the older ones out with it.
    fitted, over, low = "", whole, 0
    chars = max(1, max_tokens) * 4
    for _ in range(_FITS):
        text = ledger.render(chars, others=others)
        tokens = counter.count_text(text)
        if tokens <= max_tokens:
            fitted, low = text, chars
            if tokens * _CLOSE_ENOUGH >= max_tokens * (_CLOSE_ENOUGH - 1):
                break  # close to the budget
        else:
            over, high = text, chars
        chars = (low + high) // 2
        if high - low <= 1:
            break
    return fitted or over


def _hides(text: str) -> bool:
    """Whether a rendered log counts calls it has no room for (``(+N more)``)."""
    return any(HIDDEN_NOTE.match(line) for line in text.splitlines())


def without_ledger(text: str) -> str:
    """``text`` without the sections titled like the ledger's, at any heading level."""
    kept: list[str] = []
    skipping = 0  # heading level of the section being removed; 0: keeping
    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading is not None:
            level = len(heading[1])
            if skipping and level > skipping:
                continue
            skipping = level if heading[2].strip().lower() in _TITLES else 0
        if not skipping:
            kept.append(line)
    return regex.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def without_listed_files(text: str, paths: frozenset[str]) -> str:
    """``text`` without the file-list items that are bare ``paths``.

    The checkpoint lists its files itself (``<read-files>``, ``<modified-files>``);
    a summarizer's *Files modified* / *Files read* section of bare paths says
    them twice. Items that say more (what changed) stay; a section left with
    nothing but blank lines and a ``(+N more)`` note goes whole.
    """
    out: list[str] = []
    section: list[str] | None = None  # lines of the file section being read

    def flush() -> None:
        kept = [line for line in section[1:] if line.strip()] if section is not None else []
        if section is not None and any(not HIDDEN_NOTE.match(line) for line in kept):
            out.extend(section)

    for line in text.splitlines():
        heading = _HEADING.match(line)
        if heading is not None:
            flush()
            section = [line] if heading[2].strip().lower() in _FILE_TITLES else None
            if section is None:
                out.append(line)
            continue
        if section is None:
            out.append(line)
            continue
        item = _ITEM.match(line)
        if item is None or item[1] not in paths:
            section.append(line)
    flush()
    return regex.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()


async def with_ledger(
    checkpoint: ContextSummary, ledger: Ledger, log: str, limit: int, counter: TokenCounter
) -> ContextSummary:
    """``checkpoint`` with ``log`` (the rendered ``ledger``) in its text and ``ledger`` in metadata.

    The log goes after the body, before the section on the current request.
    Should the whole exceed ``limit`` (the framing counts a few tokens more),
    it is bounded again without asking the summarizer.
    """
    if not ledger:
        return checkpoint
    body, prefix = split_prefix(checkpoint.summary)
    if log:
        body = f"{body}\n\n{log}" if body else log
    text = join_prefix(body, prefix) if prefix is not None else (body or checkpoint.summary)
    metadata = {**checkpoint.metadata, LEDGER_KEY: ledger.as_metadata()}
    logged = attrs.evolve(checkpoint, summary=text, metadata=metadata)
    if counter.count_message(logged) <= limit:
        return logged
    return await bound_checkpoint(logged, limit, counter, None)
