"""The checkpoint's work log: calls with their last status, the last failure, never forgotten."""

from __future__ import annotations

import json
from typing import Any

import pytest

from context_engine import ContextSummary, Message, ToolCall
from context_engine.formats.anthropic import from_anthropic
from context_engine.strategies import FullSummary, ToolResultMicrocompact
from context_engine.strategies.base import Budget
from context_engine.summarize.bound import CONDENSED_KEY
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.ledger import LEDGER_KEY, Ledger
from context_engine.summarize.ledger_text import DENSE_LABEL_CHARS, OK_LEGEND, SHORT_LABEL_CHARS
from context_engine.summarize.log import fit_ledger, without_ledger, without_listed_files
from context_engine.summarize.outcome import Outcome, outcome
from context_engine.summarize.request import SummaryRequest
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.extras import needs

COUNTER = FixedTokenCounter()
KEY = "AssertionError: expected 2024-01-01"


def measure(messages: Any) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


def budget(view: list[Message], threshold: int) -> Budget:
    return Budget(
        tokens=measure(view), window=100_000, threshold=threshold, counter=COUNTER, measure=measure
    )


class Shell:
    """Builds bash calls and their results with sequential ids."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, command: str, output: str, code: int = 0) -> list[Message]:
        self.count += 1
        call_id = f"s{self.count}"
        call = ToolCall(call_id, "bash", f'{{"command": "{command}"}}')
        text = f"<returncode>{code}</returncode>\n<output>\n{output}\n</output>"
        return [Message.assistant("", tool_calls=[call]), Message.tool(call_id, text, name="bash")]


def failing_test(run: Shell) -> list[Message]:
    output = f'Traceback (most recent call last):\n  File "t.py", line 1\n{KEY}'
    return run("pytest tests/test_dates.py", output, code=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Traceback (most recent call last):\n  ValueError: bad\n\nDuring handling of the above"
            " exception, another exception occurred:\n\nTraceback (most recent call last):\n"
            '  File "x"\nKeyError: 3',
            Outcome(None, True, "KeyError: 3"),
        ),
        (
            "<returncode>1</returncode>\nt.py::test FAILED\nE   AssertionError: 1 != 2\n1 failed",
            Outcome(1, True, "E AssertionError: 1 != 2"),
        ),
        (
            "Your proposed edit has introduced new syntax error(s).\nERRORS:\n"
            "- E999 SyntaxError: unmatched ')'",
            Outcome(None, True, "- E999 SyntaxError: unmatched ')'"),
        ),
        ("exit code 2\nmake: *** [all] Error 2", Outcome(2, True, "make: *** [all] Error 2")),
        ("<returncode>1</returncode>\n<output>\n</output>", Outcome(1, True, None)),
        ("<returncode>0</returncode>\nall good", Outcome(0, False, None)),
        (
            '{"output": "collected 3 items\\n1 failed", "metadata": {"exit_code": 1}}',
            Outcome(
                1, True, '{"output": "collected 3 items\\n1 failed", "metadata": {"exit_code": 1}}'
            ),
        ),
        (
            "Exit Code: 2\nStderr: make: *** [all] Error 2",
            Outcome(2, True, "Stderr: make: *** [all] Error 2"),
        ),
        ("ok\n[The command completed with exit code 0.]", Outcome(0, False, None)),
    ],
    ids=[
        "chained-traceback",
        "pytest-e-line",
        "editor-syntax-error",
        "make",
        "grep-no-match",
        "ok",
        "codex-exec-json",
        "gemini-exit-code",
        "openhands-exit-0",
    ],
)
def test_how_a_call_ended_and_its_key_line(text: str, expected: Outcome) -> None:
    """The key line closes the last traceback, else the first exception or error line."""
    assert outcome(Message.tool("c", text, name="bash")) == expected


def test_repeated_commands_collapse_with_their_last_status() -> None:
    """A command run three times is one entry: its latest status and how many runs."""
    run = Shell()
    messages = [
        *failing_test(run),
        *run("ls", "a.py"),
        *failing_test(run),
        *run("pytest tests/test_dates.py", "1 passed"),
    ]
    ledger = Ledger().update(messages)
    assert [(r.label, r.status, r.runs) for r in ledger.runs] == [
        ("ls", "ok", 1),
        ("pytest tests/test_dates.py", "ok", 3),
    ]
    assert ledger.failure is not None
    assert KEY in ledger.failure.output


def test_an_exit_status_with_no_output_does_not_replace_the_last_failure() -> None:
    """grep finding nothing is listed, but the failure quoted stays the one with an error."""
    run = Shell()
    ledger = Ledger().update([*failing_test(run), *run("grep -n foo x.py", "", code=1)])
    assert ledger.failure is not None
    assert KEY in ledger.failure.output
    assert ledger.runs[-1].status == "exit 1, no output"


async def test_calls_hidden_from_the_text_come_back_in_later_updates() -> None:
    """Across several checkpoint updates every call stays in the ledger, none dropped."""
    run = Shell()
    strategy = FullSummary(
        summarizer=ExtractiveSummarizer(), keep_recent_tokens=1, max_checkpoint_share=0.2
    )
    view: list[Message] = [Message.system("sys"), Message.user("Fix the build")]
    commands: list[str] = []
    texts: list[str] = []
    for update in range(4):
        for n in range(15):
            command = f"make target_{update}_{n}"
            commands.append(command)
            view += run(command, "built\n" * 30)
        result = await strategy.apply(view, view, budget(view, measure(view) // 2))
        assert result.applied
        view = list(result.messages)
        checkpoint = next(m for m in view if isinstance(m, ContextSummary))
        texts.append(checkpoint.summary)
        assert "(+" in checkpoint.summary  # the text had no room for every call
    # Every call before the cut is in the ledger; the newest are still in the view verbatim.
    kept = {c.arguments for m in view[view.index(checkpoint) :] for c in m.tool_calls}
    summarized = [c for c in commands if f'{{"command": "{c}"}}' not in kept]
    assert len(summarized) > 50
    assert [r.label for r in Ledger.of(checkpoint).runs] == summarized
    assert LEDGER_KEY in checkpoint.metadata


async def test_the_last_failure_stays_verbatim_through_later_updates() -> None:
    """A failure summarized early is still quoted after updates whose ranges had none."""
    run = Shell()
    strategy = FullSummary(summarizer=ExtractiveSummarizer(), keep_recent_tokens=1)
    view: list[Message] = [Message.system("sys"), Message.user("Fix the dates"), *failing_test(run)]
    for update in range(3):
        view += [m for n in range(6) for m in run(f"cat file_{update}_{n}.py", "x = 1\n" * 40)]
        result = await strategy.apply(view, view, budget(view, measure(view) // 2))
        assert result.applied
        view = list(result.messages)
    checkpoint = next(m for m in view if isinstance(m, ContextSummary))
    assert "## Most recent failure\n- `pytest tests/test_dates.py` failed with:" in checkpoint.text
    assert KEY in checkpoint.text


async def test_a_model_cannot_call_a_failed_command_ok() -> None:
    """The model's own call sections are replaced by the code-written ones."""
    run = Shell()
    answer = (
        "<summary>## Goal\n- fix dates\n\n## Commands run\n"
        "- `pytest tests/test_dates.py` (ok)</summary>"
    )
    strategy = FullSummary(summarizer=RecordingSummarizer([answer]), keep_recent_tokens=1)
    view = [Message.system("sys"), Message.user("Fix dates"), *failing_test(run)]
    view += [*run("ls -la", "total 0\n" * 3000), *run("ls", "")]
    result = await strategy.apply(view, view, budget(view, measure(view) - 10))
    assert result.applied
    text = next(m for m in result.messages if isinstance(m, ContextSummary)).summary
    assert "Goal\n- fix dates" in text
    assert "`pytest tests/test_dates.py` (ok)" not in text
    assert "pytest tests/test_dates.py ✓" not in text
    assert "pytest tests/test_dates.py (failed, exit 1)" in text
    assert KEY in text


def test_sections_with_the_ledgers_titles_are_removed_at_any_level() -> None:
    """The summarizer's own call sections go, nested ones included; the rest stays."""
    text = (
        "## Goal\n- a\n\n## Commands run\n- `x` (ok)\n\n## Earlier in the current request\n"
        "### Commands run\n- y ✓\n### Decisions\n- b"
    )
    assert without_ledger(text) == (
        "## Goal\n- a\n\n## Earlier in the current request\n### Decisions\n- b"
    )


def test_file_list_items_the_checkpoint_lists_itself_are_not_repeated() -> None:
    """Bare paths go (the checkpoint's file blocks hold them); items saying more stay."""
    text = (
        "## Goal\n- a\n\n## Files modified\n- src/a.py\n- src/b.py: renamed parse()\n\n"
        "## Files read\n- README.md\n- (+2 more)"
    )
    listed = frozenset({"src/a.py", "src/b.py", "README.md"})
    assert without_listed_files(text, listed) == (
        "## Goal\n- a\n\n## Files modified\n- src/b.py: renamed parse()"
    )
    nested = "## Earlier\n### Files read\n- README.md\n\n### Decisions\n- b"
    assert without_listed_files(nested, listed) == "## Earlier\n### Decisions\n- b"


async def test_the_editor_s_open_file_is_carried_to_the_next_checkpoint() -> None:
    """An `edit` after the cut acts on the file an `open` before it named."""

    def editor(index: int, name: str, command: str) -> list[Message]:
        call = ToolCall(f"e{index}", name, json.dumps({"command": command}))
        return [Message.assistant("", tool_calls=[call]), Message.tool(f"e{index}", "x\n" * 300)]

    strategy = FullSummary(summarizer=ExtractiveSummarizer(), keep_recent_tokens=1)
    view: list[Message] = [Message.system("sys"), Message.user("Fix the handler")]
    view += [*editor(0, "open", "open pkg/handler.py 1"), *editor(1, "goto", "goto 20")]
    first = await strategy.apply(view, view, budget(view, measure(view) // 2))
    assert first.applied
    view = [
        *first.messages,
        *editor(2, "edit", "edit 3:4\n  x = 1\nend_of_edit"),
        *editor(3, "goto", "goto 1"),
    ]
    second = await strategy.apply(view, view, budget(view, measure(view) // 2))
    assert second.applied
    checkpoint = next(m for m in second.messages if isinstance(m, ContextSummary))
    assert "pkg/handler.py" in checkpoint.modified_files


# -- the rendering: variants together, short forms first, never an ambiguous one -------------


def test_variants_of_a_command_share_one_item_each_with_its_status() -> None:
    """A retry with one more flag or a pipe is listed with the run it extends."""
    run = Shell()
    messages = [
        *run("lint fix q.sql", "OSError: no tty", code=1),
        *run("lint fix q.sql -f", "Done."),
        *run("lint fix q.sql | head -5", "Done."),
        *run("cd /repo", ""),
        *run("cd /repo && ls", "a.py"),
    ]
    commands = Ledger().update(messages).render(10_000).split("\n\n")[0]
    assert commands.splitlines()[1:] == [
        OK_LEGEND,
        "lint fix q.sql (failed, exit 1) → lint fix q.sql -f → lint fix q.sql | head -5",
        "cd /repo",  # a list operator starts another command: no variant
        "cd /repo && ls",
    ]


def test_a_tight_budget_lists_more_calls_briefly_and_the_newest_in_full() -> None:
    """Long labels are shortened before any call is hidden; room left widens the newest."""
    run = Shell()
    long = [
        f"python -m pytest tests/test_module_{n}.py::test_case -x -q " + "-k x " * 18
        for n in range(14)
    ]
    ledger = Ledger().update([m for command in long for m in run(command, "1 passed")])
    full = ledger.render(10_000)
    assert all(command.strip() in full.splitlines() for command in long)
    tight = ledger.render(len(full) * 3 // 4)
    assert "(+" not in tight  # every call still listed
    assert all(command.strip() in tight.splitlines() for command in long[-8:])  # the newest in full
    # Short forms end on a whole word: "test_c…" would read as any later "test_c*".
    assert "python -m pytest tests/test_module_0.py::test_case…" in tight.splitlines()
    assert long[0].strip() not in tight.splitlines()
    hidden = ledger.render(420)
    assert "\n(+" in hidden
    assert f"\n{long[-1][: SHORT_LABEL_CHARS - 1]}" in hidden


def test_a_short_form_is_never_a_prefix_another_call_shares() -> None:
    """Two long commands alike up to their last words keep those words in their short forms."""
    run = Shell()
    stem = "cd /repo && python -m pytest tests/test_physical.py::test_case_with_a_longer_name"
    stem += " -xvs | tail -"
    other = "cd /repo && python -c 'import pkg; print(pkg.__version__, pkg.__file__, "
    other += "pkg.__name__, pkg.__doc__)'"
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]  # the newest stay whole
    messages = [*run(other, "1"), *run(stem + "100", "1 passed"), *run(stem + "50", "1 passed")]
    tight = Ledger().update([*messages, *newer]).render(420)
    lines = tight.splitlines()
    assert "cd /repo && python -c 'import pkg; print(pkg.__version__,…" in lines
    assert f"{stem}100" in lines
    assert f"{stem}50" in lines
    # A call shown elsewhere in the view (kept after the checkpoint) counts too.
    alone = Ledger().update([*run(stem + "10", "1 passed"), *newer])
    cut = f"{stem.split(' -xvs')[0]}…"
    assert cut in alone.render(226).splitlines()
    assert cut not in alone.render(226, others=[stem + "20"]).splitlines()
    assert f"{stem}10" in alone.render(242, others=[stem + "20"]).splitlines()


def test_hidden_variants_are_counted_one_by_one() -> None:
    """``(+N more)`` counts calls, also when a hidden item holds several variants."""
    run = Shell()
    messages = [*run("make a", "ok"), *run("make a -j4", "ok"), *run("make b " + "x" * 300, "ok")]
    text = Ledger().update(messages).render(120)
    assert text.splitlines()[:3] == ["## Commands run", OK_LEGEND, "(+2 more)"]


def test_a_tool_taking_its_own_command_line_is_named_by_it() -> None:
    """SWE-agent style tools (``{"command": "find_file x.py"}``) read like shell commands."""
    calls = [
        ToolCall("t1", "find_file", json.dumps({"command": 'find_file "handler.py"\n'})),
        ToolCall("t2", "lookup", json.dumps({"command": "other thing"})),
    ]
    messages = [Message.assistant("", tool_calls=calls)]
    messages += [Message.tool("t1", "Found 1 match"), Message.tool("t2", "done")]
    assert [r.label for r in Ledger().update(messages).runs] == [
        'find_file "handler.py"',
        'lookup({"command": "other thing"})',
    ]


async def test_a_short_text_leaves_its_room_to_the_work_log() -> None:
    """The log may take more than its share when the summarizer's text is short."""
    run = Shell()
    view: list[Message] = [Message.system("sys"), Message.user("Fix the build")]
    for n in range(60):
        view += run(f"make target_with_a_long_name_{n} --jobs 4 --keep-going", "built\n" * 30)
    short = RecordingSummarizer(["<summary>## Goal\n- fix the build</summary>"] * 4)
    strategy = FullSummary(summarizer=short, keep_recent_tokens=1, max_checkpoint_share=0.5)
    pressure = budget(view, 2_000)
    result = await strategy.apply(view, view, pressure)
    assert result.applied
    checkpoint = next(m for m in result.messages if isinstance(m, ContextSummary))
    log_tokens = COUNTER.count_text(checkpoint.summary.split("## Commands run", 1)[1])
    assert log_tokens > 0.6 * strategy.checkpoint_limit(2_000)  # more than its share
    assert COUNTER.count_message(checkpoint) <= strategy.checkpoint_limit(2_000)


@pytest.mark.parametrize("budget_tokens", [60, 200, 700])
def test_the_log_fills_its_budget_without_passing_it(budget_tokens: int) -> None:
    """`fit_ledger` lists as many calls as its token budget holds, and no more."""
    run = Shell()
    messages = [m for n in range(200) for m in run(f"make target_{n} --jobs {n % 7}", "built")]
    log = fit_ledger(Ledger().update(messages), budget_tokens, COUNTER)
    assert COUNTER.count_text(log) <= budget_tokens
    assert COUNTER.count_text(log) >= 0.9 * budget_tokens


def test_a_long_item_that_misses_a_half_budget_does_not_empty_the_log() -> None:
    """A command run with many variants is one long item: cut out of a trial rendering, it
    takes every older call with it, and that short text is not "everything shown"."""
    dense = FixedTokenCounter(chars_per_token=3)  # denser than the first trial's 4
    run = Shell()
    older = [m for n in range(60) for m in run(f"grep -n handler_{n} src/app_{n}.py", "1: x")]
    stem = 'echo \\"select id from tbl;;\\" | sqlfluff lint - 2>&1'
    variants = [
        m
        for tail in [
            "",
            *(f" | grep -B{n} -A{n} 'check_still_complete in the parser'" for n in range(12)),
        ]
        for m in run(stem + tail, "E", 1)
    ]
    ledger = Ledger().update([*older, *variants, *run("git status --short", "M a.py")])
    log = fit_ledger(ledger, 700, dense)
    assert dense.count_text(log) >= 0.9 * 700
    assert "grep -n handler_59 src/app_59.py" in log.splitlines()


def test_variants_failing_alike_quote_their_key_line_once() -> None:
    """Key lines shared by several variants of a command are listed once under the item."""
    run = Shell()
    messages = [
        *run("lint q.sql", "RuntimeError: dropped", code=1),
        *run("lint q.sql | head -5", "RuntimeError: dropped", code=1),
        *run("make", "make: *** [all] Error 2", code=2),  # the most recent failure
    ]
    text = Ledger().update(messages).render(10_000)
    assert text.count("  - RuntimeError: dropped") == 1


def _anthropic_error() -> Message:
    """Claude Code refusing an edit: no exit status, no error word, the ``is_error`` flag."""
    messages = from_anthropic(
        [
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "e1", "name": "Edit", "input": {"old": "x"}}
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "e1",
                        "is_error": True,
                        "content": "String to replace not found in file.\nString: x = 1",
                    }
                ],
            },
        ]
    )
    return next(m for m in messages if m.role == "tool")


def _strands_error() -> Message:
    """A Strands tool result with status ``error``."""
    pytest.importorskip("strands", reason=needs("strands"))
    from context_engine.formats.strands import from_strands

    messages = from_strands(
        [
            {
                "role": "assistant",
                "content": [{"toolUse": {"toolUseId": "s1", "name": "lookup", "input": {}}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "toolResult": {
                            "toolUseId": "s1",
                            "status": "error",
                            "content": [{"text": "Reservation ABC123 could not be found"}],
                        }
                    }
                ],
            },
        ]
    )
    return next(m for m in messages if m.role == "tool")


@pytest.mark.parametrize(
    ("result", "key"),
    [
        (_anthropic_error, "String to replace not found in file."),
        (_strands_error, "Reservation ABC123 could not be found"),
        (
            lambda: Message(
                "tool",
                "Reservation ABC123 could not be found",
                tool_call_id="l1",
                metadata={"langchain.message": {"status": "error"}},  # from_langchain's shape
            ),
            "Reservation ABC123 could not be found",
        ),
    ],
    ids=["anthropic-is-error", "strands-status-error", "langchain-status-error"],
)
def test_a_result_the_runtime_flagged_as_an_error_is_a_failure(result: Any, key: str) -> None:
    """The runtime's own error flag decides, even when the text reads like plain output."""
    ended = outcome(result())
    assert ended.failed
    assert ended.status == "failed"
    assert ended.key_line == key


def test_a_cleared_result_ends_as_its_original_did() -> None:
    """A placeholder kept in the transcript is not read as ok when its original failed.

    The original exits 0 with a traceback; the placeholder's words say "exit status 0".
    """
    run = Shell()
    output = 'Traceback (most recent call last):\n  File "t.py", line 3\nRuntimeError: not expanded'
    call, result = run("cd /repo && python t.py", output, code=0)
    cleared = ToolResultMicrocompact().clear(call.tool_calls[0], result)
    assert "Traceback" not in cleared.text
    ledger = Ledger().update([call, cleared])
    assert ledger.runs[-1].status == "failed, exit 0 with a traceback"
    assert ledger.runs[-1].key_line == "RuntimeError: not expanded"
    assert ledger.failure is not None
    item = ledger.render(10_000).split("\n\n")[0].splitlines()[2]
    assert item == "cd /repo && python t.py (failed, exit 0 with a traceback)"


def test_scripts_behind_one_opening_line_are_one_item_with_the_last_status() -> None:
    """``python -c "`` with different scripts below it: one item, the last run's status, runs."""
    run = Shell()
    head = 'cd /repo && python -c \\"\\nimport numpy as np\\nfrom pvlib import iam\\n'
    messages = [
        *run(head + 'print(iam.physical(aoi=90, n=1))\\n\\"', "0.0"),
        *run("ls", "a.py"),
        *run(head + 'print(iam.physical(aoi=100, n_ar=1.29))\\n\\"', KEY, code=1),
    ]
    ledger = Ledger().update(messages)
    assert [run.label for run in ledger.runs] == ["ls", 'cd /repo && python -c " …']
    assert ledger.runs[-1].head() == 'cd /repo && python -c " … (failed, exit 1, 2 runs)'
    text = ledger.render(10_000)
    assert "✓" not in text  # no older script's check mark
    assert 'cd /repo && python -c " … (failed, exit 1, 2 runs)' in text.splitlines()
    assert text.count(KEY) == 1  # the failure's key line is kept, quoted once


def test_scripts_behind_one_opening_line_that_ended_ok_get_no_check_mark() -> None:
    """The opening stands for every script run behind it: a check mark would vouch for the next.

    A checkpoint listing ``python -c " … ✓`` reads as "that check passes" once
    a later, different script behind the same line fails in the verbatim tail.
    """
    run = Shell()
    head = 'cd /repo && python -c \\"\\nimport numpy as np\\n'
    one = Ledger().update(run(head + 'print(np.zeros(2))\\n\\"', "[0. 0.]"))
    assert one.runs[-1].head() == 'cd /repo && python -c " … (ran)'
    two = one.update(run(head + 'print(np.ones(2))\\n\\"', "[1. 1.]"))
    assert two.runs[-1].head() == 'cd /repo && python -c " … (ran, 2 runs)'
    # In the log, where an item with no status ended ok, the script's line still says "ran".
    assert 'cd /repo && python -c " … (ran, 2 runs)' in two.render(10_000).splitlines()
    closed = Ledger().update(run('python -c \\"print(1)\\"', "1"))
    assert closed.runs[-1].head() == 'python -c "print(1)" ✓'  # one program: its own mark


def test_a_short_room_lists_every_command_by_its_first_40_characters() -> None:
    """Dense form: a label cut right after its first 40 characters lets every call be listed."""
    run = Shell()
    commands = [
        f"cd /repo && grep -n 'pattern {n:02d} of the parser' src/module_{n:02d}.py -B5 -A5"
        for n in range(20)
    ]
    ledger = Ledger().update([m for command in commands for m in run(command, "1: x")])
    text = ledger.render(1_300)
    assert "(+" not in text  # every call listed
    lines = text.splitlines()
    assert all(f"\n{command[:40]}" in text for command in commands[:-8])  # cut, kept
    assert all(command in lines for command in commands[-8:])  # the newest in full
    assert ledger.render(10_000).count("…") == 0  # room enough: no call cut


def test_a_dense_cut_never_ends_on_a_blank() -> None:
    """The first 40 characters are kept whole, also when the 40th is a blank."""
    run = Shell()
    command = "cd /repo && python -m pytest tests/unit -x --maxfail=1 -q -p no:cacheprovider"
    assert command[39] == " "
    (ran,) = Ledger().update(run(command, "1 passed")).runs
    assert ran.head(DENSE_LABEL_CHARS, whole_words=False) == f"{command[:41]}… ✓"


async def test_at_the_size_limit_the_work_log_comes_before_the_prose() -> None:
    """A long narrative is condensed (kept in the metadata) so the log lists more calls."""
    run = Shell()
    view: list[Message] = [Message.system("sys"), Message.user("Fix the build")]
    for n in range(60):
        view += run(f"make target_with_a_long_name_{n} --jobs 4 --keep-going", "built\n" * 30)
    view += [Message.assistant("Built."), Message.user("Now the docs"), *run("make docs", "ok")]
    decisions = "\n".join(f"- decided to keep module {n} as it is for now" for n in range(80))
    prose = f"<summary>## Goal\n- fix the build\n\n## Decisions\n{decisions}</summary>"
    strategy = FullSummary(
        summarizer=RecordingSummarizer([prose] * 4), keep_recent_tokens=1, max_checkpoint_share=0.5
    )
    result = await strategy.apply(view, view, budget(view, 2_000))
    assert result.applied
    checkpoint = next(m for m in result.messages if isinstance(m, ContextSummary))
    limit = strategy.checkpoint_limit(2_000)
    log_tokens = COUNTER.count_text(checkpoint.summary.split("## Commands run", 1)[1])
    assert log_tokens > 0.6 * limit  # more than its share, though the text is long
    assert COUNTER.count_message(checkpoint) <= limit
    assert "fix the build" in checkpoint.summary  # the text's first tokens stay
    assert "decided to keep module" in str(checkpoint.metadata[CONDENSED_KEY])  # not lost


def _alike(run: Shell, count: int, *, failing: int | None = None) -> list[Message]:
    """``count`` greps alike in their first 40 characters, the ``failing``-th one failing."""
    messages: list[Message] = []
    for n in range(count):
        command = f"cd /repo && grep -n 'pattern of the parser' src/module_{n:02d}.py -B5 -A5"
        if n == failing:
            messages += run(command, "grep: src/module: No such file or directory", code=2)
        else:
            messages += run(command, "1: x")
    return messages


def test_older_calls_alike_in_their_opening_share_one_line_with_how_each_ended() -> None:
    """When not every call fits, older calls alike in their first 40 characters are one line."""
    run = Shell()
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]  # the newest stay whole
    older = [m for n in range(30) for m in run(f"cat notes_{n:02d}.txt", "x")]
    later = run("make build", "make: *** [all] Error 1", code=1)  # the most recent failure
    ledger = Ledger().update([*older, *_alike(run, 12, failing=4), *later, *newer])
    text = ledger.render(850)
    opening = "cd /repo && grep -n 'pattern of the parser' src/module_"
    line = next(line for line in text.splitlines() if line.startswith(opening))
    assert line == f"{opening}… (12 commands: 1 failed, exit 2; 11 ✓)"
    assert "  - grep: src/module: No such file or directory" in text  # the failure's key line
    assert text.count(opening) == 1
    assert all(f"ls dir_{n}" in text.splitlines() for n in range(7))
    # Without the merge, the hidden count would also hold some of the greps.
    hidden = int(text.split("(+")[1].split(" ")[0])
    assert hidden < 30
    assert ledger.render(100_000).count(opening) == 12  # room enough: each on its own line


def test_a_shared_line_never_opens_like_a_call_listed_apart() -> None:
    """A merged opening is never a prefix of a call outside it (the newest, or shown elsewhere)."""
    run = Shell()
    newest = "cd /repo && grep -n 'pattern of the parser' tests/test_parser.py | head"
    newer = [m for n in range(7) for m in run(f"ls dir_{n}", "a")]
    older = [m for n in range(30) for m in run(f"cat notes_{n:02d}.txt", "x")]
    messages = [*older, *_alike(run, 6), *run(newest, "", code=1), *newer]
    text = Ledger().update(messages).render(700)
    assert f"{newest} (exit 1, no output)" in text.splitlines()
    lines = text.splitlines()
    merged = [line for line in lines if "commands" in line]
    assert merged  # the older greps still share a line ...
    for line in merged:  # ... whose opening the newest grep does not start with
        assert not newest.startswith(line.split("…")[0])
    shown_apart = "cd /repo && grep -n 'pattern of the parser' src/module_05.py | tail"
    assert shown_apart.startswith(merged[0].split("…")[0])
    apart = Ledger().update(messages).render(700, others=[shown_apart])
    assert all(line not in apart for line in merged)
    for line in apart.splitlines():
        if "commands" in line:
            assert not shown_apart.startswith(line.split("…")[0])


def test_a_dense_cut_never_names_the_bare_command_before_a_pipe() -> None:
    """``cmd 2>&1…`` would name every later run of ``cmd 2>&1`` with another pipe: kept whole."""
    run = Shell()
    base = "cd /repo && tool fix queries.sql -f 2>&1"
    assert len(base) == DENSE_LABEL_CHARS - 1  # the dense cut would end right there
    piped = f"{base} | grep -E 'L003|L036' | head -30"
    plain = "cd /repo && tool fix queries.sql --verbose --rules L003,L036 --dialect ansi"
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]
    older = [m for n in range(30) for m in run(f"cat notes_{n:02d}.txt", "x")]
    text = Ledger().update([*older, *run(piped, "ok"), *run(plain, "ok"), *newer]).render(700)
    assert "(+" in text  # the dense pass
    assert piped in text.splitlines()
    assert plain not in text.splitlines()  # a cut elsewhere is kept
    assert f"\n{plain[:40]}" in text


@pytest.mark.parametrize(
    "command",
    [
        "cd /repo && tool fix queries.sql --force &> fix.log && tail -30 fix.log",
        "cd /repo && tool fix queries.sql -ff 2>&1 | grep -E 'L003|L036' | head -30",
    ],
)
def test_a_dense_cut_never_names_the_bare_command_before_any_redirection(command: str) -> None:
    """``&>`` and ``2>&1`` start a redirection as ``|`` and ``>`` do: the label is kept whole."""
    run = Shell()
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]
    older = [m for n in range(30) for m in run(f"cat notes_{n:02d}.txt", "x")]
    text = Ledger().update([*older, *run(command, "ok"), *newer]).render(700)
    assert "(+" in text  # the dense pass
    assert command in text.splitlines()


def test_a_shared_line_never_ends_where_a_pipe_starts() -> None:
    """Older runs of one command with other pipes do not share ``cmd 2>&1 | …``.

    That line would name the bare command with any pipe: the next run of it,
    which may fail, would read as one of the calls that passed.
    """
    run = Shell()
    command = "cd /repo && python -m pytest tests/test_parser.py 2>&1"
    pipes = ["tail -5", "grep FAIL", "head -30", "grep -c passed"]
    piped = [m for pipe in pipes for m in run(f"{command} | {pipe}", "ok")]
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]
    older = [m for n in range(30) for m in run(f"cat notes_{n:02d}.txt", "x")]
    ledger = Ledger().update([*older, *piped, *newer])
    assert len(ledger.render(100_000)) > 900  # not every call fits whole: alike ones may merge
    text = ledger.render(900)
    assert "commands" not in text  # these do not share a line
    lines = [line for line in text.splitlines() if line.startswith(command)]
    assert lines  # each listed on its own ...
    for line in lines:  # ... with an opening that goes past the pipe
        opening = line.split("…")[0]
        assert not opening.rstrip().endswith("|")
        assert len(opening) > len(f"{command} | ")


def test_older_calls_alike_share_lines_only_as_far_as_the_room_needs() -> None:
    """The oldest alike calls share a line first; newer ones keep their own when that is enough."""
    run = Shell()
    older = [m for n in range(20) for m in run(f"cat notes_{n:02d}.txt", "x")]
    first = "cd /repo && grep -n 'pattern of the parser' src/module_"
    second = "cd /repo && grep -rn 'another pattern here' lib/file_"
    alike = [
        m
        for opening in (first, second)
        for n in range(6)
        for m in run(f"{opening}{n:02d}.py -B5 -A5", "1: x")
    ]
    newer = [m for n in range(8) for m in run(f"ls dir_{n}", "a")]
    ledger = Ledger().update([*older, *alike, *newer])
    assert len(ledger.render(100_000)) > 1_200  # not every call fits whole
    text = ledger.render(1_200)
    assert "(+" not in text  # every call is listed ...
    assert f"{first}0… (6 commands, all ✓)" in text.splitlines()  # ... the oldest alike
    assert text.count(f"\n{second}") == 6  # the newer ones each on their own
    assert ledger.render(700).count("commands, all ✓") == 2  # less room: both share a line


def test_an_item_that_ended_ok_has_no_mark_and_each_heading_says_so_once() -> None:
    """A line is the call itself: no bullet, no check mark; a failure keeps its status.

    Each heading's legend says once what a line with no status means, so a
    model reads every unmarked call as one that ended ok, and every line's
    tokens go to calls.
    """
    run = Shell()
    lookup = ToolCall("t1", "lookup", '{"id": 7}')
    messages = [
        *run("ls -la src", "a.py"),
        *run("pytest -q tests/test_a.py", "1 failed\nAssertionError: 2 != 3", code=1),
        *run("make build", "ok"),
        *run("make build", "ok"),
        Message.assistant("", tool_calls=[lookup]),
        Message.tool("t1", "found"),
    ]
    ledger = Ledger().update(messages)
    commands, tools, failure = ledger.render(10_000).split("\n\n")
    assert commands.splitlines() == [
        "## Commands run",
        OK_LEGEND,
        "ls -la src",
        "pytest -q tests/test_a.py (failed, exit 1)",
        "make build (2 runs)",
    ]
    assert tools.splitlines() == ["## Other tool calls", OK_LEGEND, 'lookup({"id": 7})']
    assert failure.startswith("## Most recent failure\n- `pytest -q tests/test_a.py` failed")
    # Outside the log (an extractive summarizer's own list) an item still carries its mark.
    assert [run.item() for run in ledger.runs if run.command][-1] == "make build ✓ (2 runs)"


def test_an_earlier_log_s_unmarked_item_is_superseded_by_the_call_s_next_run() -> None:
    """The extractive summarizer reads a checkpoint's log back: an unmarked item names its call."""
    run = Shell()
    first = Ledger().update([*run("make build", "ok"), *run("ls", "a.py")]).render(10_000)
    retry = run("make build", "make: *** [all] Error 2", code=2)
    text = ExtractiveSummarizer()(
        SummaryRequest(
            messages=tuple(retry),
            prompt_messages=(),
            previous_summary=first,
            instructions=None,
            kind="history",
            max_tokens=4096,
        )
    )
    commands = text.split("## Commands run\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # The older "make build" is gone: the call shows its last run only.
    assert commands == ["- ls", "- make build (failed, exit 2)", "  - make: *** [all] Error 2"]
    assert OK_LEGEND not in text  # the legend is no item


def test_a_call_opening_like_markup_keeps_a_bullet_and_is_read_back_as_a_call() -> None:
    """A command opening with a comment or a dash would read as a heading or a list item."""
    run = Shell()
    messages = [*run("# check the parser\\nls -la src", "a.py"), *run("- x", "", code=2)]
    ledger = Ledger().update(messages)
    commands = ledger.render(10_000).split("\n\n")[0]
    assert commands.splitlines()[2:] == ["- # check the parser …", "- - x (exit 2, no output)"]
    assert without_ledger(f"## Goal\n- a\n\n{commands}") == "## Goal\n- a"  # no stray heading
    text = ExtractiveSummarizer()(
        SummaryRequest(
            messages=tuple(run("ls", "a.py")),
            prompt_messages=(),
            previous_summary=commands,
            instructions=None,
            kind="history",
            max_tokens=4096,
        )
    )
    assert "## check the parser" not in text  # no section made of the comment
    assert "- # check the parser …" in text.splitlines()
