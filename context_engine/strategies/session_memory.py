"""`SessionMemory`: a checkpoint whose body is a memory text the caller already maintains.

Agents that keep notes as they work (a ``MEMORY.md``, a scratchpad, a task
list) already hold a summary of the session. This strategy uses that text as
the checkpoint instead of paying for an LLM summary: it replaces the history
older than ``keep_recent_tokens`` with a `ContextSummary` whose body is the
seed's text. When there is no seed, the seed returns nothing, or it raises,
the strategy hands the view on unchanged and records why, so the next strategy
(usually `FullSummary`) runs.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import ClassVar, TypeAlias

import attrs

from context_engine._validate import non_negative_int, positive_int
from context_engine.errors import ConfigurationError
from context_engine.events import SummaryInfo
from context_engine.messages import ContextSummary, Message
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import analyze
from context_engine.summarize.cut import (
    CutPoint,
    find_cut_point,
    rebuild_view,
    replaced_messages,
)
from context_engine.summarize.instructions import add_instructions
from context_engine.summarize.reattach import with_pinned

__all__ = ["Seed", "SessionMemory", "cut_seed_text"]

logger = logging.getLogger(__name__)

Seed: TypeAlias = Callable[[], "str | Awaitable[str]"]
"""A function or coroutine function without arguments that returns the memory text."""

DEFAULT_KEEP_RECENT_TOKENS = 8_000
DEFAULT_MAX_SEED_CHARS = 20_000


def _check_seed(instance: object, attribute: attrs.Attribute[Seed | None], value: object) -> None:
    if value is not None and not callable(value):
        raise ConfigurationError(
            f"SessionMemory(seed=...) must be a function or coroutine function taking no "
            f"arguments and returning the memory text, got {type(value).__name__}"
        )


def _check_label(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigurationError(
            f"SessionMemory(label={value!r}) must be a non-empty str, or None for "
            "the name 'session_memory'"
        )


def cut_seed_text(text: str, max_chars: int) -> str:
    """Shorten ``text`` to at most ``max_chars`` characters at a line boundary, with a notice.

    The memory is cut after the last full line that fits (in the middle of the
    line when the first line alone is longer than ``max_chars``), and a notice
    line saying how many characters were left out is appended. Text within the
    limit is returned unchanged.
    """
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    if text[max_chars] != "\n":
        newline = head.rfind("\n")
        if newline > 0:
            head = head[:newline]
    head = head.rstrip("\n")
    omitted = len(text) - len(head)
    return (
        f"{head}\n[session memory cut to fit: {omitted} more characters of the memory "
        "were left out here]"
    )


@attrs.frozen(kw_only=True)
class SessionMemory:
    """Replace old history with a checkpoint holding a caller-maintained memory text.

    The view becomes: the leading system/developer messages, a `ContextSummary`
    whose text is the seed's memory, the user message of the cut turn when the
    cut falls inside a turn (verbatim), then the most recent messages verbatim.
    An existing leading checkpoint is replaced, not stacked. Cut points follow
    `context_engine.summarize.cut.find_cut_point`.
    """

    seed: Seed | None = attrs.field(default=None, validator=_check_seed)
    """Returns the memory text; a plain function or a coroutine function, no arguments."""
    keep_recent_tokens: int = attrs.field(
        default=DEFAULT_KEEP_RECENT_TOKENS,
        validator=non_negative_int(
            fix=f"use the default {DEFAULT_KEEP_RECENT_TOKENS} or 0 to keep only the protected tail"
        ),
    )
    """Minimum tokens of recent history kept verbatim, capped at half the threshold."""
    max_seed_chars: int = attrs.field(
        default=DEFAULT_MAX_SEED_CHARS,
        validator=positive_int(fix=f"use the default {DEFAULT_MAX_SEED_CHARS}"),
    )
    """Longer memories are cut at a line boundary, with a notice line."""
    label: str | None = attrs.field(default=None, validator=_check_label)
    """Name used in events and ``commit_strategies`` instead of ``session_memory``."""

    uses_llm: ClassVar[bool] = False

    @property
    def name(self) -> str:
        """``label`` when given, else ``session_memory``."""
        return self.label or "session_memory"

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Replace old history in ``view`` with the memory, when the view is over the threshold."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        return await self._compact(view, budget, budget.tokens, unchanged=view)

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """Replace old history in ``transcript`` with the memory, even below the threshold.

        ``instructions`` are ignored: the memory is written by the caller, not
        by this strategy. A caller who wants them honoured should fold them
        into the memory before calling ``compact``, or rely on `FullSummary`.
        When nothing is compacted, ``transcript`` is handed on unchanged.
        """
        return await self._compact(
            transcript, budget, budget.measure(transcript), unchanged=transcript
        )

    async def _compact(
        self,
        source: Sequence[Message],
        budget: Budget,
        tokens_before: int,
        *,
        unchanged: Sequence[Message],
    ) -> StrategyResult:
        """Checkpoint ``source``; on a no-op hand ``unchanged`` on."""
        started = time.perf_counter()
        if self.seed is None:
            return StrategyResult.unchanged(
                unchanged, error="no seed configured; pass SessionMemory(seed=read_memory)"
            )
        keep = min(self.keep_recent_tokens, budget.threshold // 2)
        cut = find_cut_point(source, analyze(source), budget.counter, keep)
        if cut is None:
            return StrategyResult.unchanged(unchanged)
        text, error = await self._read_seed()
        if text is None:
            logger.warning("strategy=<%s> | %s", self.name, error)
            return StrategyResult.unchanged(unchanged, error=error)
        result = self._checkpointed(source, budget, cut, text, tokens_before, started)
        if not result.applied:
            return attrs.evolve(result, messages=tuple(unchanged))
        return await with_pinned(result, cut.lead_end, budget)  # issue 15: pinned come back

    def _checkpointed(
        self,
        view: Sequence[Message],
        budget: Budget,
        cut: CutPoint,
        text: str,
        tokens_before: int,
        started: float,
    ) -> StrategyResult:
        """The view with the checkpoint, or a recorded no-op when it would not shrink."""
        removal = Removal("messages", replaced_messages(view, cut))
        # Its own range only: older references live in the previous checkpoint it replaced.
        references = (removal.reference,) if budget.archiving else ()
        checkpoint = ContextSummary(
            summary=text, tokens_before=tokens_before, references=references
        )
        previous = view[cut.start - 1] if cut.start > cut.lead_end else None
        # The user's instructions survive this checkpoint too; 8 % of the threshold is
        # what FullSummary gives them by default (40 % of its fifth).
        checkpoint = add_instructions(
            checkpoint,
            previous,
            removal.originals,
            max_tokens=int(0.08 * budget.threshold),
            counter=budget.counter,
        )
        messages = rebuild_view(view, cut, checkpoint)
        tokens_after = budget.measure(messages)
        if tokens_after >= tokens_before:
            return StrategyResult.unchanged(
                view,
                error=(
                    f"the session memory checkpoint would not shrink the view "
                    f"({tokens_before} -> {tokens_after} tokens)"
                ),
            )
        replaced = removal.originals
        info = SummaryInfo(
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            messages_before=len(view),
            messages_after=len(messages),
            compacted_count=len(replaced),
            kept_count=len(messages) - cut.lead_end - 1,
            is_split_turn=cut.is_split_turn,
            summary_chars=len(checkpoint.summary),
            duration=time.perf_counter() - started,
            references=references[-1:],
        )
        logger.debug("strategy=<%s> tokens=<%s> | rewrite applied", self.name, tokens_after)
        return StrategyResult(
            messages=messages,
            applied=True,
            tokens_saved=tokens_before - tokens_after,
            info=info,
            removed=(removal,),
        )

    async def _read_seed(self) -> tuple[str | None, str]:
        """The seed's text cut to ``max_seed_chars``, or None and why it is unusable."""
        assert self.seed is not None
        try:
            result = self.seed()
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:  # a seed is caller code: any failure means "no memory now"
            return None, f"seed raised {type(exc).__name__}: {exc}"
        if not isinstance(result, str):
            return None, f"seed returned {type(result).__name__}, expected the memory text (str)"
        if not result.strip():
            return None, "seed returned empty text; nothing to use as the checkpoint"
        return cut_seed_text(result, self.max_seed_chars), ""
