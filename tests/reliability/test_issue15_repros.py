"""Issue 15's repros: checkpoints keep the failures, the last error and every edited file.

Each test replays what an agent does through the default engine (extractive
summarizer, no model) and asserts what the checkpoint must still tell it.
"""

from __future__ import annotations

import json

from context_engine import ContextEngine, ContextSummary, Message, ToolCall
from context_engine.strategies.hard_truncate import is_truncation_marker
from context_engine.summarize import ExtractiveSummarizer
from context_engine.summarize.bound import Condensed
from context_engine.summarize.ledger import Ledger
from tests.reliability.support import COUNTER

NAME_ERROR = "NameError: name 'Query' is not defined"


def bash(index: int, command: str, output: str, code: int = 0) -> list[Message]:
    call = ToolCall(f"call_{index}", "bash", json.dumps({"command": command}))
    text = f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"
    return [Message.assistant(f"Step {index}.", tool_calls=(call,)), Message.tool(call.id, text)]


def engine(window: int = 8_000) -> ContextEngine:
    return ContextEngine.default(window, summarizer=ExtractiveSummarizer(), token_counter=COUNTER)


def checkpoint_of(messages: tuple[Message, ...]) -> ContextSummary:
    return next(m for m in messages if isinstance(m, ContextSummary))


async def replay(messages: list[Message], window: int = 8_000) -> tuple[Message, ...]:
    """One call per step, each commit kept, as an agent loop would; the last view."""
    runner, transcript, view = engine(window), list(messages[:2]), tuple(messages[:2])
    for at in range(2, len(messages), 2):
        transcript += messages[at : at + 2]
        result = await runner.project(transcript)
        if result.commit is not None:
            transcript = list(result.commit)
        view = result.messages
    return view


def failing_then_busy(steps: int) -> list[Message]:
    trace = f'Traceback (most recent call last):\n  File "app.py", line 3\n{NAME_ERROR}'
    messages = [Message.system("You are a coding agent."), Message.user("Fix app.py.")]
    messages += bash(0, "python app.py", trace + "\n" + "frame\n" * 200, code=1)
    for index in range(1, steps):
        messages += bash(index, f"grep -n step_{index} app.py", f"{index}: line of app.py\n" * 60)
    return messages


async def test_the_failure_microcompact_cleared_is_quoted_by_the_checkpoint() -> None:
    """The summarizer reads the original result, not the placeholder: the error line survives."""
    view = await replay(failing_then_busy(60))
    checkpoint = checkpoint_of(view)
    assert "`python app.py` (failed, exit 1)" in checkpoint.text
    assert "## Most recent failure\n- `python app.py` failed with:" in checkpoint.text
    assert NAME_ERROR in checkpoint.text


async def test_no_step_is_left_to_a_truncation_with_no_summary() -> None:
    """A long task statement and a small window: the checkpoint covers what would not fit."""
    task = "Fix the parser. " + "The spec says many things. " * 300
    messages = [Message.system("You are a coding agent."), Message.user(task)]
    for index in range(40):
        messages += bash(index, f"pytest -k case_{index}", f"case {index}\n" * 60, code=index % 2)
    view = await replay(messages, window=8_000)
    assert not any(is_truncation_marker(m) for m in view)
    ledger = Ledger.of(checkpoint_of(view))
    assert ledger.runs  # the work log carries the summarized calls
    assert all(run.status != "ok" for run in ledger.runs if run.label.endswith(("1", "3", "5")))


async def test_a_shell_fix_made_early_stays_modified_after_many_updates() -> None:
    """A `sed -i` fix made at the start is still listed as modified after every later update."""
    fix = "sed -i 's/a/b/' astropy/utils/shapes.py"
    messages = [Message.system("You are a coding agent."), Message.user("Fix the shapes bug.")]
    messages += bash(0, fix, "")
    for index in range(1, 80):
        messages += bash(index, f"python -m pytest -k t{index}", f"t{index} passed\n" * 80)
    checkpoint = checkpoint_of(await replay(messages))
    assert "astropy/utils/shapes.py" in {
        *checkpoint.modified_files,
        *Condensed.of(checkpoint).modified_files,
    }
    assert fix in [run.label for run in Ledger.of(checkpoint).runs]


async def test_a_split_older_turn_keeps_its_goal_and_the_task_title() -> None:
    """The first request (the task) stays the Goal's first item through later requests."""
    messages = [Message.system("You are a coding agent."), Message.user("Task: port the CLI.")]
    for index in range(40):
        messages += bash(index, f"make step_{index}", f"step {index} built\n" * 60)
    messages.append(Message.user("Now also add a --verbose flag."))
    for index in range(40, 200):
        messages += bash(index, f"make step_{index}", f"step {index} built\n" * 60)
    view = await replay(messages)
    checkpoint = checkpoint_of(view)
    goal = checkpoint.summary.split("## Goal\n", 1)[1].split("\n\n", 1)[0]
    assert goal.startswith("- Task: port the CLI.")
    # The split turn's own request stays verbatim right after the checkpoint.
    assert view[view.index(checkpoint) + 1].text == "Now also add a --verbose flag."
