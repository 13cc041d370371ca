"""Reading transcript files of every known shape, writing them back, and clear errors."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from context_engine import ConfigurationError, InvalidMessageError, Message, ThinkingBlock, ToolCall
from context_engine.errors import TranscriptFormatError
from context_engine.formats.anthropic import IS_ERROR_KEY, from_anthropic
from context_engine.formats.openai import from_openai, to_openai
from context_engine.formats.readers import (
    TRANSCRIPT_FORMATS,
    Transcript,
    read_transcript,
    write_transcript,
)
from tests.conftest import load_corpus_dicts

FIXTURES = Path(__file__).parent / "fixtures"

OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    {"role": "assistant", "content": "One file: a.py."},
]

ANTHROPIC_MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "List the files."},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]},
    {"role": "assistant", "content": "One file: a.py."},
]


def jsonl(items: list[Any]) -> str:
    return "".join(json.dumps(item) + "\n" for item in items)


SHAPES: list[tuple[str, str, str, str]] = [
    ("openai JSON array", "t.json", json.dumps(OPENAI), "openai"),
    ("openai JSON array, indented", "t.json", json.dumps(OPENAI, indent=2), "openai"),
    ("openai JSONL", "t.jsonl", jsonl(OPENAI), "openai"),
    (
        "openai JSONL with blank lines",
        "t.jsonl",
        "\n" + jsonl(OPENAI).replace("\n", "\n\n"),
        "openai",
    ),
    (
        "openai messages object",
        "t.json",
        json.dumps({"model": "gpt-4o", "messages": OPENAI}),
        "openai",
    ),
    (
        "openai messages object, indented",
        "t.json",
        json.dumps({"messages": OPENAI}, indent=2),
        "openai",
    ),
    (
        "anthropic body",
        "b.json",
        json.dumps({"model": "claude", "system": "You are terse.", "messages": ANTHROPIC_MESSAGES}),
        "anthropic",
    ),
    (
        "anthropic body, indented",
        "b.json",
        json.dumps({"system": "You are terse.", "messages": ANTHROPIC_MESSAGES}, indent=2),
        "anthropic",
    ),
    ("anthropic messages array", "m.json", json.dumps(ANTHROPIC_MESSAGES), "anthropic"),
    (
        "anthropic messages object",
        "m.json",
        json.dumps({"messages": ANTHROPIC_MESSAGES}),
        "anthropic",
    ),
    ("anthropic JSONL, blocks from line 2", "m.jsonl", jsonl(ANTHROPIC_MESSAGES), "anthropic"),
]

EXPECTED = {
    "openai": from_openai(OPENAI),
    "anthropic": from_anthropic(ANTHROPIC_MESSAGES),
}


@pytest.mark.parametrize(("name", "filename", "text", "kind"), SHAPES, ids=[s[0] for s in SHAPES])
def test_each_shape_is_detected_and_read(
    tmp_path: Path, name: str, filename: str, text: str, kind: str
) -> None:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    transcript = read_transcript(path)
    assert transcript.format == kind
    assert transcript.source == str(path)
    expected = EXPECTED[kind]
    if "system" in text and kind == "anthropic":
        expected = [Message.system("You are terse."), *expected]
    assert list(transcript.messages) == expected


def test_a_one_line_jsonl_file_is_one_message(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n", encoding="utf-8")
    assert read_transcript(path) == Transcript(
        messages=(Message.user("hi"),), format="openai", source=str(path)
    )


def test_the_claude_code_fixture_reads_as_a_conversation() -> None:
    transcript = read_transcript(FIXTURES / "claude_code_session.jsonl")
    assert transcript.format == "claude-code"
    messages = transcript.messages
    # summary, sidechain, snapshot and system lines are skipped; 2 streamed lines are one answer
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    answer = messages[1]
    assert isinstance(answer.content[0], ThinkingBlock)
    assert answer.tool_calls == (
        ToolCall(
            "toolu_01",
            "Bash",
            '{"command": "pytest -x tests/test_parse.py", "description": "Run the parser test"}',
        ),
    )
    assert answer.stop_reason == "tool_use"
    assert answer.usage is not None
    assert answer.usage.input_tokens == 4 + 1200 + 13000
    assert messages[2].tool_call_id == "toolu_01"
    assert messages[2].metadata[IS_ERROR_KEY] is True
    assert messages[0].timestamp == dt.datetime(2025, 7, 14, 9, 30, tzinfo=dt.timezone.utc)


def test_the_codex_fixture_reads_as_a_conversation() -> None:
    transcript = read_transcript(FIXTURES / "codex_rollout.jsonl")
    assert transcript.format == "codex"
    messages = transcript.messages
    assert [m.role for m in messages] == [
        "system",
        "user",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert messages[0].text == "You are a coding agent running in the Codex CLI."
    first_call = messages[3]
    assert first_call.content[0] == ThinkingBlock("**Running the failing test**")
    assert [c.name for c in first_call.tool_calls] == ["shell"]
    assert messages[4].tool_call_id == "call_A1"
    assert "IndexError" in messages[4].text
    # A freeform tool call stays a custom call in OpenAI form.
    (patch,) = to_openai([messages[5]])[0]["tool_calls"]
    assert patch["type"] == "custom"
    assert patch["custom"]["input"].startswith("*** Begin Patch")
    assert messages[-1].text.startswith("Fixed:")


def test_every_corpus_file_reads_as_openai(corpus_path: Path) -> None:
    transcript = read_transcript(corpus_path)
    assert transcript.format == "openai"
    assert len(transcript.messages) == len(load_corpus_dicts(corpus_path))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_written_transcripts_read_back_the_same(tmp_path: Path, kind: str) -> None:
    messages = from_openai(OPENAI)
    path = tmp_path / f"out.{kind}"
    write_transcript(path, messages, format=kind)  # type: ignore[arg-type]
    transcript = read_transcript(path)
    assert transcript.format == kind
    assert list(transcript.messages) == messages
    if kind == "openai":
        assert path.read_text(encoding="utf-8").count("\n") == len(messages)


def test_written_corpus_transcript_round_trips(tmp_path: Path, corpus_path: Path) -> None:
    messages = read_transcript(corpus_path).messages
    path = tmp_path / "copy.jsonl"
    write_transcript(path, messages)
    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == (
        load_corpus_dicts(corpus_path)
    )


def test_an_unknown_write_format_says_which_are_known(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="'openai' or 'anthropic'"):
        write_transcript(tmp_path / "x", [], format="yaml")  # type: ignore[arg-type]


def test_transcripts_are_frozen() -> None:
    transcript = Transcript(messages=[Message.user("a")], format="openai", source="x")
    assert transcript.messages == (Message.user("a"),)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        transcript.format = "anthropic"  # type: ignore[misc]
    assert set(TRANSCRIPT_FORMATS) == {"openai", "anthropic", "claude-code", "codex"}


ERRORS: list[tuple[str, str, int | None, int | None, str]] = [
    ("empty file", "  \n\n", None, None, "is empty"),
    ("not JSON at all", "hello", None, None, "neither JSON nor JSONL (it starts with 'h')"),
    ("broken JSON document", '[{"role": "user",\n', None, None, "is not valid JSON"),
    ("JSON scalar in an array file", "[1", None, None, "is not valid JSON"),
    ("object without messages", '{"model": "x"}', None, None, "without a 'messages' list"),
    (
        "bad JSONL line",
        jsonl(OPENAI[:2]) + "\n{oops\n",
        4,
        None,
        "is not valid JSON",
    ),
    (
        "malformed message in JSONL",
        jsonl(OPENAI[:2]) + "\n" + json.dumps({"role": "tool", "content": "x"}) + "\n",
        4,
        None,
        "tool message without tool_call_id",
    ),
    (
        "malformed anthropic message in JSONL",
        jsonl(ANTHROPIC_MESSAGES[:2]) + json.dumps({"role": "user"}) + "\n",
        3,
        None,
        "message dict has no 'content'",
    ),
    (
        "malformed message in a JSON array",
        json.dumps([*OPENAI[:2], {"role": "robot", "content": "x"}]),
        None,
        2,
        "unknown role 'robot'",
    ),
    (
        "malformed message in an anthropic body",
        json.dumps({"system": "s", "messages": [{"role": "user", "content": 5}]}),
        None,
        0,
        "content must be a str or a list",
    ),
    (
        "JSONL line not an object",
        jsonl([{"role": "user", "content": "a"}, [1]]),
        2,
        None,
        "expected a message dict, got list",
    ),
    ("unknown line shape", jsonl([{"kind": "x"}, {"kind": "y"}]), 1, None, "is not a chat message"),
    (
        "body in a JSONL file",
        jsonl([{"messages": []}, {"messages": []}]),
        1,
        None,
        "holds a whole request body",
    ),
    (
        "claude code line without message",
        jsonl([{"type": "summary", "leafUuid": "u"}, {"type": "user", "uuid": "u2"}]),
        2,
        None,
        "a user line needs a 'message' object",
    ),
    (
        "claude code message malformed",
        jsonl([{"type": "user", "uuid": "u", "message": {"role": "user", "content": 5}}]),
        1,
        None,
        "content must be a str or a list",
    ),
    (
        "codex item malformed",
        jsonl(
            [
                {"timestamp": "t", "type": "session_meta", "payload": {}},
                {"timestamp": "t", "type": "response_item", "payload": {"type": "function_call"}},
            ]
        ),
        2,
        None,
        "a function_call item needs a str 'call_id'",
    ),
    (
        "codex line not an object",
        jsonl([{"timestamp": "t", "type": "session_meta", "payload": {}}, "x"]),
        2,
        None,
        "expected an object",
    ),
]


@pytest.mark.parametrize(
    ("name", "text", "line", "index", "problem"), ERRORS, ids=[e[0] for e in ERRORS]
)
def test_unreadable_files_name_the_file_the_line_and_the_problem(
    tmp_path: Path, name: str, text: str, line: int | None, index: int | None, problem: str
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TranscriptFormatError) as caught:
        read_transcript(path)
    error = caught.value
    assert isinstance(error, InvalidMessageError)
    assert (error.path, error.line, error.index) == (str(path), line, index)
    where = f"line {line}: " if line else f"message {index}: " if index is not None else ""
    assert str(error).startswith(f"{path}: {where}")
    assert problem in str(error)


def test_a_missing_file_raises_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_transcript(tmp_path / "missing.jsonl")
