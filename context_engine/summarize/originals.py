"""The original messages behind a view's shortened ones, for the summarizer to read.

Earlier rewrites in the same call leave placeholders in the view: a cleared
tool result (microcompact), a trimmed message (light trim), a capped result.
A checkpoint written from those would only know what the placeholder says,
and a failure's traceback or a fix's output would be gone from it for good.
`restore_originals` puts the caller's original back for every shortened
message it can find in the transcript; what it cannot find (a checkpoint, a
truncation marker, a result capped before it reached the transcript) stays
as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine.messages import ContextSummary, Message
from context_engine.structure import (
    ARCHIVED_KEY,
    CAPPED_KEY,
    CLEARED_KEY,
    TRIMMED_KEY,
    is_user_message,
)

__all__ = ["is_shortening_of", "restore_originals", "whole_for_commit", "whole_newest_user"]

_SHORTENED = (CLEARED_KEY, TRIMMED_KEY, CAPPED_KEY, ARCHIVED_KEY)
# How far past the last matched message a shortened one's original is looked
# for: the view keeps the transcript's order, so it is the next one of its kind.
_LOOKAHEAD = 64


def _shortened(message: Message) -> bool:
    return any(key in message.metadata for key in _SHORTENED)


def _is_source(candidate: Message, shortened: Message) -> bool:
    """Whether ``candidate`` may be the message ``shortened`` was made from."""
    return (
        candidate.role == shortened.role
        and candidate.tool_call_id == shortened.tool_call_id
        and candidate.name == shortened.name
        and len(candidate.tool_calls) == len(shortened.tool_calls)
        and not candidate.is_summary
    )


def is_shortening_of(message: Message, original: Message) -> bool:
    """Whether ``message`` is a strategy's shortened copy of ``original`` (cleared, trimmed, ...).

    It carries a shortening mark and keeps the original's role, tool call id,
    name and number of tool calls.
    """
    return _shortened(message) and _is_source(original, message)


def restore_originals(
    messages: Sequence[Message], transcript: Sequence[Message]
) -> tuple[Message, ...]:
    """``messages`` (a part of a view) with each shortened message replaced by its original.

    A message of ``messages`` that is one of ``transcript``'s objects is kept
    and anchors the search; a shortened one (cleared, trimmed, capped or
    archived by a strategy) is replaced by the next transcript message after
    the last anchor with the same role, tool call id and name. The order of
    ``messages`` is kept and nothing is added or dropped; the input is not
    mutated.
    """
    if not transcript:
        return tuple(messages)
    position = {id(message): index for index, message in enumerate(transcript)}
    restored: list[Message] = []
    floor = 0
    for message in messages:
        index = position.get(id(message))
        if index is None and _shortened(message):
            index = _source_of(message, transcript, floor)
            if index is not None and transcript[index] is not message:
                restored.append(transcript[index])
                floor = index + 1
                continue
        restored.append(message)
        if index is not None:
            floor = index + 1
    return tuple(restored)


def _source_of(message: Message, transcript: Sequence[Message], floor: int) -> int | None:
    for index in range(floor, min(len(transcript), floor + _LOOKAHEAD)):
        candidate = transcript[index]
        if _is_source(candidate, message) and not _same_shortening(candidate, message):
            return index
    return None


def _same_shortening(candidate: Message, message: Message) -> bool:
    """Whether ``candidate`` is already shortened exactly as ``message`` (no original to gain)."""
    return candidate.content == message.content


def _newest_user(messages: Sequence[Message]) -> int:
    return next((i for i in reversed(range(len(messages))) if is_user_message(messages[i])), -1)


def whole_newest_user(
    view: Sequence[Message], transcript: Sequence[Message]
) -> tuple[Message, ...]:
    """``view`` with its newest user message whole again, when a strategy trimmed it.

    The newest user message is trimmed only so that one view fits; a caller
    that keeps the view as its transcript (a commit) would lose the rest of
    the request for good, even once later views have room for it. The
    original is the transcript's newest user message; a view whose newest
    user message is not trimmed, or whose transcript holds no other version
    of it, is returned as it is.
    """
    at = _newest_user(view)
    if at < 0 or TRIMMED_KEY not in view[at].metadata:
        return tuple(view)
    source = _newest_user(transcript)
    if source < 0:
        return tuple(view)
    original = transcript[source]
    if not _is_source(original, view[at]) or _same_shortening(original, view[at]):
        return tuple(view)
    return (*view[:at], original, *view[at + 1 :])


def whole_for_commit(
    view: Sequence[Message], transcript: Sequence[Message], shortened: Sequence[Message]
) -> tuple[Message, ...]:
    """``view`` as a caller should keep it: what was cut to fit this one view, whole again.

    Two messages are only ever cut for the view at hand, by the last resorts of
    a truncation: the newest user message (`whole_newest_user`) and the
    checkpoint, whose text and file lists go when nothing else is left. A
    caller committing the view would lose the request, the files and the
    calls for good. ``shortened`` are the originals of the call's text
    removals; a checkpoint of ``view`` made from one of them (same
    ``tokens_before`` and metadata) is replaced by it.
    """
    whole = list(whole_newest_user(view, transcript))
    originals = [m for m in shortened if isinstance(m, ContextSummary)]
    for index, message in enumerate(whole):
        if not isinstance(message, ContextSummary):
            continue
        for original in originals:
            if (
                original is not message
                and original.tokens_before == message.tokens_before
                and original.metadata == message.metadata
            ):
                whole[index] = original
                break
    return tuple(whole)
