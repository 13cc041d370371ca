"""Tool-result caps: no single tool output, the newest included, may crowd out the rest.

One ``grep`` over a repository or one ``cat`` of a log can return more tokens
than the whole window. The newest tool group is protected from every other
strategy (the agent is about to read it), so such a result makes every view
futile. `ToolResultCap` shortens every result above its cap to a head + tail
preview (error lines from the middle kept) with a marker naming the original
size and, when the engine archives, the reference the original is kept under.
It never removes a message. `cap_tool_result` is the same cap for one result,
for an engine or adapter to apply when the result arrives.

Defaults, and where they come from: Strands caps results at 1,500 tokens and
Codex CLI at 10 KiB / 256 lines (about 2,500 tokens), which suits a 128k
window but starves a 1M one; Claude Code spills results over ~50k characters
(about 12,500 tokens) to disk and deepagents evicts those over 20k tokens.
A share of the threshold scales with the window, so the cap here is a quarter
of the threshold (a result still leaves room for three more like it and the
conversation), never more than 20,000 tokens (deepagents' ceiling: past it a
preview is no longer a preview). Per round (the results answering one
assistant message), results together get half the threshold, so a burst of
parallel calls cannot fill the view either. A round, not a user turn: an agent
turn of hundreds of steps would otherwise cap even its newest results to a few
tokens each, where clearing old ones (microcompact) is the right tool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs

from context_engine._validate import share
from context_engine.errors import ConfigurationError, InvalidMessageError
from context_engine.messages import Block, Message, TextBlock
from context_engine.strategies._preview import preview
from context_engine.strategies._shorten import (
    UNARCHIVED_NOTE,
    archived_copy,
    derived_copy,
    reference_note,
    unarchived_copy,
)
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import CAPPED_KEY, CLEARED_KEY, analyze
from context_engine.tokens import TEXT_SEPARATOR_TOKENS, TokenCounter

__all__ = ["MIN_CAP_TOKENS", "ToolResultCap", "cap_to_fit", "cap_tool_result"]

logger = logging.getLogger(__name__)

MIN_CAP_TOKENS = 128
"""No cap goes below this: a smaller preview would be little more than its marker."""

# Room the reference note takes in a capped result when the engine archives.
_NOTE = reference_note("arc-" + "0" * 20)
# Rounds of shrinking a preview that came out above its cap (the character
# budget is derived from an average token length; code and CJK run denser).
_ROUNDS = 8


_share = share(exclusive_minimum=True, fix="it is a share of the threshold, 1.0 for all of it")


def _positive_tokens(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < MIN_CAP_TOKENS:
        raise ConfigurationError(
            f"{type(instance).__name__}.{attribute.name} must be an int >= {MIN_CAP_TOKENS} "
            f"(a smaller preview is little more than its marker), got {value!r}"
        )


def _cappable(message: Message) -> bool:
    """A tool result with text that no rewrite has shortened yet."""
    if message.role != "tool":
        return False
    metadata = message.metadata
    if metadata and (CAPPED_KEY in metadata or CLEARED_KEY in metadata):
        return False
    return any(isinstance(block, TextBlock) for block in message.content)


def _capped(message: Message, cap: int, counter: TokenCounter) -> Message:
    """The preview copy of ``message`` at about ``cap`` tokens (made once, `derived_copy`)."""
    text = message.text
    tokens = counter.count_message(message)
    lines = len(text.splitlines())
    size = f"{tokens:,} tokens, {lines:,} lines, {len(text):,} characters"
    others: tuple[Block, ...] = tuple(b for b in message.content if not isinstance(b, TextBlock))
    metadata = {
        **message.metadata,
        CAPPED_KEY: {"tokens": tokens, "lines": lines, "characters": len(text)},
    }
    chars_per_token = len(text) / max(1, tokens)
    max_chars = int(cap * chars_per_token)
    for round_ in range(_ROUNDS + 64):
        body = preview(text, max_chars=max_chars, size=size)
        shorter = attrs.evolve(message, content=(TextBlock(body), *others), metadata=metadata)
        over = counter.count_message(shorter) - cap
        if over <= 0 or max_chars == 0:
            break
        if round_ < _ROUNDS:  # close in by the estimated excess
            max_chars = max(0, max_chars - int(over * chars_per_token) - 1)
        else:  # dense text the estimate keeps missing: halve until it fits
            max_chars //= 2
    return shorter


def cap_tool_result(
    message: Message, *, max_tokens: int, counter: TokenCounter, archiving: bool = False
) -> tuple[Message, Removal | None]:
    """``message`` capped at ``max_tokens``, and the `Removal` of the original (None if kept).

    A tool result counted above ``max_tokens`` becomes one text block: its
    first and last lines around a marker that names the full size (tokens,
    lines, characters), with error lines from the omitted middle kept after
    it; image blocks stay as they are, after the text. The copy keeps role,
    ``tool_call_id``, name and timestamp, carries `CAPPED_KEY` (the original's
    size) in its metadata and is at most ``max_tokens`` (unless the marker
    alone is larger). With ``archiving`` it also names the reference the
    original is archived under (`reference_note`); the caller stores the
    returned `Removal` there.

    Returned unchanged, with no removal: a result at or under the cap, a
    result with no text (images only), one already capped or cleared, and
    any message that is not a tool result. The same message, cap and counter
    always give the same object back.

    Args:
        message: The tool result.
        max_tokens: The cap, counted with ``counter`` (message framing included).
        counter: Counts tokens the way the engine does.
        archiving: Whether the original will be archived (the copy names it).

    Raises:
        InvalidMessageError: ``message`` is not a `Message`.
        ConfigurationError: ``max_tokens`` is not an int >= `MIN_CAP_TOKENS`.
    """
    if not isinstance(message, Message):
        raise InvalidMessageError(f"cap_tool_result takes a Message, got {type(message).__name__}")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ConfigurationError(f"max_tokens must be an int, got {max_tokens!r}")
    if max_tokens < MIN_CAP_TOKENS:
        raise ConfigurationError(
            f"max_tokens must be >= {MIN_CAP_TOKENS} (a smaller preview is little more than "
            f"its marker), got {max_tokens}"
        )
    if not _cappable(message) or counter.count_message(message) <= max_tokens:
        return message, None
    return _cap(message, max_tokens, counter, archiving)


def _cap(
    message: Message, cap: int, counter: TokenCounter, archiving: bool, archive_down: bool = False
) -> tuple[Message, Removal | None]:
    note = _NOTE if archiving else UNARCHIVED_NOTE if archive_down else ""
    # The note is a text block of its own: its tokens and the separator before it.
    note_tokens = counter.count_text(note) + TEXT_SEPARATOR_TOKENS if note else 0
    body_cap = max(MIN_CAP_TOKENS // 2, cap - note_tokens) if note else cap
    key = (CAPPED_KEY, body_cap, counter.key)
    shorter = derived_copy(message, key, _capped, body_cap, counter)
    removal = Removal("tool_result", (message,))
    if archiving:
        shorter = archived_copy(shorter, removal.reference)
    elif archive_down:
        shorter = unarchived_copy(shorter)
    if counter.count_message(shorter) >= counter.count_message(message):
        return message, None  # barely above the cap: the marker would cost more than it saves
    return shorter, removal


def cap_to_fit(
    view: Sequence[Message],
    indices: Sequence[int],
    excess: int,
    budget: Budget,
    originals: Mapping[str, Message],
) -> tuple[tuple[Message, ...], tuple[Removal, ...]] | None:
    """``view`` with the tool results at ``indices`` capped, all to one level, by ``excess``.

    The last resort for the newest tool group, which other strategies protect:
    a result is capped from its original (``originals``, by tool-call id, when
    the view holds an earlier preview of it), never below `MIN_CAP_TOKENS`.
    None when nothing could be capped.
    """
    counter = budget.counter
    sources = [_source(view[index], originals) for index in indices]
    chosen = [(i, m) for i, m in zip(indices, sources, strict=True) if m is not None]
    if not chosen:
        return None
    sizes = [counter.count_message(view[i]) for i, _ in chosen]
    level = max(MIN_CAP_TOKENS, _water_level(sizes, max(0, sum(sizes) - excess)))
    messages, removed = list(view), []
    for (index, source), size in zip(chosen, sizes, strict=True):
        if size <= level:
            continue
        shorter, removal = _cap(source, level, counter, budget.archiving, budget.archive_down)
        if removal is not None and counter.count_message(shorter) < size:
            messages[index] = shorter
            removed.append(removal)
    return (tuple(messages), tuple(removed)) if removed else None


def _source(message: Message, originals: Mapping[str, Message]) -> Message | None:
    """What to cap for ``message``: itself, its original when it is a preview, or None.

    A preview whose original is gone (the caller committed the capped copy) is
    capped again from its own text: the last resort must still be able to fit.
    """
    if message.role != "tool":
        return None
    if _cappable(message):
        return message
    original = originals.get(message.tool_call_id or "")
    if original is not None and original is not message and _cappable(original):
        return original
    capped = message.metadata and CAPPED_KEY in message.metadata
    if capped and any(isinstance(block, TextBlock) for block in message.content):
        return message
    return None


def _water_level(sizes: Sequence[int], room: int) -> int:
    """The largest level L with ``sum(min(size, L)) <= room`` (sizes are capped at L)."""
    remaining = len(sizes)
    for size in sorted(sizes):
        if size * remaining > room:
            return room // remaining
        room -= size
        remaining -= 1
    return max(sizes, default=0)


@attrs.frozen(kw_only=True)
class ToolResultCap:
    """Caps every tool result, the newest included, to a head + tail preview.

    A result's cap is ``max_share`` of the threshold or ``max_tokens``,
    whichever is lower (never below `MIN_CAP_TOKENS`). Within a round (the
    results answering one assistant message's calls), results together get
    ``max_round_share`` of the threshold; when they need more, the largest are
    capped first, all to one level, so that the round fits. See `cap_tool_result` for the preview.

    Left as they are: results already capped or cleared, results with no text
    (images), and the results of calls still pending at the end of the view
    (the invariants keep those verbatim). Messages are never removed. The
    engine runs it while the view is above the threshold; called directly,
    it caps whatever is above its cap and reports ``applied=False`` when
    nothing is.
    """

    max_share: float = attrs.field(default=0.25, validator=_share)
    """A result may take at most this share of the threshold."""
    max_tokens: int = attrs.field(default=20_000, validator=_positive_tokens)
    """A result may take at most this many tokens, whatever the threshold."""
    max_round_share: float = attrs.field(default=0.5, validator=_share)
    """The results answering one assistant message together may take at most this share
    of the threshold."""
    name: str = attrs.field(default="tool_result_cap", init=False)
    """The strategy's name in events, spans and logs."""
    uses_llm: ClassVar[bool] = False

    def limit(self, threshold: int) -> int:
        """The cap of one result under ``threshold``."""
        return max(MIN_CAP_TOKENS, min(self.max_tokens, int(self.max_share * threshold)))

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Cap every tool result in ``view`` above its cap (`rewrite`)."""
        return self.rewrite(view, budget)

    def rewrite(self, view: Sequence[Message], budget: Budget) -> StrategyResult:
        """The synchronous body of `apply`: no I/O, the same input gives the same result."""
        caps = self.caps(view, budget.threshold, budget.counter)
        if not caps:
            return StrategyResult.unchanged(view)
        count = budget.counter.count_message
        messages = list(view)
        removed: list[Removal] = []
        saved = 0
        for index, cap in caps.items():
            original = view[index]
            shorter, removal = _cap(
                original, cap, budget.counter, budget.archiving, budget.archive_down
            )
            if removal is None:
                continue
            messages[index] = shorter
            removed.append(removal)
            saved += count(original) - count(shorter)
        if not removed:
            return StrategyResult.unchanged(view)
        logger.debug(
            "strategy=<%s> capped=<%d> tokens_saved=<%d> | rewrite applied",
            self.name,
            len(removed),
            saved,
        )
        return StrategyResult(messages=messages, applied=True, tokens_saved=saved, removed=removed)

    def caps(
        self, view: Sequence[Message], threshold: int, counter: TokenCounter
    ) -> dict[int, int]:
        """``{index: cap}`` of the results above their cap, oldest first (empty: nothing to do)."""
        limit = self.limit(threshold)
        round_room = int(self.max_round_share * threshold)
        count = counter.count_message
        pending = analyze(view).pending_start
        caps: dict[int, int] = {}
        group: list[int] = []  # eligible results of the current round
        fixed = 0  # tokens of the round's results no cap applies to
        capped = False  # the round was capped before: its level is settled
        for index, message in enumerate(view):
            if message.role != "tool":  # a round ends where its results do
                room = limit * len(group) + fixed if capped else round_room
                self._cap_round(view, group, fixed, limit, room, counter, caps)
                group, fixed, capped = [], 0, False
            elif index < pending and _cappable(message):
                group.append(index)
            else:
                capped = capped or CAPPED_KEY in message.metadata
                fixed += count(message)
        room = limit * len(group) + fixed if capped else round_room
        self._cap_round(view, group, fixed, limit, room, counter, caps)
        return caps

    @staticmethod
    def _cap_round(
        view: Sequence[Message],
        group: list[int],
        fixed: int,
        limit: int,
        round_room: int,
        counter: TokenCounter,
        caps: dict[int, int],
    ) -> None:
        """Add to ``caps`` the results of one round above the per-result or per-round level."""
        if not group:
            return
        sizes = [counter.count_message(view[index]) for index in group]
        kept = [min(size, limit) for size in sizes]
        level = limit
        if fixed + sum(kept) > round_room:
            level = _water_level(kept, round_room - fixed)
            # Whole steps of a sixteenth of the result cap: a result arriving later in
            # the round moves the level, and a coarse level keeps earlier previews the same.
            step = max(1, limit // 16)
            level = max(MIN_CAP_TOKENS, min(limit, level - level % step))
        for index, size in zip(group, sizes, strict=True):
            if size > level:
                caps[index] = level
