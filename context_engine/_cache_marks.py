"""The engine's Anthropic breakpoints on a view, and what a breakpoint cache serves of it.

With ``cache_breakpoints=True`` the engine marks each view it hands out
(`request_view`) and remembers where (`Session.marks`): the next call's
placement keeps a breakpoint on the deepest of them it still starts with,
and the cost-aware engine prices a rewrite by what the provider's cache
would really serve (`served_tokens`): under a pricing with
``breakpoint_lookback_blocks`` only the prefix up to the previous request's
last breakpoint before the first change, not the whole shared prefix.
The usage the engine reports (`ContextUsage.cache`) and the cost on its
rewrite events (`RewriteEvent.cost`) are priced by the same rule
(`cache_reads`).
"""

from __future__ import annotations

from collections.abc import Sequence

from context_engine._settings import Settings
from context_engine.formats.breakpoints import (
    MAX_BREAKPOINTS,
    cached_prefix,
    marked,
    place_breakpoints,
    stable_prefix_end,
)
from context_engine.messages import Message
from context_engine.meter import Meter
from context_engine.pricing import CACHE_PRICING
from context_engine.session import Remembered, Session
from context_engine.strategies.base import Strategy
from context_engine.strategies.microcompact import ToolResultMicrocompact
from context_engine.structure import CLEARED_KEY, analyze
from context_engine.tokens import TokenCounter

__all__ = ["cache_reads", "clearing_frontier", "request_view", "served_tokens"]


def clearing_frontier(
    strategies: Sequence[Strategy], view: Sequence[Message], counter: TokenCounter
) -> int | None:
    """The last message before the first tool result a later clearing may rewrite, or None.

    That result is the oldest one the pipeline's `ToolResultMicrocompact` has
    not cleared and would not keep for its size (recent ones included: they
    age). Everything up to the frontier stays as it is through that clearing.
    """
    clearing = next((s for s in strategies if isinstance(s, ToolResultMicrocompact)), None)
    if clearing is None:
        return None
    count = counter.count_message
    for index in range(analyze(view).lead_end, len(view)):
        message = view[index]
        if message.role != "tool" or message.metadata.get(CLEARED_KEY):
            continue
        if count(message) >= clearing.min_result_tokens:
            return index - 1
    return None


def request_view(
    settings: Settings,
    meter: Meter,
    view: tuple[Message, ...],
    previous: Remembered | None,
    previous_marks: Sequence[int] | None,
) -> tuple[Message, ...]:
    """``view`` with the engine's breakpoints (`place_breakpoints`), given the last request's.

    The anchor is the previous request's deepest breakpoint ``view`` still
    starts with; the frontier is `clearing_frontier`'s.
    """
    pricing = settings.pricing
    if pricing is None or pricing.breakpoint_lookback_blocks is None:
        pricing = CACHE_PRICING["anthropic"]
    anchor = None
    if previous is not None and previous_marks:
        shared, _ = meter.shared_prefix(view, previous.view)
        inside = [mark for mark in previous_marks if mark < shared]
        anchor = inside[-1] if inside else None
    count = meter.counter.count_message
    overhead = meter.overhead_tokens
    return place_breakpoints(
        view,
        lambda index: overhead + sum(map(count, view[: index + 1])),
        limit=pricing.max_breakpoints if pricing.max_breakpoints is not None else MAX_BREAKPOINTS,
        min_tokens=pricing.minimum_for(pricing.model),
        frontier=clearing_frontier(settings.strategies, view, meter.counter),
        anchor=anchor,
        lookback=pricing.breakpoint_lookback_blocks,
    )


def _assumed(view: Sequence[Message]) -> tuple[int, ...]:
    """Breakpoints of a request the engine does not mark: the caller's, and two assumed.

    One after the system prompt and one on the last message.
    """
    found = {*marked(view), stable_prefix_end(view), len(view) - 1}
    return tuple(sorted(index for index in found if index >= 0))


def served_tokens(
    settings: Settings,
    meter: Meter,
    session: Session,
    view: tuple[Message, ...],
    *,
    placed: tuple[Message, ...] | None = None,
) -> int:
    """Tokens of ``view``'s prefix the provider's cache serves after the last request.

    A prefix cache (no ``breakpoint_lookback_blocks``) serves all the view
    shares with the last view. A breakpoint cache serves it only up to the
    last request's deepest breakpoint within it that one of this request's
    breakpoints finds (`cached_prefix`): the engine's own when it places
    them, else the caller's plus one after the system prompt and one on the
    last message (so a rewrite behind the last message keeps only the
    system prompt cached). ``placed``: ``view`` with the engine's breakpoints
    when the caller has placed them already (`request_view`), so they are
    not placed twice.
    """
    last = session.last
    if last is None:
        return 0
    shared, _ = meter.shared_prefix(view, last.view)
    pricing = settings.pricing
    lookback = None if pricing is None else pricing.breakpoint_lookback_blocks
    if lookback is None:
        return meter.prefix_tokens(view, shared)
    if settings.cache_breakpoints and session.marks is not None:
        before = session.marks
        marks = marked(
            placed if placed is not None else request_view(settings, meter, view, last, before)
        )
    else:
        before, marks = _assumed(last.view), _assumed(view)
    return meter.prefix_tokens(view, cached_prefix(view, shared, before, marks, lookback))


def cache_reads(
    settings: Settings,
    meter: Meter,
    session: Session,
    transcript: tuple[Message, ...],
    view: tuple[Message, ...],
) -> tuple[int, int]:
    """What the cache would serve of the call's prompt unrewritten, and what it serves of ``view``.

    Asked before the session remembers ``view``. The second number is
    `served_tokens` of ``view``. The first is what a rewrite of the call's
    input gives up: on a prefix cache all the last view holds (its estimate;
    a prompt that starts with it reads it whole); on a breakpoint cache,
    `served_tokens` of the prompt the engine would send without a rewrite
    (the last projected view plus the new messages, `Session.extension`, or
    ``transcript``), which reads only up to an entry one of its own
    breakpoints reaches.
    """
    served = served_tokens(settings, meter, session, view)
    last = session.last
    if last is None:
        return 0, served
    pricing = settings.pricing
    if pricing is None or pricing.breakpoint_lookback_blocks is None:
        return last.estimate.tokens, served
    unrewritten = session.extension(transcript) or transcript
    return served_tokens(settings, meter, session, unrewritten), served
