"""ExtractiveSummarizer: a checkpoint built from the transcript, with no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.messages import (
    ContextSummary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
)
from context_engine.summarize.extractive import (
    DEFAULT_SHELL_TOOLS,
    SECTION_TITLES,
    ExtractiveSummarizer,
)
from context_engine.summarize.files import track_files
from context_engine.summarize.request import (
    Summarizer,
    SummaryKind,
    SummaryRequest,
    parse_summary_text,
)
from tests.conftest import load_corpus_dicts

summarize = ExtractiveSummarizer()


def request(
    messages: list[Message],
    *,
    previous: str | None = None,
    instructions: str | None = None,
    kind: SummaryKind = "history",
    max_tokens: int = 4096,
) -> SummaryRequest:
    return SummaryRequest(
        messages=tuple(messages),
        prompt_messages=(),
        previous_summary=previous,
        instructions=instructions,
        kind=kind,
        max_tokens=max_tokens,
    )


def sections(text: str) -> dict[str, list[str]]:
    """The checkpoint's sections: heading -> first lines of its items."""
    found: dict[str, list[str]] = {}
    items: list[str] = []
    for line in text.splitlines():
        if line.startswith("## "):
            items = found.setdefault(line[3:], [])
        elif line.startswith("- "):
            items.append(line[2:])
    return found


def details(text: str) -> list[str]:
    """The indented detail lines under items."""
    return [line[4:] for line in text.splitlines() if line.startswith("  - ")]


class Calls:
    """Builds assistant tool calls with sequential ids."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, name: str, result: str | None = None, **arguments: object) -> list[Message]:
        self.count += 1
        call_id = f"call{self.count}"
        messages = [Message.assistant(None, [ToolCall(call_id, name, json.dumps(arguments))])]
        if result is not None:
            messages.append(Message.tool(call_id, result))
        return messages


def bug_fix_session() -> list[Message]:
    run = Calls()
    return [
        Message.user(
            "Fix the date parser in utils/dates.py. Don't change the public API. "
            "The tests should pass on Python 3.10."
        ),
        *run("read_file", "def parse(value): ...", path="utils/dates.py"),
        *run("read_file", "[tool]\nname='x'", path="pyproject.toml"),
        *run(
            "bash",
            "<returncode>1</returncode>\n<output>\n"
            "tests/test_dates.py::test_iso FAILED\n"
            "E   AssertionError: expected 2024-01-01\n"
            "FAILED tests/test_dates.py::test_iso - AssertionError\n"
            "1 failed, 4 passed\n</output>",
            command="pytest -q tests/test_dates.py",
        ),
        Message.assistant("The root cause is that offsets are dropped. I'll keep the API as is."),
        *run("str_replace_editor", "edited", command="str_replace", path="utils/dates.py"),
        *run(
            "bash", "<returncode>0</returncode>\n<output>\n5 passed\n</output>", command="pytest -q"
        ),
        Message.assistant("All tests pass now. TODO: add a test for negative offsets."),
        Message.user("Great. Now also support ISO week dates."),
        *run("lookup_calendar", '{"weeks": 52}', year=2024),
    ]


def test_each_section_is_extracted_from_a_hand_built_session() -> None:
    """Goal, constraints, files, commands, tools, last failure, decisions, progress, next steps."""
    text = summarize(request(bug_fix_session()))
    found = sections(text)
    assert list(found) == [
        "Goal", "Constraints", "Files modified", "Files read", "Commands run",
        "Other tool calls", "Most recent failure", "Decisions", "Latest progress", "Next steps",
    ]  # fmt: skip
    assert found["Goal"] == [
        "Fix the date parser in utils/dates.py. Don't change the public API. "
        "The tests should pass on Python 3.10.",
        "Great. Now also support ISO week dates.",
    ]
    assert found["Constraints"] == [
        "Don't change the public API.",
        "The tests should pass on Python 3.10.",
    ]
    assert found["Files modified"] == ["utils/dates.py"]
    assert found["Files read"] == ["pyproject.toml"]
    assert found["Commands run"] == [
        "pytest -q tests/test_dates.py (failed, exit 1)",
        "pytest -q ✓",
    ]
    assert details(text) == ["E AssertionError: expected 2024-01-01"]
    assert (
        "## Most recent failure\n"
        "- `pytest -q tests/test_dates.py` failed with:\n"
        "    tests/test_dates.py::test_iso FAILED\n"
        "    E   AssertionError: expected 2024-01-01\n"
        "    FAILED tests/test_dates.py::test_iso - AssertionError\n"
        "    1 failed, 4 passed\n\n"
    ) in text
    assert found["Other tool calls"] == ['lookup_calendar({"year": 2024}) ✓']
    assert found["Decisions"] == [
        "The root cause is that offsets are dropped.",
        "I'll keep the API as is.",
    ]
    assert found["Latest progress"] == [
        "The root cause is that offsets are dropped. I'll keep the API as is.",
        "All tests pass now. TODO: add a test for negative offsets.",
    ]
    assert found["Next steps"] == [
        "TODO: add a test for negative offsets.",
        "Still open: Great. Now also support ISO week dates.",
    ]


def test_the_result_is_a_valid_checkpoint_text() -> None:
    """The answer passes `parse_summary_text` unchanged and fits the `Summarizer` type."""
    summarizer: Summarizer = summarize
    text = summarizer(request(bug_fix_session()))
    assert isinstance(text, str)
    assert parse_summary_text(text) == text


def test_same_request_gives_the_same_text() -> None:
    """Deterministic: equal requests, and separate instances, give identical text."""
    first = summarize(request(bug_fix_session(), instructions="failing tests"))
    again = ExtractiveSummarizer()(request(bug_fix_session(), instructions="failing tests"))
    assert first == again


@pytest.mark.parametrize(
    ("user_text", "expected"),
    [
        ("You must not edit the migrations.", "You must not edit the migrations."),
        ("Never push to main! Thanks.", "Never push to main!"),
        ("Please do not add dependencies.", "Please do not add dependencies."),
        ("Always run the linter first?", "Always run the linter first?"),
        ("- Keep the changelog updated", "Keep the changelog updated"),
        ("Avoid global state. Use fixtures.", "Avoid global state."),
        ("请不要修改测试文件。其他都可以。", "请不要修改测试文件。"),
        ("日志必须保留原始格式\uff01谢谢", "日志必须保留原始格式\uff01"),  # fullwidth !
        ("本番環境には絶対に触れないでください。", "本番環境には絶対に触れないでください。"),
        ("테스트는 반드시 통과해야 합니다.", "테스트는 반드시 통과해야 합니다."),
    ],
    ids=[
        "must-not", "never", "do-not", "always", "keep-bullet", "avoid",
        "chinese-bu-yao", "chinese-bi-xu", "japanese-naide", "korean-bandeusi",
    ],
)  # fmt: skip
def test_constraints_are_the_users_rule_sentences_kept_whole(user_text: str, expected: str) -> None:
    """A sentence with a rule word is a constraint, whole; the sentences around it are not."""
    found = sections(summarize(request([Message.user(user_text)])))
    assert found["Constraints"] == [expected]


def test_constraints_ignore_code_blocks_and_plain_sentences() -> None:
    """Code in fences and sentences without a rule word are not constraints."""
    text = "Here is the code.\n```python\nassert x should be y  # never\n```\nIt crashes."
    assert "Constraints" not in sections(summarize(request([Message.user(text)])))


def test_failed_command_without_exit_code_is_told_by_traceback_or_error_line() -> None:
    """Without an exit code, a traceback or an error-like first/last line means failure."""
    run = Calls()
    messages = [
        Message.user("go"),
        *run("bash", 'Traceback (most recent call last):\n  File "x"\nKeyError: 3', command="py x"),
        *run("bash", "bash: foo: command not found", command="foo"),
        *run("bash", "line 1\nprint('error handling')\nline 3", command="cat handler.py"),
        *run("bash", "Ran 3 tests\n0 errors", command="check"),
    ]
    found = sections(summarize(request(messages)))
    assert found["Commands run"] == [
        "py x (failed)",
        "foo (failed)",
        "cat handler.py ✓",
        "check ✓",
    ]


def test_a_failed_command_quotes_its_key_line_and_the_last_failure_its_output() -> None:
    """The command list quotes one key line; the last failure keeps its output's last lines."""
    run = Calls()
    output = "\n".join(f"ERROR in step {n}" for n in range(10))
    messages = [Message.user("go"), *run("bash", f"exit code 2\n{output}", command="make")]
    text = summarize(request(messages))
    assert sections(text)["Commands run"] == ["make (failed, exit 2)"]
    assert details(text) == ["ERROR in step 0"]
    # The key line is quoted first when the output's last lines do not hold it.
    last = "\n".join(f"    ERROR in step {n}" for n in range(4, 10))
    assert f"- `make` failed with:\n    ERROR in step 0\n    …\n{last}" in text


@pytest.mark.parametrize(
    ("name", "arguments", "label"),
    [
        ("bash", {"command": "ls -la"}, "ls -la (no result yet)"),
        ("execute_bash", {"command": "cat <<E >x\nbody\nE"}, "cat <<E >x … (no result yet)"),
        ("shell", {"command": ["bash", "-lc", "make test"]}, "make test (no result yet)"),
        ("shell", {"command": ["git", "status"]}, "git status (no result yet)"),
        ("run_tests", {}, "run_tests({}) (no result yet)"),
        ("bash", {"command": "echo `date`"}, "echo `date` (no result yet)"),
    ],
    ids=["plain", "multi-line-first-line", "codex-argv", "argv", "no-command-argument", "backtick"],
)  # fmt: skip
def test_shell_commands_are_labelled_by_their_command(
    name: str, arguments: dict[str, object], label: str
) -> None:
    """The label is the command's first line; a pending call says so."""
    messages = [Message.user("go"), *Calls()(name, None, **arguments)]
    assert sections(summarize(request(messages)))["Commands run"] == [label]


def test_file_tools_are_not_listed_as_other_tool_calls() -> None:
    """File tools show up under the file sections only."""
    run = Calls()
    messages = [Message.user("go"), *run("read_file", "x", path="a.py"), *run("submit", "done")]
    found = sections(summarize(request(messages)))
    assert found["Other tool calls"] == ["submit({}) ✓"]
    assert found["Files read"] == ["a.py"]


def test_custom_shell_tools_are_honoured() -> None:
    """A caller's ``shell_tools`` decides what counts as a command."""
    run = Calls()
    messages = [Message.user("go"), *run("sandbox", "ok", command="uname -a")]
    custom = ExtractiveSummarizer(shell_tools={"sandbox"})
    assert sections(custom(request(messages)))["Commands run"] == ["uname -a ✓"]
    assert "sandbox" not in DEFAULT_SHELL_TOOLS


def test_latest_progress_keeps_the_last_three_assistant_texts() -> None:
    """Only the newest assistant texts describe the current state."""
    messages = [Message.user("go")] + [Message.assistant(f"step {n} done") for n in range(6)]
    found = sections(summarize(request(messages)))
    assert found["Latest progress"] == ["step 3 done", "step 4 done", "step 5 done"]


@pytest.mark.parametrize(
    ("tail", "still_open"),
    [
        ([Message.assistant("Here is the answer.")], False),
        ([], True),
        ([Message.assistant("Checking.", [ToolCall("p1", "bash", '{"command": "ls"}')])], True),
    ],
    ids=["answered", "no-reply-yet", "reply-still-calling-tools"],
)
def test_the_latest_request_is_open_until_a_final_answer_follows(
    tail: list[Message], still_open: bool
) -> None:
    """A user request with no final assistant text after it is a next step."""
    messages = [Message.user("Rename the module."), *tail]
    steps = sections(summarize(request(messages))).get("Next steps", [])
    assert ("Still open: Rename the module." in steps) is still_open


def test_checkbox_and_next_lines_are_next_steps() -> None:
    """Unchecked boxes, TODO/FIXME and ``Next:`` lines are collected."""
    plan = "Plan:\n- [x] done already\n- [ ] write docs\nNext: release\nFIXME the flaky test"
    messages = [Message.user("go"), Message.assistant(plan), Message.assistant("Done.")]
    assert sections(summarize(request(messages)))["Next steps"] == [
        "- [ ] write docs",
        "Next: release",
        "FIXME the flaky test",
    ]


def test_an_update_keeps_every_fact_of_the_previous_checkpoint() -> None:
    """Incremental: old items stay, new ones follow, duplicates are dropped.

    Latest progress is the exception: it says where the work stands now.
    """
    first = summarize(request(bug_fix_session()))
    run = Calls()
    later = [
        Message.user("Also never touch the CLI."),
        *run("Write", "ok", file_path="utils/weeks.py"),
        *run("Edit", "ok", file_path="pyproject.toml"),
        *run("bash", "<returncode>0</returncode>", command="pytest -q"),
        Message.assistant("Week dates are supported."),
    ]
    updated = summarize(request(later, previous=first))
    old, new = sections(first), sections(updated)
    for title, items in old.items():
        for item in items:
            if title == "Files read" and item == "pyproject.toml":
                continue  # modified later: it moved to "Files modified"
            if title == "Latest progress":
                continue  # replaced by the newer progress, asserted below
            assert item in new[title], (title, item)
    assert new["Files modified"] == ["utils/dates.py", "utils/weeks.py", "pyproject.toml"]
    assert "Files read" not in new  # its only file was modified since
    assert new["Commands run"].count("pytest -q ✓") == 1
    assert "Also never touch the CLI." in new["Constraints"]
    assert new["Latest progress"] == ["Week dates are supported."]


def test_an_update_keeps_sections_it_does_not_write_itself() -> None:
    """An LLM-written checkpoint's own sections and loose text survive an update."""
    previous = "The user is porting the app.\n\n## Key facts\n- DB is Postgres 15\n  - on port 5433"
    updated = summarize(request([Message.user("Continue.")], previous=previous))
    assert "## Key facts\n- DB is Postgres 15\n  - on port 5433" in updated
    assert "## Earlier notes\n- The user is porting the app." in updated


def test_summarizing_its_own_output_again_is_stable() -> None:
    """With nothing new, an update reproduces the previous checkpoint."""
    first = summarize(request(bug_fix_session()))
    assert summarize(request([], previous=first)) == first


def test_a_checkpoint_among_the_messages_is_merged_like_a_previous_summary() -> None:
    """A `ContextSummary` in the messages contributes its text and its file lists."""
    checkpoint = ContextSummary(
        summary="## Goal\n- Port the app", read_files=("a.py",), modified_files=("b.py",)
    )
    found = sections(summarize(request([checkpoint, Message.user("Go on.")])))
    assert found["Goal"] == ["Port the app", "Go on."]
    assert found["Files read"] == ["a.py"]
    assert found["Files modified"] == ["b.py"]


def test_instructions_put_a_focus_line_on_top_and_list_matching_lines() -> None:
    """The focus comes first; lines matching it are quoted."""
    text = summarize(request(bug_fix_session(), instructions="Keep the failing test names"))
    assert text.startswith("## Focus requested by the user\n- Keep the failing test names\n")
    matching = sections(text)["Lines matching the focus"]
    assert "FAILED tests/test_dates.py::test_iso - AssertionError" in matching
    assert all("5 passed" not in line for line in matching)


def test_matching_items_are_kept_when_the_text_must_shrink() -> None:
    """Under a tight budget, commands matching the focus outlive newer ones that do not."""
    run = Calls()
    messages = [Message.user("go"), *run("bash", "ok", command="deploy staging")]
    for n in range(40):
        messages += run("bash", "ok", command=f"echo step {n:02d} " + "x" * 40)
    focused = summarize(request(messages, instructions="staging deploy", max_tokens=150))
    plain = summarize(request(messages, max_tokens=150))
    assert "deploy staging ✓" in focused
    assert "deploy staging ✓" not in plain
    assert len(focused) <= 600


def test_previous_focus_is_kept_across_updates() -> None:
    """A focus asked for earlier stays on top of later checkpoints."""
    first = summarize(request(bug_fix_session(), instructions="failing tests"))
    updated = summarize(request([Message.user("next")], previous=first))
    assert updated.startswith("## Focus requested by the user\n- failing tests\n")


def big_session(steps: int) -> list[Message]:
    run = Calls()
    messages = [Message.user("Refactor everything. " + "Keep the API stable. " * 30)]
    for n in range(steps):
        messages += run("read_file", "x", path=f"src/module_{n:03d}.py")
        messages += run("bash", f"exit code {n % 2}\nerror in test_{n}", command=f"pytest -k t{n}")
        messages.append(Message.assistant(f"Step {n}: the fix is to rename helper_{n}. " * 5))
    messages += run("Write", "ok", file_path="src/new_api.py")
    return messages


@pytest.mark.parametrize("max_tokens", [1, 10, 60, 250, 1000, 4096])
def test_the_text_stays_under_four_characters_per_token(max_tokens: int) -> None:
    """However long the transcript, the checkpoint fits ``4 * max_tokens`` characters."""
    text = summarize(request(big_session(120), max_tokens=max_tokens))
    assert 0 < len(text) <= 4 * max_tokens


def test_clipped_lists_say_how_many_items_they_hide() -> None:
    """A section that hides items ends with ``(+N more)``, N counting them exactly."""
    text = summarize(request(big_session(120), max_tokens=4096))
    found = sections(text)
    assert found["Files modified"] == ["src/new_api.py"]
    read = found["Files read"]
    assert read[-1].startswith("(+")
    assert len(read) - 1 + int(read[-1][2:].split()[0]) == 120
    commands = found["Commands run"]
    assert len(commands) - 1 + int(commands[-1][2:].split()[0]) == 120


def test_files_modified_outlast_everything_else_under_a_small_budget() -> None:
    """Modified files are the last items hidden."""
    text = summarize(request(big_session(50), max_tokens=80))
    assert "src/new_api.py" in text
    assert len(text) <= 320


def test_long_items_are_clipped_at_item_chars_without_breaking_characters() -> None:
    """A long CJK request is clipped by characters, ending in an ellipsis."""
    request_text = "请把所有日期都转换成协调世界时" * 40
    custom = ExtractiveSummarizer(item_chars=50)
    goal = sections(custom(request([Message.user(request_text)])))["Goal"]
    assert goal == [request_text[:49] + "…"]


def test_turn_prefix_gives_a_shorter_form() -> None:
    """A turn prefix has no goal or constraints and fewer items than a history checkpoint."""
    messages = big_session(30)[1:]
    history = summarize(request(messages))
    prefix = summarize(request(messages, kind="turn_prefix"))
    found = sections(prefix)
    assert "Goal" not in found
    assert "Constraints" not in found
    assert len(found["Latest progress"]) == 2
    assert len(prefix) < len(history)


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [Message.system("You are terse.")],
        [Message.assistant("Thinking out loud.")],
        [Message.user("")],
    ],
    ids=["no-messages", "system-only", "no-user-message", "empty-user-text"],
)
def test_inputs_with_nothing_to_extract_still_give_text(messages: list[Message]) -> None:
    """The checkpoint is never empty."""
    text = summarize(request(messages))
    assert text.strip()
    assert parse_summary_text(text) == text


def test_only_tool_calls_give_command_and_file_sections() -> None:
    """A transcript of bare tool calls (a turn prefix, say) still summarizes."""
    run = Calls()
    messages = [*run("bash", "ok", command="ls"), *run("write_file", "ok", path="x.txt")]
    found = sections(summarize(request(messages)))
    assert list(found) == ["Files modified", "Commands run"]


def test_thinking_blocks_and_images_are_not_read() -> None:
    """Reasoning and image data never reach the checkpoint."""
    messages = [
        Message(
            "user",
            (
                TextBlock("Describe this chart."),
                ImageBlock(data="aGVsbG8=", media_type="image/png"),
            ),
        ),
        Message("assistant", (ThinkingBlock("secret chain of thought"), TextBlock("A bar chart."))),
    ]
    text = summarize(request(messages))
    assert "secret" not in text
    assert "aGVsbG8" not in text
    assert sections(text)["Latest progress"] == ["A bar chart."]


def test_section_titles_are_the_documented_ones() -> None:
    """`SECTION_TITLES` lists every heading the summarizer writes, focus first."""
    text = summarize(request(bug_fix_session(), instructions="dates"))
    assert set(sections(text)) <= set(SECTION_TITLES)
    assert SECTION_TITLES[0] == "Focus requested by the user"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"item_chars": 10}, "item_chars"),
        ({"item_chars": True}, "item_chars"),
        ({"shell_tools": "bash"}, "shell_tools"),
        ({"file_tools": {"read_file": "peek"}}, "read_file"),
    ],
    ids=["item-chars-too-small", "item-chars-bool", "shell-tools-string", "bad-file-rule"],
)
def test_bad_configuration_fails_at_construction(options: dict[str, object], message: str) -> None:
    """A bad option raises `ConfigurationError` naming it."""
    with pytest.raises(ConfigurationError, match=message):
        ExtractiveSummarizer(**options)  # type: ignore[arg-type]


def test_corpus_checkpoints_name_every_modified_file_within_the_bound(corpus_path: Path) -> None:
    """On real transcripts: every modified file is named, the size bound holds, text is stable."""
    messages = tuple(from_openai(load_corpus_dicts(corpus_path)))
    summary_request = SummaryRequest(messages=messages, prompt_messages=())
    text = ExtractiveSummarizer()(summary_request)
    assert 0 < len(text) <= 4 * summary_request.max_tokens
    for path in track_files(messages).modified:
        assert path in text
    assert ExtractiveSummarizer()(summary_request) == text


def test_files_edited_through_the_shell_are_listed_as_modified() -> None:
    """The issue's repro: a fix made with ``sed -i`` shows under "Files modified"."""
    sed = ToolCall("c1", "bash", json.dumps({"command": "sed -i 's/a/b/' astropy/utils/shapes.py"}))
    view = [
        Message.user("Fix the shapes bug."),
        Message.assistant(tool_calls=[sed]),
        Message.tool("c1", ""),
    ]
    found = sections(summarize(request(view)))
    assert found["Files modified"] == ["astropy/utils/shapes.py"]
    assert found["Commands run"] == ["sed -i 's/a/b/' astropy/utils/shapes.py ✓"]
