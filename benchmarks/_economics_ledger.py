"""The pure part of `economics.py`: what each call costs, and observation masking.

Every function here is a decision on messages already in hand: no engine, no
peer, no I/O, so the test suite checks them on hand-made sessions.

Two cache models. A family with automatic caching (OpenAI) reads the prefix
a call shares with the previous prompt, from 1,024 tokens on and in 128-token
steps (`AUTOMATIC_STEP_TOKENS`). A family with explicit breakpoints
(Anthropic) reads only what `AnthropicCache` finds: an entry is written
only at a breakpoint (``cache_control`` on a message's last block), and a
call reads the longest entry that is a prefix of its prompt and ends at most
`LOOKBACK_BLOCKS` content blocks before one of its own breakpoints; it
writes its prompt from there up to its last breakpoint (1.25x), and what
follows that breakpoint is plain input. Where the breakpoints go is a
`Placement`: `system_and_last` (the careful user's) or `engine_placement`
(``cache_breakpoints=True``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import attrs

from context_engine import Message, TextBlock, ThinkingBlock
from context_engine.cache_cost import estimate_call
from context_engine.formats.breakpoints import breakpoints_of, place_breakpoints
from context_engine.pricing import CACHE_PRICING, CachePricing
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TokenCounter

MASK_KEEP = 10
MASK_PLACEHOLDER = "[Earlier tool output omitted.]"

Prompt = tuple[Message, ...]
Call = tuple[Prompt, Prompt]  # (the agent's history before the call, the prompt sent)
Placement = Callable[[Prompt], tuple[int, ...]]
"""Where a contender's requests carry Anthropic breakpoints: indices of the messages whose
last block has ``cache_control``, ascending."""

LOOKBACK_BLOCKS = 20
"""Content blocks Anthropic checks for a cache hit from a breakpoint: the breakpoint's own
block and the 19 before it (its prompt-caching guide: about 20 blocks)."""
AUTOMATIC_STEP_TOKENS = 128
"""OpenAI's cache hits grow from the 1,024-token minimum in steps of this many tokens."""


@dataclass(frozen=True)
class CallCost:
    """The accounting of one LLM call.

    ``tokens`` is 0 for a call above the window: the provider rejects it and
    bills nothing, and the agent loop stops there (``attempted`` keeps its size).
    """

    tokens: int
    attempted: int
    reused: int
    overflow: bool
    broken_pairs: int
    cache_break: bool = False
    """The prompt does not start with the previous accepted prompt: the cache misses from there."""
    anthropic_read: int = 0
    """Tokens Anthropic reads from its cache for this call (`AnthropicCache`)."""
    anthropic_written: int = 0
    """Tokens this call writes to Anthropic's cache (up to its last breakpoint)."""


@dataclass(frozen=True)
class SummaryRequestCost:
    """One summarizer request, the two ways a provider summarizer can send it.

    *Apart*: its own prompt (the conversation serialized as data), nothing of
    which the agent's cache holds: plain input. *Reusing the prefix*
    (`context_engine.summarize.reuse.reusing_prompt`): the agent's last view
    as sent, up to the end of the history, then the appended message (the
    instruction and the originals of what the view shows shortened); what
    the view part shares with the agent's last prompt is read from the cache,
    the rest of it is written (the request marks a breakpoint on it) and the
    appended message is plain input. A request whose history the view does
    not hold is sent apart in both modes (`sent_apart`).

    Under a family with explicit breakpoints the reads and writes are
    `AnthropicCache`'s instead, once `account_session` has replayed the
    request in its place among the agent's calls (``lead``, ``view``,
    ``after_calls``): the lead carries the view's breakpoints that fall in
    it, or one on its last block when none does (as
    `context_engine.summarize.anthropic` sends it).
    """

    apart_tokens: int
    reusing_tokens: int
    reused_tokens: int
    instruction_tokens: int
    """The appended message: the instruction and the originals after it."""
    output_tokens: int
    lead: Prompt = field(default=(), repr=False, compare=False)
    """The agent's messages sent before the instruction (empty: sent apart)."""
    view: Prompt = field(default=(), repr=False, compare=False)
    """The agent's last prompt, whose breakpoints the lead keeps."""
    after_calls: int = 0
    """How many of the agent's calls came before this request."""
    anthropic_read: int | None = None
    """Tokens read from Anthropic's cache (None: not replayed, or sent apart)."""
    anthropic_written: int = 0

    @classmethod
    def sent_apart(cls, apart_tokens: int, output_tokens: int) -> SummaryRequestCost:
        """A request the summarizers send apart even when reusing the prefix: plain input."""
        return cls(apart_tokens, apart_tokens, 0, apart_tokens, output_tokens)

    def cost(self, family: str, reuse: bool) -> float:
        """The request in input-token units under ``family``'s prices."""
        pricing = CACHE_PRICING[family]
        output = self.output_tokens * pricing.output_multiplier
        if not reuse:
            return self.apart_tokens + output
        if not pricing.automatic and self.anthropic_read is not None:
            read, written = self.anthropic_read, self.anthropic_written
            plain = max(0, self.reusing_tokens - read - written)
            return (
                read * pricing.read_multiplier + written * pricing.write_multiplier + plain + output
            )
        reused = automatic_hit(pricing, self.reused_tokens) if pricing.automatic else None
        reused = self.reused_tokens if reused is None else reused
        written = max(0, self.reusing_tokens - reused - self.instruction_tokens)
        return (
            reused * pricing.read_multiplier
            + written * pricing.write_multiplier
            + self.instruction_tokens
            + output
        )


SUMMARY_MODES = ("reuse", "apart")
"""How the summary requests are sent: reusing the agent's prefix, or apart."""


def summary_dollars(requests: Iterable[SummaryRequestCost], family: str, reuse: bool) -> float:
    """What the summary requests cost under ``family``'s published prices."""
    units = sum(request.cost(family, reuse) for request in requests)
    return CACHE_PRICING[family].dollars(units) or 0.0


@dataclass
class Outcome:
    """One contender on one transcript at one window."""

    contender: str
    transcript: str
    window: int
    calls: int
    tokens: int
    attempted_tokens: int
    reused: int
    cache_share: float
    summarizer_calls: int
    commits: int
    overflows: int
    broken_pairs: int
    max_tokens: int
    cache_breaks: int = 0
    dollars: dict[str, float] = field(default_factory=dict)
    """The agent's prompts priced per family of `CACHE_PRICING` (summarizer requests aside)."""
    summary_dollars: dict[str, dict[str, float]] = field(default_factory=dict)
    """The summarizer requests per family, sent reusing the agent's prefix (``reuse``) or apart."""
    summary_input_tokens: int = 0
    """Input tokens of the summarizer requests, sent apart."""
    summary_output_tokens: int = 0
    anthropic_read: int = 0
    """Prompt tokens Anthropic's cache served, with the contender's breakpoints."""
    anthropic_written: int = 0
    """Prompt tokens written to Anthropic's cache."""
    tokens_per_call: list[int] = field(default_factory=list)
    reused_per_call: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def pairs_intact(self) -> bool:
        return self.broken_pairs == 0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pairs_intact": self.pairs_intact}


# -- accounting (pure) --------------------------------------------------------------------------


def prompt_tokens(view: Sequence[Message], counter: TokenCounter) -> int:
    """Tokens of one prompt: every message with its framing, plus the reply priming."""
    return REQUEST_OVERHEAD_TOKENS + sum(counter.count_message(m) for m in view)


def shared_prefix_tokens(
    previous: Sequence[Message] | None, view: Sequence[Message], counter: TokenCounter
) -> int:
    """Tokens of the leading messages of ``view`` equal to those of ``previous``."""
    if previous is None:
        return 0
    total = 0
    for before, now in zip(previous, view, strict=False):
        if before is not now and before != now:
            break
        total += counter.count_message(now)
    return total


def _unpaired(messages: Iterable[Message]) -> set[str]:
    calls: set[str] = set()
    results: set[str] = set()
    for message in messages:
        calls.update(c.id for c in message.tool_calls)
        if message.role == "tool" and message.tool_call_id is not None:
            results.add(message.tool_call_id)
    return calls ^ results


def broken_pairs(history: Sequence[Message], view: Sequence[Message]) -> int:
    """Tool calls without their result (or results without their call) the view introduced."""
    return len(_unpaired(view) - _unpaired(history))


def automatic_hit(pricing: CachePricing, reused: int) -> int:
    """What an automatic cache serves of a ``reused``-token shared prefix.

    Nothing below the minimum; above it, whole `AUTOMATIC_STEP_TOKENS` steps.
    """
    minimum = pricing.minimum_for(pricing.model)
    if reused < minimum:
        return 0
    return minimum + (reused - minimum) // AUTOMATIC_STEP_TOKENS * AUTOMATIC_STEP_TOKENS


def anthropic_blocks(message: Message) -> int:
    """Content blocks ``message`` makes in an Anthropic request (a tool result is one)."""
    if message.role == "tool":
        return 1
    return max(1, len(message.content))


def _carries_breakpoint(message: Message) -> bool:
    """Whether the last block of ``message`` can take ``cache_control`` (thinking cannot)."""
    if message.role == "tool":
        return True
    return bool(message.content) and not isinstance(message.content[-1], ThinkingBlock)


def system_and_last(view: Prompt) -> tuple[int, ...]:
    """The careful user's placement: the last leading system message, and the last message."""
    head = 0
    while head < len(view) and view[head].role in ("system", "developer"):
        head += 1
    wanted = {head - 1, len(view) - 1}
    return tuple(sorted(i for i in wanted if i >= 0 and _carries_breakpoint(view[i])))


def engine_placement(counter: TokenCounter, pricing: CachePricing | None = None) -> Placement:
    """The engine's own placement with ``cache_breakpoints=True`` (`place_breakpoints`).

    After the stable prefix (the leading system messages and the checkpoint
    that follows them) and on the last message, each only when its prefix
    reaches the model's minimum cacheable length, as ``context_engine.call``
    asks it to (no tool schemas: no fixed overhead).
    """
    pricing = pricing or CACHE_PRICING["anthropic"]
    minimum = pricing.minimum_for(pricing.model)
    limit = pricing.max_breakpoints or 4

    def place(view: Prompt) -> tuple[int, ...]:
        def prefix(index: int) -> int:
            return sum(counter.count_message(m) for m in view[: index + 1])

        placed = place_breakpoints(view, prefix, limit=limit, min_tokens=minimum)
        return tuple(i for i, message in enumerate(placed) if breakpoints_of(message))

    return place


@dataclass(frozen=True)
class CacheUse:
    """What one request reads from and writes to a breakpoint cache, in tokens."""

    read: int
    written: int


class AnthropicCache:
    """Anthropic's prompt cache over one session, entries kept for the whole session.

    An entry is the prompt's prefix up to a breakpoint, written when at least
    the model's minimum cacheable tokens long. A request reads, for each of
    its breakpoints, the longest entry that is a prefix of its prompt and
    ends within `LOOKBACK_BLOCKS` blocks of that breakpoint (its own block
    included), and the longest of those over its breakpoints; it writes from
    there up to its last breakpoint that is long enough. Prefixes are told
    apart by a chain of message hashes (the message's value, not its
    metadata: ``cache_control`` marks are not content).
    """

    def __init__(
        self,
        counter: TokenCounter,
        pricing: CachePricing | None = None,
        lookback: int = LOOKBACK_BLOCKS,
    ) -> None:
        pricing = pricing or CACHE_PRICING["anthropic"]
        self.counter = counter
        self.minimum = pricing.minimum_for(pricing.model)
        self.lookback = lookback
        self.entries: set[int] = set()
        self._hashes: dict[int, tuple[Message, int]] = {}

    def _hash(self, message: Message) -> int:
        known = self._hashes.get(id(message))
        if known is None or known[0] is not message:
            known = (message, hash(message))
            self._hashes[id(message)] = known
        return known[1]

    def send(self, prompt: Sequence[Message], breakpoints: Sequence[int]) -> CacheUse:
        """Reads and writes of ``prompt`` with ``breakpoints`` (message indices); records it."""
        keys, tokens, blocks = [], [], []
        key, total, count = 0, 0, 0
        for message in prompt:
            key = hash((key, self._hash(message)))
            total += self.counter.count_message(message)
            count += anthropic_blocks(message)
            keys.append(key)
            tokens.append(total)
            blocks.append(count)
        marks = sorted({b for b in breakpoints if 0 <= b < len(prompt)})
        read = 0
        for mark in marks:
            index = mark
            while index >= 0 and blocks[mark] - blocks[index] < self.lookback:
                if keys[index] in self.entries:
                    read = max(read, tokens[index])
                    break
                index -= 1
        cached = [b for b in marks if tokens[b] >= self.minimum]
        written = max(0, tokens[cached[-1]] - read) if cached else 0
        self.entries.update(keys[b] for b in cached)
        return CacheUse(read, written)


def account(
    calls: Iterable[Call],
    window: int,
    counter: TokenCounter,
    placement: Placement = system_and_last,
) -> list[CallCost]:
    """The cost of each call; a call above ``window`` is refused and leaves the cache as it was."""
    return account_session(calls, window, counter, placement)[0]


def account_session(
    calls: Iterable[Call],
    window: int,
    counter: TokenCounter,
    placement: Placement = system_and_last,
    summaries: Sequence[SummaryRequestCost] = (),
) -> tuple[list[CallCost], list[SummaryRequestCost]]:
    """The calls' costs, and the summary requests with their Anthropic reads and writes.

    Each summary request reusing the prefix is sent, in Anthropic's cache,
    before the call it preceded (``after_calls``).
    """
    cache = AnthropicCache(counter)
    pending = sorted(enumerate(summaries), key=lambda item: item[1].after_calls)
    priced: dict[int, SummaryRequestCost] = {}
    costs: list[CallCost] = []
    previous: Prompt | None = None

    def flush(upto: int | None) -> None:
        while pending and (upto is None or pending[0][1].after_calls <= upto):
            number, request = pending.pop(0)
            priced[number] = _sent_summary(cache, request, placement)

    for index, (history, view) in enumerate(calls):
        flush(index)
        tokens = prompt_tokens(view, counter)
        broken = broken_pairs(history, view)
        if tokens > window:
            costs.append(CallCost(0, tokens, 0, True, broken))
            continue
        reused = shared_prefix_tokens(previous, view, counter)
        kept = previous is None or (
            len(view) >= len(previous) and all(a == b for a, b in zip(previous, view, strict=False))
        )
        use = cache.send(view, placement(view))
        costs.append(
            CallCost(
                tokens,
                tokens,
                reused,
                False,
                broken,
                cache_break=not kept,
                anthropic_read=use.read,
                anthropic_written=use.written,
            )
        )
        previous = view
    flush(None)
    return costs, [priced.get(n, request) for n, request in enumerate(summaries)]


def _sent_summary(
    cache: AnthropicCache, request: SummaryRequestCost, placement: Placement
) -> SummaryRequestCost:
    """``request`` with what its lead reads from and writes to ``cache``."""
    lead = request.lead
    if not lead:
        return request
    marks = [b for b in placement(request.view) if b < len(lead)]
    if not marks and _carries_breakpoint(lead[-1]):
        marks = [len(lead) - 1]
    use = cache.send(lead, marks)
    return replace(request, anthropic_read=use.read, anthropic_written=use.written)


def outcome(
    contender: str,
    transcript: str,
    window: int,
    costs: Sequence[CallCost],
    *,
    summarizer_calls: int = 0,
    commits: int = 0,
    problems: Sequence[str] = (),
    summaries: Sequence[SummaryRequestCost] = (),
) -> Outcome:
    """Sums over the calls of one replay (and its summarizer requests)."""
    tokens = sum(c.tokens for c in costs)
    reused = sum(c.reused for c in costs)
    return Outcome(
        contender=contender,
        transcript=transcript,
        window=window,
        calls=len(costs),
        tokens=tokens,
        attempted_tokens=sum(c.attempted for c in costs),
        reused=reused,
        cache_share=reused / tokens if tokens else 0.0,
        summarizer_calls=summarizer_calls,
        commits=commits,
        overflows=sum(c.overflow for c in costs),
        broken_pairs=sum(c.broken_pairs for c in costs),
        max_tokens=max((c.attempted for c in costs), default=0),
        cache_breaks=sum(c.cache_break for c in costs),
        dollars={family: prompt_dollars(costs, family) for family in CACHE_PRICING},
        summary_dollars={
            family: {
                mode: summary_dollars(summaries, family, mode == "reuse") for mode in SUMMARY_MODES
            }
            for family in CACHE_PRICING
        },
        summary_input_tokens=sum(r.apart_tokens for r in summaries),
        summary_output_tokens=sum(r.output_tokens for r in summaries),
        anthropic_read=sum(c.anthropic_read for c in costs),
        anthropic_written=sum(c.anthropic_written for c in costs),
        tokens_per_call=[c.tokens for c in costs],
        reused_per_call=[c.reused for c in costs],
        problems=list(problems),
    )


def prompt_dollars(costs: Iterable[CallCost], family: str) -> float:
    """What the accepted prompts cost under ``family``'s published cache prices.

    Automatic caching: the prefix shared with the previous prompt, in whole
    steps (`automatic_hit`), read; the rest at the write price. Breakpoints:
    `AnthropicCache`'s reads and writes, the rest of the prompt plain input.
    """
    pricing = CACHE_PRICING[family]
    total = 0.0
    for cost in costs:
        if not cost.tokens:
            continue
        if pricing.automatic:
            hit = automatic_hit(pricing, cost.reused)
            total += estimate_call(pricing, cost.tokens, hit).dollars or 0.0
            continue
        read, written = cost.anthropic_read, cost.anthropic_written
        plain = max(0, cost.tokens - read - written)
        units = read * pricing.read_multiplier + written * pricing.write_multiplier + plain
        total += pricing.dollars(units) or 0.0
    return total


def call_points(messages: Sequence[Message]) -> list[int]:
    """Indices of the assistant messages after the first message: one LLM call each."""
    return [i for i, m in enumerate(messages) if i and m.role == "assistant"]


# -- observation masking ----------------------------------------------------------------------


def mask_observations(history: Sequence[Message], keep: int = MASK_KEEP) -> Prompt:
    """The history with every tool result but the ``keep`` newest replaced by a placeholder."""
    results = [i for i, m in enumerate(history) if m.role == "tool"]
    masked = set(results[: max(0, len(results) - keep)])
    placeholder = (TextBlock(MASK_PLACEHOLDER),)
    return tuple(
        attrs.evolve(m, content=placeholder) if i in masked else m for i, m in enumerate(history)
    )


def _units(view: Sequence[Message]) -> tuple[int, list[tuple[int, int]]]:
    """The untouchable head's length and the droppable steps after it, as (start, end)."""
    head = 0
    while head < len(view) and view[head].role in ("system", "developer"):
        head += 1
    if head < len(view) and view[head].role == "user":
        head += 1  # the task
    starts = [i for i in range(head, len(view)) if view[i].role != "tool" or i == head]
    ends = [*starts[1:], len(view)] if starts else []
    return head, list(zip(starts, ends, strict=True))


def cap_to_window(view: Sequence[Message], window: int, counter: TokenCounter) -> Prompt:
    """Drop the oldest whole steps (after the system messages and the task) until it fits.

    A step is an assistant message with the tool results that follow it, or a
    user message; the newest step always stays, so the prompt may still be
    above the window.
    """
    total = prompt_tokens(view, counter)
    head, units = _units(view)
    dropped = 0
    while total > window and dropped < len(units) - 1:
        start, end = units[dropped]
        total -= sum(counter.count_message(m) for m in view[start:end])
        dropped += 1
    if not dropped:
        return tuple(view)
    return (*view[:head], *view[units[dropped][0] :])
