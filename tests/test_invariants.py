"""check_view names every invariant a hand-built bad view breaks, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from context_engine.invariants import check_view
from context_engine.messages import ContextSummary, Message, TextBlock, ThinkingBlock, ToolCall
from context_engine.structure import TRIMMED_KEY

SYSTEM = Message.system("be brief")
ASK_1 = Message.user("list the files")
LIST = Message.assistant(tool_calls=[ToolCall("a", "bash", '{"cmd": "ls"}')])
LISTED = Message.tool("a", "README.md\nsrc")
ANSWER_1 = Message.assistant("two entries")
ASK_2 = Message.user("now read the readme and the setup")
READ = Message.assistant(
    tool_calls=[ToolCall("b", "read_file", '{"p": "README.md"}'), ToolCall("c", "read_file")]
)
READ_B = Message.tool("b", "# demo")
READ_C = Message.tool("c", "[metadata]")
ANSWER_2 = Message.assistant("it is a demo")
PENDING = Message.assistant(tool_calls=[ToolCall("p", "deploy"), ToolCall("q", "notify")])
PENDING_P = Message.tool("p", "deployed")

# Typed as Mapping: the attrs plugin cannot infer `converter=dict` for a dict literal.
TRIMMED: Mapping[str, Any] = {TRIMMED_KEY: 1}

# A provider's compaction checkpoint, as `formats.anthropic` holds the returned block.
PROVIDER_CHECKPOINT = Message(
    "assistant",
    (),
    metadata={"anthropic.blocks": [{"opaque": {"type": "compaction", "content": "listed"}}]},
)

TRANSCRIPT = [SYSTEM, ASK_1, LIST, LISTED, ANSWER_1, ASK_2, READ, READ_B, READ_C, ANSWER_2]
WAITING = [*TRANSCRIPT, Message.user("deploy it"), PENDING, PENDING_P]


def without(messages: list[Message], *drop: Message) -> list[Message]:
    return [m for m in messages if all(m is not d for d in drop)]


@pytest.mark.parametrize(
    ("transcript", "view"),
    [
        (TRANSCRIPT, TRANSCRIPT),
        (WAITING, WAITING),
        (
            TRANSCRIPT,
            [SYSTEM, ContextSummary(summary="listed files"), ASK_2, READ, READ_B, READ_C, ANSWER_2],
        ),
        (TRANSCRIPT, [SYSTEM, ASK_1, ANSWER_1, ASK_2, READ, READ_B, READ_C, ANSWER_2]),
        (
            TRANSCRIPT,
            [
                *TRANSCRIPT[:5],
                attrs.evolve(ASK_2, content="now read [trimmed]", metadata=TRIMMED),
                *TRANSCRIPT[6:],
            ],
        ),
        (TRANSCRIPT, [*TRANSCRIPT[:3], attrs.evolve(LISTED, content="[cleared]"), *TRANSCRIPT[4:]]),
        (
            [ASK_1, Message.tool("ghost", "late"), ANSWER_1],
            [ASK_1, Message.tool("ghost", "late"), ANSWER_1],
        ),
        ([], []),
        ([SYSTEM], [SYSTEM]),
        (TRANSCRIPT, [SYSTEM, PROVIDER_CHECKPOINT, *TRANSCRIPT[5:]]),
    ],
    ids=[
        "untouched",
        "untouched-with-pending-calls",
        "older-turn-replaced-by-checkpoint",
        "whole-tool-group-dropped",
        "newest-user-message-trimmed-with-marker",
        "tool-result-rewritten-in-place",
        "orphan-the-transcript-already-had",
        "empty",
        "system-only",
        "older-turn-replaced-by-a-provider-compaction-checkpoint",
    ],
)
def test_views_that_keep_every_invariant_pass(
    transcript: list[Message], view: list[Message]
) -> None:
    assert check_view(transcript, view) == []


@pytest.mark.parametrize(
    ("transcript", "view", "problems"),
    [
        (
            TRANSCRIPT,
            [Message.system("be verbose"), *TRANSCRIPT[1:]],
            ["leading system/developer messages changed or moved"],
        ),
        (
            TRANSCRIPT,
            TRANSCRIPT[1:],
            [
                "leading system/developer messages changed or moved",
                "first message after the leading block is no longer a user message",
            ],
        ),
        (
            TRANSCRIPT,
            [*TRANSCRIPT[:5], Message.system("reminder"), *TRANSCRIPT[5:]],
            ["a system/developer message appeared after the leading block"],
        ),
        (
            TRANSCRIPT,
            [SYSTEM, ANSWER_1, *TRANSCRIPT[5:]],
            ["first message after the leading block is no longer a user message"],
        ),
        (
            TRANSCRIPT,
            without(TRANSCRIPT, READ_C),
            ["tool call 'c' has no result"],
        ),
        (
            TRANSCRIPT,
            without(TRANSCRIPT, LIST),
            ["tool result 'a' has no call"],
        ),
        (
            WAITING,
            without(WAITING, PENDING, PENDING_P),
            ["pending tool calls at the end were changed or removed"],
        ),
        (
            WAITING,
            [*WAITING[:-1], attrs.evolve(PENDING_P, content="[cleared]")],
            ["pending tool calls at the end were changed or removed"],
        ),
        (
            TRANSCRIPT,
            without(TRANSCRIPT, ASK_2),
            ["newest user message missing or altered"],
        ),
        (
            TRANSCRIPT,
            [*TRANSCRIPT[:5], Message.user("now read the readme"), *TRANSCRIPT[6:]],
            ["newest user message missing or altered"],
        ),
        (
            TRANSCRIPT,
            [
                *TRANSCRIPT[:5],
                attrs.evolve(ASK_2, content="x", name="bob", metadata=TRIMMED),
                *TRANSCRIPT[6:],
            ],
            ["newest user message missing or altered"],
        ),
        (
            TRANSCRIPT,
            [*TRANSCRIPT[:4], ANSWER_2, *TRANSCRIPT[5:9], ANSWER_1],
            ["messages reordered"],
        ),
    ],
    ids=[
        "system-prompt-edited",
        "system-prompt-dropped",
        "system-message-injected-later",
        "first-message-after-lead-not-a-user-message",
        "call-without-result",
        "result-without-call",
        "pending-calls-dropped",
        "pending-partial-result-rewritten",
        "newest-user-message-dropped",
        "newest-user-message-edited-without-marker",
        "trimmed-copy-of-another-speaker",
        "messages-swapped",
    ],
)
def test_each_broken_invariant_is_reported(
    transcript: list[Message], view: list[Message], problems: list[str]
) -> None:
    assert check_view(transcript, view) == problems


def test_several_broken_invariants_are_all_reported() -> None:
    view = [ASK_2, SYSTEM, READ, ANSWER_1]
    assert check_view(TRANSCRIPT, view) == [
        "leading system/developer messages changed or moved",
        "a system/developer message appeared after the leading block",
        "first message after the leading block is no longer a user message",
        "tool call 'b' has no result",
        "tool call 'c' has no result",
        "messages reordered",
    ]


THOUGHT = ThinkingBlock("the readme first, then setup.cfg", signature="sig-1")
SECRET = ThinkingBlock("ZW5jcnlwdGVk", redacted=True)
THINK_READ = Message("assistant", (THOUGHT, SECRET, *READ.tool_calls))
REASONED = [SYSTEM, ASK_1, LIST, LISTED, ANSWER_1, ASK_2, THINK_READ, READ_B, READ_C, ANSWER_2]


@pytest.mark.parametrize(
    ("view", "problem"),
    [
        (
            [
                *REASONED[:6],
                attrs.evolve(THINK_READ, content=(SECRET, *READ.tool_calls)),
                *REASONED[7:],
            ],
            None,
        ),
        (
            [*REASONED[:6], Message("assistant", (*READ.tool_calls,)), *REASONED[7:]],
            None,
        ),
        (
            [
                *REASONED[:6],
                Message("assistant", (ThinkingBlock(THOUGHT.thinking, "sig-2"), *READ.tool_calls)),
                *REASONED[7:],
            ],
            "reasoning block in view message 6 edited or invented",
        ),
        (
            [
                *REASONED[:6],
                Message(
                    "assistant",
                    (ThinkingBlock(THOUGHT.thinking + " ", "sig-1"), SECRET, *READ.tool_calls),
                ),
                *REASONED[7:],
            ],
            "reasoning block in view message 6 edited or invented",
        ),
        (
            [*REASONED[:6], Message("assistant", (THOUGHT, TextBlock("done"))), ANSWER_2],
            "reasoning block in view message 6 orphaned from its calls",
        ),
        (
            [*REASONED[:6], Message("user", (SECRET,)), *REASONED[6:]],
            "reasoning block in view message 6 orphaned from its calls",
        ),
    ],
    ids=[
        "one-block-dropped-whole",
        "all-reasoning-dropped",
        "signature-changed",
        "text-changed",
        "calls-removed-reasoning-kept",
        "reasoning-moved-to-user",
    ],
)
def test_reasoning_is_kept_whole_beside_its_calls_or_dropped(
    view: list[Message], problem: str | None
) -> None:
    """A view may drop a thinking block, never edit it or separate it from its tool calls."""
    problems = check_view(REASONED, view)
    assert [p for p in problems if "reasoning" in p] == ([problem] if problem else [])
