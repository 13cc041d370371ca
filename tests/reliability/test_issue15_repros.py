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
    assert "python app.py (failed, exit 1)" in checkpoint.text
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


# -- the follow-up's repros: statuses of command variants, reads, the task statement -------


async def test_a_retried_command_is_never_shown_ok_for_the_run_that_failed() -> None:
    """A failed run and its retry with one more flag share one line, each with its status."""
    lint = "tool fix query.sql --dialect ansi"
    messages = [Message.system("You are a coding agent."), Message.user("Fix the lint.")]
    messages += bash(0, lint, "Are you sure? [Y/n]\nOSError: No such device", code=1)
    messages += bash(1, f"{lint} -f", "Persisting Changes...\nDone.")
    for index in range(2, 80):
        messages += bash(index, f"cat part_{index}.sql", f"select {index};\n" * 60)
    text = checkpoint_of(await replay(messages)).text
    assert f"{lint} (failed, exit 1) → {lint} -f" in text.splitlines()
    assert f"{lint} → " not in text  # the failed run has a status of its own


async def test_files_read_through_bash_are_listed_as_read() -> None:
    """`cat`, `sed -n` and `grep` on a named file count as reads of it."""
    reads = ["cat src/app.py", "sed -n '10,40p' src/cli.py", "grep -n main src/run.py"]
    messages = [Message.system("You are a coding agent."), Message.user("Explain the CLI.")]
    for index, command in enumerate(reads):
        messages += bash(index, f"cd /repo && {command}", "code\n" * 80)
    for index in range(3, 80):
        messages += bash(index, f"python -m pytest -k t{index}", f"t{index} passed\n" * 80)
    checkpoint = checkpoint_of(await replay(messages))
    listed = {*checkpoint.read_files, *Condensed.of(checkpoint).read_files}
    assert {"/repo/src/app.py", "/repo/src/cli.py", "/repo/src/run.py"} <= listed


async def test_a_task_statement_trimmed_for_one_view_is_committed_whole() -> None:
    """A recovery trims a long request to fit one view; the transcript it commits keeps it whole."""
    task = "Fix the parser. " + "The spec says many things about it. " * 270  # ~2,500 tokens
    messages = [Message.system("You are a coding agent."), Message.user(task)]
    for index in range(6):
        messages += bash(index, f"pytest -k case_{index}", f"case {index}\n" * 30)
    script = "cat > fix.py <<'EOF'\n" + "x = 1\n" * 1000 + "EOF"  # a ~1,500-token step
    messages += bash(6, script, "")
    runner = engine()
    result = await runner.recover_overflow(messages, "prompt is too long: 9000 > 8000")
    sent = [m for m in result.messages if m.role == "user" and not m.is_summary]
    assert sent[-1].text != task  # this view had to trim it
    assert result.commit is not None
    assert [m for m in result.commit if m.text == task]  # the caller keeps it whole
    later = [*result.commit, *bash(7, "pytest -k case_7", "ok")]
    view = (await runner.project(later)).messages
    assert [m for m in view if m.text == task]  # and the next view has room for it again


async def test_a_recovery_past_the_floor_commits_the_dropped_steps_in_a_checkpoint() -> None:
    """No view fits (a long request, a huge last step): the commit still summarizes the cut."""
    task = "Fix the parser. " + "The spec says many things about it. " * 270  # ~2,500 tokens
    messages = [Message.system("You are a coding agent."), Message.user(task)]
    messages += bash(0, "sed -i 's/a/b/' src/edited.py", "")
    for index in range(1, 30):
        messages += bash(index, f"pytest -k case_{index}", f"case {index}\n" * 30)
    script = "cat > fix.py <<'EOF'\n" + "x = 1\n" * 1400 + "EOF"  # a ~2,100-token step
    messages += bash(30, script, "")
    result = await engine().recover_overflow(messages, "prompt is too long: 9000 > 8000")
    assert result.event is not None
    assert result.event.futile  # the floor alone is above the threshold
    assert result.commit is not None
    assert not any(is_truncation_marker(m) for m in result.commit)
    kept = checkpoint_of(result.commit)
    assert "src/edited.py" in {*kept.modified_files, *Condensed.of(kept).modified_files}
    assert "pytest -k case_29" in [run.label for run in Ledger.of(kept).runs]
    # The view sent now is cut as far as it goes; the commit keeps the checkpoint whole.
    assert checkpoint_of(result.messages).tokens_before == kept.tokens_before
    assert COUNTER.count_message(checkpoint_of(result.messages)) <= COUNTER.count_message(kept)
