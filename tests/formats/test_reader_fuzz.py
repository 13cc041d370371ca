"""Thousands of mutated transcripts through the four readers: an error is always a
`TranscriptFormatError` naming the file, never a traceback."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from context_engine.cli import main
from context_engine.errors import TranscriptFormatError
from context_engine.formats.readers import read_transcript

_CALL = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"a": 1}'}}
_OPENAI: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "list"}]},
    {"role": "assistant", "content": None, "tool_calls": [_CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "a\nb"},
    {
        "role": "assistant",
        "content": "done",
        "usage": {"prompt_tokens": 120, "completion_tokens": 4, "total_tokens": 124},
    },
]
_ANTHROPIC: dict[str, Any] = {
    "system": [{"type": "text", "text": "be brief"}],
    "tools": [{"name": "ls", "description": "list", "input_schema": {"type": "object"}}],
    "messages": [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "tool_use", "id": "t1", "name": "ls", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {"type": "text", "text": "a b"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "iVB"},
                        },
                    ],
                }
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "done"}]},
    ],
}
_CLAUDE_CODE: list[dict[str, Any]] = [
    {"type": "user", "sessionId": "s", "uuid": "1", "message": {"role": "user", "content": "hi"}},
    {"type": "system", "subtype": "compact_boundary", "sessionId": "s", "uuid": "2"},
    {
        "type": "user",
        "sessionId": "s",
        "uuid": "3",
        "isCompactSummary": True,
        "message": {"role": "user", "content": "Summary: all good."},
    },
    {
        "type": "assistant",
        "sessionId": "s",
        "uuid": "4",
        "timestamp": "2025-01-01T00:00:00Z",
        "message": {
            "id": "m1",
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "x"}}],
            "usage": {"input_tokens": 50, "output_tokens": 3},
        },
    },
    {
        "type": "user",
        "sessionId": "s",
        "uuid": "5",
        "message": {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "text"}],
        },
    },
    {
        "type": "assistant",
        "sessionId": "s",
        "uuid": "6",
        "isApiErrorMessage": True,
        "message": {"id": "e", "role": "assistant", "content": [{"type": "text", "text": "API"}]},
    },
]
_CODEX: list[dict[str, Any]] = [
    {"timestamp": "2025-01-01T00:00:00Z", "type": "session_meta", "payload": {"instructions": "x"}},
    {
        "timestamp": "2025-01-01T00:00:01Z",
        "type": "response_item",
        "payload": {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "go"}],
        },
    },
    {
        "type": "response_item",
        "payload": {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
    },
    {
        "type": "response_item",
        "payload": {"type": "function_call", "call_id": "f1", "name": "shell", "arguments": "{}"},
    },
    {
        "type": "response_item",
        "payload": {"type": "function_call_output", "call_id": "f1", "output": {"content": "ok"}},
    },
    {
        "type": "response_item",
        "payload": {"type": "custom_tool_call", "call_id": "f2", "name": "patch", "input": "*"},
    },
    {
        "type": "response_item",
        "payload": {"type": "local_shell_call", "call_id": "f3", "action": {"command": ["ls"]}},
    },
    {"type": "event_msg", "payload": {"type": "token_count"}},
]

_ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    3.5,
    10**400,
    float("inf"),
    float("nan"),
    "",
    "\ud800",
    "x" * 300,
    [],
    {},
    [None],
    {"type": "text"},
    {"type": "tool_use"},
    {"type": "image", "source": None},
    [[[[[]]]]],
    "user",
    "assistant",
    "tool",
]


def _jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8")


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _nodes(item, (*path, index))
    return found


def _structural(rng: random.Random, document: Any) -> Any:
    """Replace, delete or duplicate one node of ``document`` (a deep copy)."""
    mutated = copy.deepcopy(document)
    paths = [p for p in _nodes(mutated) if p]
    if not paths:
        return rng.choice(_ODD_VALUES)
    path = rng.choice(paths)
    parent = mutated
    for key in path[:-1]:
        parent = parent[key]
    key = path[-1]
    action = rng.random()
    if action < 0.7:
        parent[key] = rng.choice(_ODD_VALUES)
    elif action < 0.85 and isinstance(parent, dict):
        del parent[key]
    elif isinstance(parent, list):
        parent.insert(key, copy.deepcopy(parent[key]))
    else:
        parent[key] = [parent[key]]
    return mutated


def _bytewise(rng: random.Random, data: bytes) -> bytes:
    """Flip, drop or insert bytes, or cut the file short."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not buffer:
            break
        at = rng.randrange(len(buffer))
        choice = rng.random()
        if choice < 0.4:
            buffer[at] = rng.randrange(256)
        elif choice < 0.6:
            del buffer[at]
        elif choice < 0.8:
            buffer.insert(at, rng.choice(b'{}[]",:\n\\\xff\xc3'))
        else:
            del buffer[at:]
    return bytes(buffer)


_SEEDS: dict[str, Callable[[], tuple[Any, bool]]] = {
    "openai": lambda: (_OPENAI, True),
    "openai-body": lambda: ({"messages": _OPENAI, "tools": [_CALL]}, False),
    "anthropic": lambda: (_ANTHROPIC, False),
    "claude-code": lambda: (_CLAUDE_CODE, True),
    "codex": lambda: (_CODEX, True),
}

_PER_SEED = 700


def _mutants(seed_name: str, count: int) -> list[bytes]:
    """``count`` mutated files of one seed, the same on every run."""
    document, as_lines = _SEEDS[seed_name]()
    rng = random.Random(f"fuzz-{seed_name}")
    base = _jsonl(document) if as_lines else json.dumps(document).encode("utf-8")
    found: list[bytes] = []
    for round_ in range(count):
        if round_ % 3 == 2:
            found.append(_bytewise(rng, base))
        elif as_lines:
            records = list(document)
            index = rng.randrange(len(records))
            records[index] = _structural(rng, records[index])
            found.append(_jsonl(records))
        else:
            found.append(json.dumps(_structural(rng, document)).encode("utf-8"))
    return found


def _suffix(seed_name: str) -> str:
    return ".jsonl" if _SEEDS[seed_name]()[1] else ".json"


@pytest.mark.parametrize("seed_name", sorted(_SEEDS))
def test_mutated_transcripts_never_escape_as_anything_but_a_format_error(
    tmp_path: Path, seed_name: str
) -> None:
    path = tmp_path / f"seed{_suffix(seed_name)}"
    read_ok = 0
    errors: list[str] = []
    for round_, data in enumerate(_mutants(seed_name, _PER_SEED)):
        path.write_bytes(data)
        try:
            transcript = read_transcript(path)
        except TranscriptFormatError as exc:
            errors.append(str(exc))
            continue
        except Exception as exc:  # the finding: anything else is a bug
            pytest.fail(f"{seed_name} round {round_}: {type(exc).__name__}: {exc}\n{data!r}")
        assert isinstance(transcript.messages, tuple)
        read_ok += 1
    # The mutations reach both outcomes, and every error names the file once, first.
    assert read_ok > 0
    assert errors
    assert all(text.startswith(f"{path}: ") for text in errors)
    assert all(text.count(str(path)) == 1 for text in errors)


@pytest.mark.parametrize("seed_name", sorted(_SEEDS))
def test_the_command_reports_every_mutant_with_an_exit_code(
    tmp_path: Path, seed_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files the readers accept go on to counting, estimates and the pipeline."""
    path = tmp_path / f"seed{_suffix(seed_name)}"
    for round_, data in enumerate(_mutants(seed_name, _PER_SEED)[:: _PER_SEED // 25]):
        path.write_bytes(data)
        try:
            code = main(["inspect", str(path), "--window", "2000", "--encoding", "cl100k_base"])
        except Exception as exc:  # the finding: a traceback a user would see
            pytest.fail(f"{seed_name} sample {round_}: {type(exc).__name__}: {exc}\n{data!r}")
        assert code in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err
