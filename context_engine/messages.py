"""The immutable message model every strategy and converter works on.

A transcript is a sequence of `Message` objects. Each message holds a tuple of
content blocks (`TextBlock`, `ThinkingBlock`, `ToolCall`, `ImageBlock`).
`ContextSummary` is the checkpoint message kind: a user message whose text is
rendered from the summary and its file lists, so converters and token counters
treat it like any other message while strategies can still recognise it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Literal, TypeAlias

import attrs
import regex

from context_engine._memo import TOOL_CALLS, memoized
from context_engine._validate import is_int
from context_engine.errors import InvalidMessageError

__all__ = [
    "ROLES",
    "Block",
    "ContextSummary",
    "ImageBlock",
    "Message",
    "Role",
    "TextBlock",
    "ThinkingBlock",
    "ToolCall",
    "Usage",
    "parse_context_summary",
]

Role: TypeAlias = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset({"system", "developer", "user", "assistant", "tool"})


def _require_str(kind: str, field: str, value: object) -> None:
    if not isinstance(value, str):
        raise InvalidMessageError(f"{kind}.{field} must be a str, got {type(value).__name__}")


@attrs.frozen
class TextBlock:
    """Plain text."""

    text: str

    def __attrs_post_init__(self) -> None:
        _require_str("TextBlock", "text", self.text)


@attrs.frozen
class ThinkingBlock:
    """Model reasoning kept for providers that need it echoed back.

    Attributes:
        thinking: The reasoning text, or the opaque payload when ``redacted``.
        signature: Provider signature that must travel with the block, if any.
        redacted: True for reasoning the provider returned encrypted.
    """

    thinking: str
    signature: str | None = None
    redacted: bool = False

    def __attrs_post_init__(self) -> None:
        _require_str("ThinkingBlock", "thinking", self.thinking)


@attrs.frozen
class ToolCall:
    """A tool call requested by the assistant.

    Attributes:
        id: Identifier the tool result refers to with ``tool_call_id``.
        name: Name of the tool.
        arguments: The raw JSON text of the arguments, exactly as the model wrote it.
    """

    id: str
    name: str
    arguments: str = "{}"

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidMessageError("ToolCall.id must be a non-empty str")
        if not isinstance(self.name, str) or not self.name:
            raise InvalidMessageError(f"ToolCall {self.id!r} needs a non-empty name")
        if not isinstance(self.arguments, str):
            raise InvalidMessageError(
                f"ToolCall {self.id!r}: arguments must be the raw JSON text (str), "
                f"got {type(self.arguments).__name__}; pass json.dumps(arguments)"
            )


@attrs.frozen
class ImageBlock:
    """An image, by URL (``data:`` URLs included) or by base64 data.

    Attributes:
        url: Where the image is, for providers that take URLs.
        data: Base64 payload, for providers that take raw data.
        media_type: MIME type such as ``image/png``.
        detail: OpenAI's ``detail`` hint (``low``, ``high``, ``auto``), if given.
    """

    url: str | None = None
    data: str | None = None
    media_type: str | None = None
    detail: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise InvalidMessageError("ImageBlock needs exactly one of url= or data=")


Block: TypeAlias = TextBlock | ThinkingBlock | ToolCall | ImageBlock
_BLOCK_TYPES = (TextBlock, ThinkingBlock, ToolCall, ImageBlock)


# No prompt comes near 2**53 tokens; a count above it is corrupt, and float arithmetic
# on it (calibration ratios, anchor checks) would overflow or lose its meaning.
MAX_USAGE_TOKENS = 2**53


def _non_negative_int(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not is_int(value) or value < 0:
        raise InvalidMessageError(
            f"{type(instance).__name__}.{attribute.name} must be a non-negative int, got {value!r}"
        )
    if value > MAX_USAGE_TOKENS:
        raise InvalidMessageError(
            f"{type(instance).__name__}.{attribute.name} must be at most 2**53, "
            f"got a {len(str(value))}-digit number"
        )


@attrs.frozen
class Usage:
    """Token usage a provider reported for one call.

    Attributes:
        input_tokens: The whole prompt billed for that call, cached parts included.
            Converters normalise providers that report cached tokens separately.
        output_tokens: Tokens the model generated.
        cache_read_tokens: Part of ``input_tokens`` read from the prompt cache.
        cache_write_tokens: Part of ``input_tokens`` written to the prompt cache.
    """

    input_tokens: int = attrs.field(validator=_non_negative_int)
    output_tokens: int = attrs.field(default=0, validator=_non_negative_int)
    cache_read_tokens: int = attrs.field(default=0, validator=_non_negative_int)
    cache_write_tokens: int = attrs.field(default=0, validator=_non_negative_int)

    @property
    def total_tokens(self) -> int:
        """Prompt plus answer: what the context held once the answer was written."""
        return self.input_tokens + self.output_tokens


def _to_content(value: object) -> tuple[Block, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (TextBlock(value),) if value else ()
    if isinstance(value, _BLOCK_TYPES):
        return (value,)
    if isinstance(value, Iterable):
        return tuple(value)
    raise InvalidMessageError(
        f"content must be a str or a sequence of blocks, got {type(value).__name__}"
    )


def _to_metadata(value: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return dict(value)
    except (TypeError, ValueError):
        kind = type(value).__name__
        raise InvalidMessageError(f"metadata must be a mapping, got {kind}") from None


def _to_timestamp(value: object) -> _dt.datetime | None:
    if value is None or isinstance(value, _dt.datetime):
        return value
    raise InvalidMessageError(f"timestamp must be a datetime or None, got {value!r}")


@attrs.frozen
class Message:
    """One message of a transcript.

    Attributes:
        role: ``system``, ``developer``, ``user``, ``assistant`` or ``tool``.
        content: The blocks; a str is accepted and becomes one `TextBlock`.
        tool_call_id: For ``tool`` messages, the id of the call they answer.
        name: Optional participant or tool name.
        usage: Provider usage reported with an assistant message.
        stop_reason: Why the provider stopped generating, if known.
        metadata: Caller data carried along untouched (copied at construction;
            treat as read-only).
        timestamp: When the message was created, if known.
    """

    role: Role
    content: tuple[Block, ...] = attrs.field(default=(), converter=_to_content)
    tool_call_id: str | None = None
    name: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_to_metadata, hash=False)
    timestamp: _dt.datetime | None = attrs.field(default=None, converter=_to_timestamp)
    # What is derived from this message and kept on it (token counts, digest, tool
    # calls, strategies' copies); owned by context_engine._memo, never part of the value.
    _memo: dict[Hashable, Any] = attrs.field(
        factory=dict, init=False, eq=False, hash=False, repr=False
    )

    def __attrs_post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidMessageError(
                f"unknown role {self.role!r}; expected one of {', '.join(sorted(ROLES))}"
            )
        for block in self.content:
            if not isinstance(block, _BLOCK_TYPES):
                raise InvalidMessageError(
                    f"{self.role} message has a content item of type "
                    f"{type(block).__name__}; expected TextBlock, ThinkingBlock, "
                    "ToolCall or ImageBlock"
                )
            if isinstance(block, ToolCall) and self.role != "assistant":
                raise InvalidMessageError(
                    f"{self.role} message carries tool call {block.id!r}; "
                    "only assistant messages may call tools"
                )
        for label, value in (
            ("tool_call_id", self.tool_call_id),
            ("name", self.name),
            ("stop_reason", self.stop_reason),
        ):
            if value is not None and not isinstance(value, str):
                raise InvalidMessageError(
                    f"{self.role} message: {label} must be a str or None, "
                    f"got {type(value).__name__}"
                )
        if self.role == "tool" and not (isinstance(self.tool_call_id, str) and self.tool_call_id):
            raise InvalidMessageError("tool message without tool_call_id")
        if self.usage is not None and not isinstance(self.usage, Usage):
            raise InvalidMessageError(f"usage must be a Usage, got {type(self.usage).__name__}")

    @classmethod
    def system(cls, text: str) -> Message:
        """A system message."""
        return cls("system", text)

    @classmethod
    def developer(cls, text: str) -> Message:
        """A developer message (OpenAI's name for system instructions)."""
        return cls("developer", text)

    @classmethod
    def user(cls, text: str) -> Message:
        """A user message."""
        return cls("user", text)

    @classmethod
    def assistant(
        cls,
        text: str | None = None,
        tool_calls: Iterable[ToolCall] = (),
        usage: Usage | None = None,
    ) -> Message:
        """An assistant message with optional text, tool calls and provider usage."""
        blocks: list[Block] = [TextBlock(text)] if text else []
        blocks.extend(tool_calls)
        return cls("assistant", tuple(blocks), usage=usage)

    @classmethod
    def tool(cls, tool_call_id: str, text: str, name: str | None = None) -> Message:
        """A tool result answering the call ``tool_call_id``."""
        return cls("tool", text, tool_call_id=tool_call_id, name=name)

    @property
    def text(self) -> str:
        """The text blocks joined with newlines."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls in this message, in order."""
        return memoized(self, TOOL_CALLS, _tool_calls)

    @property
    def is_summary(self) -> bool:
        """True for a `ContextSummary` checkpoint."""
        return False


def _tool_calls(message: Message) -> tuple[ToolCall, ...]:
    return tuple(b for b in message.content if isinstance(b, ToolCall))


_SUMMARY_OPEN = "<context-summary"
_SUMMARY_CLOSE = "</context-summary>"
_SUMMARY_RE = regex.compile(
    r"\A<context-summary(?P<attrs>[^>]*)>\n(?P<body>.*)\n</context-summary>\Z", regex.DOTALL
)
_ATTR_RE = regex.compile(r'\s([a-z-]+)="([^"]*)"')
_FILES_RE = regex.compile(
    r"\n<(?P<tag>read-files|modified-files|archived-history)>\n(?P<items>.*?)\n</(?P=tag)>(?=\n<|\Z)",
    regex.DOTALL,
)


# Tags of the rendering that a summary text may contain too. In the body each
# gets one more backslash after its "<" (``</context-summary>`` becomes
# ``<\/context-summary>``), which parsing removes again: reversible for any text.
_TAG_ESCAPE_RE = regex.compile(
    r"<(\\*)(/context-summary|read-files|modified-files|archived-history)>"
)
_TAG_UNESCAPE_RE = regex.compile(
    r"<\\(\\*)(/context-summary|read-files|modified-files|archived-history)>"
)


def _escape_body(text: str) -> str:
    return _TAG_ESCAPE_RE.sub(lambda m: f"<\\{m[1]}{m[2]}>", text)


def _unescape_body(text: str) -> str:
    return _TAG_UNESCAPE_RE.sub(lambda m: f"<{m[1]}{m[2]}>", text)


def _render_summary(summary: ContextSummary) -> tuple[Block, ...]:
    attributes = f' tokens-before="{summary.tokens_before}"'
    if summary.timestamp is not None:
        attributes += f' timestamp="{summary.timestamp.isoformat()}"'
    parts = [f"{_SUMMARY_OPEN}{attributes}>", _escape_body(summary.summary)]
    sections = (
        ("read-files", summary.read_files),
        ("modified-files", summary.modified_files),
        ("archived-history", summary.references),
    )
    for tag, files in sections:
        if files:
            parts.append(f"<{tag}>\n" + "\n".join(files) + f"\n</{tag}>")
    parts.append(_SUMMARY_CLOSE)
    return (TextBlock("\n".join(parts)),)


def _to_str_tuple(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        raise InvalidMessageError("file lists and references must be sequences of str, not one str")
    paths = tuple(value)
    for path in paths:
        if not isinstance(path, str) or "\n" in path:
            raise InvalidMessageError(
                f"file paths and references must be str without newlines, got {path!r}"
            )
    return paths


@attrs.frozen
class ContextSummary(Message):
    """A checkpoint that stands for the history it replaced.

    It is sent as a user message whose text wraps the summary in
    ``<context-summary>`` tags, followed by the read and modified file lists.

    Attributes:
        summary: The checkpoint text.
        tokens_before: Tokens of the view the checkpoint was made from.
        read_files: Files read in the summarized history.
        modified_files: Files modified in the summarized history.
        references: Archive references of the history this checkpoint (and the
            checkpoints before it) replaced, oldest first; empty without an archive.
    """

    role: Role = attrs.field(default="user", init=False)
    summary: str = attrs.field(kw_only=True)
    tokens_before: int = attrs.field(default=0, kw_only=True, validator=_non_negative_int)
    read_files: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_to_str_tuple)
    modified_files: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_to_str_tuple)
    references: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_to_str_tuple)
    content: tuple[Block, ...] = attrs.field(init=False)

    @content.default
    def _render(self) -> tuple[Block, ...]:
        _require_str("ContextSummary", "summary", self.summary)
        return _render_summary(self)

    @property
    def is_summary(self) -> bool:
        """True for a `ContextSummary` checkpoint."""
        return True


def parse_context_summary(
    text: str, *, metadata: Mapping[str, Any] | None = None
) -> ContextSummary | None:
    """Rebuild a `ContextSummary` from its rendered text, or return None.

    Converters call this on user messages so that a checkpoint survives a round
    trip through a provider format or a file.
    """
    if not text.startswith(_SUMMARY_OPEN):
        return None
    match = _SUMMARY_RE.match(text)
    if match is None:
        return None
    attributes = dict(_ATTR_RE.findall(match["attrs"]))
    body = match["body"]
    files: dict[str, tuple[str, ...]] = {
        "read-files": (),
        "modified-files": (),
        "archived-history": (),
    }
    while (found := _last_files_section(body)) is not None:
        start, tag, items = found
        files[tag] = tuple(items.split("\n"))
        body = body[:start]
    try:
        tokens_before = int(attributes.get("tokens-before", "0"))
        stamp = attributes.get("timestamp")
        timestamp = _dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
    except ValueError:
        return None
    return ContextSummary(
        summary=_unescape_body(body),
        tokens_before=tokens_before,
        read_files=files["read-files"],
        modified_files=files["modified-files"],
        references=files["archived-history"],
        metadata=dict(metadata or {}),
        timestamp=timestamp,
    )


def _last_files_section(body: str) -> tuple[int, str, str] | None:
    last = None
    for match in _FILES_RE.finditer(body):
        if match.end() == len(body):
            last = (match.start(), match["tag"], match["items"])
    return last
