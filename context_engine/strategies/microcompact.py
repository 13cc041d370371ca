"""Tool-result microcompaction: old tool outputs give way to a short placeholder.

Tool results are usually the bulk of an agent's context, and the old ones are
rarely read again: a file listing from forty steps ago, a test run the agent has
since repeated. `ToolResultMicrocompact` replaces their content with a short
placeholder, oldest first, until the view fits. It never removes a message: a
cleared result keeps its role, ``tool_call_id`` and ``name``, so every call
stays paired with its result, and it is marked with `CLEARED_KEY` so a later
run leaves it alone.

The default placeholder describes what it replaced (`_placeholder.describe`):
the tool, an argument preview, the exit status or "error", and the key error
line, so the model knows how the call ended without running it again. Failed
results are cleared after successful ones of about the same age, and the
newest failure last of all: the agent's latest error is what it most needs.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import logging
import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar, TypeAlias

import attrs

from context_engine._lru import ByteLRU
from context_engine._validate import non_negative_int
from context_engine.errors import ConfigurationError
from context_engine.messages import Message, TextBlock, ToolCall
from context_engine.strategies._placeholder import describe, outcome
from context_engine.strategies._shorten import derived_copy, replace_oldest_first, step_share
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.structure import CLEARED_KEY, analyze
from context_engine.summarize.outcome import ENDED_KEY
from context_engine.tokens import TokenCounter

__all__ = ["DEFAULT_PLACEHOLDER", "FAILURE_GRACE", "ToolResultMicrocompact"]

logger = logging.getLogger(__name__)

DEFAULT_PLACEHOLDER = (
    "[This tool output was cleared to save context space. Run the tool again if you need it.]"
)
"""A fixed placeholder text, for ``placeholder=DEFAULT_PLACEHOLDER`` (the default
placeholder describes each call instead)."""

FAILURE_GRACE = 5
"""A failed result is cleared as if it were this many results younger."""

Classifier: TypeAlias = Callable[[ToolCall, Message], bool]
PlaceholderFn: TypeAlias = Callable[[ToolCall | None, Message], str]


def _utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def _optional_callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise ConfigurationError(
            f"{type(instance).__name__}.{attribute.name} must be a function or None, "
            f"got {type(value).__name__}"
        )


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise ConfigurationError(
            f"{type(instance).__name__}.{attribute.name} must be a function returning "
            f"a datetime, got {type(value).__name__}"
        )


def _placeholder_text(
    instance: object, attribute: attrs.Attribute[str | None], value: str | None
) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigurationError(
            f"{type(instance).__name__}.placeholder must be a non-empty str "
            "(providers reject empty tool results); leave it out (None) for the describing default"
        )


def _idle_threshold(
    instance: object, attribute: attrs.Attribute[_dt.timedelta | None], value: object
) -> None:
    if value is None:
        return
    if not isinstance(value, _dt.timedelta) or value < _dt.timedelta(0):
        raise ConfigurationError(
            f"{type(instance).__name__}.idle_threshold must be a non-negative "
            f"datetime.timedelta (for example timedelta(minutes=5)) or None, got {value!r}"
        )


# Bounded by bytes: arguments can be whole files (a write_file call), and this
# memo outlives every session that fed it.
_CANONICAL_ARGUMENTS: ByteLRU[str] = ByteLRU(max_bytes=4 * 1024 * 1024)


def _canonical_arguments(arguments: str) -> str:
    """The arguments JSON in one spelling, so ``{"a":1}`` and ``{ "a": 1 }`` match."""
    canonical = _CANONICAL_ARGUMENTS.get(arguments)
    if canonical is None:
        canonical = _canonical(arguments)
        size = sys.getsizeof(arguments) + sys.getsizeof(canonical)
        _CANONICAL_ARGUMENTS.put(arguments, canonical, size)
    return canonical


def _canonical(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return arguments
    return json.dumps(parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _answered_calls(view: Sequence[Message]) -> list[ToolCall | None]:
    """For each index, the call a tool result answers (the newest earlier call with its id)."""
    calls_by_id: dict[str | None, ToolCall] = {}
    answered: list[ToolCall | None] = [None] * len(view)
    for index, message in enumerate(view):
        role = message.role
        if role == "tool":
            answered[index] = calls_by_id.get(message.tool_call_id)
        elif role == "assistant":
            for call in message.tool_calls:
                calls_by_id[call.id] = call
    return answered


def _newest_distinct(
    view: Sequence[Message], calls: Sequence[ToolCall | None], keep_recent: int
) -> set[int]:
    """Indices of the results of the ``keep_recent`` newest distinct calls.

    Calls are the same when their tool name and arguments are; an older result
    of a call made again later is superseded and not kept. A result whose call
    is not in the view counts as a distinct call of its own.
    """
    kept: set[int] = set()
    seen: set[Hashable] = set()
    for index in range(len(view) - 1, -1, -1):
        if len(seen) >= keep_recent:
            break
        if view[index].role != "tool":
            continue
        call = calls[index]
        key: Hashable = (call.name, _canonical_arguments(call.arguments)) if call else index
        if key not in seen:
            seen.add(key)
            kept.add(index)
    return kept


def _aware(moment: _dt.datetime) -> _dt.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=_dt.timezone.utc)


@attrs.frozen(kw_only=True)
class ToolResultMicrocompact:
    """Replaces old tool results with a short placeholder, oldest first, until the view fits.

    A result may be cleared when it is not among the ``keep_recent`` newest
    distinct calls, lies outside the protected tail, is not part of calls still
    pending at the end, has not been cleared already, is at least
    ``min_result_tokens`` large and, with a ``classifier``, is one the
    classifier accepts. Messages are never removed; a cleared result keeps its
    role, ``tool_call_id`` and ``name``, loses its images, and carries
    ``CLEARED_KEY: True`` in its metadata.
    """

    keep_recent: int = attrs.field(default=5, validator=non_negative_int())
    """Results of this many newest distinct calls (same tool name and arguments
    JSON count as one call) are kept; superseded duplicates may be cleared."""
    classifier: Classifier | None = attrs.field(default=None, validator=_optional_callable)
    """When given, only results for which ``classifier(call, result)`` is True may be
    cleared (results whose call is not in the view are then kept)."""
    min_result_tokens: int = attrs.field(default=64, validator=non_negative_int())
    """Results smaller than this are kept: clearing them would save next to nothing."""
    placeholder: str | None = attrs.field(default=None, validator=_placeholder_text)
    """A fixed text every cleared result gets; None (the default) describes each
    call: tool, argument preview, exit status or "error", key error line."""
    placeholder_fn: PlaceholderFn | None = attrs.field(default=None, validator=_optional_callable)
    """Per-result placeholder, called as ``placeholder_fn(call, result)`` (``call`` is
    None when the call is not in the view). It must be idempotent: the same input
    must give the same text on every call, or each projection rewrites the
    prompt prefix differently and the provider's prompt cache never hits."""
    idle_threshold: _dt.timedelta | None = attrs.field(default=None, validator=_idle_threshold)
    """When set, rewrite only if the newest assistant message is older than this:
    before that the provider's prompt cache is likely warm, and rewriting the
    prefix would throw it away. Without a timestamp on that message (or without
    an assistant message) the cache is taken as cold."""
    clearing_step: float = attrs.field(default=0.2, validator=step_share)
    """Clear in steps of this share of the threshold (0 clears exactly enough).

    The engine rebuilds the view from the transcript on every call; clearing
    exactly enough would move the cleared boundary by a result or two on every
    call and change the prompt prefix each time, so the provider's prompt
    cache would never hit. Clearing one step more than needed, in whole steps,
    keeps the same results cleared, and the view's prefix unchanged, for many
    calls."""
    clock: Callable[[], _dt.datetime] = attrs.field(default=_utcnow, validator=_callable)
    """Returns the current time; naive datetimes (here and in timestamps) are taken as UTC."""
    name: str = attrs.field(default="tool_result_microcompact", init=False)
    uses_llm: ClassVar[bool] = False
    """The strategy's name in events, spans and logs."""

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Clear old tool results in ``view`` until it fits under ``budget.threshold``."""
        return self.rewrite(view, budget)

    def rewrite(self, view: Sequence[Message], budget: Budget) -> StrategyResult:
        """The synchronous body of `apply`: no I/O, the same input gives the same result."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        if not self.cache_is_cold(view):
            logger.debug("strategy=<%s> | prompt cache still warm, not rewriting", self.name)
            return StrategyResult.unchanged(view)
        replacements = (
            (index, functools.partial(self.clear, call, view[index]))
            for index, call in self._candidates(view, budget.counter)
        )
        # With a fixed text every result clears to the same message; a described or
        # custom placeholder also depends on the call, so it is not memoized per result.
        fixed = self.placeholder_fn is None and self.placeholder is not None
        memo = (type(self), self.placeholder) if fixed else None
        result = replace_oldest_first(
            view,
            replacements,
            budget,
            budget.goal_in_steps(self.clearing_step),
            "tool_result",
            memo=memo,
        )
        if result.applied:
            # Failures are cleared late, but the removals are reported in view order.
            position = {id(message): index for index, message in enumerate(view)}
            removed = sorted(result.removed, key=lambda r: position[id(r.originals[0])])
            result = attrs.evolve(result, removed=removed)
            logger.debug(
                "strategy=<%s> cleared=<%d> tokens_saved=<%d> | rewrite applied",
                self.name,
                len(result.removed),  # one result per removal
                result.tokens_saved,
            )
        return result

    def candidates(self, view: Sequence[Message], counter: TokenCounter) -> tuple[int, ...]:
        """Indices of the results this strategy may clear, in clearing order.

        Oldest first, except that a failed result comes `FAILURE_GRACE` places
        later than its age says, and the newest failed result comes last.
        """
        return tuple(index for index, _ in self._candidates(view, counter))

    def _candidates(
        self, view: Sequence[Message], counter: TokenCounter
    ) -> list[tuple[int, ToolCall | None]]:
        shape = analyze(view)
        calls = _answered_calls(view)
        kept = _newest_distinct(view, calls, self.keep_recent)
        found: list[tuple[int, ToolCall | None]] = []
        count = counter.count_message
        described = self.placeholder_fn is None and self.placeholder is None
        # The range leaves out the lead and the tail; the newest user message is no result.
        for index in range(shape.lead_end, min(shape.tail_start, shape.pending_start)):
            message = view[index]
            if message.role != "tool" or index in kept:
                continue
            if message.metadata.get(CLEARED_KEY):
                continue
            if count(message) < self.min_result_tokens:
                continue
            call = calls[index]
            if described and count(self.clear(call, message)) >= count(message):
                continue  # a short result the description would not shorten
            if self.classifier is not None and (call is None or not self.classifier(call, message)):
                continue
            found.append((index, call))
        return _failures_last(view, found)

    def cache_is_cold(self, view: Sequence[Message]) -> bool:
        """Whether ``idle_threshold`` allows a rewrite of ``view`` now."""
        if self.idle_threshold is None:
            return True
        stamp = next((m.timestamp for m in reversed(view) if m.role == "assistant"), None)
        if stamp is None:
            return True
        return _aware(self.clock()) - _aware(stamp) > self.idle_threshold

    def clear(self, call: ToolCall | None, result: Message) -> Message:
        """The cleared copy of ``result``: placeholder text, same role, id and name.

        Made once per result and placeholder text: clearing the same result
        again returns the same object.
        """
        fn = self.placeholder_fn
        if fn is None and self.placeholder is None:
            return derived_copy(result, (CLEARED_KEY, _DESCRIBED, call), _described, call)
        text = self.placeholder if fn is None else fn(call, result)
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError(
                f"placeholder_fn returned {text!r} for tool call {result.tool_call_id!r}; "
                "it must return a non-empty str"
            )
        return derived_copy(result, (CLEARED_KEY, text), _cleared, text)


_DESCRIBED = "described"


def _described(result: Message, call: ToolCall | None) -> Message:
    return _cleared(result, describe(call, result))


def _failures_last(
    view: Sequence[Message], found: list[tuple[int, ToolCall | None]]
) -> list[tuple[int, ToolCall | None]]:
    """The candidates in clearing order.

    Oldest first, a failure `FAILURE_GRACE` places later, the newest failure last.
    """
    failed = [outcome(view[index]).failed for index, _ in found]
    newest = max((p for p, bad in enumerate(failed) if bad), default=-1)

    def rank(position: int) -> tuple[int, bool]:
        # A failure goes after the FAILURE_GRACE results that follow it.
        if position == newest:
            return len(found) + FAILURE_GRACE, True
        return position + (FAILURE_GRACE if failed[position] else 0), failed[position]

    return [found[p] for p in sorted(range(len(found)), key=rank)]


def _cleared(result: Message, text: str) -> Message:
    # The placeholder keeps how its original ended: a checkpoint written from a
    # transcript that kept it must not read "exit status 0, error" as ok.
    ended = outcome(result).as_metadata()
    metadata = {**result.metadata, CLEARED_KEY: True, ENDED_KEY: ended}
    return attrs.evolve(result, content=(TextBlock(text),), metadata=metadata)
