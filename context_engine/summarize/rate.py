"""How much a reactive checkpoint must remove, so it is not rewritten every few calls.

A cut that keeps ``keep_recent_tokens`` verbatim can leave only a message or
two to summarize when the window is small (the kept part is most of the
threshold): the next few steps bring the view back over the threshold and
the summarizer is paid again, each time breaking the prompt cache. A
reactive checkpoint therefore removes at least `min_removal` (the larger of
``min_rounds`` API rounds and ``min_share`` of the threshold): a cut that
removes less moves later, keeping less verbatim, as far as the protected tail
allows. When even the latest cut removes less, it is taken as it is: the
view must still fit.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.messages import Message
from context_engine.structure import Shape
from context_engine.summarize.cut import CutPoint, find_cut_point, replaced_messages
from context_engine.tokens import TokenCounter

__all__ = ["MIN_REMOVED_ROUNDS", "MIN_REMOVED_SHARE", "deepened", "removes_enough"]

MIN_REMOVED_ROUNDS = 2
"""API rounds (assistant messages) a reactive checkpoint removes at least."""
MIN_REMOVED_SHARE = 0.1
"""Share of the threshold a reactive checkpoint removes at least."""

_STEPS = 8  # cuts tried at most, each keeping fewer tokens verbatim


def removes_enough(
    view: Sequence[Message], cut: CutPoint, counter: TokenCounter, min_tokens: int
) -> tuple[bool, int]:
    """Whether ``cut`` removes ``min_tokens`` and enough rounds; and the tokens it removes."""
    replaced = replaced_messages(view, cut)
    tokens = sum(counter.count_message(message) for message in replaced)
    rounds = sum(1 for message in replaced if message.role == "assistant")
    return tokens >= min_tokens and rounds >= MIN_REMOVED_ROUNDS, tokens


def deepened(
    view: Sequence[Message], shape: Shape, counter: TokenCounter, cut: CutPoint, threshold: int
) -> CutPoint:
    """``cut``, or a later one that removes the minimum (or as close to it as the tail allows)."""
    min_tokens = int(MIN_REMOVED_SHARE * threshold)
    enough, removed = removes_enough(view, cut, counter, min_tokens)
    if enough:
        return cut
    # Keep less verbatim, in at most `_STEPS` steps of at least the missing tokens.
    step = max(min_tokens - removed, cut.kept_tokens // _STEPS, 1)
    for keep in range(cut.kept_tokens - step, -1, -step):
        later = find_cut_point(view, shape, counter, keep, slack_tokens=0)
        if later is not None and later.index > cut.index:
            cut = later
            if removes_enough(view, later, counter, min_tokens)[0]:
                break
    return cut
