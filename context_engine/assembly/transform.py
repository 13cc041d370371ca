"""Transforms: rewrite the request-time history before the providers and strategies see it.

A transform is a function (plain or async) from the transcript (a tuple of
`Message`) to the messages the engine should work on instead: redaction,
normalisation, dropping noise. Transforms run in order on every call, before
the providers; the providers, the strategies, the summarizer and the view all
see their output, so a commit holds transformed messages (use a provider for
what must never be stored). A transform that raises stops the call: a failed
redaction must not send the text it was meant to remove.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeAlias

from context_engine._aio import maybe_await
from context_engine._transcript import as_transcript
from context_engine.assembly.trace import Decision
from context_engine.errors import ConfigurationError, InvalidMessageError
from context_engine.messages import Message
from context_engine.tokens import TokenCounter

__all__ = ["Transform", "apply_transforms", "checked_transforms", "transform_name"]

Transform: TypeAlias = Callable[
    [tuple[Message, ...]], Sequence[Message] | Awaitable[Sequence[Message]]
]
"""Takes the transcript, returns the messages to work on (plain or async)."""


def transform_name(transform: Transform) -> str:
    """The name a transform's decisions carry: its ``name`` attribute or ``__name__``."""
    name = getattr(transform, "name", None) or getattr(transform, "__name__", None)
    return str(name) if name else type(transform).__name__


def checked_transforms(transforms: Iterable[Transform]) -> tuple[Transform, ...]:
    """``transforms`` as a tuple; a `ConfigurationError` names the first one not callable."""
    if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Iterable):
        raise ConfigurationError(f"transforms must be a list of functions, got {transforms!r}")
    checked = tuple(transforms)
    for transform in checked:
        if not callable(transform):
            raise ConfigurationError(
                f"transform {transform!r} is not callable: a transform takes the transcript "
                "(a tuple of Message) and returns the messages to use"
            )
    return checked


async def apply_transforms(
    transforms: Sequence[Transform], transcript: tuple[Message, ...], counter: TokenCounter
) -> tuple[tuple[Message, ...], tuple[Decision, ...]]:
    """Run ``transforms`` in order; the transcript they leave and one decision per change.

    A message a transform replaced or removed is one ``transform`` decision
    (its position in the transcript the transform was given, and its tokens).

    Raises:
        InvalidMessageError: a transform returned something that is not a
            sequence of `Message`; the error names the transform.
    """
    decisions: list[Decision] = []
    for transform in transforms:
        name = transform_name(transform)
        returned = await maybe_await(transform(transcript))
        try:
            changed = as_transcript(returned)
        except InvalidMessageError as exc:
            raise InvalidMessageError(
                f"transform {name!r} returned an invalid transcript: {exc}"
            ) from None
        kept = set(changed)  # equal copies are not changes
        decisions.extend(
            Decision(
                source=name,
                item=f"message {index}",
                tokens=counter.count_message(message),
                action="transform",
                reason="replaced or removed by the transform before the providers ran",
            )
            for index, message in enumerate(transcript)
            if message not in kept
        )
        transcript = changed
    return transcript, tuple(decisions)
