"""`HardTruncate`: the last resort that drops old messages without an LLM.

Order of sacrifice, oldest first, until the view fits:

1. whole turns before the newest user message (a user message and everything
   up to the next one; messages before the first user message count as one
   turn);
2. tool groups and other single messages of the current turn, oldest first
   (agent sessions are often one user turn of hundreds of tool steps).

Never dropped: the leading system/developer block, a leading `ContextSummary`
checkpoint, the newest user message, the protected tail (the newest tool group
of the current turn and calls still pending at the end).

One marker message says how many messages are gone. It is a *user* message
placed right after the leading block (and the checkpoint, if any): the first
message after the leading block stays a user message, the marker can never be
mistaken for the newest user message, and it never sits next to an assistant
message whose tool calls need their results right after them. Providers that
want strict alternation (Anthropic) merge consecutive user messages into one
turn; the alternative, an assistant marker, would merge into the next
assistant turn and break Anthropic's rule that a thinking block opens it.
Running again merges into that marker instead of adding a second one.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import regex

from context_engine.errors import ConfigurationError
from context_engine.messages import Block, Message, TextBlock
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.strategies.light_trim import trim_text
from context_engine.structure import TRIMMED_KEY, TRUNCATION_KEY, Shape, analyze, is_user_message
from context_engine.tokens import TokenCounter

__all__ = [
    "HardTruncate",
    "is_truncation_marker",
    "trim_user_message",
    "truncate_view",
    "truncation_marker",
]

logger = logging.getLogger(__name__)

_TRIM_ATTEMPTS = 50
# A block that already carries a trim marker is not cut again (idempotence).
_TRIM_MARKER = regex.compile(r"\n\[\d+ characters trimmed\]\n")
# Cutting fewer characters than the marker takes would lengthen the text.
_MARKER_ROOM = len("\n[0000000000 characters trimmed]\n")


def truncation_marker(count: int) -> Message:
    """The marker message standing for ``count`` dropped messages."""
    plural = "message was" if count == 1 else "messages were"
    text = (
        f"[Context truncated: {count} older {plural} removed to fit the context window; "
        "re-read or re-run anything you still need from them.]"
    )
    metadata: Mapping[str, Any] = {TRUNCATION_KEY: count}
    return Message("user", text, metadata=metadata)


def is_truncation_marker(message: Message) -> bool:
    """Whether ``message`` is a marker `HardTruncate` left."""
    count = message.metadata.get(TRUNCATION_KEY)
    return message.role == "user" and isinstance(count, int) and not isinstance(count, bool)


def _check_share(instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not 0 < value <= 1
    ):
        raise ConfigurationError(
            f"HardTruncate(max_user_share={value!r}) must be a number in (0, 1]: the share "
            "of the threshold the newest user message may take before it is trimmed; "
            "use 1.0 to trim it only when it alone exceeds the threshold"
        )


@attrs.frozen(kw_only=True)
class HardTruncate:
    """Drop the oldest turns, then the oldest tool steps of the current turn, until the view fits.

    A user-role marker carrying ``TRUNCATION_KEY`` (the total count of dropped
    messages) sits right after the leading block and checkpoint. The newest
    user message is only ever changed when it alone is larger than
    ``max_user_share`` of the threshold: its text is then cut to head and tail
    around a ``[N characters trimmed]`` marker and it carries ``TRIMMED_KEY``.
    """

    max_user_share: float = attrs.field(default=0.5, validator=_check_share)
    """Largest share of the threshold the newest user message may take untrimmed."""

    name: ClassVar[str] = "hard_truncate"
    uses_llm: ClassVar[bool] = False

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Drop old messages from ``view`` while it is over the threshold."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        messages, replaced = truncate_view(view, budget, max_user_share=self.max_user_share)
        if not replaced:
            return StrategyResult.unchanged(view)
        tokens_after = budget.measure(messages)
        if tokens_after >= budget.measure(view):  # a few tiny messages weigh less than the marker
            return StrategyResult.unchanged(view)
        logger.debug(
            "strategy=<%s> tokens=<%s> dropped=<%s> | rewrite applied",
            self.name, tokens_after, len(replaced),
        )
        return StrategyResult(
            messages=messages,
            applied=True,
            tokens_saved=max(0, budget.tokens - tokens_after),
            replaced=replaced,
        )

    async def force_apply(
        self,
        transcript: Sequence[Message],
        view: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """The same truncation, for overflow recovery; ``instructions`` are ignored.

        Unlike checkpoint strategies it works from ``view``, the best view
        reached so far, and it is a no-op when ``budget.tokens`` already fits.
        """
        return await self.apply(transcript, view, budget)


def truncate_view(
    view: Sequence[Message], budget: Budget, *, max_user_share: float
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Truncate ``view`` until it fits ``budget.threshold`` or only protected messages are left.

    Returns:
        The new view and the originals it removed or shortened, in view order
        (both equal to ``(view, ())`` when nothing changed).
    """
    shape = analyze(view)
    slot, start = _droppable_start(view, shape)
    old_marker = view[slot] if start > slot else None
    prior = int(old_marker.metadata[TRUNCATION_KEY]) if old_marker is not None else 0
    counter = budget.counter
    user_index = shape.last_user if shape.last_user >= start else -1
    trimmed = None
    if user_index >= 0:
        limit = int(max_user_share * budget.threshold)
        trimmed = trim_user_message(view[user_index], counter, limit)
    units = _drop_order(view, shape, start, user_index)
    estimate = budget.tokens
    if trimmed is not None:
        estimate -= counter.count_message(view[user_index]) - counter.count_message(trimmed)
    dropped: set[int] = set()
    taken = 0
    while True:
        if estimate <= budget.threshold or taken == len(units):
            candidate = _assemble(view, slot, start, prior, dropped, user_index, trimmed)
            if taken == len(units) or budget.measure(candidate[0]) <= budget.threshold:
                return candidate
        if taken == 0:  # the marker appears (or grows) with the first drop
            worst = truncation_marker(prior + sum(len(unit) for unit in units))
            estimate += counter.count_message(worst)
            estimate -= counter.count_message(old_marker) if old_marker is not None else 0
        unit = units[taken]
        taken += 1
        dropped.update(unit)
        estimate -= sum(counter.count_message(view[index]) for index in unit)


def _droppable_start(view: Sequence[Message], shape: Shape) -> tuple[int, int]:
    """Where the marker goes, and the first message that may be dropped."""
    slot = shape.lead_end
    if slot < len(view) and view[slot].is_summary:
        slot += 1
    if slot < len(view) and is_truncation_marker(view[slot]):
        return slot, slot + 1
    return slot, slot


def _drop_order(
    view: Sequence[Message], shape: Shape, start: int, user_index: int
) -> list[range]:
    """Droppable units, oldest first: whole earlier turns, then the current turn's steps."""
    units: list[range] = []
    inner = start
    if user_index >= 0:
        turn_end = shape.group_start[user_index]
        bounds = [start]
        bounds += [
            index
            for index in range(start + 1, turn_end)
            if is_user_message(view[index]) and shape.is_safe_cut(index)
        ]
        bounds.append(turn_end)
        units += [range(a, b) for a, b in itertools.pairwise(bounds) if b > a]
        inner = shape.unit_end(user_index)
    while inner < shape.tail_start:
        end = shape.unit_end(inner)
        if end > shape.tail_start:
            break
        units.append(range(inner, end))
        inner = end
    return units


def _assemble(
    view: Sequence[Message],
    slot: int,
    start: int,
    prior: int,
    dropped: set[int],
    user_index: int,
    trimmed: Message | None,
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Build the truncated view and the list of originals it removed or shortened."""
    if not dropped and trimmed is None:
        return tuple(view), ()
    kept: list[Message] = list(view[:slot])
    if dropped:
        kept.append(truncation_marker(prior + len(dropped)))
    else:
        kept.extend(view[slot:start])
    replaced: list[Message] = []
    for index in range(start, len(view)):
        message = view[index]
        if index in dropped:
            replaced.append(message)
        elif index == user_index and trimmed is not None:
            replaced.append(message)
            kept.append(trimmed)
        else:
            kept.append(message)
    return tuple(kept), tuple(replaced)


def trim_user_message(message: Message, counter: TokenCounter, limit: int) -> Message | None:
    """Cut ``message``'s text blocks to head and tail so it counts at most ``limit`` tokens.

    Returns None when the message already fits or has no text to cut. Each
    shortened block reads ``head`` + ``[N characters trimmed]`` + ``tail``;
    ``TRIMMED_KEY`` holds how many blocks were shortened. When even empty
    heads and tails do not fit (images, framing), the smallest version is
    returned.
    """
    tokens = counter.count_message(message)
    text_tokens = sum(
        counter.count_text(block.text) for block in message.content if isinstance(block, TextBlock)
    )
    if tokens <= limit or text_tokens == 0:
        return None
    # Framing and images stay; the text gets what is left, less room for the markers.
    keep_ratio = max(0.0, (limit - (tokens - text_tokens)) / text_tokens * 0.98)
    best: Message | None = None
    for _ in range(_TRIM_ATTEMPTS):
        candidate = _trim_blocks(message, keep_ratio)
        if candidate is not None:
            best = candidate
            if counter.count_message(candidate) <= limit:
                break
        keep_ratio = 0.0 if keep_ratio < 0.01 else keep_ratio * 0.9
    return best


def _trim_blocks(message: Message, keep_ratio: float) -> Message | None:
    blocks: list[Block] = []
    trimmed = 0
    for block in message.content:
        if isinstance(block, TextBlock) and not _TRIM_MARKER.search(block.text):
            keep = int(len(block.text) * keep_ratio)
            if len(block.text) - keep > _MARKER_ROOM:
                text = trim_text(block.text, head=keep - keep // 2, tail=keep // 2)
                block = TextBlock(text)
                trimmed += 1
        blocks.append(block)
    if not trimmed:
        return None
    previous = message.metadata.get(TRIMMED_KEY)
    count = trimmed + (previous if isinstance(previous, int) else 0)
    metadata = {**message.metadata, TRIMMED_KEY: count}
    return attrs.evolve(message, content=tuple(blocks), metadata=metadata)
