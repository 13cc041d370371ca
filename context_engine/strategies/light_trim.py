"""Light trimming: very long text blocks keep their head and tail around a marker.

A pasted log, a huge file dump or a verbose tool output says most of what
matters in its first and last lines. `LightTrim` cuts the middle out of every
text block over ``text_threshold`` characters and leaves
``[N characters trimmed]`` in its place, oldest messages first, until the view
fits. It never removes a message, never touches tool-call arguments (they
must stay valid JSON) and never shortens what the user wrote: a task statement
cut in half loses the constraint that happened to sit in its middle.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from functools import partial
from typing import ClassVar

import attrs

from context_engine._validate import non_negative_int
from context_engine.errors import ConfigurationError
from context_engine.messages import Block, Message, TextBlock
from context_engine.strategies._shorten import derived_copy, replace_oldest_first, step_share
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.structure import TRIMMED_KEY, analyze

__all__ = ["LightTrim", "trim_text"]

logger = logging.getLogger(__name__)


def _marker(removed: int) -> str:
    return f"\n[{removed} characters trimmed]\n"


# Room the marker takes in a trimmed block; reserving it keeps every trimmed
# block under the threshold, so a second run never trims it again.
_MARKER_ROOM = len(_marker(10**18))


def _splits_pair(text: str, position: int) -> bool:
    """Whether a cut before ``position`` would split a CRLF or a UTF-16 surrogate pair."""
    if position <= 0 or position >= len(text):
        return False
    before, after = text[position - 1], text[position]
    if before == "\r" and after == "\n":
        return True
    return "\ud800" <= before <= "\udbff" and "\udc00" <= after <= "\udfff"


def trim_text(text: str, *, head: int, tail: int) -> str:
    r"""Keep the first ``head`` and last ``tail`` characters of ``text`` around a marker.

    The marker is ``\n[N characters trimmed]\n`` where N is exactly the number
    of characters removed. A cut that would split a CRLF line break or a
    surrogate pair moves by one character so the pair goes whole. Text no
    longer than ``head + tail`` comes back unchanged.

    Args:
        text: The text to shorten.
        head: Characters kept from the start.
        tail: Characters kept from the end.
    """
    if len(text) <= head + tail:
        return text
    start, end = head, len(text) - tail
    if _splits_pair(text, start):
        start -= 1
    if _splits_pair(text, end):
        end += 1
    return text[:start] + _marker(end - start) + text[end:]


@attrs.frozen(kw_only=True)
class LightTrim:
    """Cuts the middle out of long text blocks in older messages, oldest first.

    Eligible: every assistant and tool message except the last ``keep_recent``,
    the leading system/developer block and calls still pending at the end. User
    messages (every one, not only the newest) and checkpoints are never trimmed:
    the user's instructions reach the model whole or, after a checkpoint, in its
    instructions section. In eligible messages, each `TextBlock` longer than
    ``text_threshold`` characters becomes its first ``preserve_head`` and last
    ``preserve_tail`` characters around ``[N characters trimmed]``. Thinking
    blocks and tool-call arguments are never touched. A trimmed message carries
    ``TRIMMED_KEY`` in its metadata: the number of blocks trimmed in it.
    """

    keep_recent: int = attrs.field(default=4, validator=non_negative_int())
    """The newest messages left untouched."""
    text_threshold: int = attrs.field(default=4000, validator=non_negative_int())
    """Text blocks longer than this many characters are trimmed."""
    preserve_head: int = attrs.field(default=1200, validator=non_negative_int())
    """Characters kept from the start of a trimmed block."""
    preserve_tail: int = attrs.field(default=800, validator=non_negative_int())
    """Characters kept from the end of a trimmed block."""
    trimming_step: float = attrs.field(default=0.1, validator=step_share)
    """Trim until the excess plus one step of this share of the threshold is saved, in
    whole steps (0 trims exactly enough): the room left lets the engine send the
    same view plus new messages for many calls, so the prompt prefix stays cacheable,
    as `ToolResultMicrocompact.clearing_step` does for tool results."""
    name: str = attrs.field(default="light_trim", init=False)
    uses_llm: ClassVar[bool] = False
    """The strategy's name in events, spans and logs."""

    def __attrs_post_init__(self) -> None:
        kept = self.preserve_head + self.preserve_tail
        if kept + _MARKER_ROOM > self.text_threshold:
            raise ConfigurationError(
                f"LightTrim keeps preserve_head + preserve_tail = {kept} characters, which "
                f"with the {_MARKER_ROOM}-character marker does not fit under text_threshold="
                f"{self.text_threshold}; lower them or raise text_threshold to at least "
                f"{kept + _MARKER_ROOM}"
            )

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Trim long text blocks in ``view`` until it fits under ``budget.threshold``."""
        return self.rewrite(view, budget)

    def rewrite(self, view: Sequence[Message], budget: Budget) -> StrategyResult:
        """The synchronous body of `apply`: no I/O, the same input gives the same result."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        # Lazily: the scan stops at the last message the goal needs.
        replacements = (
            (index, partial(self.trim, view[index])) for index in self._candidates(view)
        )
        result = replace_oldest_first(
            view,
            replacements,
            budget,
            budget.goal_in_steps(self.trimming_step),
            "text",
            memo=(type(self), *self._sizes()),
        )
        if result.applied:
            logger.debug(
                "strategy=<%s> trimmed_messages=<%d> tokens_saved=<%d> | rewrite applied",
                self.name,
                len(result.removed),  # one message per removal
                result.tokens_saved,
            )
        return result

    def candidates(self, view: Sequence[Message]) -> tuple[int, ...]:
        """Indices of the messages with a block to trim, oldest first."""
        return tuple(self._candidates(view))

    def _candidates(self, view: Sequence[Message]) -> Iterator[int]:
        shape = analyze(view)
        stop = min(len(view) - self.keep_recent, shape.pending_start)
        limit = self.text_threshold
        for index in range(shape.lead_end, max(stop, shape.lead_end)):
            message = view[index]
            if message.role == "user":  # a request, or a checkpoint: never trimmed
                continue
            # `_has_long_text`, inlined: this loop reads every older message on every call.
            for block in message.content:
                if isinstance(block, TextBlock) and len(block.text) > limit:
                    yield index
                    break

    def trim(self, message: Message) -> Message:
        """The trimmed copy of ``message`` (``message`` itself when no block is too long).

        Made once per message and trim sizes: trimming the same message again
        returns the same object.
        """
        if not self._has_long_text(message):
            return message
        return derived_copy(message, (TRIMMED_KEY, *self._sizes()), self._trimmed)

    def _sizes(self) -> tuple[int, int, int]:
        """Everything a trimmed copy depends on besides the message."""
        return (self.text_threshold, self.preserve_head, self.preserve_tail)

    def _trimmed(self, message: Message) -> Message:
        content: list[Block] = []
        count = 0
        for block in message.content:
            if isinstance(block, TextBlock) and self._too_long(block):
                block = TextBlock(
                    trim_text(block.text, head=self.preserve_head, tail=self.preserve_tail)
                )
                count += 1
            content.append(block)
        previous = message.metadata.get(TRIMMED_KEY)
        total = count + (previous if isinstance(previous, int) else 0)
        return attrs.evolve(
            message, content=tuple(content), metadata={**message.metadata, TRIMMED_KEY: total}
        )

    def _too_long(self, block: Block) -> bool:
        return isinstance(block, TextBlock) and len(block.text) > self.text_threshold

    def _has_long_text(self, message: Message) -> bool:
        limit = self.text_threshold
        for block in message.content:
            if isinstance(block, TextBlock) and len(block.text) > limit:
                return True
        return False
