"""What one engine remembers between calls: the last view, its estimates, the breaker, the stall.

Also the checkpoint being written in the background, when the pipeline has a
`BackgroundSummary` (`context_engine.background`).
"""

from __future__ import annotations

import attrs

from context_engine.background import Background
from context_engine.breaker import CircuitBreaker
from context_engine.events import ContextUsage, Scope
from context_engine.messages import Message
from context_engine.meter import Meter, Seen, starts_with
from context_engine.pipeline import Outcome
from context_engine.request_cap import RequestCap
from context_engine.tokens import UsageEstimate

__all__ = ["Remembered", "Session"]


@attrs.frozen
class Remembered:
    """The last active view, what it was derived from, and how it relates to the one before.

    Attributes:
        scope: What the view is (`Scope`).
        view: The view handed out.
        estimate: Its estimate.
        outcome: The pipeline run that made it, if one did.
        input: The transcript the call was given.
        input_estimate: The transcript's estimate.
        prefix_stable: The view starts with the previous view unchanged.
        prefix_reused_tokens: Tokens it shares with the previous view.
    """

    scope: Scope
    view: tuple[Message, ...]
    estimate: UsageEstimate
    outcome: Outcome | None
    input: tuple[Message, ...]
    input_estimate: UsageEstimate
    prefix_stable: bool | None = None
    prefix_reused_tokens: int = 0

    def seen(self) -> Seen:
        """What the meter needs to trust provider usage anchors on the next call."""
        return Seen(self.input, self.input_estimate, self.view, self.estimate)

    def usage(self, window: int, threshold: int) -> ContextUsage:
        """The view's `ContextUsage` under ``window`` and ``threshold``."""
        return ContextUsage(
            tokens=self.estimate.tokens,
            context_window=window,
            threshold=threshold,
            usage_tokens=self.estimate.usage_tokens,
            trailing_tokens=self.estimate.trailing_tokens,
            prefix_stable=self.prefix_stable,
            prefix_reused_tokens=self.prefix_reused_tokens,
        )


@attrs.define
class Session:
    """Everything the engine keeps between calls; configuration stays on the engine.

    Attributes:
        breaker: Counts calls whose LLM strategies failed.
        last: The last active view, or None before the first call (and after `reset`).
        stalled_at: The transcript's estimate when LLM strategies last ran and the
            view still did not fit; they run again only after real growth.
        requests: The LLM rewrites of the current request (the per-request cap).
        background: The checkpoint being written ahead of time (`BackgroundSummary`).
        marks: Indices of the messages of the last view handed out that carried an
            Anthropic breakpoint, when the engine placed them (``cache_breakpoints``).
    """

    breaker: CircuitBreaker
    last: Remembered | None = None
    stalled_at: int | None = None
    requests: RequestCap = attrs.Factory(RequestCap)
    background: Background = attrs.Factory(Background)
    marks: tuple[int, ...] | None = None

    def seen(self) -> Seen | None:
        """The last call's input and view, for the meter."""
        return self.last.seen() if self.last is not None else None

    def reset(self) -> None:
        """Forget the remembered view, the stall and the background checkpoint (not the breaker)."""
        self.last = None
        self.stalled_at = None
        self.marks = None
        self.background.discard("the engine was reset")

    def restart(self, transcript: tuple[Message, ...], estimate: UsageEstimate) -> None:
        """Forget the last view; ``transcript`` becomes the baseline (`ContextEngine.reset`)."""
        self.reset()
        self.last = Remembered("baseline", transcript, estimate, None, transcript, estimate)

    def prefix(self, meter: Meter, view: tuple[Message, ...]) -> tuple[bool | None, int]:
        """Whether ``view`` keeps the last view as its prefix, and the tokens they share."""
        if self.last is None:
            return None, 0
        shared, stable = meter.shared_prefix(view, self.last.view)
        return stable, meter.prefix_tokens(view, shared)

    def remember(self, last: Remembered) -> None:
        """Make ``last`` the last active view."""
        self.last = last

    def grown_since_stall(self, tokens: int, threshold: int) -> bool:
        """Whether the transcript grew enough since LLM strategies last failed to fit it."""
        if self.stalled_at is None:
            return True
        return tokens >= self.stalled_at + max(256, threshold // 20)

    def extension(self, transcript: tuple[Message, ...]) -> tuple[Message, ...] | None:
        """The last projected view plus what the caller appended since, or None.

        An agent loop appends to the transcript the engine just projected.
        Sending the previous view plus the new messages keeps the prompt's
        prefix unchanged (a provider's prompt cache reuses it) and runs no
        strategy at all, as long as it fits (the caller measures that).
        """
        last = self.last
        if last is None or last.scope != "projected" or last.outcome is None:
            return None
        known = len(last.input)
        if len(transcript) <= known or not starts_with(transcript, last.input):
            return None
        return last.view + transcript[known:]
