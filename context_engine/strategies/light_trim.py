"""Light trimming: very long text blocks keep their head and tail around a marker.

A pasted log, a huge file dump or a verbose tool output says most of what
matters in its first and last lines. `LightTrim` cuts the middle out of every
text block over ``text_threshold`` characters and leaves
``[N characters trimmed]`` in its place, oldest messages first, until the view
fits. It never removes a message and never shortens what the user wrote: a
task statement cut in half loses the constraint that happened to sit in its
middle.

Old assistant messages (outside the protected tail) can be shortened further:
their prose and the long string values inside their tool-call arguments (the
contents of a file the agent wrote, a long patch) keep only their head, from
``assistant_threshold`` characters: to fit with ``trim_assistant_to_fit``, and
in a cost-aware engine both to fit and whenever that pays
(`context_engine.economy`). The arguments stay valid JSON with the same keys;
only string values that long are cut (most command lines are shorter). Once
the calls have run, the model needs what they did (their results, their
short arguments), not the text it already wrote.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from functools import partial
from typing import ClassVar

import attrs

from context_engine._memo import memoized
from context_engine._validate import non_negative_int
from context_engine.errors import ConfigurationError
from context_engine.messages import Block, Message, TextBlock, ThinkingBlock, ToolCall
from context_engine.strategies._shorten import derived_copy, replace_oldest_first, step_share
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.structure import TRIMMED_KEY, analyze

__all__ = ["LightTrim", "trim_arguments", "trim_text"]

logger = logging.getLogger(__name__)


def _flag(instance: object, attribute: attrs.Attribute[bool], value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigurationError(
            f"{type(instance).__name__}.{attribute.name} must be True or False, got {value!r}"
        )


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
    ``preserve_tail`` characters around ``[N characters trimmed]``.

    Eligible assistant messages before the protected tail (`Shape.tail_start`:
    the newest tool group of the current turn and what follows) are shortened
    further with ``trim_assistant_to_fit`` (and by the cost-aware engine when
    that pays, `context_engine.economy`): each text block, and each
    string value inside a tool call's arguments, longer than that many
    characters keeps its first ``assistant_head`` characters and the marker.
    Arguments are rewritten as JSON with the same keys in the same order
    (arguments that are not JSON are left alone); keys, numbers and short
    strings (paths, most command lines) are kept as they are. Thinking blocks are
    never touched, and the tool calls of a message that holds one are kept
    as they are: its reasoning stays beside the calls it was written with. A
    trimmed message carries ``TRIMMED_KEY`` in its metadata: the number of
    blocks (text blocks and tool calls) trimmed in it.
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
    assistant_threshold: int | None = attrs.field(
        default=200, validator=non_negative_int(optional=True)
    )
    """In assistant messages before the protected tail, text blocks and string values
    in tool-call arguments longer than this many characters keep only their first
    ``assistant_head`` characters, when ``trim_assistant_to_fit`` is True or the
    cost-aware engine finds that it pays; None never trims them this way (text
    blocks then go by ``text_threshold`` only, arguments are never touched).
    200 (head 100) rather than 400 (head 200): the cost-aware engine's Anthropic
    dollars on the dev corpus fall at every window ($6.96 against $7.21 at 32k)
    and no fidelity probe falls by more than 0.06 points (docs/decisions.md)."""
    assistant_head: int = attrs.field(default=100, validator=non_negative_int())
    """Characters kept from the start of a text block or argument string that
    ``assistant_threshold`` trims."""
    trim_assistant_to_fit: bool = attrs.field(default=False, validator=_flag)
    """Whether fitting the view trims old assistant messages by ``assistant_threshold``
    too. Off by default: on the dev corpus at 8k it scores a fidelity probe
    slightly lower ("steps already done" 80.95 % against 81.09 %) and costs
    a little more under Anthropic's prices (measured with the earlier 400 and
    200 characters, docs/decisions.md). ``cost_aware=True`` engines
    run it on (`trimming_assistant`), and also trim them whenever that pays."""
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
        limit = self.assistant_threshold
        if limit is not None and self.assistant_head + _MARKER_ROOM > limit:
            raise ConfigurationError(
                f"LightTrim keeps assistant_head = {self.assistant_head} characters, which "
                f"with the {_MARKER_ROOM}-character marker does not fit under "
                f"assistant_threshold={limit}; lower assistant_head or raise "
                f"assistant_threshold to at least {self.assistant_head + _MARKER_ROOM}"
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
        old = self._old_from(view)
        replacements = (
            (index, partial(self.trim, view[index], old=index < old))
            for index in self._candidates(view, old)
        )
        result = replace_oldest_first(
            view,
            replacements,
            budget,
            budget.goal_in_steps(self.trimming_step),
            "text",
            memo=(type(self), *self._sizes()),
            variant=lambda index: index < old,
        )
        if result.applied:
            logger.debug(
                "strategy=<%s> trimmed_messages=<%d> tokens_saved=<%d> | rewrite applied",
                self.name,
                len(result.removed),  # one message per removal
                result.tokens_saved,
            )
        return result

    def trimming_assistant(self) -> LightTrim:
        """This light trim with ``trim_assistant_to_fit`` on: what a cost-aware engine runs.

        Itself when it is on already, or when ``assistant_threshold`` is None.
        """
        if self.trim_assistant_to_fit or self.assistant_threshold is None:
            return self
        return attrs.evolve(self, trim_assistant_to_fit=True)

    def candidates(self, view: Sequence[Message]) -> tuple[int, ...]:
        """Indices of the messages with a block to trim, oldest first."""
        return tuple(self._candidates(view, self._old_from(view)))

    def _old_from(self, view: Sequence[Message]) -> int:
        """Where the protected tail starts: assistant messages before it are trimmed further."""
        if self.assistant_threshold is None or not self.trim_assistant_to_fit:
            return 0
        shape = analyze(view)
        return min(shape.tail_start, shape.pending_start)

    def _candidates(self, view: Sequence[Message], old: int) -> Iterator[int]:
        shape = analyze(view)
        stop = min(len(view) - self.keep_recent, shape.pending_start)
        limit = self.text_threshold
        for index in range(shape.lead_end, max(stop, shape.lead_end)):
            message = view[index]
            if message.role == "user":  # a request, or a checkpoint: never trimmed
                continue
            if index < old and message.role == "assistant":
                if self._has_long_assistant_content(message):
                    yield index
                continue
            # `_has_long_text`, inlined: this loop reads every older message on every call.
            for block in message.content:
                if isinstance(block, TextBlock) and len(block.text) > limit:
                    yield index
                    break

    def trim(self, message: Message, *, old: bool = False) -> Message:
        """The trimmed copy of ``message`` (``message`` itself when no block is too long).

        With ``old``, an assistant message is trimmed as one before the
        protected tail (``assistant_threshold``). Made once per message, trim
        sizes and ``old``: trimming the same message again returns the same object.
        """
        further = old and message.role == "assistant" and self.assistant_threshold is not None
        if further:
            if not self._has_long_assistant_content(message):
                return message
        elif not self._has_long_text(message):
            return message
        return derived_copy(message, (TRIMMED_KEY, *self._sizes(), further), self._trimmed, further)

    def _sizes(self) -> tuple[int, int, int, int | None, int]:
        """Everything a trimmed copy depends on besides the message."""
        return (
            self.text_threshold,
            self.preserve_head,
            self.preserve_tail,
            self.assistant_threshold,
            self.assistant_head,
        )

    def _trimmed(self, message: Message, further: bool) -> Message:
        content: list[Block] = []
        count = 0
        for block in message.content:
            new = self._trim_block(message, block, further)
            count += new is not block
            content.append(new)
        previous = message.metadata.get(TRIMMED_KEY)
        total = count + (previous if isinstance(previous, int) else 0)
        return attrs.evolve(
            message, content=tuple(content), metadata={**message.metadata, TRIMMED_KEY: total}
        )

    def _trim_block(self, message: Message, block: Block, further: bool) -> Block:
        limit = self.assistant_threshold
        if further and limit is not None:
            if isinstance(block, TextBlock) and len(block.text) > limit:
                return TextBlock(trim_text(block.text, head=self.assistant_head, tail=0))
            if isinstance(block, ToolCall) and not _reasons(message):
                arguments = trim_arguments(block.arguments, limit=limit, head=self.assistant_head)
                if arguments != block.arguments:
                    return attrs.evolve(block, arguments=arguments)
                return block
        if self._too_long(block):
            assert isinstance(block, TextBlock)
            return TextBlock(
                trim_text(block.text, head=self.preserve_head, tail=self.preserve_tail)
            )
        return block

    def _too_long(self, block: Block) -> bool:
        return isinstance(block, TextBlock) and len(block.text) > self.text_threshold

    def _has_long_text(self, message: Message) -> bool:
        limit = self.text_threshold
        for block in message.content:
            if isinstance(block, TextBlock) and len(block.text) > limit:
                return True
        return False

    def _has_long_assistant_content(self, message: Message) -> bool:
        """Whether an assistant message before the tail has a text or argument string to trim."""
        limit = self.assistant_threshold
        if limit is None:
            return self._has_long_text(message)
        shortest = min(limit, self.text_threshold)
        for block in message.content:
            if isinstance(block, TextBlock) and len(block.text) > shortest:
                return True
        if _reasons(message):
            return False  # its reasoning stays beside the calls it was written with
        # Parsed once per message: this runs on every older message on every call.
        return memoized(message, (_LONG_ARGUMENTS, limit), _has_long_argument, limit)


_LONG_ARGUMENTS = "context_engine.light_trim.long_arguments"


def _reasons(message: Message) -> bool:
    """Whether ``message`` holds a thinking block, bound to its tool calls as they are."""
    return any(isinstance(block, ThinkingBlock) for block in message.content)


def _has_long_argument(message: Message, limit: int) -> bool:
    # A string value longer than the limit makes the JSON text longer still.
    return any(
        isinstance(block, ToolCall)
        and len(block.arguments) > limit
        and _trim_strings(_parsed(block.arguments), limit, 0)[1]
        for block in message.content
    )


def _parsed(arguments: str) -> object:
    try:
        return json.loads(arguments)
    except ValueError:
        return None


def trim_arguments(arguments: str, *, limit: int, head: int) -> str:
    """Tool-call ``arguments`` with every string value over ``limit`` characters cut to its head.

    Each such string keeps its first ``head`` characters and the
    ``[N characters trimmed]`` marker (`trim_text` with no tail). The result
    is JSON with the same keys in the same order; keys and shorter values are
    kept. ``arguments`` comes back unchanged (the same object) when it is not
    JSON or holds no string that long.
    """
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    trimmed, changed = _trim_strings(value, limit, head)
    if not changed:
        return arguments
    return json.dumps(trimmed, ensure_ascii=False)


def _trim_strings(value: object, limit: int, head: int) -> tuple[object, bool]:
    if isinstance(value, str):
        if len(value) > limit:
            return trim_text(value, head=head, tail=0), True
        return value, False
    if isinstance(value, dict):
        pairs = [(key, *_trim_strings(item, limit, head)) for key, item in value.items()]
        if not any(changed for _, _, changed in pairs):
            return value, False
        return {key: item for key, item, _ in pairs}, True
    if isinstance(value, list):
        items = [_trim_strings(item, limit, head) for item in value]
        if not any(changed for _, changed in items):
            return value, False
        return [item for item, _ in items], True
    return value, False
