"""The user's instructions survive checkpoints in a section of their own; pinned messages return."""

from __future__ import annotations

import json

import pytest

from context_engine import ContextEngine, ContextSummary, Message, ToolCall
from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai, to_openai
from context_engine.strategies import HardTruncate, SessionMemory
from context_engine.summarize import ExtractiveSummarizer
from context_engine.summarize.instructions import (
    INSTRUCTIONS_KEY,
    UserInstructions,
    constraint_sentences,
    split_instructions,
)
from context_engine.summarize.pinned import INJECTED_KEY, Pinned
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter(4)
TASK = (
    "Fix the date parser in src/dates.py. You DON'T have to modify the testing logic. "
    "Keep the public API unchanged."
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "Fix it. You must not touch setup.py! Thanks.",
            ["You must not touch setup.py!"],
            id="must-not",
        ),
        pytest.param(
            "- only edit files under src/\n- run the linter",
            ["only edit files under src/"],
            id="list-item-with-only",
        ),
        pytest.param(
            "Never push.\nPlease always run the tests first.",
            ["Please always run the tests first."],
            id="fragments-under-three-words-left-out",
        ),
        pytest.param(
            "Look:\n```\nyou must never see this\n```\nDon't rename the module.",
            ["Don't rename the module."],
            id="code-blocks-not-read",
        ),
        pytest.param("请不要修改测试文件。", ["请不要修改测试文件。"], id="chinese"),
    ],
)
def test_constraint_sentences_are_whole_sentences_with_a_cue(
    text: str, expected: list[str]
) -> None:
    assert constraint_sentences(text) == expected


def call(index: int, command: str) -> Message:
    args = json.dumps({"command": command})
    return Message.assistant(tool_calls=[ToolCall(f"c{index}", "bash", args)])


def step(index: int) -> list[Message]:
    """One tool round of about 300 tokens."""
    return [
        call(index, f"cat src/module_{index}.py"),
        Message.tool(f"c{index}", f"line {index}\n" * 150, name="bash"),
    ]


def session(rounds: int) -> list[Message]:
    """A session with a new request, carrying a constraint, every fifth round."""
    messages = [Message.system("You are a coding agent."), Message.user(TASK)]
    for index in range(rounds):
        if index and index % 5 == 0:
            messages.append(Message.user(f"Next part {index}: never delete module_{index}.py."))
        messages += step(index)
    return messages


def requests_so_far(messages: list[Message]) -> list[str]:
    return [s for m in messages if m.role == "user" for s in constraint_sentences(m.text)]


def extractive_engine(**options: object) -> ContextEngine:
    return ContextEngine.default(
        6_000,
        summarizer=ExtractiveSummarizer(),
        tool_result_cap=None,
        reserve_tokens=1_500,
        token_counter=COUNTER,
        **options,
    )


async def test_pinned_rules_and_every_constraint_survive_ten_checkpoints() -> None:
    """Ten committed checkpoints: the rules file comes back after each, the instructions stay."""
    rules = "AGENTS.md: always run `make lint` before you finish; never commit secrets."
    engine = extractive_engine(pinned=[rules])
    transcript: list[Message] = []
    consumed = checkpoints = 0
    for rounds in range(4, 400):
        full = session(rounds)
        transcript += full[consumed:]
        consumed = len(full)
        result = await engine.project(transcript)
        assert engine.estimate(result.messages).tokens <= engine.threshold
        if result.commit is None:
            continue
        checkpoints += 1
        transcript = list(result.commit)
        checkpoint = transcript[1]
        assert isinstance(checkpoint, ContextSummary)
        section, _ = split_instructions(checkpoint.summary)
        assert section is not None
        assert TASK in section
        # Every constraint so far: in the checkpoint's record or a request still verbatim
        # after it; those the section has no room for are counted in it, never lost silently.
        verbatim = " ".join(m.text for m in transcript[2:] if m.role == "user")
        recorded = UserInstructions.of(checkpoint).constraints
        wanted = [s for s in requests_so_far(full) if s not in verbatim]
        assert set(wanted) <= set(recorded)
        listed = [s for s in recorded if f"- {s}" in section]
        assert listed == list(recorded[len(recorded) - len(listed) :])  # the oldest give way
        left_out = len(recorded) - len(listed)
        assert not left_out or f"(+{left_out} earlier constraints" in section
        pinned = [m for m in transcript if m.metadata.get(INJECTED_KEY) == "pinned"]
        assert [m.text for m in pinned] == [rules]
        assert transcript[2] is pinned[0]  # right after the checkpoint
        if checkpoints == 10:
            break
    assert checkpoints == 10


async def test_the_section_is_read_back_from_the_text_when_the_metadata_is_lost() -> None:
    """A round trip through a provider format keeps the instructions of the older checkpoint."""
    engine = extractive_engine()
    first = await engine.compact(session(12))
    assert first.commit is not None
    round_trip = from_openai(to_openai(list(first.commit)))
    assert INSTRUCTIONS_KEY not in round_trip[1].metadata
    assert UserInstructions.of(round_trip[1]) == UserInstructions.of(first.commit[1])
    later = [*round_trip, *session(30)[len(session(12)) :]]
    second = await engine.compact(later)
    assert second.commit is not None
    section, body = split_instructions(second.commit[1].summary)  # type: ignore[attr-defined]
    assert section is not None
    assert TASK in section
    assert "<user-instructions>" not in body  # one section, not one per checkpoint


async def test_the_summarizer_never_sees_the_section_it_would_rewrite() -> None:
    summarizer = RecordingSummarizer(["## Goal\n- fix the parser"])
    engine = ContextEngine.default(
        6_000, summarizer=summarizer, tool_result_cap=None, token_counter=COUNTER
    )
    first = await engine.compact(session(12))
    assert first.commit is not None
    asked = len(summarizer.requests)
    await engine.compact([*first.commit, *session(20)[len(session(12)) :]])
    updates = [r.previous_summary for r in summarizer.requests[asked:] if r.previous_summary]
    assert updates
    assert all("<user-instructions>" not in text for text in updates)


def test_a_long_task_statement_is_shortened_around_a_marker_within_the_budget() -> None:
    long_task = "Start here. " + "detail " * 4000 + "End with the summary."
    found = UserInstructions(long_task, ("Never touch the tests.",))
    section = found.render(200, COUNTER)
    assert COUNTER.count_text(section) <= 200
    assert section.count("Start here.") == 1
    assert "characters of the first request left out" in section
    assert "- Never touch the tests." in section


def test_constraints_over_the_budget_are_counted_never_dropped_silently() -> None:
    rules = tuple(f"Rule {n}: never edit file_{n}.py in this change." for n in range(60))
    section = UserInstructions(None, rules).render(150, COUNTER)
    assert COUNTER.count_text(section) <= 150
    shown = [rule for rule in rules if rule in section]
    assert shown == list(rules[-len(shown) :])  # the newest are shown
    assert f"(+{len(rules) - len(shown)} earlier constraints" in section


def test_pinned_messages_over_budget_are_shortened_with_a_marker() -> None:
    import asyncio

    pinned = Pinned(source=["x" * 4000, "plan: step 1"], max_share=0.1)
    fitted = asyncio.run(pinned.fitted(room=10_000, threshold=2_000, counter=COUNTER))
    assert sum(COUNTER.count_message(m) for m in fitted) <= 200
    assert "pinned text shortened" in fitted[0].text
    assert all(m.metadata[INJECTED_KEY] == "pinned" for m in fitted)


async def test_a_pinned_function_is_read_when_each_checkpoint_is_written() -> None:
    plan = ["- [ ] step one"]
    engine = ContextEngine.default(
        6_000,
        summarizer=ExtractiveSummarizer(),
        tool_result_cap=None,
        token_counter=COUNTER,
        pinned=lambda: [f"Plan:\n{chr(10).join(plan)}"],
    )
    first = await engine.compact(session(12))
    plan.append("- [x] step two")
    second = await engine.compact([*(first.commit or ()), *session(20)[len(session(12)) :]])
    assert second.commit is not None
    injected = [m.text for m in second.commit if INJECTED_KEY in m.metadata]
    assert injected == ["Plan:\n- [ ] step one\n- [x] step two"]


@pytest.mark.parametrize(
    ("pinned", "problem"),
    [
        pytest.param("rules", "wrap one in a list", id="bare-string"),
        pytest.param([Message.system("rules")], "leading system message", id="system"),
        pytest.param([42], "Message objects or strings", id="not-a-message"),
    ],
)
def test_bad_pinned_settings_fail_at_construction(pinned: object, problem: str) -> None:
    with pytest.raises(ConfigurationError, match=problem):
        ContextEngine(8_000, pinned=pinned)


async def test_a_session_memory_checkpoint_keeps_the_instructions_and_the_pinned_messages() -> None:
    engine = ContextEngine(
        6_000,
        [SessionMemory(seed=lambda: "# Memory\n- parser half done"), HardTruncate()],
        reserve_tokens=1_500,
        token_counter=COUNTER,
        pinned=["Plan: 1. parser 2. docs"],
        commit_strategies=("session_memory",),
    )
    result = await engine.project(session(30))
    assert result.commit is not None
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    section, body = split_instructions(checkpoint.summary)
    assert section is not None
    assert TASK in section
    assert body == "# Memory\n- parser half done"
    assert result.commit[2].text == "Plan: 1. parser 2. docs"
    assert result.commit[2].metadata[INJECTED_KEY] == "pinned"
    assert engine.estimate(result.messages).tokens <= engine.threshold
    assert result.event is not None
    assert result.event.info is not None
    assert result.event.info.tokens_after == engine.estimate(result.messages).tokens
