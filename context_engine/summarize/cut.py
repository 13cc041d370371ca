"""Where a checkpoint cuts the history: pure functions shared by the checkpoint strategies.

A checkpoint strategy (`SessionMemory`, `FullSummary`) turns a view into::

    leading system/developer block
    checkpoint                      (replaces view[start:index], and any older checkpoint)
    user message of the cut turn    (only for a split turn, kept verbatim)
    view[index:]                    (the kept part, verbatim)

`find_cut_point` chooses ``index``; `rebuild_view` assembles the result. Both
are synchronous and never mutate their arguments.

Rules for the cut, in order:

1. Walk back from the end, summing ``counter.count_message``, until at least
   ``keep_recent_tokens`` are kept verbatim. The cut is the latest boundary
   that keeps that much.
2. The cut never falls inside a tool group (`Shape.is_safe_cut`) and never
   inside the protected tail (`Shape.tail_start`: the newest tool group of the
   current turn and any calls still pending at the end).
3. The cut never falls at or before the leading block or an existing leading
   checkpoint: at least one message must be replaced, or there is no cut.
4. When the cut lands inside a turn, it moves back to the user message that
   opens that turn if that keeps no more than ``slack_tokens`` extra tokens
   (default: a quarter of ``keep_recent_tokens``). It only ever moves back, so
   the kept part never shrinks below ``keep_recent_tokens``. When the moved cut
   leaves nothing to compact there is no cut: splitting a turn to save at most
   ``slack_tokens`` is not worth a checkpoint. This also makes a strategy run on
   its own output find nothing more to do.
5. When the cut still lands inside a turn (a *split turn*), that turn's user
   message stays verbatim right after the checkpoint. This is how the newest
   user message survives a cut inside the current turn, the usual case for an
   agent working through hundreds of tool steps on one request.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine.messages import Message
from context_engine.structure import Shape, is_user_message
from context_engine.tokens import TokenCounter

__all__ = [
    "CutPoint",
    "find_cut_point",
    "leading_checkpoint",
    "rebuild_view",
    "replaced_messages",
]


@attrs.frozen(kw_only=True)
class CutPoint:
    """Where a checkpoint cuts a view.

    Attributes:
        index: First message kept verbatim after the checkpoint (``len(view)``
            when nothing after the cut is kept).
        turn_start: Index of the user message that opens the turn containing
            ``index``, or -1 when no user message opens it after the leading
            block and checkpoint.
        is_split_turn: The cut falls inside a turn, after its user message; that
            user message stays verbatim after the checkpoint.
        lead_end: Number of leading system/developer messages.
        start: First message the checkpoint replaces: ``lead_end``, or the
            existing leading checkpoint's index + 1.
        kept_tokens: Tokens kept verbatim: ``view[index:]`` plus, for a split
            turn, the turn's user message.
    """

    index: int
    turn_start: int
    is_split_turn: bool
    lead_end: int
    start: int
    kept_tokens: int

    @property
    def history(self) -> range:
        """Indices of the whole turns before the cut (before the split turn, if any)."""
        return range(self.start, self.turn_start if self.is_split_turn else self.index)

    @property
    def turn_prefix(self) -> range:
        """Indices of the split turn's messages that the checkpoint replaces (empty otherwise)."""
        if not self.is_split_turn:
            return range(0)
        return range(self.turn_start + 1, self.index)

    @property
    def compacted_count(self) -> int:
        """Messages after ``start`` the checkpoint replaces (an older checkpoint not included)."""
        return len(self.history) + len(self.turn_prefix)


def leading_checkpoint(view: Sequence[Message], shape: Shape) -> int:
    """Index of the `ContextSummary` right after the leading block, or -1 when there is none."""
    index = shape.lead_end
    if index < len(view) and view[index].is_summary:
        return index
    return -1


def find_cut_point(
    view: Sequence[Message],
    shape: Shape,
    counter: TokenCounter,
    keep_recent_tokens: int,
    *,
    slack_tokens: int | None = None,
) -> CutPoint | None:
    """Choose where a checkpoint cuts ``view``, or return None when nothing can be compacted.

    Args:
        view: The view to cut.
        shape: ``analyze(view)``.
        counter: Counts single messages the way the engine does.
        keep_recent_tokens: Minimum tokens kept verbatim at the end (0 keeps only
            the protected tail).
        slack_tokens: Extra tokens the cut may keep to land on a user message
            instead of splitting a turn; None means ``keep_recent_tokens // 4``.

    Returns:
        The cut, or None when the part before the kept messages holds nothing
        to compact: everything fits in ``keep_recent_tokens``, only the
        protected tail follows the leading block and checkpoint, or the only
        candidate would split the first turn within ``slack_tokens`` of its
        user message.
    """
    slack = keep_recent_tokens // 4 if slack_tokens is None else slack_tokens
    checkpoint = leading_checkpoint(view, shape)
    start = checkpoint + 1 if checkpoint >= 0 else shape.lead_end
    found = _latest_cut(view, shape, counter, keep_recent_tokens, start)
    if found is None:
        return None
    index, kept = found
    turn_start, turn_tokens = _turn_start(view, counter, start, index)
    if 0 <= turn_start < index and turn_tokens <= slack and shape.is_safe_cut(turn_start):
        # Even when that leaves nothing to compact: splitting a turn to save at most
        # ``slack`` tokens is not worth it, and a second run over the result must not
        # find the split the first run declined.
        index, kept = turn_start, kept + turn_tokens
    is_split = 0 <= turn_start < index
    if is_split:
        kept += counter.count_message(view[turn_start])
    cut = CutPoint(
        index=index,
        turn_start=turn_start,
        is_split_turn=is_split,
        lead_end=shape.lead_end,
        start=start,
        kept_tokens=kept,
    )
    return cut if cut.compacted_count > 0 else None


def _latest_cut(
    view: Sequence[Message],
    shape: Shape,
    counter: TokenCounter,
    keep_recent_tokens: int,
    start: int,
) -> tuple[int, int] | None:
    """The latest safe boundary after ``start`` keeping at least ``keep_recent_tokens``."""
    limit = min(shape.tail_start, len(view))
    kept = 0
    for index in range(len(view), start, -1):
        if index < len(view):
            kept += counter.count_message(view[index])
        if index <= limit and kept >= keep_recent_tokens and shape.is_safe_cut(index):
            return index, kept
    return None


def _turn_start(
    view: Sequence[Message], counter: TokenCounter, start: int, index: int
) -> tuple[int, int]:
    """The user message opening the turn that holds ``index`` and the tokens between them.

    Returns ``(-1, 0)`` when no user message at or after ``start`` opens it.
    The token figure counts ``view[turn_start:index]``.
    """
    if index < len(view) and is_user_message(view[index]):
        return index, 0
    tokens = 0
    for position in range(index - 1, start - 1, -1):
        tokens += counter.count_message(view[position])
        if is_user_message(view[position]):
            return position, tokens
    return -1, 0


def rebuild_view(
    view: Sequence[Message], cut: CutPoint, checkpoint: Message
) -> tuple[Message, ...]:
    """Assemble the view a checkpoint strategy returns.

    Leading block, ``checkpoint``, the split turn's user message (verbatim, when
    the turn is split), then ``view[cut.index:]``. An existing leading checkpoint
    is dropped: the new one replaces it.
    """
    kept_user: tuple[Message, ...] = (view[cut.turn_start],) if cut.is_split_turn else ()
    return (*view[: cut.lead_end], checkpoint, *kept_user, *view[cut.index :])


def replaced_messages(view: Sequence[Message], cut: CutPoint) -> tuple[Message, ...]:
    """The originals `rebuild_view` leaves out, in view order (an older checkpoint included)."""
    return tuple(
        message
        for position, message in enumerate(view[cut.lead_end : cut.index], start=cut.lead_end)
        if not (cut.is_split_turn and position == cut.turn_start)
    )
