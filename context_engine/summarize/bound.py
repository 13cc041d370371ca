"""Keeping a checkpoint under its share of the threshold, oldest detail out first.

A checkpoint that would take more than its share is shortened in this order:

1. Its file lists give up their oldest entries until they take at most half
   of the share.
2. The summarizer is asked to condense the text to the room left (a
   ``condense`` request with a smaller ``max_tokens``), twice at most. The
   `ExtractiveSummarizer` hides its least important, oldest items first; a
   model rewrites.
3. As a last resort the oldest items (lines) are dropped deterministically,
   spread over the sections, and at the very end the text is cut.

Whatever leaves the text is kept in the checkpoint's metadata under
`CONDENSED_KEY` (items, read files, modified files), so nothing is lost
silently: the caller's transcript holds it, and with an archive the
checkpoint is archived whole when the next one replaces it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import attrs
import regex

from context_engine.errors import SummarizerError
from context_engine.messages import ContextSummary, Message
from context_engine.summarize.ledger_text import HIDDEN_NOTE, OK_LEGEND
from context_engine.tokens import TokenCounter

__all__ = [
    "CONDENSED_KEY",
    "Ask",
    "Condensed",
    "bound_checkpoint",
    "drop_oldest_items",
    "with_condensed",
]

logger = logging.getLogger(__name__)

CONDENSED_KEY = "context_engine.condensed"
"""Metadata key on a checkpoint: what was condensed out of it and its predecessors."""

Ask = Callable[[str, int], Awaitable[str]]
"""``ask(text, max_tokens)``: the summarizer's shorter version of ``text``."""

# Below this the text is no use to anyone; the checkpoint may then exceed its share.
_MIN_ROOM = 16
_ASKS = 2
_HEADING = regex.compile(r"^#{1,6}\s")


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, (list, tuple)):
        return tuple(item for item in value if isinstance(item, str))
    return ()


@attrs.frozen
class Condensed:
    """What was taken out of a checkpoint's text and file lists to keep it under its share.

    Attributes:
        items: Lines (items) of the text, oldest condensing first.
        read_files: Read files dropped from the list.
        modified_files: Modified files dropped from the list.
    """

    items: tuple[str, ...] = ()
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()

    @classmethod
    def of(cls, message: Message | None) -> Condensed:
        """What ``message`` (a checkpoint) records under `CONDENSED_KEY`; empty otherwise."""
        recorded = message.metadata.get(CONDENSED_KEY) if message is not None else None
        if not isinstance(recorded, Mapping):
            return cls()
        return cls(
            _strings(recorded.get("items")),
            _strings(recorded.get("read_files")),
            _strings(recorded.get("modified_files")),
        )

    def __add__(self, other: Condensed) -> Condensed:
        return Condensed(
            (*self.items, *other.items),
            (*self.read_files, *other.read_files),
            (*self.modified_files, *other.modified_files),
        )

    def __bool__(self) -> bool:
        return bool(self.items or self.read_files or self.modified_files)

    def as_metadata(self) -> dict[str, list[str]]:
        """The JSON form stored under `CONDENSED_KEY` (empty lists left out)."""
        fields = attrs.asdict(self)
        return {name: list(values) for name, values in fields.items() if values}


def with_condensed(checkpoint: ContextSummary, condensed: Condensed) -> ContextSummary:
    """``checkpoint`` recording ``condensed`` in its metadata (unchanged when empty)."""
    if not condensed:
        return checkpoint
    metadata = {**checkpoint.metadata, CONDENSED_KEY: condensed.as_metadata()}
    return attrs.evolve(checkpoint, metadata=metadata)


async def bound_checkpoint(
    checkpoint: ContextSummary, limit: int, counter: TokenCounter, ask: Ask | None
) -> ContextSummary:
    """``checkpoint`` shortened to at most ``limit`` tokens (see the module docstring).

    ``ask`` is not called when the checkpoint already fits; when it raises a
    `SummarizerError` (its deadline passed, say) the deterministic cut takes
    over: the text is already paid for.
    """
    if counter.count_message(checkpoint) <= limit:
        return checkpoint
    shell, files = _trim_files(attrs.evolve(checkpoint, summary=""), limit // 2, counter)
    room = max(_MIN_ROOM, limit - counter.count_message(shell))
    text, items = checkpoint.summary, list[str]()
    if ask is not None and counter.count_text(text) > room:
        text, items = await _ask_shorter(ask, text, room, counter)
    for _ in range(3):  # the framing may differ from the text's count by a few tokens
        text, cut = drop_oldest_items(text, room, counter.count_text)
        items += cut
        bounded = attrs.evolve(shell, summary=text)
        over = counter.count_message(bounded) - limit
        if over <= 0 or room <= _MIN_ROOM:
            break
        room = max(_MIN_ROOM, room - over)
    condensed = Condensed.of(checkpoint) + attrs.evolve(files, items=tuple(items))
    return with_condensed(bounded, condensed)


def _trim_files(
    shell: ContextSummary, limit: int, counter: TokenCounter
) -> tuple[ContextSummary, Condensed]:
    """``shell`` with its oldest read, then modified, files dropped until it takes ``limit``."""
    read, modified = list(shell.read_files), list(shell.modified_files)
    over = counter.count_message(shell) - limit
    trimmed = shell
    while over > 0 and (read or modified):
        # Estimate per path, then measure: one rebuild per batch, not per path.
        while over > 0 and (read or modified):
            over -= counter.count_text((read or modified).pop(0)) + 1
        trimmed = attrs.evolve(trimmed, read_files=read, modified_files=modified)
        over = counter.count_message(trimmed) - limit
    gone = Condensed(
        read_files=shell.read_files[: len(shell.read_files) - len(read)],
        modified_files=shell.modified_files[: len(shell.modified_files) - len(modified)],
    )
    return trimmed, gone


async def _ask_shorter(
    ask: Ask, text: str, room: int, counter: TokenCounter
) -> tuple[str, list[str]]:
    """The summarizer's shorter text, asked at most twice, and the items it left out."""
    dropped: list[str] = []
    target = room
    for _ in range(_ASKS):
        try:
            shorter = await ask(text, target)
        except SummarizerError as exc:
            logger.warning("error=<%s> | condensing the checkpoint failed; cutting it", exc)
            break
        kept = frozenset(_items_of(shorter))
        dropped += [item for item in _items_of(text) if item not in kept]
        text = shorter
        tokens = counter.count_text(text)
        if tokens <= room:
            break
        target = max(1, target * room * 9 // (10 * tokens))
    return text, dropped


# ------------------------------------------------------------ the deterministic cut


@attrs.define
class _Block:
    heading: str | None
    items: list[str]
    hidden: int = 0

    def render(self) -> str:
        lines = [self.heading] if self.heading is not None else []
        lines += self.items
        if self.hidden:
            lines.append(f"- (+{self.hidden} more)")
        return "\n".join(lines)


def _blocks(text: str) -> list[_Block]:
    """``text`` as headed blocks of items; an item is a line plus its indented continuation."""
    blocks = [_Block(None, [])]
    for line in text.splitlines():
        note = HIDDEN_NOTE.match(line)
        if _HEADING.match(line):
            blocks.append(_Block(line.rstrip(), []))
        elif line.strip() == OK_LEGEND and blocks[-1].heading and not blocks[-1].items:
            blocks[-1].heading += "\n" + OK_LEGEND  # the log's legend stays with its heading
        elif not line.strip():
            continue
        elif note is not None:
            blocks[-1].hidden += int(note[1])
        elif line[:1].isspace() and blocks[-1].items:
            blocks[-1].items[-1] += "\n" + line.rstrip()
        else:
            blocks[-1].items.append(line.rstrip())
    return [block for block in blocks if block.heading is not None or block.items]


def _render(blocks: list[_Block]) -> str:
    return "\n\n".join(block.render() for block in blocks)


def _items_of(text: str) -> list[str]:
    return [item for block in _blocks(text) for item in block.items]


def drop_oldest_items(
    text: str, room: int, count_text: Callable[[str], int]
) -> tuple[str, list[str]]:
    """``text`` under ``room`` tokens with its oldest items dropped, and the dropped items.

    Items go from the block with the most items left (its first, oldest, item),
    so every section keeps its newest items as long as possible; each block
    says how many it hides (``- (+N more)``). When one item is left the text is
    cut, and the part cut off counts as one dropped item. Deterministic.
    """
    if count_text(text) <= room:
        return text, []
    blocks = _blocks(text)
    dropped: list[str] = []
    total = count_text(_render(blocks))
    left = sum(len(block.items) for block in blocks)
    while total > room and left > 1:  # the last item is cut, not dropped: a head says more
        block = max(blocks, key=lambda b: len(b.items))
        left -= 1
        item = block.items.pop(0)
        block.hidden += 1
        dropped.append(item)
        total -= count_text(item) + 1
        if total <= room:  # the estimate says it fits: measure
            total = count_text(_render(blocks))
    shorter = _render(blocks)
    if count_text(shorter) > room:
        shorter, tail = _cut(shorter, room, count_text)
        dropped.append(tail)
    return shorter, dropped


def _cut(text: str, room: int, count_text: Callable[[str], int]) -> tuple[str, str]:
    """The longest head of ``text`` that fits ``room`` with an ellipsis, and the rest."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count_text(text[:middle] + "…") <= room:
            low = middle
        else:
            high = middle - 1
    return text[:low] + "…", text[low:]
