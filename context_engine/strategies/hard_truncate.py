"""`HardTruncate`: the last resort that drops old messages without an LLM.

Order of sacrifice, oldest first, until the view fits:

1. whole turns before the newest user message (a user message and everything
   up to the next one; messages before the first user message count as one
   turn);
2. tool groups and other single messages of the current turn, oldest first
   (agent sessions are often one user turn of hundreds of tool steps);
3. only when nothing droppable is left and the view still does not fit: the
   part of the newest user message's text that does not fit, never cutting it
   below ``max_user_share`` of the threshold.

Never dropped: the leading system/developer block, the newest user message,
the protected tail (the newest tool group of the current turn and calls still
pending at the end). A leading `ContextSummary` checkpoint is trimmed, and
dropped (archived and counted like the rest) only at the very end, when its
framing alone keeps a view of the floor above the threshold; the marker then
takes its brief form, or none when even that does not fit. A recovery keeps
the checkpoint's instructions section, and drops only a checkpoint that came
in holding nothing.

One marker message says how many messages are gone. It is a *user* message
placed right after the leading block (and the checkpoint, if any): the first
message after the leading block stays a user message, the marker can never be
mistaken for the newest user message, and it never sits next to an assistant
message whose tool calls need their results right after them. Providers that
want strict alternation (Anthropic) merge consecutive user messages into one
turn; the alternative, an assistant marker, would merge into the next
assistant turn and break Anthropic's rule that a thinking block opens it.
Running again merges into that marker instead of adding a second one.

It is a plain `Strategy`, not a `ForceCompactionStrategy`: ``compact()`` and
``recover_overflow()`` let the first force-capable strategy that applies win,
so a force-capable truncation would drop whole turns where clearing tool
results would have been enough. Recovery runs the normal pipeline afterwards,
and this is its last step.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

import attrs
import regex

from context_engine._validate import is_int
from context_engine.messages import Block, ContextSummary, Message, TextBlock
from context_engine.strategies._shorten import archived_copy
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.strategies.light_trim import trim_text
from context_engine.strategies.tool_result_cap import cap_to_fit
from context_engine.structure import (
    ARCHIVED_KEY,
    TRIMMED_KEY,
    TRUNCATION_KEY,
    Shape,
    analyze,
    is_user_message,
)
from context_engine.summarize.instructions import split_instructions
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
# Measures the drop loop may make before it drops every unit left.
_MEASURES = 6
# Least tokens a measure is taken to lose per counted token dropped (a measure that barely moves).
_MIN_RATE = 1 / 64
# Measures spent trimming the newest user message down to what fits.
_TRIM_MEASURES = 3
# A block that already carries a trim marker is not cut again (idempotence).
_TRIM_MARKER = regex.compile(r"\n\[\d+ characters trimmed\]\n")
# Cutting fewer characters than the marker takes would lengthen the text.
_MARKER_ROOM = len("\n[0000000000 characters trimmed]\n")
# Stands for the reference of the next drop while candidate views are sized (same length).
_SIZING_REFERENCE = "arc-" + "0" * 20


def truncation_marker(
    count: int, references: Sequence[str] = (), *, brief: bool = False
) -> Message:
    """The marker message standing for ``count`` dropped messages.

    With ``references`` (the engine keeps an archive), the marker names them
    so the agent can fetch the dropped messages back. ``brief`` gives the
    shortest wording, for a threshold with no room for the full one.
    """
    plural = "message was" if count == 1 else "messages were"
    if brief:
        archived = f"; archived as {', '.join(references)}" if references else ""
        text = f"[{count} older {plural} truncated{archived}.]"
        metadata: Mapping[str, Any] = {TRUNCATION_KEY: count}
        if references:
            metadata = {**metadata, ARCHIVED_KEY: list(references)}
        return Message("user", text, metadata=metadata)
    if references:
        text = (
            f"[Context truncated: {count} older {plural} removed to fit the context window. "
            f"They are archived as {', '.join(references)}; the recall_context tool returns "
            "them.]"
        )
        metadata = {TRUNCATION_KEY: count, ARCHIVED_KEY: list(references)}
    else:
        text = (
            f"[Context truncated: {count} older {plural} removed to fit the context window; "
            "re-read or re-run anything you still need from them.]"
        )
        metadata = {TRUNCATION_KEY: count}
    return Message("user", text, metadata=metadata)


def is_truncation_marker(message: Message) -> bool:
    """Whether ``message`` is a marker `HardTruncate` left."""
    count = message.metadata.get(TRUNCATION_KEY)
    return message.role == "user" and is_int(count)


@attrs.frozen(kw_only=True)
class HardTruncate:
    """Drop the oldest turns, then the oldest tool steps of the current turn, until the view fits.

    A user-role marker carrying ``TRUNCATION_KEY`` (the total count of dropped
    messages) sits right after the leading block and checkpoint. The newest
    user message is only changed when every droppable message is gone and the
    view still does not fit: its text is then cut to head and tail around a
    ``[N characters trimmed]`` marker, by what does not fit but never below
    `Budget.max_user_share` of the threshold (the engine's ``max_user_share``
    setting, so its floor and this strategy agree), and it carries ``TRIMMED_KEY``.
    """

    name: ClassVar[str] = "hard_truncate"
    uses_llm: ClassVar[bool] = False

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Drop old messages from ``view`` while it is over the threshold."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        tokens_before = budget.measure(view)
        messages, removed, tokens_after = _truncate(view, budget, tokens_before, transcript)
        if not removed or tokens_after >= tokens_before:
            # Nothing to drop, or a few tiny messages weigh less than the marker.
            return StrategyResult.unchanged(view)
        logger.debug(
            "strategy=<%s> tokens=<%s> dropped=<%s> | rewrite applied",
            self.name,
            tokens_after,
            sum(len(r.originals) for r in removed),
        )
        return StrategyResult(
            messages=messages,
            applied=True,
            tokens_saved=max(0, budget.tokens - tokens_after),
            removed=removed,
        )


def truncate_view(
    view: Sequence[Message], budget: Budget
) -> tuple[tuple[Message, ...], tuple[Message, ...]]:
    """Truncate ``view`` until it fits ``budget.threshold`` or only protected messages are left.

    Droppable units go oldest first; the newest user message is trimmed only
    when all of them are gone and the view still does not fit, and then only by
    what does not fit, never below `Budget.max_user_share` of the threshold
    (never, when that is None).

    Returns:
        The new view and the originals it removed or shortened, in view order
        (both equal to ``(view, ())`` when nothing changed).
    """
    messages, removed, _ = _truncate(view, budget, budget.tokens)
    return messages, tuple(m for removal in removed for m in removal.originals)


_Assembled = tuple[tuple[Message, ...], tuple[Removal, ...]]


@attrs.frozen
class _Cut:
    """Where one truncation may cut: computed once per run."""

    view: Sequence[Message]
    slot: int
    start: int
    prior: int
    user_index: int
    units: tuple[range, ...]
    archiving: bool
    prior_references: tuple[str, ...]

    @classmethod
    def of(cls, view: Sequence[Message], archiving: bool) -> _Cut:
        """Read the marker slot, the newest user message and the units of ``view``."""
        shape = analyze(view)
        slot, start = _droppable_start(view, shape)
        prior = int(view[slot].metadata[TRUNCATION_KEY]) if start > slot else 0
        earlier = view[slot].metadata.get(ARCHIVED_KEY, ()) if start > slot else ()
        user_index = shape.last_user if shape.last_user >= start else -1
        units = tuple(_drop_order(view, shape, start, user_index))
        return cls(view, slot, start, prior, user_index, units, archiving, tuple(earlier))

    def marker(self, count: int, reference: str) -> Message:
        """The marker for ``count`` dropped messages in all, the newest drop named ``reference``."""
        if not self.archiving:
            return truncation_marker(count)
        return truncation_marker(count, (*self.prior_references, reference))

    def dropped_count(self, taken: int) -> int:
        """Messages in the first ``taken`` units."""
        return sum(len(unit) for unit in self.units[:taken])

    def marker_tokens(self, counter: TokenCounter, taken: int) -> int:
        """Tokens of the marker a view with the first ``taken`` units dropped carries."""
        if taken:
            marker = self.marker(self.prior + self.dropped_count(taken), _SIZING_REFERENCE)
            return counter.count_message(marker)
        return counter.count_message(self.view[self.slot]) if self.start > self.slot else 0

    def assemble(self, taken: int, trimmed: Message | None = None) -> _Assembled:
        """The view with the first ``taken`` units dropped (and ``trimmed`` in place)."""
        dropped = {index for unit in self.units[:taken] for index in unit}
        return _assemble(self, dropped, trimmed)


def _truncate(
    view: Sequence[Message], budget: Budget, tokens: int, transcript: Sequence[Message] = ()
) -> tuple[tuple[Message, ...], tuple[Removal, ...], int]:
    """`truncate_view` of a view of ``tokens`` tokens, also returning the new view's measure.

    Last of all, the newest tool group's results are capped (from their
    originals in ``transcript``) by what still does not fit.
    """
    cut = _Cut.of(view, budget.archiving)
    (messages, replaced), tokens = _drop_units(cut, budget, tokens)
    share = budget.max_user_share
    if tokens > budget.threshold and cut.user_index >= 0 and share is not None:
        share_floor = int(share * budget.threshold)
        trimmed = _trim_newest(cut, budget, tokens, share_floor)
        if trimmed is not None:
            (messages, replaced), tokens = trimmed
    before = messages, replaced, tokens
    capped = _last_resort(_cap_tail, before, budget, transcript)
    cut_checkpoint = _last_resort(_trim_checkpoint, capped, budget, transcript)
    # A checkpoint dropped whole is dropped as it came in, not as the trim left it:
    # the removal (and the marker's reference) must name the original.
    messages, replaced, tokens = _last_resort(
        _drop_checkpoint, capped, budget, transcript, after=cut_checkpoint
    )
    # The last resorts cost content the others keep: worth it when the view fits, and
    # in a recovery (the provider rejected the prompt: sending as much again cannot work).
    if tokens <= budget.threshold or budget.reason == "overflow":
        return messages, replaced, tokens
    return before


_Truncated: TypeAlias = tuple[tuple[Message, ...], tuple[Removal, ...], int]
_LastResort: TypeAlias = Callable[
    [tuple[Message, ...], Budget, int, Sequence[Message]], _Truncated | None
]


def _last_resort(
    resort: _LastResort,
    start: _Truncated,
    budget: Budget,
    transcript: Sequence[Message],
    *,
    after: _Truncated | None = None,
) -> _Truncated:
    """``resort`` run from ``start`` when ``after`` (default ``start``) still does not fit.

    Its result when it applies, else ``after``.
    """
    current = start if after is None else after
    if current[2] <= budget.threshold:
        return current
    messages, replaced, tokens = start
    shortened = resort(messages, budget, tokens, transcript)
    if shortened is None:
        return current
    messages, more, tokens = shortened
    return messages, (*replaced, *more), tokens


def _trim_checkpoint(
    view: tuple[Message, ...], budget: Budget, tokens: int, transcript: Sequence[Message]
) -> tuple[tuple[Message, ...], tuple[Removal, ...], int] | None:
    """The checkpoint's text cut to head and tail by what still does not fit, or None.

    The very last resort: a caller's checkpoint can be larger than anything a
    summary would write, and nothing else is left to shorten. The original is
    archived like any trimmed text. A recovery keeps the user's instructions
    section (goal, constraints) whatever its target: the retry's agent must
    still know what it is doing.
    """
    index = analyze(view).lead_end
    checkpoint = view[index] if index < len(view) else None
    if not isinstance(checkpoint, ContextSummary) or _TRIM_MARKER.search(checkpoint.summary):
        return None
    size = budget.counter.count_message(checkpoint)
    removal = Removal("text", (checkpoint,))
    # A checkpoint names what it stands for in its references, not in a note.
    references = (*checkpoint.references, removal.reference) if budget.archiving else ()
    share = max(0.0, (size - (tokens - budget.threshold)) / max(1, size))
    messages: tuple[Message, ...] = view
    # The user's instructions section (task statement, constraints) goes last of all.
    section, body = split_instructions(checkpoint.summary)
    head = checkpoint.summary[: len(checkpoint.summary) - len(body)] if section else ""
    # Cut by the excess, then by more (the marker and framing cost tokens too), then
    # the file lists, files read first, then the instructions: what first fits is sent.
    for keep, keep_head, keep_read, keep_modified in (
        (share, True, True, True),
        (share / 2, True, True, True),
        (0.0, True, True, True),
        (0.0, True, False, True),
        (0.0, True, False, False),
        (0.0, False, False, False),
    ):
        text = body if keep_head else checkpoint.summary
        half = int(len(text) * keep / 2)
        shorter = attrs.evolve(
            checkpoint,
            summary=(head if keep_head else "") + trim_text(text, head=half, tail=half),
            references=references or checkpoint.references,
            read_files=checkpoint.read_files if keep_read else (),
            modified_files=checkpoint.modified_files if keep_modified else (),
        )
        if shorter == checkpoint or (not keep_head and budget.reason == "overflow"):
            continue
        messages = (*view[:index], shorter, *view[index + 1 :])
        tokens = budget.measure(messages)
        if tokens <= budget.threshold:
            break
    if messages is view:
        return None
    return messages, (removal,), tokens


def _drop_checkpoint(
    view: tuple[Message, ...], budget: Budget, tokens: int, transcript: Sequence[Message]
) -> tuple[tuple[Message, ...], tuple[Removal, ...], int] | None:
    """The view without its checkpoint, and with a brief marker or none, when that fits; or None.

    Past every other resort at a tiny threshold, the checkpoint's framing and the
    marker (30-60 tokens) can be all that keeps a view of the floor from fitting.
    The checkpoint is then dropped like an old turn (archived, counted and named
    by the marker); the marker is shortened, and left out only when even its
    brief form does not fit. Only when the result fits: where no view does, the
    checkpoint is the view's one record of what was cut. Runs only when a user
    message follows them, so the first message after the leading block stays a
    user message. A recovery drops only a checkpoint that came in holding
    nothing (`_drop_empty_checkpoint`): its target is a guess below the real
    threshold, and the checkpoint this request may have paid for is what the
    retry must keep (a cut one still carries its instructions and file lists).
    """
    lead_end = analyze(view).lead_end
    index = lead_end
    checkpoint = view[index] if index < len(view) and view[index].is_summary else None
    if budget.reason == "overflow":
        return _drop_empty_checkpoint(view, lead_end, checkpoint, budget, transcript)
    index += checkpoint is not None
    marker = view[index] if index < len(view) and is_truncation_marker(view[index]) else None
    index += marker is not None
    if (checkpoint is None and marker is None) or index >= len(view):
        return None
    if not is_user_message(view[index]):
        return None
    prior = int(marker.metadata[TRUNCATION_KEY]) if marker is not None else 0
    earlier = tuple(marker.metadata.get(ARCHIVED_KEY, ())) if marker is not None else ()
    removed: tuple[Removal, ...] = ()
    references = earlier
    if checkpoint is not None:
        removal = Removal("messages", (checkpoint,))
        removed = (removal,)
        if budget.archiving:
            references = (*earlier, removal.reference)
    count = prior + (checkpoint is not None)
    rest = view[index:]
    for brief in (truncation_marker(count, references, brief=True), None):
        messages = (*view[:lead_end], *((brief,) if brief is not None else ()), *rest)
        measured = budget.measure(messages)
        if measured <= budget.threshold:
            return messages, removed, measured
    return None  # no view fits anyway: the checkpoint stays, cut (the commit keeps it whole)


def _drop_empty_checkpoint(
    view: tuple[Message, ...],
    index: int,
    checkpoint: Message | None,
    budget: Budget,
    transcript: Sequence[Message],
) -> tuple[tuple[Message, ...], tuple[Removal, ...], int] | None:
    """A recovery's view without a checkpoint that came in empty, fitting or not; or None.

    Empty: no file lists and no text but trim markers (an earlier view's last
    resort cut it, and nothing restored it). It is no memory, so no marker
    counts it; one this call emptied is kept (its commit restores it whole).
    """
    if not isinstance(checkpoint, ContextSummary) or checkpoint not in transcript:
        return None
    if checkpoint.read_files or checkpoint.modified_files:
        return None
    if _TRIM_MARKER.sub("", checkpoint.summary).strip():
        return None
    messages = (*view[:index], *view[index + 1 :])
    if index >= len(messages) or not is_user_message(messages[index]):
        return None  # the first message after the leading block stays a user message
    return messages, (Removal("messages", (checkpoint,)),), budget.measure(messages)


def _cap_tail(
    view: tuple[Message, ...], budget: Budget, tokens: int, transcript: Sequence[Message]
) -> tuple[tuple[Message, ...], tuple[Removal, ...], int] | None:
    """The newest tool group's results capped by the excess (`cap_to_fit`), or None."""
    shape = analyze(view)
    indices = [i for i in range(shape.tail_start, shape.pending_start) if view[i].role == "tool"]
    originals = {m.tool_call_id: m for m in transcript if m.role == "tool" and m.tool_call_id}
    capped = cap_to_fit(view, indices, tokens - budget.threshold, budget, originals)
    if capped is None:
        return None
    messages, removed = capped
    return messages, removed, budget.measure(messages)


def _drop_units(cut: _Cut, budget: Budget, tokens: int) -> tuple[_Assembled, int]:
    """Drop units oldest first until the measured view fits or none is left.

    ``tokens`` is the view's size to start from. Per-unit costs are counted
    once and dropped oldest first until their savings cover the excess; then
    one measure. When the measured view is still over, the next round starts
    from the measured size, with the tokens a measure lost per counted token
    saved (1 at first) and, from the third round on, a growing multiple of the
    miss (2, 4, 8, ...). At most ``_MEASURES`` measures: the last round drops
    every unit left.
    """
    counter = budget.counter
    costs = [sum(counter.count_message(cut.view[i]) for i in unit) for unit in cut.units]
    worst = cut.marker_tokens(counter, len(costs))
    growth = worst - cut.marker_tokens(counter, 0)  # the marker appears (or grows) with a drop
    taken, saved = 0, 0
    known, known_saved, rate = tokens, 0, 1.0
    for attempt in range(_MEASURES):
        want = known_saved + (known - budget.threshold) * 2 ** max(0, attempt - 1) / rate
        while taken < len(costs) and (attempt == _MEASURES - 1 or saved < want):
            saved += costs[taken] - (growth if taken == 0 else 0)
            taken += 1
        candidate = cut.assemble(taken)
        measured = budget.measure(candidate[0]) if taken else tokens
        if measured <= budget.threshold or taken == len(costs):
            return candidate, measured
        measured += worst - cut.marker_tokens(counter, taken)  # room for the marker to grow
        if measured < known and saved > known_saved:
            rate = max(_MIN_RATE, (known - measured) / (saved - known_saved))
        known, known_saved = measured, saved
    raise AssertionError("unreachable: the last round drops every unit")  # pragma: no cover


def _trim_newest(
    cut: _Cut, budget: Budget, tokens: int, share_floor: int
) -> tuple[_Assembled, int] | None:
    """Cut the newest user message by what still does not fit, down to ``share_floor`` at most.

    Runs only with every unit dropped. Returns None when the message is
    already within its share (or has nothing left to cut).
    """
    counter = budget.counter
    original = cut.view[cut.user_index]
    current, best = original, None
    for _ in range(_TRIM_MEASURES):
        size = counter.count_message(current)
        limit = max(share_floor, size - (tokens - budget.threshold))
        if limit >= size:
            break
        trimmed = trim_user_message(original, counter, limit)
        if trimmed is None or trimmed == current:
            break
        if cut.archiving:
            trimmed = archived_copy(trimmed, Removal("text", (original,)).reference)
        current = trimmed
        candidate = cut.assemble(len(cut.units), trimmed)
        tokens = budget.measure(candidate[0])
        best = candidate, tokens
        if tokens <= budget.threshold:
            break
    return best


def _droppable_start(view: Sequence[Message], shape: Shape) -> tuple[int, int]:
    """Where the marker goes, and the first message that may be dropped."""
    slot = shape.lead_end
    if slot < len(view) and view[slot].is_summary:
        slot += 1
    if slot < len(view) and is_truncation_marker(view[slot]):
        return slot, slot + 1
    return slot, slot


def _drop_order(view: Sequence[Message], shape: Shape, start: int, user_index: int) -> list[range]:
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


def _assemble(cut: _Cut, dropped: set[int], trimmed: Message | None) -> _Assembled:
    """Build the truncated view and what it removed: the dropped range, the trimmed message."""
    view = cut.view
    if not dropped and trimmed is None:
        return tuple(view), ()
    gone = tuple(view[index] for index in sorted(dropped))
    removed: list[Removal] = [Removal("messages", gone)] if gone else []
    kept: list[Message] = list(view[: cut.slot])
    if gone:
        reference = removed[0].reference if cut.archiving else ""  # none without archiving
        kept.append(cut.marker(cut.prior + len(gone), reference))
    else:
        kept.extend(view[cut.slot : cut.start])
    for index in range(cut.start, len(view)):
        if index in dropped:
            continue
        if index == cut.user_index and trimmed is not None:
            removed.append(Removal("text", (view[index],)))
            kept.append(trimmed)
        else:
            kept.append(view[index])
    return tuple(kept), tuple(removed)


def trim_user_message(message: Message, counter: TokenCounter, limit: int) -> Message | None:
    """Cut ``message``'s text blocks to head and tail so it counts at most ``limit`` tokens.

    Returns None when the message already fits or has no text to cut. Each
    shortened block reads ``head`` + ``[N characters trimmed]`` + ``tail``;
    ``TRIMMED_KEY`` holds how many blocks were shortened. When even empty
    heads and tails do not fit (images, framing), the smallest version is
    returned.
    """
    tokens = counter.count_message(message)
    cuttable = [
        block.text
        for block in message.content
        if isinstance(block, TextBlock) and not _TRIM_MARKER.search(block.text)
    ]
    text_tokens = sum(counter.count_text(text) for text in cuttable)
    if tokens <= limit or text_tokens == 0:
        return None
    # Framing, images and cut blocks stay; the text gets what is left, less the markers.
    markers = sum(counter.count_text(f"\n[{len(text)} characters trimmed]\n") for text in cuttable)
    room = limit - (tokens - text_tokens) - markers
    keep_ratio = min(1.0, max(0.0, room / text_tokens))
    best: Message | None = None
    for _ in range(_TRIM_ATTEMPTS):
        candidate = _trim_blocks(message, keep_ratio)
        if candidate is None:  # no block loses more than its marker adds yet
            keep_ratio = 0.0 if keep_ratio < 0.01 else keep_ratio * 0.9
            continue
        best = candidate
        over = counter.count_message(candidate) - limit
        if over <= 0 or keep_ratio == 0.0:
            break
        # Tokenizers do not split head, marker and tail exactly: correct by the miss.
        keep_ratio = max(0.0, min(keep_ratio * 0.999, keep_ratio - over / text_tokens))
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
