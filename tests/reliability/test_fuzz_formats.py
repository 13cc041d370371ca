"""Fuzzing the format readers: arbitrary JSON values and raw bytes in, documented errors out.

`from_openai` and `from_anthropic` may raise only `InvalidMessageError`; the file
reader `read_transcript` only `TranscriptFormatError` (an `InvalidMessageError`).
Whatever they accept converts back without an obscure error, and the engine
projects it with every invariant kept.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from context_engine import ContextEngine, ContextSummary, InvalidMessageError
from context_engine.errors import TranscriptFormatError
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.openai import from_openai, to_openai
from context_engine.formats.readers import read_transcript
from tests.reliability.support import COUNTER, examples, valid
from tests.transcripts import transcripts

CHECKPOINT = ContextSummary(summary="earlier work", read_files=("a.py",)).text

KEYS = (
    "role", "content", "type", "text", "tool_calls", "tool_call_id", "id", "function", "name",
    "arguments", "usage", "prompt_tokens", "completion_tokens", "reasoning_content", "image_url",
    "url", "detail", "tool_use_id", "input", "source", "media_type", "data", "thinking",
    "signature", "is_error", "cache_control", "system", "messages", "stop_reason",
    "input_tokens", "output_tokens", "cache_read_input_tokens", "payload", "message", "uuid",
    "sessionId", "timestamp", "refusal", "custom",
)  # fmt: skip
WORDS = (
    "user", "assistant", "system", "developer", "tool", "function", "text", "tool_use",
    "tool_result", "image", "image_url", "thinking", "redacted_thinking", "document", "base64",
    "image/png", "{}", '{"a": 1}', "{not json", "", "c1", "response_item", "event_msg",
    CHECKPOINT, "\ud800", "<context-summary>",
)  # fmt: skip

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(WORDS)
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=16,
)
"""Arbitrary JSON values, biased towards the keys and words of the chat formats."""

ROLE_DICT = st.fixed_dictionaries(
    {"role": st.sampled_from(("user", "assistant", "system", "tool", "developer"))},
    optional=dict.fromkeys(("content", "tool_calls", "tool_call_id", "name", "usage"), JSON),
)
MESSAGE_LISTS = st.lists(ROLE_DICT | JSON, max_size=5)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*path, index))
    return found


@st.composite
def mutated(draw: st.DrawFn, document: Any) -> tuple[Any, int]:
    """``document`` with 0-3 random edits: a value replaced, a key or item deleted, a key added."""
    document = copy.deepcopy(document)
    edits = draw(st.integers(0, 3))
    for _ in range(edits):
        path = draw(st.sampled_from(_paths(document)))
        kind = draw(st.sampled_from(("replace", "replace", "delete", "add")))
        replacement = draw(JSON)
        if not path:
            document = replacement
            continue
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if kind == "replace":
            parent[path[-1]] = replacement
        elif kind == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS))] = replacement
        else:
            parent.insert(path[-1], replacement)
    return document, edits


def _writable(write: Any) -> Any:
    def convert(messages: list[Any]) -> Any:
        try:
            return write(messages)
        except InvalidMessageError:
            return None

    return convert


OPENAI_DOCS = transcripts(max_turns=3, max_steps=2, huge=False).map(_writable(to_openai))
ANTHROPIC_DOCS = transcripts(max_turns=3, max_steps=2, huge=False).map(_writable(to_anthropic))


def project_checked(messages: list[Any]) -> None:
    """Whatever a reader accepted goes through the engine with every invariant kept."""
    engine = ContextEngine.default(600, token_counter=COUNTER, reserve_tokens=100)
    valid(messages, engine.project_sync(messages).messages)


def read_openai(value: Any) -> list[Any] | None:
    """from_openai's result, or None after an InvalidMessageError (the only error allowed)."""
    try:
        messages = from_openai(value)
    except InvalidMessageError as error:
        event("rejected")
        assert str(error)  # noqa: PT017  (the message is part of the contract)
        return None
    event(f"accepted {min(len(messages), 3)}+ messages")
    try:
        to_openai(messages)
    except InvalidMessageError:
        event("accepted but not writable")
    project_checked(messages)
    return messages


def read_anthropic(value: Any, system: Any = None) -> list[Any] | None:
    """from_anthropic's result, or None after an InvalidMessageError (the only error allowed)."""
    try:
        messages = from_anthropic(value, system)
    except InvalidMessageError as error:
        event("rejected")
        assert str(error)  # noqa: PT017  (the message is part of the contract)
        return None
    event(f"accepted {min(len(messages), 3)}+ messages")
    try:
        to_anthropic(messages)
    except InvalidMessageError:
        event("accepted but not writable")
    project_checked(messages)
    return messages


@examples(100)
@given(value=JSON | MESSAGE_LISTS)
def test_from_openai_on_arbitrary_json_raises_only_invalid_message_error(value: Any) -> None:
    read_openai(value)


@examples(150)
@given(data=st.data(), document=OPENAI_DOCS.filter(lambda d: d is not None))
def test_from_openai_on_edited_real_dicts_raises_only_invalid_message_error(
    data: st.DataObject, document: Any
) -> None:
    edited, edits = data.draw(mutated(document))
    messages = read_openai(edited)
    if edits == 0:
        assert messages is not None
        assert to_openai(messages) == document


@examples(100)
@given(value=JSON | MESSAGE_LISTS, system=st.none() | JSON)
def test_from_anthropic_on_arbitrary_json_raises_only_invalid_message_error(
    value: Any, system: Any
) -> None:
    read_anthropic(value, system)


@examples(150)
@given(data=st.data(), document=ANTHROPIC_DOCS.filter(lambda d: d is not None))
def test_from_anthropic_on_edited_real_bodies_raises_only_invalid_message_error(
    data: st.DataObject, document: Any
) -> None:
    edited, edits = data.draw(mutated(document))
    messages = read_anthropic(edited)
    if edits == 0:
        assert messages is not None
        assert to_anthropic(messages) == document


def _corrupt(data: bytes, cut: int, flip: int) -> bytes:
    if not data:
        return data
    position = flip % len(data)
    flipped = data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]
    return flipped[: max(1, len(flipped) - cut)]


FILE_BYTES = st.one_of(
    st.binary(max_size=200),
    JSON.map(lambda v: json.dumps(v).encode()),
    MESSAGE_LISTS.map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")),
    MESSAGE_LISTS.map(lambda v: "\n".join(json.dumps(x) for x in v).encode()),
    st.builds(
        _corrupt,
        MESSAGE_LISTS.map(lambda v: json.dumps(v).encode()),
        st.integers(0, 30),
        st.integers(0, 10_000),
    ),
    st.builds(lambda b: b"\xef\xbb\xbf" + b, MESSAGE_LISTS.map(lambda v: json.dumps(v).encode())),
    OPENAI_DOCS.flatmap(mutated).map(
        lambda d: (
            "\n".join(json.dumps(x) for x in d[0]).encode()
            if isinstance(d[0], list)
            else json.dumps(d[0]).encode()
        )
    ),
    ANTHROPIC_DOCS.flatmap(mutated).map(lambda d: json.dumps(d[0]).encode()),
)


@examples(200)
@given(data=FILE_BYTES)
def test_read_transcript_raises_only_transcript_format_error(
    data: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "transcript.json"
    path.write_bytes(data)
    try:
        transcript = read_transcript(path)
    except TranscriptFormatError as error:
        event("rejected")
        assert str(path) in str(error)  # noqa: PT017  (the message names the file)
        return
    event(f"read as {transcript.format}")
    project_checked(list(transcript.messages))


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b'[{"role": "user", "content": "caf\xe9"}]', id="latin-1-byte"),
        pytest.param(b'{"role": "user", "content": "a"}\n\xff\xfe\n', id="bad-jsonl-line"),
        pytest.param("[]".encode("utf-16"), id="utf-16"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deeply-nested-array"),
        pytest.param(b'{"messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", id="deep-body"),
        pytest.param(
            b'{"role": "user", "content": ' + b"[" * 50_000 + b"]" * 50_000 + b"}\n",
            id="deep-jsonl",
        ),
        pytest.param(b"\x00\x00\x00", id="nul-bytes"),
        pytest.param(b"", id="empty"),
        pytest.param(b"   \n\t  ", id="blank"),
    ],
)
def test_hostile_files_get_a_transcript_format_error(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    with pytest.raises(TranscriptFormatError) as info:
        read_transcript(path)
    assert str(path) in str(info.value)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    """Editors on Windows write one; it is not part of the JSON."""
    path = tmp_path / "t.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([{"role": "user", "content": "hi"}]).encode())
    assert read_transcript(path).messages[0].text == "hi"
