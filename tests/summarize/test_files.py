"""File tracking from tool-call arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.messages import ContextSummary, Message, ToolCall
from context_engine.summarize.files import (
    DEFAULT_FILE_TOOLS,
    FileActivity,
    FileToolRule,
    check_file_tools,
    files_in_call,
    merge,
    track_files,
)
from tests.conftest import load_corpus_dicts

ENVELOPE = """*** Begin Patch
*** Update File: src/app.py
@@
-old
+new
+++ not a header inside an envelope
*** Add File: src/new.py
+print("hi")
*** Delete File: src/old.py
*** End Patch"""

DIFF = """--- a/lib/core.py
+++ b/lib/core.py
@@ -1 +1 @@
-a
+b
--- /dev/null
+++ b/lib/added.py
"""


def call(name: str, arguments: object, call_id: str = "c1") -> ToolCall:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(call_id, name, raw)


def session(*calls: ToolCall) -> list[Message]:
    """Each call in its own assistant message, answered by a short result."""
    messages: list[Message] = [Message.user("go")]
    for index, tool_call in enumerate(calls):
        numbered = ToolCall(f"call{index}", tool_call.name, tool_call.arguments)
        messages += [Message.assistant(None, [numbered]), Message.tool(f"call{index}", "done")]
    return messages


@pytest.mark.parametrize(
    ("tool_call", "read", "modified"),
    [
        (call("read_file", {"path": "a.py"}), ("a.py",), ()),
        (call("Read", {"file_path": "/repo/a.py"}), ("/repo/a.py",), ()),
        (call("view", {"path": "a.py"}), ("a.py",), ()),
        (call("open", {"path": "setup.py", "line_number": 3}), ("setup.py",), ()),
        (call("read_multiple_files", {"paths": ["a.py", "b.py"]}), ("a.py", "b.py"), ()),
        (call("write_file", {"path": "out.txt", "content": "x"}), (), ("out.txt",)),
        (call("Write", {"file_path": "w.py", "content": ""}), (), ("w.py",)),
        (call("Edit", {"file_path": "e.py", "old_string": "a", "new_string": "b"}), (), ("e.py",)),
        (call("MultiEdit", {"file_path": "m.py", "edits": []}), (), ("m.py",)),
        (call("NotebookEdit", {"notebook_path": "n.ipynb"}), (), ("n.ipynb",)),
        (call("edit_file", {"target_file": "t.py"}), (), ("t.py",)),
        (call("create", {"filename": "reproduce.py"}), (), ("reproduce.py",)),
        (call("str_replace_editor", {"command": "view", "path": "v.py"}), ("v.py",), ()),
        (call("str_replace_editor", {"command": "create", "path": "c.py"}), (), ("c.py",)),
        (call("str_replace_editor", {"command": "str_replace", "path": "s.py"}), (), ("s.py",)),
        (call("str_replace_editor", {"command": "insert", "path": "i.py"}), (), ("i.py",)),
        (call("str_replace_based_edit_tool", {"command": "undo_edit", "path": "u"}), (), ("u",)),
        (call("apply_patch", {"input": ENVELOPE}), (), ("src/app.py", "src/new.py", "src/old.py")),
        (call("apply_patch", ENVELOPE), (), ("src/app.py", "src/new.py", "src/old.py")),
        (call("apply_patch", {"patch": DIFF}), (), ("lib/core.py", "lib/added.py")),
    ],
    ids=[
        "read_file", "claude-read", "view", "swe-agent-open", "paths-list", "write_file",
        "claude-write", "claude-edit", "claude-multiedit", "notebook-edit", "cursor-target-file",
        "swe-agent-create-filename", "editor-view-reads", "editor-create-modifies",
        "editor-str-replace-modifies", "editor-insert-modifies", "editor-undo-modifies",
        "apply-patch-envelope", "apply-patch-freeform-raw-text", "unified-diff",
    ],
)  # fmt: skip
def test_a_file_tool_call_is_tracked_by_what_it_does(
    tool_call: ToolCall, read: tuple[str, ...], modified: tuple[str, ...]
) -> None:
    """Each common file tool counts its paths as read or modified."""
    activity = track_files(session(tool_call))
    assert activity == FileActivity(read=read, modified=modified)


@pytest.mark.parametrize(
    "tool_call",
    [
        call("grep", {"pattern": "def", "path": "src"}),
        call("glob", {"pattern": "**/*.py", "path": "."}),
        call("find_file", {"file_name": "fields.py", "dir": "src"}),
        call("bash", {"command": "ls src && grep -rn 'def main' src/ && python run.py"}),
        call("get_weather", {"path": "not-a-file-tool.py"}),
        call("str_replace_editor", {"command": "explode", "path": "x.py"}),
        call("str_replace_editor", {"path": "no-command.py"}),
    ],
    ids=[
        "grep-is-search", "glob-is-search", "find-file-is-search", "shell-search-not-tracked",
        "unknown-tool", "editor-unknown-command", "editor-without-command",
    ],
)  # fmt: skip
def test_calls_that_do_not_read_or_modify_a_file_are_not_tracked(tool_call: ToolCall) -> None:
    """Searching (a shell's too), unknown tools and unknown editor commands name no file."""
    assert track_files(session(tool_call)) == FileActivity()


@pytest.mark.parametrize(
    "arguments",
    [
        "not json {",
        "[1, 2]",
        '"just a string"',
        "null",
        json.dumps({"path": 42}),
        json.dumps({"path": ["a.py"]}),
        json.dumps({"path": "   "}),
        json.dumps({"path": "two\nlines.py"}),
        json.dumps({"path": "x" * 5000}),
        json.dumps({"paths": "a.py"}),
        json.dumps({"paths": [1, None]}),
        "[" * 100_000,
    ],
    ids=[
        "not-json", "json-list", "json-string", "json-null", "path-not-str", "path-list",
        "blank-path", "newline-in-path", "overlong-path", "paths-not-list", "paths-not-str",
        "deeply-nested",
    ],
)  # fmt: skip
def test_malformed_arguments_are_ignored_without_raising(arguments: str) -> None:
    """Arguments that are not a JSON object with string paths add nothing and never raise."""
    assert track_files(session(call("write_file", arguments))) == FileActivity()


def test_files_keep_first_seen_order_and_a_modified_file_is_not_listed_as_read() -> None:
    """Order is first-seen; read then modified moves a file to ``modified`` only."""
    messages = session(
        call("read_file", {"path": "b.py"}),
        call("read_file", {"path": "a.py"}),
        call("read_file", {"path": "b.py"}),
        call("write_file", {"path": "c.py"}),
        call("Edit", {"file_path": "a.py"}),
        call("read_file", {"path": "c.py"}),
        call("read_file", {"path": "d.py"}),
    )
    activity = track_files(messages)
    assert activity.read == ("b.py", "d.py")
    assert activity.modified == ("c.py", "a.py")


def test_same_messages_give_the_same_activity() -> None:
    """Tracking is deterministic."""
    messages = session(call("read_file", {"path": "z.py"}), call("write_file", {"path": "y.py"}))
    assert track_files(messages) == track_files(list(messages))


def test_every_call_counts_even_without_a_result_or_with_an_error_result() -> None:
    """A pending call and a call whose result is an error both count (documented decision)."""
    messages = [
        Message.user("go"),
        Message.assistant(None, [call("write_file", {"path": "failed.py"}, "w1")]),
        Message.tool("w1", "Error: permission denied"),
        Message.assistant(None, [call("write_file", {"path": "pending.py"}, "w2")]),
    ]
    assert track_files(messages).modified == ("failed.py", "pending.py")


def test_paths_are_kept_as_written_apart_from_surrounding_whitespace() -> None:
    """Paths are not normalised: ``./a.py`` and ``a.py`` are two entries."""
    messages = session(
        call("read_file", {"path": "  ./a.py "}), call("read_file", {"path": "a.py"})
    )
    assert track_files(messages).read == ("./a.py", "a.py")


def test_custom_tools_mapping_with_a_command_dependent_rule() -> None:
    """A caller's mapping replaces the defaults; a rule may depend on ``command``."""
    tools: dict[str, FileToolRule] = {
        "notes": {"show": "read", "save": "modified"},
        "fetch": "read",
    }
    messages = session(
        call("notes", {"command": "show", "path": "n1.md"}),
        call("notes", {"command": "save", "path": "n2.md"}),
        call("fetch", {"filename": "f.txt"}),
        call("read_file", {"path": "default-tool.py"}),
    )
    assert track_files(messages, tools) == FileActivity(
        read=("n1.md", "f.txt"), modified=("n2.md",)
    )


def test_extending_the_defaults_keeps_them() -> None:
    """``{**DEFAULT_FILE_TOOLS, ...}`` adds a tool without losing the others."""
    tools = {**DEFAULT_FILE_TOOLS, "slurp": "read"}
    messages = session(call("slurp", {"path": "s.py"}), call("Write", {"file_path": "w.py"}))
    assert track_files(messages, tools) == FileActivity(read=("s.py",), modified=("w.py",))


def test_a_checkpoint_among_the_messages_contributes_its_file_lists() -> None:
    """A `ContextSummary` stands for the history it replaced, files included."""
    checkpoint = ContextSummary(
        summary="s", read_files=("old.py", "x.py"), modified_files=("m.py",)
    )
    messages = [
        checkpoint,
        *session(call("read_file", {"path": "new.py"}), call("Edit", {"file_path": "x.py"})),
    ]
    activity = track_files(messages)
    assert activity.read == ("old.py", "new.py")
    assert activity.modified == ("m.py", "x.py")


def test_files_in_call_tells_file_tools_from_others() -> None:
    """`files_in_call` gives the action and paths, or None for a tool that is not a file tool."""
    assert files_in_call(call("read_file", {"path": "a.py"})) == ("read", ("a.py",))
    assert files_in_call(call("write_file", {"content": "no path"})) == ("modified", ())
    assert files_in_call(call("bash", {"command": "ls"})) is None


def test_shell_and_python_writes_count_as_modified() -> None:
    """Edits through bash and IPython land in the modified list, in call order."""
    activity = track_files(
        session(
            call("read_file", {"path": "/testbed/astropy/utils/shapes.py"}),
            call("bash", {"command": "cd /testbed && sed -i 's/a/b/' astropy/utils/shapes.py"}),
            call("execute_bash", {"command": "cat > notes.txt <<'EOF'\nhi\nEOF"}),
            call("execute_ipython_cell", {"code": "edit_file_by_replace('/w/App.css', 'a', 'b')"}),
            call("bash", {"command": "grep -rn x src/"}),
        )
    )
    assert activity == FileActivity(
        modified=("/testbed/astropy/utils/shapes.py", "notes.txt", "/w/App.css")
    )


def test_files_a_shell_command_shows_count_as_read() -> None:
    """An agent reading through bash (``cat``, ``sed -n``, ``grep`` on a file) has read the file."""
    messages = session(
        call("bash", {"command": "cd /repo && cat setup.cfg && sed -n '1,40p' pkg/mod.py"}),
        call("bash", {"command": "cd /repo && grep -n run pkg/cli.py && sed -i s/a/b/ pkg/mod.py"}),
    )
    # The file read and then edited is listed as modified only.
    assert track_files(messages) == FileActivity(
        read=("/repo/setup.cfg", "/repo/pkg/cli.py"), modified=("/repo/pkg/mod.py",)
    )


def test_a_script_written_in_one_call_and_run_in_a_later_one_counts_its_writes() -> None:
    """The script's text is remembered across calls of the same history."""
    script = "cat > fix.py << 'EOF'\nwith open('src/f.py', 'w') as f:\n    f.write('x')\nEOF"
    activity = track_files(
        session(call("bash", {"command": script}), call("bash", {"command": "python fix.py"}))
    )
    assert activity.modified == ("fix.py", "src/f.py")
    assert track_files(session(call("bash", {"command": "python fix.py"}))) == FileActivity()


def test_a_shell_tool_mapped_by_the_caller_is_parsed() -> None:
    """Any tool name can be marked ``"shell"``; an unmapped one is not parsed."""
    tools: dict[str, FileToolRule] = {"my_sh": "shell"}
    touch = call("my_sh", {"cmd": "touch a.py"})
    assert track_files(session(touch), tools).modified == ("a.py",)
    assert track_files(session(call("other", {"cmd": "touch a.py"})), tools) == FileActivity()
    assert files_in_call(touch, tools) == ("modified", ("a.py",))


def test_merge_keeps_older_entries_first_and_moves_modified_files() -> None:
    """Older lists come first; a file modified later leaves the read list; no duplicates."""
    activity = FileActivity(read=("b.py", "c.py"), modified=("a.py", "d.py"))
    merged = merge(("a.py", "b.py", "e.py"), ("z.py", "d.py"), activity)
    assert merged.read == ("b.py", "e.py", "c.py")
    assert merged.modified == ("z.py", "d.py", "a.py")


def test_merge_with_nothing_new_returns_the_older_lists() -> None:
    """Merging an empty activity changes nothing."""
    assert merge(("r.py",), ("m.py",), FileActivity()) == FileActivity(
        read=("r.py",), modified=("m.py",)
    )


@pytest.mark.parametrize(
    "tools",
    [{"x": "write"}, {"x": {"view": "peek"}}, {"x": None}, {"x": {"run": "shell"}}],
    ids=["unknown-action", "unknown-command-action", "none", "shell-inside-a-command-mapping"],
)
def test_check_file_tools_rejects_rules_it_cannot_follow(tools: dict[str, object]) -> None:
    """A bad rule fails with a message that shows the valid forms."""
    with pytest.raises(ConfigurationError, match="'read', 'modified'"):
        check_file_tools(tools)


def test_default_rules_are_valid() -> None:
    """The defaults pass their own check."""
    check_file_tools(DEFAULT_FILE_TOOLS)


def test_corpus_transcripts_track_without_raising(corpus_path: Path) -> None:
    """Every corpus transcript gives clean, deterministic, disjoint file lists."""
    messages = from_openai(load_corpus_dicts(corpus_path))
    activity = track_files(messages)
    assert activity == track_files(messages)
    assert not set(activity.read) & set(activity.modified)
    for path in (*activity.read, *activity.modified):
        assert path
        assert "\n" not in path
    # The lists are valid checkpoint file lists.
    ContextSummary(summary="s", read_files=activity.read, modified_files=activity.modified)


def test_swe_agent_edits_act_on_the_file_the_editor_has_open() -> None:
    """``open f`` / ``create f`` name the file; ``edit 3:5`` modifies it, across stretches."""

    def call(index: int, name: str, command: str) -> Message:
        arguments = json.dumps({"command": command})
        return Message.assistant("", tool_calls=[ToolCall(f"e{index}", name, arguments)])

    first = [
        call(0, "create", "create reproduce.py\n"),
        call(1, "edit", "edit 1:1\nprint(1)\nend_of_edit\n"),
        call(2, "open", "open pkg/handler.py 293\n"),
    ]
    activity = track_files(first)
    assert activity.modified == ("reproduce.py",)
    assert activity.read == ("pkg/handler.py",)
    assert activity.open_file == "pkg/handler.py"
    # The next stretch starts with the editor where the last one left it.
    later = track_files(
        [call(3, "edit", "edit 287:295\n  x = 1\nend_of_edit\n")], open_file="pkg/handler.py"
    )
    assert later.modified == ("pkg/handler.py",)
    assert track_files([call(4, "edit", "edit 1:2\nend_of_edit\n")]).modified == ()
