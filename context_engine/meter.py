"""How the engine measures views: counted tokens, provider usage anchors, the untouchable floor.

Every view of one call is measured on one scale: the tokenizer's count plus a
correction fixed for that call. Without a provider anchor the correction is the
declared ``overhead_tokens``; with a trusted anchor it is what the provider
billed minus what we count for the same prefix (tool schemas and tokenizer
differences included). A strategy that saves N counted tokens therefore saves N
measured tokens, whatever it rewrites.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from itertools import accumulate, compress, islice

import attrs

from context_engine.messages import Message, TextBlock
from context_engine.strategies.tool_result_cap import MIN_CAP_TOKENS
from context_engine.structure import CAPPED_KEY, CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY, analyze
from context_engine.tokens import (
    REQUEST_OVERHEAD_TOKENS,
    TokenCounter,
    UsageEstimate,
    estimate_from_counts,
    is_approximate,
    last_usage_index,
)

__all__ = ["Meter", "Seen", "starts_with"]

_REWRITE_KEYS = (CAPPED_KEY, CLEARED_KEY, TRIMMED_KEY, TRUNCATION_KEY)


def _same_prefix(view: Sequence[Message], reference: Sequence[Message], length: int) -> bool:
    """Whether the first ``length`` messages are equal in both (identity first, at C speed).

    Equality, not identity: a caller or runtime adapter that rebuilds equal
    message objects on every call still has its provider usage anchors trusted.
    """
    if len(view) < length or len(reference) < length:
        return False
    return tuple(view[:length]) == tuple(reference[:length])


_CHUNK = 64


def starts_with(view: tuple[Message, ...], prefix: tuple[Message, ...]) -> bool:
    """Whether ``view`` begins with ``prefix`` (equal position by position), copying neither.

    Tuples order by their first unequal items, then by length, so ``prefix <=
    view`` compares items for equality (identity first, at C speed, without
    touching the messages) and, when all of ``prefix`` matches, holds by
    length. Where two items differ, Python then orders them, which messages
    refuse: not a prefix.
    """
    if len(prefix) > len(view):
        return False
    try:
        return bool(prefix <= view)
    except Exception:  # unordered items: messages (TypeError), or a caller's odd object
        return False


def _shared_prefix(
    view: tuple[Message, ...], previous: tuple[Message, ...], known: tuple[Message, ...] = ()
) -> tuple[int, tuple[Message, ...]]:
    """How many leading messages ``view`` shares with ``previous``, and a tuple of them.

    Equality (identity first) also matches a caller that rebuilds equal
    message objects from dicts on every call. ``known`` is a tuple
    ``previous`` is known to begin with. The usual answers (the caller
    appended to ``previous``, or replaced its last message) cost one C-speed
    comparison; past ``known`` (or all but the last message of ``previous``)
    the rest is compared chunk by chunk, so at most one chunk is compared in
    Python. The tuple returned is one ``view`` begins with: the next call
    passes it as ``known``.
    """
    if known and starts_with(view, known):
        verified = known
    elif starts_with(view, previous):
        return len(previous), previous
    elif len(previous) > 1 and view[len(previous) - 2 : len(previous) - 1] == previous[-2:-1]:
        head = previous[:-1]
        verified = head if starts_with(view, head) else ()
    else:
        verified = ()
    start = len(verified)
    limit = min(len(view), len(previous))
    while start < limit:
        stop = min(limit, start + _CHUNK)
        if view[start:stop] != previous[start:stop]:
            for index in range(start, stop):
                mine, theirs = view[index], previous[index]
                if mine is not theirs and mine != theirs:
                    return index, verified
        start = stop
    if limit == len(previous):  # view begins with all of previous
        return limit, previous
    return limit, verified


def _rewritten(message: Message) -> bool:
    """A checkpoint, a truncation marker, or a message a strategy shortened."""
    if message.is_summary:
        return True
    metadata = message.metadata
    return bool(metadata) and any(key in metadata for key in _REWRITE_KEYS)


def _has_text(message: Message) -> bool:
    return any(isinstance(block, TextBlock) for block in message.content)


@attrs.frozen
class Seen:
    """What the engine saw and returned on its last call."""

    input: tuple[Message, ...]
    input_estimate: UsageEstimate
    view: tuple[Message, ...]
    view_estimate: UsageEstimate


@attrs.define
class Meter:
    """Counts views the same way everywhere in one engine.

    Attributes:
        counter: Counts single messages.
        overhead_tokens: Fixed prompt parts sent with every call.
    """

    counter: TokenCounter
    overhead_tokens: int = 0
    # The last input measured, its prefix sums and usage index: an agent loop
    # appends to the same list, so the next call only counts what is new.
    _memo: tuple[tuple[Message, ...], list[int], int] = attrs.field(
        factory=lambda: ((), [0], -1), init=False, repr=False
    )
    # A tuple the last input begins with (itself, when the caller appended):
    # checking that the next input begins with it copies nothing.
    _stable: tuple[Message, ...] = attrs.field(factory=tuple, init=False, repr=False)
    # The last (view, previous, shared, verified) comparison: the engine compares the
    # same pair when it checks the input, counts it and reports the prompt-cache prefix.
    _compared: tuple[tuple[Message, ...], tuple[Message, ...], int, tuple[Message, ...]] = (
        attrs.field(factory=lambda: ((), (), 0, ()), init=False, repr=False)
    )
    # The last view `measurer` counted and its tokenizer total (no framing).
    _counted: tuple[tuple[Message, ...], int] = attrs.field(
        factory=lambda: ((), 0), init=False, repr=False
    )

    def counted(self, view: Sequence[Message]) -> int:
        """Tokenizer count of ``view`` with the request framing, no correction."""
        count = self.counter.count_message
        return sum(map(count, view)) + REQUEST_OVERHEAD_TOKENS

    def shared(self, view: tuple[Message, ...], previous: tuple[Message, ...]) -> int:
        """`_shared_prefix` of the pair, remembered for the next question about the same pair."""
        seen_view, seen_previous, shared, _ = self._compared
        if seen_view is view and seen_previous is previous:
            return shared
        known = self._stable if previous is self._memo[0] else ()
        shared, verified = _shared_prefix(view, previous, known)
        self._compared = (view, previous, shared, verified)
        return shared

    def checked_prefix(self, view: tuple[Message, ...]) -> int:
        """How many leading items of ``view`` are messages of the last input already checked."""
        return self.shared(view, self._memo[0])

    def counts(self, view: tuple[Message, ...]) -> tuple[list[int], int]:
        """Prefix sums of the per-message counts of ``view`` and its usage index.

        Reuses the previous input's work for the part ``view`` shares with it
        (all of it when the caller appended, all but the last message when the
        caller replaced that one), checked by a C-speed comparison, so an agent
        loop pays only for the messages that are new.
        """
        previous, cumulative, usage_index = self._memo
        if view is previous:  # measured again within the same call
            return cumulative, usage_index
        shared = self.shared(view, previous)
        self._stable = self._compared[3]  # view begins with it too
        if shared:
            del cumulative[shared + 1 :]
            if usage_index >= shared:
                usage_index = last_usage_index(view[:shared])
        else:
            cumulative, usage_index = [0], -1
        if len(view) > shared:
            new = view[shared:]
            totals = accumulate(map(self.counter.count_message, new), initial=cumulative[-1])
            cumulative.extend(islice(totals, 1, None))  # skip the repeated initial total
            found = last_usage_index(new)
            if found >= 0:
                usage_index = shared + found
        self._memo = (view, cumulative, usage_index)
        return cumulative, usage_index

    def shared_prefix(
        self, view: tuple[Message, ...], previous: tuple[Message, ...]
    ) -> tuple[int, bool]:
        """Leading messages ``view`` shares with ``previous``, and whether that is all of it."""
        shared = self.shared(view, previous)
        return shared, shared == len(previous)

    def prefix_tokens(self, view: tuple[Message, ...], shared: int) -> int:
        """Tokens of ``view[:shared]`` plus the fixed overhead (0 when nothing is shared)."""
        if shared == 0:
            return 0
        memo_view, cumulative, _ = self._memo
        if memo_view is view:
            return cumulative[shared] + self.overhead_tokens
        count = self.counter.count_message
        counted_view, total = self._counted
        if counted_view is view and 2 * shared > len(view):  # count the shorter part
            return total - sum(map(count, view[shared:])) + self.overhead_tokens
        return sum(map(count, view[:shared])) + self.overhead_tokens

    def estimate(self, view: tuple[Message, ...], seen: Seen | None) -> UsageEstimate:
        """Estimate ``view`` given what the engine saw and returned last.

        A provider usage anchor is trusted when it answers the view the engine
        returned last, or when the engine already trusted it for the same prefix.
        With history, any other anchor is ignored: a usage left on a message kept
        after a compaction describes the longer prompt before it. Without history,
        an anchor behind a message a strategy rewrote is ignored and any other is
        checked against the counted prefix.
        """
        cumulative, index = self.counts(view)
        trusted: bool | None = None
        if index >= 0 and seen is None:
            if any(_rewritten(m) for m in view[:index]):
                trusted = False
        elif index >= 0 and seen is not None:
            trusted = (
                (index == len(seen.view) and _same_prefix(view, seen.view, index))
                or (
                    index == seen.input_estimate.last_usage_index
                    and _same_prefix(view, seen.input, index + 1)
                )
                or (
                    index == seen.view_estimate.last_usage_index
                    and _same_prefix(view, seen.view, index + 1)
                )
            )
        return estimate_from_counts(
            view,
            cumulative,
            index,
            overhead_tokens=self.overhead_tokens,
            anchor_trusted=trusted,
            calibrate=is_approximate(self.counter),
        )

    def measurer(
        self, transcript: tuple[Message, ...], estimate: UsageEstimate, *, detached: bool = False
    ) -> Callable[[Sequence[Message]], int]:
        """Measure views derived from ``transcript`` on the scale of its estimate.

        ``detached``: for work that outlives the call (a background checkpoint):
        the prefix sums are copied, since the next call's `counts` reuses the
        list in place, and nothing is remembered for the call's own questions.
        """
        cumulative, _ = self.counts(transcript)
        if detached:
            cumulative = list(cumulative)
        correction = estimate.tokens - cumulative[-1] - REQUEST_OVERHEAD_TOKENS
        count = self.counter.count_message

        def measure(view: Sequence[Message]) -> int:
            if len(view) == len(transcript):
                # A rewrite in place (cleared results, trimmed text): count only what changed.
                changed = list(map(operator.is_not, view, transcript))
                before = sum(map(count, compress(transcript, changed)))
                total = cumulative[-1] - before + sum(map(count, compress(view, changed)))
            else:
                total = sum(map(count, view))
            if not detached and isinstance(view, tuple):
                self._counted = (view, total)
            return max(0, total + REQUEST_OVERHEAD_TOKENS + correction)

        return measure

    def estimate_outcome(
        self,
        transcript: tuple[Message, ...],
        estimate: UsageEstimate,
        view: tuple[Message, ...],
        tokens: int,
    ) -> UsageEstimate:
        """The estimate of ``view`` (measured at ``tokens``), split like the transcript's."""
        if view is transcript:
            return estimate
        index = estimate.last_usage_index
        if index >= 0 and _same_prefix(view, transcript, index + 1):
            usage = min(estimate.usage_tokens, tokens)
            return UsageEstimate(tokens, usage, tokens - usage, index)
        return UsageEstimate(tokens, 0, tokens, -1)

    def floor_tokens(
        self,
        view: tuple[Message, ...],
        estimate: UsageEstimate,
        threshold: int,
        max_user_share: float | None = None,
    ) -> int:
        """Tokens no strategy can remove: leading block, newest user message, protected tail.

        Measured on the scale of ``estimate`` (the view's own). With
        ``max_user_share`` (the pipeline can trim the newest user message), that
        message counts only up to that share of the threshold.
        """
        return self.view_floor(view, estimate.tokens, threshold, max_user_share)

    def view_floor(
        self,
        view: tuple[Message, ...],
        tokens: int,
        threshold: int,
        max_user_share: float | None = None,
    ) -> int:
        """`floor_tokens` of a view measured at ``tokens`` (a rewritten view, for one).

        The floor of the view as strategies left it is the honest one: a tool
        result in the protected tail counts as capped once it was capped.
        """
        shape = analyze(view)
        count = self.counter.count_message
        # The lead and the tail never overlap (the tail starts after the lead). The
        # newest tool group's text results can be capped down to MIN_CAP_TOKENS (the
        # last resort of `HardTruncate`), so they count at most that much.
        tail = [
            min(count(m), MIN_CAP_TOKENS) if m.role == "tool" and _has_text(m) else count(m)
            for m in view[shape.tail_start :]
        ]
        total = sum(map(count, view[: shape.lead_end])) + sum(tail)
        last = shape.last_user
        if last >= 0:
            user = count(view[last])
            if last >= shape.tail_start:
                total -= user  # counted with the tail (whole: not a tool result); added back
            # Only text can be trimmed: an image-only message counts whole.
            if max_user_share is not None and _has_text(view[last]):
                user = min(user, int(max_user_share * threshold))
            total += user
        memo_view, cumulative, _ = self._memo
        counted = cumulative[-1] if memo_view is view else sum(map(count, view))
        return max(0, total + tokens - counted)
