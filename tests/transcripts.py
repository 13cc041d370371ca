"""Shared hypothesis strategies that generate realistic agent transcripts.

`transcripts()` draws a ``list[Message]`` shaped like what an agent loop holds:
leading system/developer messages, an optional checkpoint, then turns of a user
message followed by assistant steps (sequential and parallel tool groups, with
tiny and huge results, images, reasoning, CJK and emoji text) and a final
answer. Every tool call is answered by a result after it, except the calls of a
trailing assistant message when ``pending`` is drawn (possibly partly answered).
Call ids are unique in a transcript. Assistant messages may carry a `Usage`
anchor whose numbers are consistent with a four-characters-per-token count of
the prefix, the way a provider's would be with the real tokenizer.

`agent_sessions()` draws the sessions that strain the promise that the view
fits: tool results of up to 65,000 tokens, up to 24 parallel calls, one request
of hundreds of tool steps, beside ordinary mixed sessions.

`windows()` draws context-window sizes, mixing the usual model sizes with
arbitrary ones small enough to force compaction.

Generation is cheap (word pools, string repetition for huge results) so that
property tests stay quick.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from hypothesis import strategies as st

from context_engine.messages import (
    Block,
    ContextSummary,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)

__all__ = ["COMMON_WINDOWS", "SESSION_SHAPES", "agent_sessions", "texts", "transcripts", "windows"]

COMMON_WINDOWS = (8_192, 16_384, 32_768, 128_000, 200_000, 1_000_000)
"""Context windows of real models."""

# fmt: off
_LATIN = (
    "the", "test", "fails", "because", "configuration", "value", "returns", "None",
    "please", "fix", "module", "function", "error", "after", "update", "we", "should",
    "check", "cache", "token", "budget", "summary", "file", "line", "café", "naïve",
)
_CJK = (
    "请帮我修改这个函数", "测试失败了", "内存泄漏", "名前はまだ無い", "キャッシュの有効期限",
    "テストを追加しました", "서버 로그를 확인", "데이터베이스 연결", "수정해 주세요",
)
# fmt: on
_EMOJI = ("🎉", "🚀", "✅", "😀", "👍🏽", "🔥", "❤️", "🧪")
_CODE = (
    "def f(x):\n    return x * 2\n",
    "for i in range(10):\n    print(i)\n",
    'Traceback (most recent call last):\n  File "app.py", line 3\nValueError: bad\n',
    "SELECT id, name FROM users WHERE id = 42;",
    '{"status": "ok", "items": [1, 2, 3]}',
    "<|endoftext|> <|im_start|>",
)
_TOOLS = ("bash", "read_file", "write_file", "grep", "search", "list_dir")
_PATHS = ("src/app.py", "tests/test_app.py", "README.md", "docs/index.md", "setup.cfg")


_SEEDS = st.integers(0, 2**32 - 1)
_POOLS = (_LATIN, _LATIN, _LATIN, _CJK, _EMOJI, _CODE)


def _words(rnd: random.Random, min_words: int, max_words: int) -> str:
    count = rnd.randint(max(1, min_words), max(1, min_words, max_words))
    return " ".join(rnd.choice(rnd.choice(_POOLS)) for _ in range(count))


@st.composite
def texts(draw: st.DrawFn, *, min_words: int = 1, max_words: int = 30) -> str:
    """Non-empty text mixing English, accented Latin, CJK, emoji and code snippets.

    Args:
        min_words: Fewest pieces joined (at least 1).
        max_words: Most pieces joined.
    """
    return _words(random.Random(draw(_SEEDS)), min_words, max_words)


def _huge(rnd: random.Random, chars: tuple[int, int]) -> str:
    chunk = _words(rnd, 5, 15)
    size = rnd.randint(*chars)
    return (chunk + "\n") * (size // (len(chunk) + 1) + 1)


def _image(rnd: random.Random) -> ImageBlock:
    if rnd.random() < 0.5:
        return ImageBlock(url=f"https://example.invalid/{rnd.randint(0, 999)}.png")
    return ImageBlock(data="iVBORw0KGgo=", media_type="image/png")


def _rough_tokens(message: Message) -> int:
    """Four characters a token plus framing: what the anchors are consistent with."""
    total = 4
    for block in message.content:
        if isinstance(block, TextBlock):
            total += math.ceil(len(block.text) / 4)
        elif isinstance(block, ThinkingBlock):
            total += math.ceil(len(block.thinking) / 4)
        elif isinstance(block, ToolCall):
            total += 3 + math.ceil((len(block.name) + len(block.arguments)) / 4)
        else:
            total += 100
    return total


class _Builder:
    """Accumulates one transcript; hands out unique call ids and usage anchors."""

    def __init__(
        self,
        draw: st.DrawFn,
        *,
        usage: bool,
        images: bool,
        huge: bool,
        max_parallel: int = 4,
        huge_chars: tuple[int, int] = (4_000, 40_000),
        huge_every: int = 20,
    ) -> None:
        self.draw = draw
        self.rnd: random.Random = random.Random(draw(_SEEDS))
        self.messages: list[Message] = []
        self.next_id = 0
        self.prefix_tokens = 3
        self.schema_tokens: int = draw(st.integers(0, 1_500)) if usage else 0
        self.usage = usage
        self.images = images
        self.huge = huge
        self.widths = (1, 1, 1, *range(2, max_parallel + 1))
        self.huge_chars = huge_chars
        self.huge_every = huge_every

    def text(self, max_words: int = 30) -> str:
        return _words(self.rnd, 1, max_words)

    def add(self, message: Message) -> None:
        self.messages.append(message)
        self.prefix_tokens += _rough_tokens(message)

    def user(self) -> None:
        draw = self.draw
        blocks: list[Block] = [TextBlock(self.text())]
        if self.images and draw(st.integers(0, 9)) == 0:
            blocks.append(_image(self.rnd))
        self.add(Message("user", tuple(blocks)))

    def assistant(self, text: str | None, calls: tuple[ToolCall, ...] = ()) -> None:
        draw = self.draw
        blocks: list[Block] = []
        if draw(st.integers(0, 4)) == 0:
            signature = self.rnd.choice((None, "sig-abc123"))
            blocks.append(ThinkingBlock(self.text(), signature=signature))
        if text:
            blocks.append(TextBlock(text))
        blocks.extend(calls)
        message = Message("assistant", tuple(blocks))
        usage = None
        if self.usage and draw(st.booleans()):
            output = _rough_tokens(message) - 4 + self.rnd.randint(0, 50)
            usage = Usage(
                input_tokens=self.prefix_tokens + self.schema_tokens,
                output_tokens=output,
                cache_read_tokens=self.rnd.randint(0, self.prefix_tokens),
            )
        self.add(Message("assistant", tuple(blocks), usage=usage))

    def calls(self, count: int) -> tuple[ToolCall, ...]:
        made = []
        for _ in range(count):
            name = self.rnd.choice(_TOOLS)
            path = self.rnd.choice(_PATHS)
            made.append(ToolCall(f"call_{self.next_id:04d}", name, json.dumps({"path": path})))
            self.next_id += 1
        return tuple(made)

    def result(self, call: ToolCall) -> None:
        draw = self.draw
        size = draw(st.integers(0, self.huge_every - 1))
        if size == 0:
            text = ""
        elif size == 1 and self.huge:
            text = _huge(self.rnd, self.huge_chars)
        else:
            text = self.text(60)
        blocks: list[Block] = [TextBlock(text)] if text else []
        if self.images and draw(st.integers(0, 14)) == 0:
            blocks.append(_image(self.rnd))
        self.add(Message("tool", tuple(blocks), tool_call_id=call.id, name=call.name))

    def group(self, *, answered: int | None = None) -> None:
        """One assistant message with calls and its results (the first ``answered`` only)."""
        draw = self.draw
        count = draw(st.sampled_from(self.widths))
        calls = self.calls(count)
        text = self.text(12) if draw(st.booleans()) else None
        self.assistant(text, calls)
        order: list[ToolCall] = draw(st.permutations(calls))
        for call in order[: len(order) if answered is None else min(answered, count - 1)]:
            self.result(call)


@st.composite
def transcripts(
    draw: st.DrawFn,
    *,
    min_turns: int = 1,
    max_turns: int = 4,
    min_steps: int = 0,
    max_steps: int = 3,
    system: bool | None = None,
    summary: bool | None = None,
    pending: bool | None = None,
    usage: bool | None = None,
    images: bool = True,
    huge: bool = True,
    max_parallel: int = 4,
    huge_chars: tuple[int, int] = (4_000, 40_000),
    huge_every: int = 20,
) -> list[Message]:
    """A realistic transcript as a list of messages.

    Args:
        min_turns: Fewest user turns.
        max_turns: Most user turns.
        min_steps: Fewest tool groups in one turn.
        max_steps: Most tool groups in one turn.
        system: Force (True) or forbid (False) leading system/developer messages.
        summary: Force or forbid a leading `ContextSummary` checkpoint.
        pending: Force or forbid tool calls still waiting at the end.
        usage: Force or forbid `Usage` anchors on assistant messages.
        images: Allow image blocks in user and tool messages.
        huge: Allow huge tool results.
        max_parallel: Most tool calls in one assistant message.
        huge_chars: Smallest and largest size of a huge tool result, in characters.
        huge_every: About one tool result in this many is huge (when ``huge``) and one
            is empty; at least 3.
    """
    if huge_every < 3:
        raise ValueError(f"huge_every must be at least 3, got {huge_every}")
    maybe = st.booleans()
    with_usage = draw(maybe) if usage is None else usage
    builder = _Builder(
        draw,
        usage=with_usage,
        images=images,
        huge=huge,
        max_parallel=max_parallel,
        huge_chars=huge_chars,
        huge_every=huge_every,
    )
    if draw(maybe) if system is None else system:
        roles: list[Role] = draw(
            st.lists(st.sampled_from(("system", "developer")), min_size=1, max_size=2)
        )
        for role in roles:
            builder.add(Message(role, builder.text(40)))
    if draw(maybe) if summary is None else summary:
        builder.add(
            ContextSummary(
                summary=builder.text(80),
                tokens_before=draw(st.integers(1_000, 200_000)),
                read_files=draw(st.lists(st.sampled_from(_PATHS), max_size=2, unique=True)),
                modified_files=draw(st.lists(st.sampled_from(_PATHS), max_size=2, unique=True)),
            )
        )
    turns: int = draw(st.integers(min_turns, max(min_turns, max_turns)))
    ends_pending = draw(maybe) if pending is None else pending
    ends_pending = ends_pending and turns > 0
    for turn in range(turns):
        builder.user()
        for _ in range(draw(st.integers(min_steps, max(min_steps, max_steps)))):
            builder.group()
        if turn < turns - 1 or not ends_pending:
            builder.assistant(builder.text())
    if ends_pending:
        builder.group(answered=draw(st.integers(0, 3)))
    return builder.messages


@st.composite
def windows(draw: st.DrawFn, *, min_tokens: int = 512, max_tokens: int = 1_000_000) -> int:
    """A context-window size: a real model's, or any size in the range.

    Args:
        min_tokens: Smallest window drawn.
        max_tokens: Largest window drawn.
    """
    common = [w for w in COMMON_WINDOWS if min_tokens <= w <= max_tokens]
    choices: list[st.SearchStrategy[int]] = [st.integers(min_tokens, max_tokens)]
    if common:
        choices.append(st.sampled_from(common))
    return draw(st.one_of(choices))


SESSION_SHAPES = ("mixed", "huge_results", "parallel_calls", "long_request")
"""The kinds of session `agent_sessions` draws."""

_SHAPE_OPTIONS: dict[str, dict[str, object]] = {
    "mixed": {"max_turns": 4, "max_steps": 4},
    # A grep or cat of a whole tree: 10k to 65k tokens, about one result in three.
    "huge_results": {
        "max_turns": 3,
        "max_steps": 3,
        "huge_chars": (40_000, 260_000),
        "huge_every": 3,
    },
    "parallel_calls": {"max_turns": 2, "max_steps": 3, "max_parallel": 24},
    # One user request an agent works on for hundreds of steps.
    "long_request": {"min_turns": 1, "max_turns": 1, "min_steps": 100, "max_steps": 300},
}


@st.composite
def agent_sessions(
    draw: st.DrawFn, *, shapes: tuple[str, ...] = SESSION_SHAPES, usage: bool | None = None
) -> list[Message]:
    """A session of one of ``shapes`` (see `SESSION_SHAPES`); checkpoints, images and
    pending calls as `transcripts` draws them.

    Args:
        shapes: The kinds of session to draw from.
        usage: Force or forbid `Usage` anchors on assistant messages.
    """
    unknown = set(shapes) - set(SESSION_SHAPES)
    if not shapes or unknown:
        raise ValueError(f"shapes must be drawn from {SESSION_SHAPES}, got {shapes!r}")
    shape = draw(st.sampled_from(shapes))
    options: dict[str, Any] = _SHAPE_OPTIONS[shape]
    return Session(draw(transcripts(usage=usage, **options)))


def _brief(message: Message) -> str:
    parts = []
    for block in message.content:
        if isinstance(block, ToolCall):
            parts.append(f"call {block.id} {block.name}")
        elif isinstance(block, ImageBlock):
            parts.append("image")
        elif isinstance(block, (TextBlock, ThinkingBlock)):
            text = block.text if isinstance(block, TextBlock) else block.thinking
            head = text[:24].replace("\n", " ")
            parts.append(f"{head!r}" + (f"+{len(text) - 24:,} chars" if len(text) > 24 else ""))
    kind = "summary" if message.is_summary else message.role
    answers = f" {message.tool_call_id}" if message.tool_call_id else ""
    return f"{kind}{answers}({', '.join(parts)})"


class Session(list[Message]):
    """A generated session: a plain list of messages whose repr stays readable.

    Hypothesis prints a falsifying example with ``repr``; a 260,000-character
    tool result would bury it, so each message shows its role, its call ids and
    the head and size of each text.
    """

    def __repr__(self) -> str:
        return "Session([" + ", ".join(map(_brief, self)) + "])"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))
