"""What the providers' explicit compaction calls share: plan the cut, call, rebuild, report.

A subclass says how to call its provider (`CompactCallBase.call`) and how
large the provider's window will likely be (`CompactCallBase.expected`); the
rest (where to cut, the view around the window, the archive removal, the
`SummaryInfo`) is here, once.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from context_engine._validate import positive_int
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.events import SummaryInfo
from context_engine.messages import Message
from context_engine.native._compact_plan import CompactPlan, plan_compaction
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.strategies.summary import default_keep_recent_tokens
from context_engine.summarize.reuse import AgentPrefix, collect_cache_usage

__all__ = ["CompactCallBase", "Compacted", "async_method", "call_failed", "model_name"]

logger = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class Compacted:
    """What one compaction call returned.

    Attributes:
        window: The messages that replace the compacted range, as the provider
            returned them (their items or blocks kept whole in the metadata).
        summary_chars: Characters of readable summary text in the window (0
            when the provider returns only encrypted content).
    """

    window: tuple[Message, ...]
    summary_chars: int = 0


def async_method(*path: str) -> Callable[[object, attrs.Attribute[Any], object], None]:
    """An attrs validator: ``value.<path>`` is a coroutine function (an async client's method)."""

    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        target: object = value
        for name in path:
            target = getattr(target, name, None)
        if not inspect.iscoroutinefunction(target):
            raise ConfigurationError(
                f"{type(instance).__name__}({attribute.name}=...) needs an async client with "
                f"an async {'.'.join(path)}() method, got {type(value).__name__}"
            )

    return check


def model_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a non-empty model name."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(
            f"{type(instance).__name__}(model={value!r}): model must be a non-empty model name"
        )


def _prefix(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, AgentPrefix):
        raise ConfigurationError(
            f"{type(instance).__name__}(prefix=...): prefix must be an AgentPrefix or None, "
            f"got {type(value).__name__}"
        )


def call_failed(provider: str, model: str, exc: BaseException) -> SummarizerError:
    """The error a failed compaction call surfaces as (raise it ``from`` the cause)."""
    status = getattr(exc, "status_code", None)
    where = f"{provider} compaction call ({model})"
    detail = f"HTTP {status}: {exc}" if isinstance(status, int) else f"{type(exc).__name__}: {exc}"
    return SummarizerError(f"{where} failed ({detail})")


@attrs.frozen(kw_only=True)
class CompactCallBase:
    """A strategy that asks the provider to compact the older part of the view.

    Attributes:
        keep_recent_tokens: Tokens kept verbatim at the end; None:
            ``clamp(threshold / 4, 2000, 20000)`` (at most a quarter of the
            view for ``compact`` and ``recover_overflow``), fewer when the
            provider's window and the kept messages could not fit together.
        prefix: What the agent sends besides its messages (`AgentPrefix`):
            its tools, its system prompt when the view has none, its
            ``prompt_cache_key``, so the call reads the agent's prompt cache.
            Its ``view`` is not used: the call sends the view being compacted.
    """

    name: ClassVar[str]
    uses_llm: ClassVar[bool] = True
    provider_label: ClassVar[str]
    send_split_user: ClassVar[bool]

    keep_recent_tokens: int | None = attrs.field(
        default=None, validator=positive_int(optional=True)
    )
    prefix: AgentPrefix | None = attrs.field(default=None, validator=_prefix)

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Compact the older part of the view when it is above the threshold."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        return await self._compact(tuple(view), budget, None)

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """Compact the full transcript on demand (``compact``, ``recover_overflow``)."""
        return await self._compact(tuple(transcript), budget, instructions)

    async def call(self, plan: CompactPlan, instructions: str | None) -> Compacted:
        """Send ``plan.lead`` and ``plan.sent`` to the provider; return its window.

        Raises:
            SummarizerError: the call failed or returned no checkpoint.
        """
        raise NotImplementedError

    def expected(self, budget: Budget) -> Callable[[Sequence[Message]], int]:
        """Tokens the provider's window will likely take for the messages sent."""
        raise NotImplementedError

    async def _compact(
        self, view: tuple[Message, ...], budget: Budget, instructions: str | None
    ) -> StrategyResult:
        started = time.perf_counter()
        keep = self.keep_recent_tokens or default_keep_recent_tokens(budget.threshold)
        if self.keep_recent_tokens is None and budget.reason != "threshold":
            # On demand, compact something even when the history is shorter than the default.
            keep = min(keep, max(1, budget.tokens // 4))
        # The caller's own keep_recent_tokens is kept to, even when the view will not fit.
        expected = self.expected(budget) if self.keep_recent_tokens is None else None
        plan = plan_compaction(
            view, budget, keep, send_split_user=self.send_split_user, expected=expected
        )
        if plan is None:
            return StrategyResult.unchanged(view)
        with collect_cache_usage() as cache:
            compacted = await self.call(plan, instructions)
        rebuilt = plan.view(compacted.window)
        after = budget.measure(rebuilt)
        if after >= budget.tokens:
            error = f"the provider's window would not shrink the view ({budget.tokens} -> {after})"
            return StrategyResult.unchanged(view, error=error)
        removal = Removal("messages", plan.replaced)
        info = SummaryInfo(
            tokens_before=budget.tokens,
            tokens_after=after,
            messages_before=len(view),
            messages_after=len(rebuilt),
            compacted_count=len(plan.replaced),
            kept_count=len(plan.kept),
            is_split_turn=plan.is_split_turn,
            is_incremental=plan.is_incremental,
            summary_chars=compacted.summary_chars,
            duration=time.perf_counter() - started,
            references=(removal.reference,) if budget.archiving else (),
            cache_read_tokens=cache.cache_read_tokens,
            cache_write_tokens=cache.cache_write_tokens,
        )
        logger.info(
            "strategy=<%s> tokens=<%d -> %d> replaced=<%d> | provider compaction applied",
            self.name,
            budget.tokens,
            after,
            len(plan.replaced),
        )
        return StrategyResult(
            messages=rebuilt,
            applied=True,
            tokens_saved=budget.tokens - after,
            info=info,
            removed=(removal,),
        )
