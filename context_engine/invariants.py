"""Checks that a view keeps the invariants of the design against the transcript it came from.

The engine's tests run this on every view they produce; users can run it on
their own strategies with `check_view`.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine._native_checkpoint import carries_native_checkpoint
from context_engine.messages import Message, ThinkingBlock
from context_engine.structure import TRIMMED_KEY, analyze, is_user_message

__all__ = ["check_view"]


def check_view(transcript: Sequence[Message], view: Sequence[Message]) -> list[str]:
    """Return a description of every invariant ``view`` breaks (empty when it keeps them all).

    Checked: leading system/developer messages first and untouched; the first
    message after them a user message or checkpoint (a provider's compaction
    checkpoint included) when the transcript's was;
    no tool call without its result or result without its call (except calls
    pending at the end, which must stay as they were, and orphans the
    transcript already had); the newest user message present (verbatim, or
    trimmed with a marker); untouched messages in their original order;
    every reasoning block (`ThinkingBlock`, signature or encrypted payload
    included) either dropped whole or kept byte for byte in an assistant
    message with the same tool calls as the one it came from, so no reasoning
    is edited, invented or orphaned from its tool call.
    """
    problems: list[str] = []
    shape = analyze(transcript)
    lead = list(transcript[: shape.lead_end])
    if list(view[: shape.lead_end]) != lead:
        problems.append("leading system/developer messages changed or moved")
    if any(m.role in ("system", "developer") for m in view[shape.lead_end :]) and not any(
        m.role in ("system", "developer") for m in transcript[shape.lead_end :]
    ):
        problems.append("a system/developer message appeared after the leading block")
    if shape.lead_end < len(transcript) and transcript[shape.lead_end].role == "user":
        first = view[shape.lead_end] if shape.lead_end < len(view) else None
        # A provider's compaction checkpoint stands where it sends its summary (issue 19).
        if first is None or not (first.role == "user" or carries_native_checkpoint(first)):
            problems.append("first message after the leading block is no longer a user message")
    problems.extend(_pairing_problems(transcript, view, shape.pending_start))
    if shape.last_user >= 0:
        newest = transcript[shape.last_user]
        if not any(m == newest or _trimmed_from(m, newest) for m in view):
            problems.append("newest user message missing or altered")
    problems.extend(_order_problems(transcript, view))
    problems.extend(_reasoning_problems(transcript, view))
    return problems


def _reasoning_problems(transcript: Sequence[Message], view: Sequence[Message]) -> list[str]:
    """Reasoning kept whole, and still beside exactly the tool calls it was written with."""
    homes: dict[ThinkingBlock, list[tuple[object, ...]]] = {}
    for message in transcript:
        for block in message.content:
            if isinstance(block, ThinkingBlock):
                homes.setdefault(block, []).append(tuple(message.tool_calls))
    problems: list[str] = []
    for index, message in enumerate(view):
        for block in message.content:
            if not isinstance(block, ThinkingBlock):
                continue
            calls = homes.get(block)
            if calls is None:
                problems.append(f"reasoning block in view message {index} edited or invented")
            elif message.role != "assistant" or tuple(message.tool_calls) not in calls:
                problems.append(f"reasoning block in view message {index} orphaned from its calls")
    return problems


def _trimmed_from(candidate: Message, original: Message) -> bool:
    return (
        is_user_message(candidate)
        and TRIMMED_KEY in candidate.metadata
        and candidate.timestamp == original.timestamp
        and candidate.name == original.name
    )


def _pairing_problems(
    transcript: Sequence[Message], view: Sequence[Message], pending_start: int
) -> list[str]:
    def calls_and_results(messages: Sequence[Message]) -> tuple[set[str], set[str]]:
        calls = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls}
        results = {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}
        return calls, results

    in_calls, in_results = calls_and_results(transcript)
    old_orphans = in_calls ^ in_results
    calls, results = calls_and_results(view)
    problems = [f"tool call {cid!r} has no result" for cid in sorted(calls - results - old_orphans)]
    problems += [
        f"tool result {cid!r} has no call" for cid in sorted(results - calls - old_orphans)
    ]
    pending = list(transcript[pending_start:])
    if pending and list(view[len(view) - len(pending) :]) != pending:
        problems.append("pending tool calls at the end were changed or removed")
    return problems


def _order_problems(transcript: Sequence[Message], view: Sequence[Message]) -> list[str]:
    position = {id(m): i for i, m in enumerate(transcript)}
    last = -1
    for message in view:
        index = position.get(id(message))
        if index is None:
            continue
        if index < last:
            return ["messages reordered"]
        last = index
    return []
