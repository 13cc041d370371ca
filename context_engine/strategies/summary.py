"""FullSummary: replace older history with a checkpoint written by a summarizer."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar, TypeAlias

import attrs
import regex

from context_engine._aio import maybe_await
from context_engine._validate import non_negative_seconds, positive_int
from context_engine.errors import ConfigurationError
from context_engine.events import SummaryInfo
from context_engine.messages import ContextSummary, Message
from context_engine.redact import Redactor, redact_messages
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import analyze
from context_engine.summarize.cut import (
    CutPoint,
    find_cut_point,
    leading_checkpoint,
    rebuild_view,
    replaced_messages,
)
from context_engine.summarize.files import DEFAULT_FILE_TOOLS, FileToolRule, merge, track_files
from context_engine.summarize.prompts import DEFAULT_PROMPTS, SummaryPrompts
from context_engine.summarize.request import Summarizer
from context_engine.summarize.run import SummaryCall, strip_images

__all__ = ["FullSummary", "PostSummaryHook", "default_keep_recent_tokens"]

logger = logging.getLogger(__name__)

PostSummaryHook: TypeAlias = Callable[
    [SummaryInfo, tuple[Message, ...], int], "Sequence[Message] | Awaitable[Sequence[Message]]"
]
"""``hook(info, kept, room) -> messages`` injected right after the checkpoint.

``kept`` are the messages kept verbatim; ``room`` is what is left under the
threshold, reduced by the messages of earlier hooks. Messages that do not fit
in ``room`` are dropped (and logged).
"""

_PREFIX_HEADING = "## Earlier in the current request"
_HEADING = regex.compile(r"^(#{1,5} )", regex.MULTILINE)


def default_keep_recent_tokens(threshold: int) -> int:
    """``clamp(threshold / 4, 2000, 20000)``."""
    return max(2000, min(20_000, threshold // 4))


def _callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not callable(value):
        raise ConfigurationError(
            f"{attribute.name} must be a callable taking a SummaryRequest and returning text "
            f"(plain or async), got {type(value).__name__}"
        )


@attrs.frozen(kw_only=True)
class FullSummary:
    """Replaces history older than ``keep_recent_tokens`` with a `ContextSummary` checkpoint.

    The checkpoint is incremental (an existing leading checkpoint is updated
    with only the new messages), split turns keep their user message verbatim
    and get a short summary of their early part, and the files read and
    modified in the compacted part are listed in the checkpoint.
    """

    name: ClassVar[str] = "full_summary"
    uses_llm: ClassVar[bool] = True

    summarizer: Summarizer = attrs.field(validator=_callable)
    """Writes the checkpoint text from a `SummaryRequest`."""
    keep_recent_tokens: int | None = attrs.field(
        default=None, validator=positive_int(optional=True)
    )
    """Tokens kept verbatim at the end; None: ``clamp(threshold / 4, 2000, 20000)``,
    and at most a quarter of the view for ``compact`` and ``recover_overflow``."""
    summarizer_window: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    """The summarizer model's window; None: the engine's window. Longer histories are chunked."""
    max_summary_tokens: int = attrs.field(default=4096, validator=positive_int())
    """Output budget asked of the summarizer (capped at an eighth of its window)."""
    max_tool_result_chars: int = attrs.field(default=2000, validator=positive_int())
    """Tool results (and reasoning) are clipped to this many characters in the prompt."""
    prompts: SummaryPrompts = DEFAULT_PROMPTS
    """The prompt texts (system, summary, update, turn prefix)."""
    file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
    """Tool name → ``read`` / ``modified`` mapping used to track files."""
    post_summary_hooks: tuple[PostSummaryHook, ...] = attrs.field(default=(), converter=tuple)
    """Hooks that may add reminder messages after the checkpoint."""
    timeout_seconds: float | None = attrs.field(
        default=300.0, validator=non_negative_seconds(optional=True, fix="0 or None waits for ever")
    )
    """Time allowed for one summarizer call (async summarizers only)."""
    redactor: Redactor | None = None
    """Removes secrets from everything sent to the summarizer; None sends the history as is."""

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Write a checkpoint when the view is above the threshold."""
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
        """Write a checkpoint from the full transcript, even below the threshold."""
        return await self._compact(tuple(transcript), budget, instructions)

    async def _compact(
        self, view: tuple[Message, ...], budget: Budget, instructions: str | None
    ) -> StrategyResult:
        started = time.perf_counter()
        shape = analyze(view)
        keep = self.keep_recent_tokens or default_keep_recent_tokens(budget.threshold)
        if self.keep_recent_tokens is None and budget.reason != "threshold":
            # On demand, compact something even when the history is shorter than the default.
            keep = min(keep, max(1, budget.tokens // 4))
        cut = find_cut_point(view, shape, budget.counter, keep)
        if cut is None:
            return StrategyResult.unchanged(view)
        previous_index = leading_checkpoint(view, shape)
        previous = view[previous_index] if previous_index >= 0 else None
        history = strip_images([view[i] for i in cut.history])
        prefix = strip_images([view[i] for i in cut.turn_prefix])
        if not history and not prefix:
            return StrategyResult.unchanged(view)
        call = self._summary_call(budget, instructions)
        problem = call.window_problem()
        if problem is not None:
            # Recorded as a no-op so the pipeline's next strategy still runs.
            return StrategyResult.unchanged(view, error=problem)
        text = await self._write(call, history, prefix, previous)
        removal = Removal("messages", replaced_messages(view, cut))
        references = _references(previous, removal) if budget.archiving else ()
        checkpoint = self._checkpoint(text, history + prefix, previous, budget.tokens, references)
        compacted = rebuild_view(view, cut, checkpoint)
        compacted = await self._run_hooks(compacted, cut, budget, checkpoint, started)
        after = budget.measure(compacted)
        if after >= budget.tokens:
            return StrategyResult.unchanged(
                view, error=f"checkpoint would not shrink the view ({budget.tokens} -> {after})"
            )
        info = self._info(view, compacted, cut, budget.tokens, after, checkpoint, started)
        return StrategyResult(
            messages=compacted,
            applied=True,
            tokens_saved=budget.tokens - after,
            info=info,
            removed=(removal,),
        )

    def _summary_call(self, budget: Budget, instructions: str | None) -> SummaryCall:
        window = self.summarizer_window or budget.window
        return SummaryCall(
            summarizer=self.summarizer,
            prompts=self.prompts,
            counter=budget.counter,
            window=window,
            # A small window cannot hold a large answer next to the conversation.
            max_summary_tokens=min(self.max_summary_tokens, max(256, window // 8)),
            max_tool_result_chars=self.max_tool_result_chars,
            timeout=self.timeout_seconds,
            reason=budget.reason,
            instructions=instructions,
        )

    async def _write(
        self,
        call: SummaryCall,
        history: tuple[Message, ...],
        prefix: tuple[Message, ...],
        previous: Message | None,
    ) -> str:
        text = previous.summary if isinstance(previous, ContextSummary) else None
        if self.redactor is not None:
            history = redact_messages(history, self.redactor)
            prefix = redact_messages(prefix, self.redactor)
            text = self.redactor.redact(text) if text is not None else None
        if history:
            text, _ = await call.summarize(history, text)
        if prefix:
            turn, _ = await call.summarize(prefix, None, kind="turn_prefix")
            turn = _HEADING.sub(r"#\1", turn)  # its sections nest under the prefix heading
            text = f"{text}\n\n{_PREFIX_HEADING}\n{turn}" if text else f"{_PREFIX_HEADING}\n{turn}"
        assert text is not None
        return text

    def _checkpoint(
        self,
        text: str,
        compacted: tuple[Message, ...],
        previous: Message | None,
        tokens_before: int,
        references: tuple[str, ...],
    ) -> ContextSummary:
        activity = track_files(compacted, self.file_tools)
        if isinstance(previous, ContextSummary):
            activity = merge(previous.read_files, previous.modified_files, activity)
        return ContextSummary(
            summary=text,
            tokens_before=tokens_before,
            read_files=activity.read,
            modified_files=activity.modified,
            references=references,
        )

    async def _run_hooks(
        self,
        view: tuple[Message, ...],
        cut: CutPoint,
        budget: Budget,
        checkpoint: ContextSummary,
        started: float,
    ) -> tuple[Message, ...]:
        if not self.post_summary_hooks:
            return view
        kept = view[cut.lead_end + 1 :]
        room = budget.threshold - budget.measure(view)
        injected: list[Message] = []
        for hook in self.post_summary_hooks:
            info = self._info(
                view, view, cut, budget.tokens, budget.threshold - room, checkpoint, started
            )
            try:
                added = tuple(await maybe_await(hook(info, kept, room)))
                _check_hook_messages(added)
            except Exception:
                logger.exception("hook=<post_summary> | post-summary hook raised; ignored")
                continue
            cost = sum(budget.counter.count_message(m) for m in added)
            if cost > room:
                logger.warning(
                    "tokens=<%d> room=<%d> | post-summary messages do not fit; dropped", cost, room
                )
                continue
            injected.extend(added)
            room -= cost
        at = cut.lead_end + 1
        return (*view[:at], *injected, *view[at:])

    def _info(
        self,
        before: tuple[Message, ...],
        after: tuple[Message, ...],
        cut: CutPoint,
        tokens_before: int,
        tokens_after: int,
        checkpoint: ContextSummary,
        started: float,
    ) -> SummaryInfo:
        return SummaryInfo(
            tokens_before=tokens_before,
            tokens_after=tokens_after,
            messages_before=len(before),
            messages_after=len(after),
            compacted_count=cut.compacted_count,
            kept_count=len(before) - cut.index + (1 if cut.is_split_turn else 0),
            is_split_turn=cut.is_split_turn,
            is_incremental=cut.start > cut.lead_end,
            summary_chars=len(checkpoint.summary),
            duration=time.perf_counter() - started,
            read_files=checkpoint.read_files,
            modified_files=checkpoint.modified_files,
            references=checkpoint.references[-1:],
        )


def _references(previous: Message | None, removal: Removal) -> tuple[str, ...]:
    """The references a checkpoint names: its predecessor's, then its own range's."""
    earlier = previous.references if isinstance(previous, ContextSummary) else ()
    return (*earlier, removal.reference)


def _check_hook_messages(messages: tuple[Message, ...]) -> None:
    for message in messages:
        if not isinstance(message, Message):
            raise TypeError(
                f"post-summary hooks must return Messages, got {type(message).__name__}"
            )
        if message.role in ("tool", "system", "developer") or message.tool_calls:
            raise ValueError(
                "post-summary hooks may add user or assistant text only "
                f"(got a {message.role} message)"
            )
