"""Calling a summarizer: timeouts, answer parsing, and chunking a long history.

A history too large for one summarizer call is first sent with its tool
results clipped harder (down to `MIN_CLIP_CHARS`, head and tail kept) when
that makes it one request; past that it is summarized in chunks, oldest
first, each chunk updating the running checkpoint, so nothing old is dropped
silently. Every answer is kept in the strategy's `SummaryMemo`, so a summary
that fails halfway resumes after its last answered request; a `Deadline`
bounds the whole summary besides the per-request timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence

import attrs

from context_engine.errors import SummarizerError, SummaryTimeoutError
from context_engine.messages import ImageBlock, Message, TextBlock
from context_engine.structure import analyze
from context_engine.summarize.memo import SummaryMemo, request_key
from context_engine.summarize.prompts import SummaryPrompts, build_request
from context_engine.summarize.request import (
    Summarizer,
    SummaryKind,
    SummaryReason,
    SummaryRequest,
    parse_summary_text,
)
from context_engine.summarize.scrub import request_sources, scrub_quotes
from context_engine.summarize.serialize import IMAGE_PLACEHOLDER, serialize_message
from context_engine.telemetry import current_telemetry
from context_engine.tokens import TokenCounter

__all__ = ["Deadline", "SummaryCall", "call_summarizer", "chunk_history", "strip_images"]

# Room kept in the summarizer's window for the prompt's own framing.
_FRAMING_TOKENS = 512
_MIN_CHUNK_TOKENS = 1024
MIN_CLIP_CHARS = 500
"""The tightest clip of a tool result a summary request gets to save a second request:
its head and tail still say what ran and how it ended (the failure's key line and the
files are merged into the checkpoint by code, from the originals, either way)."""


async def call_summarizer(
    summarizer: Summarizer, request: SummaryRequest, timeout: float | None
) -> str:
    """Run ``summarizer`` on ``request`` and return the parsed checkpoint text.

    Raises:
        SummarizerError: it raised, timed out, or returned nothing usable (the
            original exception chained).
    """
    telemetry = current_telemetry()
    attributes = {
        "gen_ai.request.max_tokens": request.max_tokens,
        "context_engine.summary.kind": request.kind,
        "context_engine.summary.reason": request.reason,
        "context_engine.summary.messages": len(request.messages),
    }
    with telemetry.summarizer_call(summarizer, attributes):
        try:
            return await _answer(summarizer, request, timeout)
        except SummarizerError as exc:
            # Its text goes to steps, logs and spans: no quote of the conversation in it.
            scrubbed = scrub_quotes(str(exc), request_sources(request))
            if scrubbed == str(exc):
                raise
            raise SummarizerError(scrubbed) from exc


async def _answer(summarizer: Summarizer, request: SummaryRequest, timeout: float | None) -> str:
    awaited = None
    try:
        answer: object = summarizer(request)
        if inspect.isawaitable(answer):
            awaited = _carry_own_timeout(answer)
            answer = await (asyncio.wait_for(awaited, timeout) if timeout else awaited)
    except SummarizerError:
        raise
    except _OwnTimeout as own:
        raise _failed(own.error) from own.error
    except asyncio.TimeoutError as exc:
        if awaited is None:  # a plain summarizer's own timeout (a socket's, say)
            raise _failed(exc) from exc
        raise SummarizerError(f"summarizer did not answer within {timeout} s") from exc
    except Exception as exc:
        raise _failed(exc) from exc
    return parse_summary_text(answer)


class _OwnTimeout(Exception):
    """A timeout the summarizer raised itself, carried past `asyncio.wait_for` unmistaken."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


async def _carry_own_timeout(answer: Awaitable[object]) -> object:
    try:
        return await answer
    except (TimeoutError, asyncio.TimeoutError) as exc:
        raise _OwnTimeout(exc) from None


def _failed(exc: BaseException) -> SummarizerError:
    return SummarizerError(f"summarizer failed: {type(exc).__name__}: {exc}")


def strip_images(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The messages with every image replaced by a placeholder (new objects only where needed)."""
    out = []
    for message in messages:
        if (
            any(isinstance(block, ImageBlock) for block in message.content)
            and not message.is_summary
        ):
            content = tuple(
                TextBlock(IMAGE_PLACEHOLDER) if isinstance(block, ImageBlock) else block
                for block in message.content
            )
            message = attrs.evolve(message, content=content)
        out.append(message)
    return tuple(out)


def chunk_history(
    messages: Sequence[Message],
    counter: TokenCounter,
    chunk_tokens: int,
    *,
    max_tool_result_chars: int,
) -> list[tuple[Message, ...]]:
    """Split ``messages`` into runs of at most ``chunk_tokens`` serialized tokens.

    Tool groups are never split; a single group larger than a chunk gets a chunk
    of its own (its tool results are clipped by the serialization anyway).
    """
    shape = analyze(messages)
    chunks: list[tuple[Message, ...]] = []
    current: list[Message] = []
    size = 0
    index = 0
    while index < len(messages):
        end = shape.unit_end(index)
        unit = messages[index:end]
        unit_size = sum(
            counter.count_text(serialize_message(m, max_tool_result_chars=max_tool_result_chars))
            for m in unit
        )
        if current and size + unit_size > chunk_tokens:
            chunks.append(tuple(current))
            current, size = [], 0
        current.extend(unit)
        size += unit_size
        index = end
    if current:
        chunks.append(tuple(current))
    return chunks


@attrs.define
class Deadline:
    """A summary-wide deadline, started when it is made, and the requests answered before it.

    Attributes:
        seconds: Time allowed for the whole summary; None: no deadline.
        finished: Summarizer requests answered so far (memo hits not included).
    """

    seconds: float | None
    finished: int = 0
    _ends: float | None = attrs.field(init=False)

    @_ends.default
    def _start(self) -> float | None:
        return None if self.seconds is None else time.monotonic() + self.seconds

    def remaining(self) -> float | None:
        """Seconds left (0 once passed), or None without a deadline."""
        return None if self._ends is None else max(0.0, self._ends - time.monotonic())

    def passed(self) -> bool:
        """Whether the deadline has passed."""
        return self.remaining() == 0.0

    def error(self) -> SummaryTimeoutError:
        """The error raised once the deadline has passed."""
        assert self.seconds is not None
        return SummaryTimeoutError(self.seconds, self.finished)


@attrs.frozen(kw_only=True)
class SummaryCall:
    """How one strategy talks to its summarizer."""

    summarizer: Summarizer
    prompts: SummaryPrompts
    counter: TokenCounter
    window: int
    max_summary_tokens: int
    max_tool_result_chars: int
    timeout: float | None
    reason: SummaryReason
    instructions: str | None
    memo: SummaryMemo = attrs.field(factory=SummaryMemo)
    """Answers kept across attempts (the strategy's own memo)."""
    redact: Callable[[str], str] | None = None
    """The strategy's redactor, which the messages went through, or None."""
    deadline: Deadline = attrs.field(factory=lambda: Deadline(None))
    """The summary-wide deadline, shared by every request of this call."""

    async def summarize(
        self, messages: Sequence[Message], previous: str | None, kind: SummaryKind = "history"
    ) -> tuple[str, int]:
        """The text for ``messages`` (updating ``previous``), and the number of chunks.

        Each chunk updates the running text, for a turn prefix as for the history,
        so a request compacted many times keeps one summary of its early part.

        Raises:
            SummarizerError: a request failed (the answers before it are kept in
                ``memo``); `SummaryTimeoutError` once ``deadline`` has passed.
        """
        running = previous
        room = self._chunk_tokens()
        clip_chars = self._one_request_clip(messages, room)
        chunks = chunk_history(messages, self.counter, room, max_tool_result_chars=clip_chars)
        for chunk in chunks:
            request = self._request(chunk, kind, running, self.max_summary_tokens, clip_chars)
            running = await self._ask(request)
        assert running is not None
        return running, len(chunks)

    async def condense(self, text: str, max_tokens: int) -> str:
        """``text`` rewritten by the summarizer to at most about ``max_tokens`` tokens.

        Raises:
            SummarizerError: the request failed; `SummaryTimeoutError` past the deadline.
        """
        clip_chars = self.max_tool_result_chars
        return await self._ask(self._request((), "condense", text, max(1, max_tokens), clip_chars))

    def _one_request_clip(self, messages: Sequence[Message], room: int) -> int:
        """The loosest clip at which ``messages`` fit one request of ``room`` tokens.

        Halves from ``max_tool_result_chars`` down to `MIN_CLIP_CHARS`; when none
        fits, ``max_tool_result_chars`` (the history is chunked at full detail then).
        """
        clip_chars = self.max_tool_result_chars
        while True:
            if self._serialized_tokens(messages, clip_chars) <= room:
                return clip_chars
            if clip_chars <= MIN_CLIP_CHARS:
                return self.max_tool_result_chars
            clip_chars = max(MIN_CLIP_CHARS, clip_chars // 2)

    def _serialized_tokens(self, messages: Sequence[Message], clip_chars: int) -> int:
        count = self.counter.count_text
        return sum(count(serialize_message(m, max_tool_result_chars=clip_chars)) for m in messages)

    def _request(
        self,
        messages: Sequence[Message],
        kind: SummaryKind,
        previous: str | None,
        max_tokens: int,
        clip_chars: int,
    ) -> SummaryRequest:
        return build_request(
            messages,
            kind=kind,
            previous_summary=previous,
            instructions=self.instructions,
            reason=self.reason,
            max_tokens=max_tokens,
            prompts=self.prompts,
            max_tool_result_chars=clip_chars,
            redact=self.redact,
        )

    async def _ask(self, request: SummaryRequest) -> str:
        """One request: from the memo when answered before, else from the summarizer."""
        key = request_key(request)
        kept = self.memo.get(key)
        if kept is not None:
            return kept
        deadline = self.deadline
        if deadline.passed():
            raise deadline.error()
        remaining = deadline.remaining()
        if remaining is not None:  # never 0: call_summarizer reads 0 as "no timeout"
            remaining = max(remaining, 0.001)
        timeout = self.timeout if remaining is None else min(self.timeout or remaining, remaining)
        # The request ran out of the summary's time, not its own: the deadline's error.
        bound = remaining is not None and (not self.timeout or remaining <= self.timeout)
        try:
            text = await call_summarizer(self.summarizer, request, timeout)
        except SummarizerError as exc:
            # asyncio.TimeoutError is not the builtin TimeoutError before Python 3.11.
            timed_out = isinstance(exc.__cause__, (TimeoutError, asyncio.TimeoutError))
            if timed_out and (bound or deadline.passed()):
                raise deadline.error() from exc
            raise
        # Kept even past the deadline: it is paid for, and the next attempt starts after it.
        self.memo.put(key, text)
        deadline.finished += 1
        return text

    def window_problem(self) -> str | None:
        """Why the summarizer's window cannot hold a useful chunk, or None when it can."""
        room = self._room()
        if room >= _MIN_CHUNK_TOKENS:
            return None
        return (
            f"the summarizer's window ({self.window} tokens) leaves {room} tokens for the "
            "conversation after the prompt and two summaries; raise summarizer_window or "
            "lower max_summary_tokens"
        )

    def _room(self) -> int:
        prompt = self.counter.count_text(self.prompts.system + self.prompts.summary)
        return self.window - 2 * self.max_summary_tokens - prompt - _FRAMING_TOKENS

    def _chunk_tokens(self) -> int:
        problem = self.window_problem()
        if problem is not None:
            raise SummarizerError(problem)
        return self._room()
