"""How the engine measures views: counted tokens, provider usage anchors, the untouchable floor.

Every view of one call is measured on one scale: the tokenizer's count plus a
correction fixed for that call. Without a provider anchor the correction is the
declared ``overhead_tokens``; with a trusted anchor it is what the provider
billed minus what we count for the same prefix (tool schemas and tokenizer
differences included). A strategy that saves N counted tokens therefore saves N
measured tokens, whatever it rewrites.
"""

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

__all__ = ["Meter", "Seen"]

_REWRITE_KEYS = (CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY)


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


@attrs.frozen
class Seen:
    """What the engine saw and returned on its last call."""

    input: tuple[Message, ...]
    input_estimate: UsageEstimate
    view: tuple[Message, ...]
    view_estimate: UsageEstimate


@attrs.define
class Meter:
    """Counts views the same way everywhere in one engine.

    Attributes:
        counter: Counts single messages.
        overhead_tokens: Fixed prompt parts sent with every call.
        max_user_share: Share of the threshold the newest user message may be
            trimmed down to (from the pipeline's `HardTruncate`, if any).
    """

    counter: TokenCounter
    overhead_tokens: int = 0
    max_user_share: float | None = None

    def counted(self, view: Sequence[Message]) -> int:
        """Tokenizer count of ``view`` with the request framing, no correction."""
        count = self.counter.count_message
        return sum(count(m) for m in view) + REQUEST_OVERHEAD_TOKENS

    def estimate(self, view: tuple[Message, ...], seen: Seen | None) -> UsageEstimate:
        """Estimate ``view`` given what the engine saw and returned last.

        A provider usage anchor is trusted when it answers the view the engine
        returned last, or when the engine already trusted it for the same prefix.
        With history, any other anchor is ignored: a usage left on a message kept
        after a compaction describes the longer prompt before it. Without history,
        an anchor behind a message a strategy rewrote is ignored and any other is
        checked against the counted prefix.
        """
        index = last_usage_index(view)
        trusted: bool | None = None
        if index >= 0 and seen is None:
            if any(_rewritten(m) for m in view[:index]):
                trusted = False
        elif index >= 0 and seen is not None:
            trusted = (
                (index == len(seen.view) and _same_prefix(view, seen.view, index))
                or (
                    index == seen.input_estimate.last_usage_index
                    and _same_prefix(view, seen.input, index + 1)
                )
                or (
                    index == seen.view_estimate.last_usage_index
                    and _same_prefix(view, seen.view, index + 1)
                )
            )
        return estimate_usage(
            view, self.counter, overhead_tokens=self.overhead_tokens, anchor_trusted=trusted
        )

    def measurer(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate
    ) -> Callable[[Sequence[Message]], int]:
        """Measure views derived from ``transcript`` on the scale of its estimate."""
        correction = estimate.tokens - self.counted(transcript)

        def measure(view: Sequence[Message]) -> int:
            return max(0, self.counted(view) + correction)

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
            usage = min(estimate.usage_tokens, tokens)
            return UsageEstimate(tokens, usage, tokens - usage, index)
        return UsageEstimate(tokens, 0, tokens, -1)

    def floor_tokens(
        self, view: tuple[Message, ...], estimate: UsageEstimate, threshold: int
    ) -> int:
        """Tokens no strategy can remove: leading block, newest user message, protected tail.

        Measured on the scale of ``estimate`` (the view's own). The newest user
        message counts only up to the share of the threshold it may be trimmed
        to, when the pipeline can trim it.
        """
        shape = analyze(view)
        count = self.counter.count_message
        total = 0
        for index, message in enumerate(view):
            if not shape.is_protected(index):
                continue
            tokens = count(message)
            if index == shape.last_user and self.max_user_share is not None:
                tokens = min(tokens, int(self.max_user_share * threshold))
            total += tokens
        correction = estimate.tokens - self.counted(view)
        return max(0, total + REQUEST_OVERHEAD_TOKENS + correction)
