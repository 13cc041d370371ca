"""Per-session calibration of an approximate counter from provider usage anchors.

Every assistant message that carries `Usage` says how many tokens the provider
billed for the prompt that produced it: the messages before it, plus whatever
the caller sent besides them (tool schemas, framing). Between two such anchors
that extra part is the same, so the difference of their ``input_tokens`` is what
the provider's tokenizer made of the messages between them, and dividing it by
what the counter made of the same messages gives the counter's error on this
session's own text. `calibration_ratio` turns the recent anchors into one
correction for the messages after the newest anchor:

* smoothed: measured over the last `MAX_ANCHORS` anchors at once (the billed
  differences add up, so only the oldest usable anchor and the newest matter),
  and only once they span `MIN_SPAN_TOKENS` counted tokens;
* conservative: a correction that raises the estimate applies in full; one that
  lowers it applies in proportion to the evidence, ``counted / (counted +
  EVIDENCE_TOKENS)`` of it, so it never goes below what the anchors justify;
* bounded: clamped to `MIN_RATIO` .. `MAX_RATIO`;
* per session: computed from the messages given, nothing is kept between calls;
* stale anchors ignored: the walk back stops at a message a strategy rewrote (a
  checkpoint, a cleared result, a trim or truncation marker), at a prompt that
  shrank, and at a step whose ratio no tokenizer difference explains (the anchors
  then describe a different prompt than the messages show).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from context_engine.messages import Message
from context_engine.structure import CAPPED_KEY, CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY

__all__ = [
    "EVIDENCE_TOKENS",
    "MAX_ANCHORS",
    "MAX_RATIO",
    "MIN_RATIO",
    "MIN_SPAN_TOKENS",
    "calibration_ratio",
]

MIN_RATIO = 0.7
"""The smallest correction applied."""
MAX_RATIO = 1.3
"""The largest correction applied."""
MAX_ANCHORS = 8
"""How many anchors, newest first, the correction is measured over."""
MIN_SPAN_TOKENS = 256
"""Counted tokens the anchors must span before they calibrate anything."""
EVIDENCE_TOKENS = 1024
"""Counted tokens of evidence at which a lowering correction applies by half."""
# A segment whose provider/counted ratio lies outside these bounds is not a
# tokenizer difference: the anchors describe a rewritten or different prompt.
_PLAUSIBLE = (0.5, 2.0)
_REWRITE_KEYS = (CAPPED_KEY, CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY)
# How far back to look for anchors: the walk runs on every estimate.
_MAX_SCAN = 256


def _rewritten(message: Message) -> bool:
    if message.is_summary:
        return True
    metadata = message.metadata
    return bool(metadata) and any(key in metadata for key in _REWRITE_KEYS)


def _anchors(messages: Sequence[Message], newest: int) -> list[tuple[int, int]]:
    """``(index, input_tokens)`` of the anchors at and before ``newest``, newest first.

    Stops at a rewritten message: anchors before it were billed for the prompt
    as it was before the rewrite.
    """
    usage = messages[newest].usage
    if usage is None:
        return []
    found = [(newest, usage.input_tokens)]
    for index in range(newest - 1, max(-1, newest - 1 - _MAX_SCAN), -1):
        message = messages[index]
        if _rewritten(message):
            break
        if message.usage is not None and message.role == "assistant":
            found.append((index, message.usage.input_tokens))
            if len(found) == MAX_ANCHORS:
                break
    return found


def calibration_ratio(
    messages: Sequence[Message], cumulative: Sequence[int], usage_index: int
) -> float:
    """Provider tokens per counted token for this session, 1.0 without enough evidence.

    Args:
        messages: The messages measured.
        cumulative: Prefix sums of the counter's per-message counts
            (``len(messages) + 1`` items, starting at 0).
        usage_index: Index of the newest anchor (an assistant message with `Usage`).

    Returns:
        The correction to multiply counted tokens after the anchor by, within
        `MIN_RATIO` .. `MAX_RATIO`; exactly 1.0 when fewer than two usable
        anchors or too few counted tokens lie between them.
    """
    if usage_index < 0:
        return 1.0
    anchors = _anchors(messages, usage_index)
    low, high = _PLAUSIBLE
    oldest = None
    for (newer, newer_input), (older, older_input) in pairwise(anchors):
        billed = newer_input - older_input
        tokens = cumulative[newer] - cumulative[older]
        if billed <= 0 or tokens <= 0 or not low <= billed / tokens <= high:
            break  # the prompt shrank or changed between them: older anchors are stale
        oldest = (older, older_input)
    if oldest is None:
        return 1.0
    counted = cumulative[usage_index] - cumulative[oldest[0]]
    if counted < MIN_SPAN_TOKENS:
        return 1.0
    ratio = (anchors[0][1] - oldest[1]) / counted
    if ratio < 1.0:
        ratio = 1.0 - (1.0 - ratio) * counted / (counted + EVIDENCE_TOKENS)
    return min(MAX_RATIO, max(MIN_RATIO, ratio))
