"""The pure part of `economics.py`: what each call costs, and observation masking.

Every function here is a decision on messages already in hand: no engine, no
peer, no I/O, so the test suite checks them on hand-made sessions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import attrs

from context_engine import Message, TextBlock
from context_engine.cache_cost import estimate_call
from context_engine.pricing import CACHE_PRICING
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TokenCounter

MASK_KEEP = 10
MASK_PLACEHOLDER = "[Earlier tool output omitted.]"

Prompt = tuple[Message, ...]
Call = tuple[Prompt, Prompt]  # (the agent's history before the call, the prompt sent)


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
    """

    apart_tokens: int
    reusing_tokens: int
    reused_tokens: int
    instruction_tokens: int
    """The appended message: the instruction and the originals after it."""
    output_tokens: int

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
        written = max(0, self.reusing_tokens - self.reused_tokens - self.instruction_tokens)
        return (
            self.reused_tokens * pricing.read_multiplier
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


def account(calls: Iterable[Call], window: int, counter: TokenCounter) -> list[CallCost]:
    """The cost of each call; a call above ``window`` is refused and leaves the cache as it was."""
    costs: list[CallCost] = []
    previous: Prompt | None = None
    for history, view in calls:
        tokens = prompt_tokens(view, counter)
        broken = broken_pairs(history, view)
        if tokens > window:
            costs.append(CallCost(0, tokens, 0, True, broken))
            continue
        reused = shared_prefix_tokens(previous, view, counter)
        kept = previous is None or (
            len(view) >= len(previous) and all(a == b for a, b in zip(previous, view, strict=False))
        )
        costs.append(CallCost(tokens, tokens, reused, False, broken, cache_break=not kept))
        previous = view
    return costs


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
        tokens_per_call=[c.tokens for c in costs],
        reused_per_call=[c.reused for c in costs],
        problems=list(problems),
    )


def prompt_dollars(costs: Iterable[CallCost], family: str) -> float:
    """What the accepted prompts cost under ``family``'s published cache prices."""
    pricing = CACHE_PRICING[family]
    total = 0.0
    for cost in costs:
        if cost.tokens:
            total += estimate_call(pricing, cost.tokens, cost.reused).dollars or 0.0
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
