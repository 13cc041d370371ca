"""Checks on what callers pass in, and small pure helpers of the engine."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from context_engine.errors import InvalidMessageError
from context_engine.messages import Message
from context_engine.overflow import overflow_token_counts

__all__ = ["as_transcript", "recovery_target"]


def as_transcript(
    messages: Sequence[Message], checked: Callable[[tuple[Message, ...]], int] | None = None
) -> tuple[Message, ...]:
    """Snapshot the caller's sequence as a tuple, checking every item is a `Message`.

    Args:
        messages: What the caller passed.
        checked: Given the tuple, how many of its leading items are known to be
            messages already (they equal those of an input checked before);
            only the items after them are checked.
    """
    if isinstance(messages, (str, bytes, Message, Mapping)) or not isinstance(messages, Iterable):
        hint = (
            "; convert provider dicts with context_engine.formats.openai.from_openai"
            if isinstance(messages, Mapping)
            else ""
        )
        raise InvalidMessageError(
            f"expected a sequence of Message, got {type(messages).__name__}{hint}"
        )
    transcript = tuple(messages)
    start = checked(transcript) if checked is not None and transcript else 0
    # One C-speed pass over the types; the per-item loop only runs to name a culprit.
    rest = transcript[start:] if start else transcript
    if all(map(_is_message_type, set(map(type, rest)))):
        return transcript
    for index, message in enumerate(transcript):
        if not isinstance(message, Message):
            hint = (
                "; convert provider dicts with context_engine.formats.openai.from_openai"
                if isinstance(message, dict)
                else ""
            )
            raise InvalidMessageError(
                f"expected a Message, got {type(message).__name__}{hint}", index=index
            )
    return transcript


def _is_message_type(kind: type) -> bool:
    return issubclass(kind, Message)


def recovery_target(
    estimated: int, window: int, threshold: int, error: BaseException | str | None
) -> int:
    """A threshold low enough that the true size fits, given how far the estimate was off.

    The provider rejected a prompt we estimated at ``estimated`` tokens, so its
    real size was above ``window`` (or the size its error message states). The
    target scales the threshold down by that ratio, and below the provider's
    own limit when the error states a smaller one than the configured window.
    """
    prompt, limit = overflow_token_counts(error)
    if limit is None or not 0 < limit < window:
        limit = window
    threshold = max(0, threshold - (window - limit))
    # The rejected prompt was above the limit that rejected it: one discount, not two.
    actual = max(limit + 1, prompt or 0)
    if estimated >= actual:
        return threshold
    return max(0, min(threshold, threshold * estimated // actual))
