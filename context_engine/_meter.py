"""How the engine measures views: counted tokens, provider usage anchors, the untouchable floor."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from context_engine._pipeline import PipelineOutcome
from context_engine.messages import Message
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY, analyze
from context_engine.tokens import (
    REQUEST_OVERHEAD_TOKENS,
    TokenCounter,
    UsageEstimate,
    estimate_usage,
    last_usage_index,
)

__all__ = ["Meter"]


def _same_prefix(view: Sequence[Message], reference: Sequence[Message], length: int) -> bool:
    """Whether the first ``length`` messages are the very same objects in both."""
    if len(view) < length or len(reference) < length:
        return False
    return all(a is b for a, b in zip(view[:length], reference, strict=False))


def _rewritten(message: Message) -> bool:
    """A checkpoint, a truncation marker, or a message a strategy shortened."""
    if message.is_summary:
        return True
    metadata = message.metadata
    return bool(metadata) and any(key in metadata for key in _REWRITE_KEYS)


_REWRITE_KEYS = (CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY)


@attrs.define
class Meter:
    """Counts views the same way everywhere in one engine.

    Attributes:
        counter: Counts single messages.
        overhead_tokens: Fixed prompt parts sent with every call.
    """

    counter: TokenCounter
    overhead_tokens: int = 0

    def estimate(
        self, view: tuple[Message, ...], last: tuple[tuple[Message, ...], UsageEstimate] | None
    ) -> UsageEstimate:
        """Estimate ``view``; ``last`` is the view this engine returned last and its estimate.

        With that history an anchor is trusted only when its prefix is exactly
        a view the engine returned (the one just sent, or the one the last
        estimate was already anchored on) and ignored otherwise: a usage left on
        a message kept after a compaction describes the longer prompt before it.
        Without history an anchor behind a message the engine rewrote may
        predate that rewrite, so it is ignored; any other anchor is checked
        against the counted prefix.
        """
        trusted: bool | None = None
        if last is None:
            index = last_usage_index(view)
            if index > 0 and any(_rewritten(m) for m in view[:index]):
                trusted = False
        else:
            sent, sent_estimate = last
            index = last_usage_index(view)
            if index == len(sent):
                trusted = _same_prefix(view, sent, index)
            else:
                trusted = (
                    index >= 0
                    and index == sent_estimate.last_usage_index
                    and _same_prefix(view, sent, index + 1)
                )
        return estimate_usage(
            view, self.counter, overhead_tokens=self.overhead_tokens, anchor_trusted=trusted
        )

    def measurer(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate
    ) -> Callable[[Sequence[Message]], int]:
        """Measure rewritten views of ``transcript`` the way its estimate was made.

        The provider's usage anchor only describes the prefix it was billed for:
        a view that rewrote anything up to the anchor is counted instead.
        """
        anchor = estimate.last_usage_index

        def measure(view: Sequence[Message]) -> int:
            trusted = anchor >= 0 and _same_prefix(view, transcript, anchor + 1)
            return estimate_usage(
                view, self.counter, overhead_tokens=self.overhead_tokens, anchor_trusted=trusted
            ).tokens

        return measure

    def estimate_outcome(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate, outcome: PipelineOutcome
    ) -> UsageEstimate:
        """The estimate of a pipeline's view, split like the transcript's where it can be."""
        if not outcome.changed:
            return estimate
        tokens = outcome.tokens
        index = estimate.last_usage_index
        if index >= 0 and _same_prefix(outcome.view, transcript, index + 1):
            return UsageEstimate(
                tokens, estimate.usage_tokens, tokens - estimate.usage_tokens, index
            )
        return UsageEstimate(tokens, 0, tokens, -1)

    def floor_tokens(self, view: tuple[Message, ...]) -> int:
        """Tokens of what no strategy may remove: leading block, newest user message, tail."""
        shape = analyze(view)
        count = self.counter.count_message
        kept = sum(count(m) for i, m in enumerate(view) if shape.is_protected(i))
        return kept + self.overhead_tokens + REQUEST_OVERHEAD_TOKENS
