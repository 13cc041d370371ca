"""Head + tail previews of long tool output that keep the error lines in between.

A pure text function for `ToolResultCap`: it knows nothing of messages or
tokens, only of a character budget. Whole lines are kept where they fit; a
first or last line too long for its half of the budget is cut inside the line
(a minified JSON document is one line). Lines from the omitted middle that look
like errors (a traceback, ``FAILED``, ``error:``, an exit status) are kept with
their line numbers, because they are what the agent most needs from a long log.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from itertools import accumulate

from context_engine.summarize.outcome import ERROR_LINE

__all__ = ["ERROR_LINE", "preview"]

# Words every ERROR_LINE match contains, as plain alternatives: Python's re scans
# for these about twenty times faster than for ERROR_LINE itself, which only
# confirms the lines they find.
_CANDIDATE = re.compile(
    "Traceback|Error|Exception|exception|error|fatal|panic|ERROR|FATAL|FAIL|CRITICAL"
    "|Segmentation fault|xit code|xit status|exited with|non-zero"
)

# Most of an error line that is shown: a huge line that happens to match
# (minified JSON with an "error" key) must not crowd out the others.
_ERROR_LINE_CHARS = 400
# Share of the character budget error lines may take; the rest goes to head and tail.
_ERROR_SHARE = 0.25


def _keeps_pair(text: str, position: int) -> int:
    """``position``, moved back one when a cut there would split a CRLF or a surrogate pair."""
    if 0 < position < len(text):
        before, after = text[position - 1], text[position]
        if (before == "\r" and after == "\n") or (
            "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff"
        ):
            return position - 1
    return position


def _head_end(text: str, starts: list[int], budget: int) -> int:
    """Where the head ends: at a line start when whole lines fill half its budget."""
    cut = starts[bisect_right(starts, budget) - 1]
    if cut * 2 < budget:  # whole lines would waste the budget: cut inside the next line
        cut = _keeps_pair(text, min(budget, len(text)))
    return cut


def _tail_start(text: str, starts: list[int], budget: int, head_end: int) -> int:
    """Where the tail starts (never before ``head_end``), at a line start when it can."""
    want = max(len(text) - budget, head_end)
    cut = starts[bisect_left(starts, want)]  # the sentinel len(text) bounds the search
    if (len(text) - cut) * 2 < budget:  # as for the head: cut inside the line before
        cut = max(_keeps_pair(text, want), head_end)
    return cut


def _error_lines(
    text: str, starts: list[int], first: int, last: int, budget: int
) -> list[tuple[int, str]]:
    """``(line number, line)`` of the error lines wholly inside ``text[first:last]``."""
    found: list[tuple[int, str]] = []
    used = 0
    position = first
    # One search over the middle, not one per line: a capped output has tens of
    # thousands of lines and few errors.
    while (match := _CANDIDATE.search(text, position, last)) is not None:
        number = bisect_right(starts, match.start()) - 1
        start, end = starts[number], starts[number + 1]
        position = end
        if start < first or end > last:
            continue
        body = text[start:end].rstrip("\r\n")
        if not ERROR_LINE.search(body):
            continue
        if len(body) > _ERROR_LINE_CHARS:
            body = body[: _ERROR_LINE_CHARS - 1] + "…"
        if used + len(body) > budget:
            break
        found.append((number + 1, body))
        used += len(body)
    return found


def _omitted(text: str, starts: list[int], head_end: int, tail_start: int, shown: int) -> str:
    """How much of the middle is not shown, in whole lines and characters."""
    # Lines wholly inside the middle: those starting at or after head_end whose
    # end (the next start; the sentinel for the last) is at or before tail_start.
    whole = bisect_right(starts, tail_start) - 1 - bisect_left(starts, head_end)
    chars = tail_start - head_end
    lines = max(0, whole - shown)
    return f"{lines:,} lines ({chars:,} characters)" if lines else f"{chars:,} characters"


def preview(text: str, *, max_chars: int, size: str) -> str:
    """``text`` shortened to about ``max_chars`` characters plus a marker; deterministic.

    The first and last lines are kept (half of what error lines leave each),
    error lines from the middle follow the marker with their line numbers.
    Text no longer than ``max_chars`` comes back unchanged.

    Args:
        text: The tool output.
        max_chars: Characters of the original to show (the marker comes on top).
        size: How the marker names the full output (``"61,234 tokens, ..."``).
    """
    if len(text) <= max_chars:
        return text
    budget = max(0, max_chars)
    lines = text.splitlines(keepends=True)
    starts = [0, *accumulate(map(len, lines))]  # ends with len(text), a sentinel
    half = int(budget * (1 - _ERROR_SHARE)) // 2
    head_end = _head_end(text, starts, half)
    tail_start = _tail_start(text, starts, half, head_end)
    errors = _error_lines(text, starts, head_end, tail_start, budget - 2 * half)
    # What the error lines did not use goes to head and tail; errors now inside them go.
    spare = (budget - sum(len(line) for _, line in errors)) // 2
    head_end = _head_end(text, starts, spare)
    tail_start = _tail_start(text, starts, spare, head_end)
    errors = [
        (n, line) for n, line in errors if head_end <= starts[n - 1] and starts[n] <= tail_start
    ]
    return _assemble(text, starts, head_end, tail_start, errors, size)


def _assemble(
    text: str,
    starts: list[int],
    head_end: int,
    tail_start: int,
    errors: list[tuple[int, str]],
    size: str,
) -> str:
    head, tail = text[:head_end], text[tail_start:]
    omitted = _omitted(text, starts, head_end, tail_start, len(errors))
    marker = f"[… {omitted} omitted from this tool output; in full it is {size}"
    if errors:
        noun = "error line" if len(errors) == 1 else "error lines"
        marker += f". {len(errors)} {noun} from the omitted part:]\n"
        marker += "".join(f"[line {number}] {line}\n" for number, line in errors)
        marker += "[… end of the omitted part …]"
    else:
        marker += " …]"
    separator = "" if not head or head.endswith("\n") else "\n"
    return f"{head}{separator}{marker}\n{tail}"
