"""The quality gate: a checkpoint that forgets what the agent needs is replaced, and it says so."""

from __future__ import annotations

import json

import pytest

from context_engine import ContextEngine, ContextSummary, Message, ToolCall
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize import ExtractiveSummarizer
from context_engine.summarize.gate import Review, gated, last_failure_line
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter(4)
TASK = "Make the query builder work with nested joins and subqueries. Never change the public API."
ERROR = "NameError: name 'Query' is not defined"


def bash(index: int, command: str, output: str) -> list[Message]:
    call = ToolCall(f"c{index}", "bash", json.dumps({"command": command}))
    return [Message.assistant(tool_calls=[call]), Message.tool(f"c{index}", output, name="bash")]


def edit(index: int, path: str) -> list[Message]:
    arguments = json.dumps({"command": "create", "path": path, "file_text": "x = 1\n"})
    call = ToolCall(f"e{index}", "str_replace_editor", arguments)
    return [Message.assistant(tool_calls=[call]), Message.tool(f"e{index}", "File created.")]


def session() -> list[Message]:
    """Edits, a failing test run early on, then long passing rounds."""
    failing = f"Traceback (most recent call last):\n  File 'q.py', line 3\n{ERROR}\n"
    messages = [Message.system("You are a coding agent."), Message.user(TASK)]
    messages += edit(0, "src/query.py")
    messages += bash(
        1, "python -m pytest tests/test_query.py", failing + "<returncode>1</returncode>"
    )
    for index in range(2, 30):
        messages += bash(index, f"cat src/part_{index}.py", f"line {index}\n" * 120)
    return messages


def engine_with(summarizer: object) -> ContextEngine:
    strategies = [FullSummary(summarizer=summarizer, keep_recent_tokens=1_000), HardTruncate()]
    return ContextEngine(8_000, strategies, token_counter=COUNTER)


async def test_a_checkpoint_without_the_last_failure_gets_it_back_by_code_and_passes() -> None:
    engine = engine_with(RecordingSummarizer(["## Goal\n- make the query builder work"]))
    result = await engine.project(session())
    assert result.event is not None
    (step,) = [s for s in result.event.steps if s.name == "full_summary"]
    assert step.applied
    assert step.rejected is None
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    assert "make the query builder work" in checkpoint.summary  # the model's text is used
    assert ERROR in checkpoint.summary  # the work log quotes the failure
    assert "src/query.py" in checkpoint.modified_files


async def test_a_checkpoint_that_keeps_what_matters_is_used_as_written() -> None:
    answer = f"## Goal\n- make the query builder work\n## Last failure\n- {ERROR}"
    engine = engine_with(RecordingSummarizer([answer]))
    result = await engine.project(session())
    assert result.event is not None
    (step,) = [s for s in result.event.steps if s.name == "full_summary"]
    assert step.applied
    assert step.rejected is None
    assert result.event.info is not None
    assert result.event.info.rejected is None
    checkpoint = result.messages[1]
    assert isinstance(checkpoint, ContextSummary)
    assert "- make the query builder work" in checkpoint.summary
    assert f"- {ERROR}" in checkpoint.summary


async def test_the_extractive_summarizer_is_not_replaced_by_itself() -> None:
    engine = engine_with(ExtractiveSummarizer())
    result = await engine.project(session())
    assert result.event is not None
    assert all(step.rejected is None for step in result.event.steps)


def review(tokens_after: int = 10, previous: Message | None = None) -> Review:
    return Review(
        originals=tuple(session()[1:]),
        previous=previous,
        tokens_before=100,
        measure=lambda checkpoint: tokens_after,
    )


def good_checkpoint(**changes: object) -> ContextSummary:
    text = f"<user-instructions>\n{TASK}\n</user-instructions>\n\nLast failure: {ERROR}"
    fields: dict[str, object] = {"summary": text, "modified_files": ("src/query.py",)}
    fields.update(changes)
    return ContextSummary(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("checkpoint", "tokens_after", "problem"),
    [
        pytest.param(good_checkpoint(modified_files=()), 10, "src/query.py", id="file"),
        pytest.param(good_checkpoint(summary=TASK), 10, "last failure", id="failure"),
        pytest.param(good_checkpoint(summary=ERROR), 10, "task statement", id="task"),
        pytest.param(
            good_checkpoint(summary=f"{TASK.split('.')[0]}. {ERROR}"), 10, "constraint", id="rule"
        ),
        pytest.param(good_checkpoint(), 100, "grows the view", id="grows"),
    ],
)
def test_review_names_what_a_checkpoint_drops(
    checkpoint: ContextSummary, tokens_after: int, problem: str
) -> None:
    problems = review(tokens_after).problems(checkpoint)
    assert problems
    assert all(problem in found or "constraint" in found for found in problems)
    assert any(problem in found for found in problems)


def test_review_passes_a_checkpoint_that_keeps_everything() -> None:
    assert review().problems(good_checkpoint()) == []


def test_a_constraint_of_an_earlier_checkpoint_must_stay() -> None:
    rule = "Do not touch the migrations folder at all."
    previous = ContextSummary(
        summary=f"<user-instructions>\n{TASK}\nConstraints the user stated (verbatim):\n- {rule}"
        "\n</user-instructions>"
    )
    problems = review(previous=previous).problems(good_checkpoint())
    assert problems == ["it drops 1 user constraint(s)"]


def test_the_last_failure_is_the_newest_failed_result() -> None:
    messages = session()
    messages += bash(99, "make lint", "src/x.py:1: error: bad thing\n<returncode>2</returncode>")
    assert last_failure_line(messages) == "src/x.py:1: error: bad thing"
    assert last_failure_line(messages[:4]) is None


async def test_gated_without_a_fallback_keeps_the_checkpoint() -> None:
    checkpoint = good_checkpoint(modified_files=())

    async def write() -> ContextSummary:
        return checkpoint

    assert await gated(write, None, review()) == (checkpoint, None)


async def test_gated_replaces_a_checkpoint_that_drops_what_matters_and_says_why() -> None:
    dropped = good_checkpoint(summary=TASK)  # no last failure
    fallback = good_checkpoint()

    async def write() -> ContextSummary:
        return dropped

    async def digest() -> ContextSummary:
        return fallback

    checkpoint, rejected = await gated(write, digest, review())
    assert checkpoint is fallback
    assert rejected is not None
    assert "last failure" in rejected
