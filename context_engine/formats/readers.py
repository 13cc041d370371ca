"""Read transcripts from files of any known shape, and write them back.

`read_transcript` looks at a file and picks its reader:

* ``openai``: a JSON array of Chat Completions message dicts, the same as JSONL
  (one dict per line), or a JSON object ``{"messages": [...]}``;
* ``anthropic``: a Messages API body ``{"system": ..., "messages": [...]}``, or
  message dicts (array or JSONL) whose content holds Anthropic block types
  (``tool_use``, ``tool_result``, ``thinking``, ``image``, ...);
* ``codex``: a Codex CLI rollout (JSONL ``{"timestamp", "type", "payload"}`` lines);
* ``claude-code``: a Claude Code session (JSONL ``user`` / ``assistant`` lines
  wrapping an Anthropic ``message``).

JSONL files are read line by line. `write_transcript` writes JSONL for
``openai`` and a JSON body for ``anthropic``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import IO, Any, Final, Literal, TypeAlias

import attrs

from context_engine.errors import ConfigurationError, InvalidMessageError, TranscriptFormatError
from context_engine.formats._agent_logs import (
    CODEX_LINE_TYPES,
    is_claude_code_line,
    read_claude_code,
    read_codex,
)
from context_engine.formats._anthropic_blocks import ANTHROPIC_BLOCK_TYPES
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.openai import from_openai, message_to_openai
from context_engine.messages import Message

__all__ = [
    "TRANSCRIPT_FORMATS",
    "Transcript",
    "TranscriptFormat",
    "read_transcript",
    "write_transcript",
]

TranscriptFormat: TypeAlias = Literal["openai", "anthropic", "claude-code", "codex"]
TRANSCRIPT_FORMATS: Final[tuple[TranscriptFormat, ...]] = (
    "openai",
    "anthropic",
    "claude-code",
    "codex",
)
"""Every format `read_transcript` detects."""

_CHUNK: Final = 4096


def _to_tuple(messages: Iterable[Message]) -> tuple[Message, ...]:
    return tuple(messages)


def _to_lines(lines: Iterable[int]) -> tuple[int, ...]:
    return tuple(lines)


def _to_tools(tools: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(tools)


@attrs.frozen(kw_only=True)
class Transcript:
    """A transcript read from a file.

    Attributes:
        messages: The messages, in file order.
        format: The shape the file was read as: ``openai``, ``anthropic``,
            ``claude-code`` or ``codex``.
        source: The path the file was read from.
        lines: For a JSONL file, the 1-based line each message was read from
            (one entry per message); empty when the file is one JSON document
            or a line held several messages.
        tools: The tool definitions a request body carries (its ``tools``
            list), as written; the model is sent them with every call.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_to_tuple)
    format: TranscriptFormat
    source: str
    lines: tuple[int, ...] = attrs.field(default=(), converter=_to_lines, eq=False)
    tools: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_to_tools)

    def where(self, index: int) -> str:
        """Where message ``index`` is in the file: ``line N`` for JSONL, else ``message N``."""
        if index < len(self.lines):
            return f"line {self.lines[index]}"
        return f"message {index}"


class _SwitchToAnthropic(Exception):
    """A JSONL file read as OpenAI turned out to hold Anthropic blocks."""


def read_transcript(path: str | os.PathLike[str]) -> Transcript:
    """Read a transcript file, detecting its shape.

    Args:
        path: A JSON or JSONL file (see the module docstring for the shapes).

    Returns:
        The messages with the detected format and the path as ``source``.

    Raises:
        TranscriptFormatError: The file is empty, not JSON, of no known shape,
            or a message in it is malformed; the message names the file and,
            for JSONL, the line (``.line``), else the message index (``.index``).
        OSError: The file cannot be opened.
    """
    source = os.fspath(path)
    try:
        return _read(source)
    except UnicodeDecodeError:
        raise _not_utf8(source) from None
    except RecursionError:
        raise TranscriptFormatError(
            "nests JSON too deeply to be a transcript", path=source
        ) from None


def _not_utf8(source: str) -> TranscriptFormatError:
    """Where the first byte that is not UTF-8 is: its line and its offset in the file.

    The decoder reports positions within the chunk it was reading, so the file
    is read again as bytes; this happens only on the way to an error.
    """
    with open(source, "rb") as handle:
        data = handle.read()
    start = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        data[start:].decode("utf-8")
    except UnicodeDecodeError as exc:
        offset = start + exc.start
        line = data.count(b"\n", 0, offset) + 1
        return TranscriptFormatError(
            f"is not UTF-8 text: byte 0x{data[offset]:02x} at offset {offset} cannot be decoded",
            path=source,
            line=line,
        )
    return TranscriptFormatError("is not UTF-8 text", path=source)  # changed while being read


def _read(source: str) -> Transcript:
    # utf-8-sig: a byte order mark (as some Windows editors write) is not part of the JSON.
    with open(source, encoding="utf-8-sig") as handle:
        first = _first_char(handle, source)
        handle.seek(0)
        if first == "[":
            return _read_document(_load(handle, source), source)
        if first != "{":
            raise TranscriptFormatError(
                f"is neither JSON nor JSONL (it starts with {first!r})", path=source
            )
        number, line = next((n, text) for n, text in enumerate(handle, 1) if text.strip())
        try:
            head = json.loads(line)
        except json.JSONDecodeError:  # a JSON document spread over several lines
            handle.seek(0)
            return _read_document(_load(handle, source), source)
        more = any(text.strip() for text in handle)
        if not more and isinstance(head, dict) and _line_kind(head) is None:
            return _read_document(head, source)
        handle.seek(0)
        return _read_jsonl(handle, source, head, number)


def _first_char(handle: IO[str], source: str) -> str:
    while chunk := handle.read(_CHUNK):
        stripped = chunk.lstrip()
        if stripped:
            return stripped[0]
    raise TranscriptFormatError("is empty", path=source)


def _load(handle: IO[str], source: str) -> Any:
    try:
        return json.load(handle)
    except json.JSONDecodeError as exc:
        raise TranscriptFormatError(
            f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            path=source,
        ) from None


def _is_anthropic_message(obj: object) -> bool:
    content = obj.get("content") if isinstance(obj, Mapping) else None
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and _is_one_of(block.get("type"), ANTHROPIC_BLOCK_TYPES)
        for block in content
    )


def _is_one_of(value: object, names: frozenset[str]) -> bool:
    """Whether ``value`` is one of ``names``; a list or dict from the file never is."""
    return isinstance(value, str) and value in names


def _bare(exc: InvalidMessageError) -> str:
    text = str(exc)
    prefix = f"message {exc.index}: "
    return text[len(prefix) :] if exc.index is not None and text.startswith(prefix) else text


def _read_document(data: object, source: str) -> Transcript:
    if isinstance(data, Mapping):
        if not isinstance(data.get("messages"), list):
            raise TranscriptFormatError(
                "is a JSON object without a 'messages' list; expected a chat request body",
                path=source,
            )
        messages: list[Any] = data["messages"]
    elif isinstance(data, list):
        messages = data
    else:
        raise TranscriptFormatError(
            f"holds a JSON {type(data).__name__}; expected a list of messages or a body",
            path=source,
        )
    anthropic = isinstance(data, Mapping) and data.get("system") is not None
    anthropic = anthropic or any(_is_anthropic_message(m) for m in messages)
    tools = _tools(data, source)
    try:
        if anthropic:
            body: Any = data if isinstance(data, Mapping) else messages
            return Transcript(
                messages=from_anthropic(body), format="anthropic", source=source, tools=tools
            )
        return Transcript(
            messages=from_openai(messages), format="openai", source=source, tools=tools
        )
    except InvalidMessageError as exc:
        raise TranscriptFormatError(_bare(exc), path=source, index=exc.index) from None


def _tools(data: object, source: str) -> tuple[Mapping[str, Any], ...]:
    tools = data.get("tools") if isinstance(data, Mapping) else None
    if tools is None:
        return ()
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise TranscriptFormatError(
            "has a 'tools' entry that is not a list of objects", path=source
        )
    return tuple(tools)


# ------------------------------------------------------------------ JSONL


def _lines(handle: IO[str], source: str) -> Iterator[tuple[int, Any]]:
    for number, text in enumerate(handle, 1):
        if not text.strip():
            continue
        try:
            yield number, json.loads(text)
        except json.JSONDecodeError as exc:
            raise TranscriptFormatError(
                f"is not valid JSON: {exc.msg} (column {exc.colno})", path=source, line=number
            ) from None


def _objects(handle: IO[str], source: str) -> Iterator[tuple[int, Mapping[str, Any]]]:
    for number, obj in _lines(handle, source):
        if not isinstance(obj, Mapping):
            raise TranscriptFormatError(
                f"holds a JSON {type(obj).__name__}; expected an object", path=source, line=number
            )
        yield number, obj


def _read_jsonl(handle: IO[str], source: str, head: object, number: int) -> Transcript:
    def fail(line: int, problem: str) -> Exception:
        return TranscriptFormatError(problem, path=source, line=line)

    if not isinstance(head, Mapping):
        raise fail(number, f"holds a JSON {type(head).__name__}; expected an object")
    kind = _line_kind(head)
    if kind == "chat":
        return _read_chat_lines(handle, source)
    origins: list[int] = []
    if kind == "codex":
        messages = read_codex(_objects(handle, source), fail, origins)
        return Transcript(messages=messages, format="codex", source=source, lines=origins)
    if kind == "claude-code":
        messages = read_claude_code(_objects(handle, source), fail, origins)
        return Transcript(messages=messages, format="claude-code", source=source, lines=origins)
    if "messages" in head:
        raise fail(number, "holds a whole request body; a JSONL transcript has one message a line")
    raise fail(
        number,
        "is not a chat message (no 'role'), a Claude Code session line or a Codex rollout line",
    )


def _line_kind(head: Mapping[str, Any]) -> str | None:
    """What the first record of a JSONL file says the file is, if anything."""
    if "messages" in head:
        return None
    if "role" in head:
        return "chat"
    if _is_one_of(head.get("type"), CODEX_LINE_TYPES) and "payload" in head:
        return "codex"
    return "claude-code" if is_claude_code_line(head) else None


def _read_chat_lines(handle: IO[str], source: str) -> Transcript:
    try:
        return _convert_lines(handle, source, "openai")
    except _SwitchToAnthropic:
        handle.seek(0)
        return _convert_lines(handle, source, "anthropic")


def _convert_lines(handle: IO[str], source: str, kind: TranscriptFormat) -> Transcript:
    numbers: list[int] = []

    def dicts() -> Iterator[Any]:
        for number, obj in _lines(handle, source):
            if kind == "openai" and _is_anthropic_message(obj):
                raise _SwitchToAnthropic
            numbers.append(number)
            yield obj

    try:
        messages = from_openai(dicts()) if kind == "openai" else from_anthropic(dicts())
    except TranscriptFormatError:
        raise
    except InvalidMessageError as exc:
        line = numbers[exc.index] if exc.index is not None else None
        raise TranscriptFormatError(_bare(exc), path=source, line=line) from None
    # An Anthropic user line may hold several tool results; then lines are not known per message.
    lines = numbers if len(numbers) == len(messages) else []
    return Transcript(messages=messages, format=kind, source=source, lines=lines)


# ------------------------------------------------------------------ writing


def write_transcript(
    path: str | os.PathLike[str],
    messages: Iterable[Message],
    format: Literal["openai", "anthropic"] = "openai",
) -> None:
    """Write messages to a file that `read_transcript` reads back.

    Args:
        path: The file; it is created or replaced.
        messages: The messages, in transcript order.
        format: ``openai`` writes JSONL, one Chat Completions dict a line, message
            by message; ``anthropic`` writes a Messages API body as indented JSON.

    Raises:
        ConfigurationError: ``format`` is neither ``openai`` nor ``anthropic``.
        InvalidMessageError: A message cannot be written in that format.
    """
    if format not in ("openai", "anthropic"):
        raise ConfigurationError(
            f"write_transcript format must be 'openai' or 'anthropic', got {format!r}"
        )
    # A lone surrogate cannot be UTF-8; inside a JSON string its backslash escape is exact.
    if format == "anthropic":
        body = to_anthropic(messages)
        with open(path, "w", encoding="utf-8", errors="backslashreplace") as handle:
            json.dump(body, handle, ensure_ascii=False, indent=2)
            handle.write("\n")
        return
    with open(path, "w", encoding="utf-8", errors="backslashreplace") as handle:
        for index, message in enumerate(messages):
            line = json.dumps(message_to_openai(message, index=index), ensure_ascii=False)
            handle.write(line + "\n")
