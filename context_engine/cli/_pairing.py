"""Tool calls and results that do not pair up: found, reported with their lines, repaired.

Providers reject a request whose tool result answers no earlier call, or whose
tool call is followed by anything but its results (OpenAI and Anthropic both
answer 400). A recorded transcript can hold either after a crash, an edit or a
lossy export; the engine leaves them as they are, so the command says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from context_engine.formats.readers import Transcript
from context_engine.messages import Message

__all__ = ["MISSING_RESULT_TEXT", "PairingProblem", "pairing_problems", "repair"]

MISSING_RESULT_TEXT = "(no result was recorded for this tool call)"
"""The result `repair` gives a call that was never answered."""


@attrs.frozen(kw_only=True)
class PairingProblem:
    """One tool call or result a provider would reject.

    Attributes:
        kind: ``orphan_result``: a tool result whose call is not open before it;
            ``unanswered_call``: a call followed by another message before its result.
        index: The message with the problem (the result, or the assistant message
            holding the call).
        call_id: The tool call id.
        next_index: For an unanswered call, the message that came instead of its result.
    """

    kind: Literal["orphan_result", "unanswered_call"]
    index: int
    call_id: str
    next_index: int | None = None

    def describe(self, transcript: Transcript) -> str:
        """The problem in words, with the lines (or message numbers) of ``transcript``."""
        where = transcript.where(self.index)
        if self.kind == "orphan_result":
            return (
                f"{where}: tool result for call {self.call_id!r} answers no call before it "
                "(providers reject this with a 400)"
            )
        following = transcript.messages[self.next_index or 0]
        return (
            f"{where}: tool call {self.call_id!r} has no result before the "
            f"{following.role} message at {transcript.where(self.next_index or 0)} "
            "(providers reject this with a 400)"
        )


def pairing_problems(messages: Sequence[Message]) -> list[PairingProblem]:
    """Every orphan tool result and every call answered too late or never, in order.

    Calls still open at the end of the transcript are not problems: the agent
    is waiting for their results.
    """
    problems: list[PairingProblem] = []
    open_calls: dict[str, int] = {}  # call id -> index of the assistant message
    for index, message in enumerate(messages):
        if message.role == "tool":
            if open_calls.pop(message.tool_call_id or "", None) is None:
                problems.append(
                    PairingProblem(
                        kind="orphan_result", index=index, call_id=message.tool_call_id or ""
                    )
                )
            continue
        problems.extend(
            PairingProblem(kind="unanswered_call", index=owner, call_id=call_id, next_index=index)
            for call_id, owner in open_calls.items()
        )
        open_calls = {call.id: index for call in message.tool_calls}
    return sorted(problems, key=lambda problem: problem.index)


def repair(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` with orphan results removed and a placeholder result for each unanswered call.

    The placeholder (`MISSING_RESULT_TEXT`) goes right after the call's group,
    before the message that interrupted it. Calls still open at the end are
    left open. Nothing else changes.
    """
    problems = pairing_problems(messages)
    orphans = {p.index for p in problems if p.kind == "orphan_result"}
    missing: dict[int, list[Message]] = {}  # index of the interrupting message -> results
    for problem in problems:
        if problem.kind == "unanswered_call" and problem.next_index is not None:
            name = next(
                (c.name for c in messages[problem.index].tool_calls if c.id == problem.call_id),
                None,
            )
            result = Message.tool(problem.call_id, MISSING_RESULT_TEXT, name=name)
            missing.setdefault(problem.next_index, []).append(result)
    repaired: list[Message] = []
    for index, message in enumerate(messages):
        repaired.extend(missing.get(index, ()))
        if index not in orphans:
            repaired.append(message)
    return tuple(repaired)
