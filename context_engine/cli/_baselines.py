"""What a user would otherwise send: the baselines a replay's savings are measured against.

Sending the whole history ("without") is no baseline once it is above the
window: the provider rejects it. A user without the engine does one of two
things, and both are measured call by call on the same token counts:

* **hard trimming to the window** (trim-last): keep the leading system
  messages, the first user message (the task) and the newest messages that
  fit under the threshold, dropping the oldest (and a tool result whose call
  was dropped);
* **observation masking**: replace every tool result but the newest
  `MASK_KEEP` with a short placeholder, keep everything else; it does not
  guarantee a fit.
"""

from __future__ import annotations

import attrs

from context_engine.messages import Message
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TokenCounter

__all__ = ["MASK_KEEP", "MASK_PLACEHOLDER", "Baselines"]

MASK_KEEP = 10
"""Tool results observation masking keeps whole: the newest ten, as in the usual setup."""
MASK_PLACEHOLDER = "[tool output omitted]"
"""What observation masking leaves of an older tool result."""
_LEAD_ROLES = ("system", "developer", "user")


@attrs.define
class Baselines:
    """Follows a transcript message by message and prices each call under both baselines.

    Args:
        counter: The engine's counter.
        threshold: Where hard trimming stops.
        overhead: Tokens every call sends besides the messages.
    """

    counter: TokenCounter
    threshold: int
    overhead: int
    _messages: list[Message] = attrs.Factory(list)
    _counts: list[int] = attrs.Factory(list)
    _lead: int = 0  # leading system/developer messages and the task after them
    _lead_tokens: int = 0
    _task: bool = False  # the lead ends with the first user message
    _start: int = 0  # first message hard trimming keeps after the lead
    _kept_tokens: int = 0  # tokens of messages[_start:]
    _results: list[int] = attrs.Factory(list)  # indexes of tool results, oldest first
    _masked_savings: int = 0
    _placeholder: int = 0
    _sent_from: int = 0  # where the last priced call's kept part started

    def __attrs_post_init__(self) -> None:
        self._placeholder = self.counter.count_message(Message.tool("x", MASK_PLACEHOLDER))

    def add(self, message: Message) -> None:
        """The transcript grew by ``message``."""
        count = self.counter.count_message(message)
        index = len(self._messages)
        self._messages.append(message)
        self._counts.append(count)
        if index == self._lead and not self._task and message.role in _LEAD_ROLES:
            self._task = message.role == "user"
            self._lead += 1
            self._lead_tokens += count
            self._start = self._lead
            return
        self._kept_tokens += count
        if message.role == "tool":
            self._results.append(index)
            if len(self._results) > MASK_KEEP:
                oldest = self._results[-MASK_KEEP - 1]
                self._masked_savings += max(0, self._counts[oldest] - self._placeholder)

    @property
    def kept_from(self) -> int:
        """The first message hard trimming kept at the last trimmed call (after the lead)."""
        return self._start

    def trimmed_prompt(self) -> tuple[Message, ...]:
        """What hard trimming sent at the last call `trimmed` priced: the lead and the rest kept."""
        return (*self._messages[: self._lead], *self._messages[self._sent_from :])

    def trimmed(self, without: int) -> int:
        """Tokens of the call after hard trimming; ``without`` when it fits already."""
        if without <= self.threshold:
            self._sent_from = self._lead
            return without
        fixed = self.overhead + REQUEST_OVERHEAD_TOKENS + self._lead_tokens  # as `without` counts
        room = self.threshold - fixed
        last = len(self._messages) - 1
        while self._start < last and (
            self._kept_tokens > room or self._messages[self._start].role == "tool"
        ):
            self._kept_tokens -= self._counts[self._start]
            self._start += 1
        self._sent_from = self._start
        return fixed + self._kept_tokens

    def masked(self, without: int) -> int:
        """Tokens of the call with older tool results masked."""
        return max(0, without - self._masked_savings)
