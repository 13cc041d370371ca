"""FullSummary: replace older history with a checkpoint written by a summarizer."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, ClassVar, TypeAlias

import attrs

from context_engine._aio import maybe_await
from context_engine._validate import number_in, positive_int, positive_seconds, share
from context_engine.errors import ConfigurationError
from context_engine.events import SummaryInfo
from context_engine.messages import ContextSummary, Message
from context_engine.redact import Redactor, redact_messages
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import Shape, analyze
from context_engine.summarize.bound import Ask, Condensed, bound_checkpoint, with_condensed
from context_engine.summarize.cut import (
    CutPoint,
    find_cut_point,
    leading_checkpoint,
    rebuild_view,
    replaced_messages,
)
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.files import DEFAULT_FILE_TOOLS, FileToolRule, merge, track_files
from context_engine.summarize.gate import Review, gated
from context_engine.summarize.instructions import keep_instructions
from context_engine.summarize.ledger import Ledger, call_label
from context_engine.summarize.log import (
    fit_ledger,
    with_ledger,
    without_ledger,
    without_listed_files,
)
from context_engine.summarize.memo import SummaryMemo
from context_engine.summarize.originals import restore_originals
from context_engine.summarize.prompts import DEFAULT_PROMPTS, SummaryPrompts
from context_engine.summarize.rate import MIN_REMOVED_SHARE, deepened
from context_engine.summarize.reattach import reattach
from context_engine.summarize.rehydrate import Rehydration
from context_engine.summarize.request import Summarizer, summary_reason
from context_engine.summarize.reuse import collect_cache_usage
from context_engine.summarize.run import Deadline, SummaryCall, strip_images
from context_engine.summarize.sections import join_prefix, split_prefix
from context_engine.summarize.shell import DEFAULT_SHELL_TOOLS
from context_engine.tokens import TokenCounter

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


DEFAULT_CHECKPOINT_SHARE = 0.2
"""The share of the threshold a checkpoint may take when ``max_checkpoint_share`` is None."""
SMALL_WINDOW_CHECKPOINT_TOKENS = 1_600
"""Tokens a checkpoint may take in a window where its default share gives fewer."""
SMALL_WINDOW_MAX_SHARE = 0.4
"""The most of the threshold `SMALL_WINDOW_CHECKPOINT_TOKENS` may take."""
SMALL_WINDOW_ROOM_SHARE = 0.6
"""In a small window, the share of the threshold a checkpoint may grow to in the room its
cut leaves: the cut is chosen for `FullSummary.checkpoint_limit`, so the messages kept
verbatim are the same, and the checkpoint takes only what they leave free above
`context_engine.summarize.rate.MIN_REMOVED_SHARE` of the threshold, or all of it when the
newest tool step alone takes more than that share (`_headroom`)."""

_TEXT_FIRST_TOKENS = 160
_JOIN_TOKENS = 4  # the blank line between the text and the log, and tokenizer slack
_ALL_CHARS = 1 << 30  # a log rendered with no bound


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
    and get a short summary of their early part (one section, updated while
    the cut stays inside the same request), and the files read and modified in
    the compacted part are listed in the checkpoint.

    Checkpoints do not grow with the session: one names the archive reference
    of what it replaced only (its predecessor is among those originals, so
    older references are reached through it), and one that would take more
    than ``max_checkpoint_share`` of the threshold is condensed, oldest detail
    first, with what was condensed out kept in its metadata
    (`context_engine.summarize.bound`).

    A summary that takes several summarizer requests keeps every answer: when
    one request fails or the summary-wide deadline passes, the strategy
    raises, and the next attempt resumes after the last answered request.
    """

    name: ClassVar[str] = "full_summary"
    uses_llm: ClassVar[bool] = True

    summarizer: Summarizer = attrs.field(validator=_callable)
    """Writes the checkpoint text from a `SummaryRequest`."""
    keep_recent_tokens: int | None = attrs.field(
        default=None, validator=positive_int(optional=True)
    )
    """Tokens kept verbatim at the end; None: ``clamp(threshold / 4, 2000, 20000)``,
    and at most a quarter of the view for ``compact`` and ``recover_overflow``; with
    None, fewer are kept when the checkpoint and the kept messages could not fit
    the threshold together (a later cut, a turn split if need be)."""
    summarizer_window: int | None = attrs.field(default=None, validator=positive_int(optional=True))
    """The summarizer model's window; None: the engine's window. Longer histories are chunked."""
    max_summary_tokens: int = attrs.field(default=4096, validator=positive_int())
    """Output budget asked of the summarizer (capped at an eighth of its window)."""
    max_tool_result_chars: int = attrs.field(default=2000, validator=positive_int())
    """Tool results (and reasoning) are clipped to this many characters in the prompt; a
    history one request cannot hold is clipped harder (halving, to 500 at least) when that
    makes it one request, and chunked at this clip otherwise."""
    prompts: SummaryPrompts = DEFAULT_PROMPTS
    """The prompt texts (system, summary, update, turn prefix)."""
    file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
    """Tool name → ``read`` / ``modified`` mapping used to track files."""
    post_summary_hooks: tuple[PostSummaryHook, ...] = attrs.field(default=(), converter=tuple)
    """Hooks that may add reminder messages after the checkpoint."""
    timeout_seconds: float | None = attrs.field(
        default=300.0, validator=positive_seconds(optional=True, fix="None waits for ever")
    )
    """Time allowed for one summarizer request (async summarizers only); None: no limit."""
    summary_timeout_seconds: float | None = attrs.field(
        default=600.0, validator=positive_seconds(optional=True, fix="None waits for ever")
    )
    """Time allowed for the whole summary, all its requests together; past it the
    strategy raises `SummaryTimeoutError` (the answers so far are kept for the next
    attempt). A plain (blocking) summarizer is checked between requests. None: no limit."""
    max_checkpoint_share: float | None = attrs.field(
        default=None,
        validator=number_in(
            0.0,
            1.0,
            exclusive_minimum=True,
            optional=True,
            fix="0.2 keeps the checkpoint under a fifth of the threshold",
        ),
    )
    """Largest share of the threshold the checkpoint may take; a longer one is condensed.
    None: a fifth, and in a small window up to `SMALL_WINDOW_CHECKPOINT_TOKENS` (at most
    `SMALL_WINDOW_MAX_SHARE` of the threshold), or up to `SMALL_WINDOW_ROOM_SHARE` where
    the messages kept verbatim leave that room free: a session's work log does not
    shrink with the window, the verbatim tail it leaves room for does."""
    ledger_share: float = attrs.field(
        default=0.6,
        validator=share(exclusive_minimum=True, fix="0.6 gives the work log 3/5 of the checkpoint"),
    )
    """Share of the checkpoint its work log (calls with their last status, the most
    recent failure, written by code) may take even when the summarizer's text is
    longer; a shorter text leaves the log more. The text keeps at least its first
    160 tokens."""
    redactor: Redactor | None = None
    """Removes secrets from everything sent to the summarizer; None sends the history as is."""
    rehydrate: Rehydration | None = None
    """Re-attaches the most recently used files after each checkpoint; None (the default)
    does not (`context_engine.summarize.rehydrate`)."""
    _memo: SummaryMemo = attrs.field(factory=SummaryMemo, init=False, eq=False, repr=False)
    """Summarizer answers kept so a failed summary resumes where it stopped."""

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        """Write a checkpoint when the view is above the threshold."""
        if budget.tokens <= budget.threshold:
            return StrategyResult.unchanged(view)
        return await self._compact(tuple(view), budget, None, transcript)

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        """Write a checkpoint from the full transcript, even below the threshold."""
        return await self._compact(tuple(transcript), budget, instructions, ())

    async def _compact(
        self,
        view: tuple[Message, ...],
        budget: Budget,
        instructions: str | None,
        transcript: Sequence[Message],
    ) -> StrategyResult:
        started = time.perf_counter()
        shape = analyze(view)
        keep = self.keep_recent_tokens or default_keep_recent_tokens(budget.threshold)
        if self.keep_recent_tokens is None and budget.reason != "threshold":
            # On demand, compact something even when the history is shorter than the default.
            keep = min(keep, max(1, budget.tokens // 4))
        cut = find_cut_point(view, shape, budget.counter, keep)
        if cut is not None and budget.reason == "threshold":
            # A reactive checkpoint removes at least the minimum (`summarize.rate`).
            cut = deepened(view, shape, budget.counter, cut, budget.threshold)
        # The caller's own keep_recent_tokens is kept to, even when the view will not fit.
        fits = self.keep_recent_tokens is None
        previous_index = leading_checkpoint(view, shape)
        previous = view[previous_index] if previous_index >= 0 else None
        expected = self._expected_size(previous, budget)
        if fits and _over(view, shape, budget, cut, expected):
            cut = _later_cut(view, shape, budget, keep, expected) or cut
        if cut is None or cut.compacted_count == 0:
            return StrategyResult.unchanged(view)
        problem = self._summary_call(budget, instructions).window_problem()
        if problem is not None:
            # Recorded as a no-op so the pipeline's next strategy still runs.
            return StrategyResult.unchanged(view, error=problem)
        write = functools.partial(
            self._write_at, view, previous=previous, budget=budget,
            instructions=instructions, transcript=transcript,
        )  # fmt: skip
        with collect_cache_usage() as cache:
            removal, checkpoint, compacted, rejected = await write(cut)
            if fits and budget.measure(compacted) > budget.threshold:
                # Longer than expected: a later cut, so the last resort drops nothing unsummarized.
                size = budget.counter.count_message(checkpoint)
                later = _later_cut(view, shape, budget, keep, size)
                if later is not None and later.index > cut.index:
                    cut = later
                    removal, checkpoint, compacted, rejected = await write(cut)
        replaced = restore_originals(
            tuple(view[i] for i in (*cut.history, *cut.turn_prefix)), transcript
        )
        compacted, checkpoint = await reattach(
            compacted,
            cut.lead_end,
            checkpoint,
            budget,
            replaced,
            self.rehydrate,
            self.file_tools,
        )
        compacted = await self._run_hooks(compacted, cut, budget, checkpoint, started)
        after = budget.measure(compacted)
        if after >= budget.tokens:
            return StrategyResult.unchanged(
                view, error=f"checkpoint would not shrink the view ({budget.tokens} -> {after})"
            )
        info = self._info(view, compacted, cut, budget.tokens, after, checkpoint, started)
        info = attrs.evolve(
            info,
            rejected=rejected,
            cache_read_tokens=cache.cache_read_tokens,
            cache_write_tokens=cache.cache_write_tokens,
        )
        return StrategyResult(
            messages=compacted,
            applied=True,
            tokens_saved=budget.tokens - after,
            info=info,
            removed=(removal,),
        )

    def _expected_size(self, previous: Message | None, budget: Budget) -> int:
        """What the checkpoint will likely take: about its predecessor's size, at most the limit."""
        limit = self.checkpoint_limit(budget.threshold)
        if previous is None:
            return limit // 2
        return min(limit, budget.counter.count_message(previous))

    async def _write_at(
        self,
        view: tuple[Message, ...],
        cut: CutPoint,
        previous: Message | None,
        budget: Budget,
        instructions: str | None,
        transcript: Sequence[Message],
    ) -> tuple[Removal, ContextSummary, tuple[Message, ...], str | None]:
        """What writing a checkpoint at ``cut`` gives.

        The removal, the checkpoint (past the quality gate), the view rebuilt
        around it, and why the gate rejected the summarizer's checkpoint (None
        when it did not).
        """
        history = tuple(view[i] for i in cut.history)
        prefix = tuple(view[i] for i in cut.turn_prefix)
        removal = Removal("messages", replaced_messages(view, cut))
        write = partial(
            self._write_gated,
            history,
            prefix,
            previous,
            budget,
            removal,
            instructions,
            transcript,
            view[cut.index :],
            limit=self._limit_at(view, cut, budget),
        )
        review = Review(
            originals=restore_originals(history + prefix, transcript),
            previous=previous,
            tokens_before=budget.tokens,
            measure=lambda written: budget.measure(rebuild_view(view, cut, written)),
            file_tools=self.file_tools,
            redact=self._redact,
        )
        extractive = isinstance(self.summarizer, ExtractiveSummarizer)
        fallback = None if extractive else partial(write, ExtractiveSummarizer())
        checkpoint, rejected = await gated(partial(write, self.summarizer), fallback, review)
        return removal, checkpoint, rebuild_view(view, cut, checkpoint), rejected

    async def _write_gated(
        self,
        history: tuple[Message, ...],
        prefix: tuple[Message, ...],
        previous: Message | None,
        budget: Budget,
        removal: Removal,
        instructions: str | None,
        transcript: Sequence[Message],
        kept: Sequence[Message],
        summarizer: Summarizer,
        *,
        limit: int,
    ) -> ContextSummary:
        """The checkpoint ``summarizer`` writes, opened by the user's instructions (by code)."""
        writer = (
            self if summarizer is self.summarizer else attrs.evolve(self, summarizer=summarizer)
        )

        async def body(
            history: tuple[Message, ...],
            prefix: tuple[Message, ...],
            previous: Message | None,
            limit: int,
        ) -> ContextSummary:
            return await writer.write_checkpoint(
                history,
                prefix,
                previous,
                budget,
                removal,
                limit=limit,
                instructions=instructions,
                transcript=transcript,
                kept=kept,
            )

        counter, redact = budget.counter, self._redact
        return await keep_instructions(
            body, history, prefix, previous, limit=limit, counter=counter, redact=redact
        )

    @property
    def _redact(self) -> Callable[[str], str] | None:
        return self.redactor.redact if self.redactor is not None else None

    def _limit_at(self, view: tuple[Message, ...], cut: CutPoint, budget: Budget) -> int:
        """The most tokens the checkpoint at ``cut`` may take.

        With the default share, a small window's larger limit is used only as
        far as the messages kept after ``cut`` leave room for it (a long
        newest step would otherwise push the checkpoint into a last resort's
        cut), and never less than the default share; where they leave more,
        the checkpoint may grow into it up to `SMALL_WINDOW_ROOM_SHARE`, less
        the next steps' headroom (`_headroom`).
        """
        limit = self.checkpoint_limit(budget.threshold)
        if self.max_checkpoint_share is not None:
            return limit
        shape = analyze(view)
        room = _room(view, shape, budget, 0) - cut.kept_tokens
        least = min(limit, max(1, int(DEFAULT_CHECKPOINT_SHARE * budget.threshold)))
        planned = max(least, min(limit, room))
        # The cut was chosen for `limit`: what the kept messages leave free goes to
        # the work log, not to a longer verbatim tail.
        # Pinned messages, re-attached files and hooks take their room after the checkpoint.
        reserved = (
            bool(budget.pinned) or self.rehydrate is not None or bool(self.post_summary_hooks)
        )
        free = room - _headroom(view, shape, budget, reserved=reserved)
        return max(planned, min(self.grown_limit(budget.threshold), free))

    def grown_limit(self, threshold: int) -> int:
        """The most tokens a checkpoint may grow to where its kept messages leave the room.

        `SMALL_WINDOW_ROOM_SHARE` of ``threshold`` in a small window (where
        `checkpoint_limit` is above the default share), else `checkpoint_limit`.
        """
        limit = self.checkpoint_limit(threshold)
        if self.max_checkpoint_share is not None:
            return limit
        if limit <= int(DEFAULT_CHECKPOINT_SHARE * threshold):
            return limit  # not a small window
        return max(limit, int(SMALL_WINDOW_ROOM_SHARE * threshold))

    def checkpoint_limit(self, threshold: int) -> int:
        """The most tokens a checkpoint may take under ``threshold``."""
        if self.max_checkpoint_share is not None:
            return max(1, int(self.max_checkpoint_share * threshold))
        small = min(SMALL_WINDOW_CHECKPOINT_TOKENS, int(SMALL_WINDOW_MAX_SHARE * threshold))
        return max(1, int(DEFAULT_CHECKPOINT_SHARE * threshold), small)

    async def write_checkpoint(
        self,
        history: Sequence[Message],
        prefix: Sequence[Message],
        previous: Message | None,
        budget: Budget,
        removal: Removal,
        *,
        limit: int,
        instructions: str | None = None,
        transcript: Sequence[Message] = (),
        kept: Sequence[Message] = (),
    ) -> ContextSummary:
        """The checkpoint replacing ``removal``'s originals, at most ``limit`` tokens.

        ``history`` (whole turns) and ``prefix`` (the current request's early
        part) are summarized, updating ``previous`` (the checkpoint they
        follow, or None); files are tracked and merged with its lists; with
        an archive the checkpoint names ``removal``'s reference (its own
        range only: the previous checkpoint is among those originals).

        The summarizer reads the originals: a message an earlier strategy of
        the same call shortened (a cleared result, a trimmed text) is replaced
        by its original from ``transcript`` (`restore_originals`). The
        checkpoint's command list and most recent failure are written by code
        (`Ledger`), merged with ``previous``'s, and take ``ledger_share`` of
        ``limit``, or all the summarizer's text and the file lists leave when
        that is more; the text gets the rest.
        The calls of ``kept`` (the messages left verbatim after the
        checkpoint) are not logged, but a call the log shortens is never
        shortened to a prefix one of them shares.

        Raises:
            SummarizerError: the summarizer failed, or its window cannot hold a chunk.
        """
        history = strip_images(restore_originals(history, transcript))
        prefix = strip_images(restore_originals(prefix, transcript))
        if self.redactor is not None and instructions is not None:
            instructions = self.redactor.redact(instructions)  # they reach the summarizer too
        call = self._summary_call(budget, instructions)
        text = await self._write(call, history, prefix, previous)
        earlier = Ledger.of(previous)
        logged = history + prefix
        if self.redactor is not None:  # the log quotes commands and output: no secrets in it
            logged = redact_messages(logged, self.redactor)
        ledger = earlier.update(logged, shell_tools=self._shell_tools(), file_tools=self.file_tools)
        references = (removal.reference,) if budget.archiving else ()
        checkpoint, open_file = self._checkpoint(
            without_ledger(text), history + prefix, previous, budget, references, earlier.open_file
        )
        ledger = attrs.evolve(ledger, open_file=open_file)
        listed = frozenset((*checkpoint.read_files, *checkpoint.modified_files))
        checkpoint = attrs.evolve(
            checkpoint, summary=without_listed_files(checkpoint.summary, listed) or text
        )
        others = [call_label(c, self._shell_tools()) for m in kept for c in m.tool_calls]
        room_for_log = self._room_for_log(
            limit,
            budget.counter.count_message(checkpoint),
            files=budget.counter.count_message(attrs.evolve(checkpoint, summary="")),
            wanted=budget.counter.count_text(ledger.render(_ALL_CHARS, others=others)),
        )
        log = fit_ledger(ledger, room_for_log, budget.counter, others=others)
        condense = _condense_by_part(call, budget.counter)
        room = max(1, limit - budget.counter.count_text(log))
        bounded = await bound_checkpoint(checkpoint, room, budget.counter, condense)
        return await with_ledger(bounded, ledger, log, limit, budget.counter)

    def _room_for_log(self, limit: int, text_tokens: int, *, files: int, wanted: int) -> int:
        """Tokens the work log may take next to a text (and file lists) of ``text_tokens``.

        Its share of ``limit``, or all the text leaves when that is more: a
        short text leaves the log room for more calls. A log that wants more
        (``wanted``: every call in full) comes before the prose at the size
        limit: the prose is condensed (what leaves it is kept in the
        checkpoint's metadata) down to its first tokens (goal, constraints:
        a small checkpoint must still say what the user asked) next to the
        file lists (``files`` tokens), which are not cut for it.
        """
        share = int(limit * self.ledger_share)
        most = max(0, limit - _TEXT_FIRST_TOKENS)
        prose_first = max(share, limit - max(_TEXT_FIRST_TOKENS + files, 2 * files))
        spare = limit - text_tokens - _JOIN_TOKENS
        return min(most, max(share, spare, min(wanted, prose_first)))

    def _shell_tools(self) -> frozenset[str]:
        commands = (name for name, rule in self.file_tools.items() if rule in ("shell", "python"))
        return DEFAULT_SHELL_TOOLS | frozenset(commands)

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
            reason=summary_reason(budget.reason),
            instructions=instructions,
            memo=self._memo,
            deadline=Deadline(self.summary_timeout_seconds),
            redact=self._redact,
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
            # Whole turns: the earlier request's summary, if any, is folded in with them.
            text, _ = await call.summarize(history, text)
        if prefix:
            # Still the request the previous checkpoint's section is about (no whole
            # turn came between): that section is updated, not repeated.
            body, earlier = split_prefix(text) if not history else (text, None)
            turn, _ = await call.summarize(prefix, earlier, kind="turn_prefix")
            text = join_prefix(body, turn)
        assert text is not None
        return text

    def _checkpoint(
        self,
        text: str,
        compacted: tuple[Message, ...],
        previous: Message | None,
        budget: Budget,
        references: tuple[str, ...],
        open_file: str | None,
    ) -> tuple[ContextSummary, str | None]:
        """The checkpoint with its file lists, and the editor's open file at its end."""
        activity = track_files(compacted, self.file_tools, open_file=open_file)
        earlier = Condensed.of(previous)
        if isinstance(previous, ContextSummary):
            # Files an earlier bound moved to the metadata come back: the lists
            # are bounded again below, and what still does not fit moves again.
            activity = merge(
                (*earlier.read_files, *previous.read_files),
                (*earlier.modified_files, *previous.modified_files),
                activity,
            )
        read, modified = activity.read, activity.modified
        if self.redactor is not None:
            # Paths come from the unredacted history (a URL with its password, a token in
            # a file name); the checkpoint is condensed by the summarizer and archived.
            read = tuple(dict.fromkeys(self.redactor.redact_all(read)))
            modified = tuple(dict.fromkeys(self.redactor.redact_all(modified)))
        checkpoint = ContextSummary(
            summary=text,
            tokens_before=budget.tokens,
            read_files=read,
            modified_files=modified,
            references=references,
        )
        # With an archive the previous checkpoint, metadata included, is recallable
        # under this one's reference; without one, what it condensed out travels on.
        carried = Condensed() if budget.archiving else Condensed(items=earlier.items)
        return with_condensed(checkpoint, carried), activity.open_file

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


def _room(view: tuple[Message, ...], shape: Shape, budget: Budget, size: int) -> int:
    """Tokens left for the kept messages next to the leading block and a checkpoint of ``size``.

    The leading block is measured as the engine measures a view (fixed
    overhead, the request's own tokens and the usage calibration included),
    so a checkpoint grown into all of this room still leaves the view at the
    threshold, not a few tokens over it.
    """
    return budget.threshold - budget.measure(list(view[: shape.lead_end])) - size


def _headroom(view: tuple[Message, ...], shape: Shape, budget: Budget, *, reserved: bool) -> int:
    """What a grown checkpoint leaves free for the next steps.

    `MIN_REMOVED_SHARE` of the threshold, so a few steps fit before the next
    rewrite; nothing when the newest tool step (the protected tail after the
    newest user message) alone takes more: a next step of its size would not
    fit in that share either, so the call after it rewrites all the same, and
    the room lists more of the log. The share stays when something else is
    ``reserved`` the room after the checkpoint (pinned messages, re-attached
    files, hooks), and when the tail is a new request with no step yet.
    """
    share = int(MIN_REMOVED_SHARE * budget.threshold)
    step = range(max(shape.tail_start, shape.last_user + 1), len(view))
    newest = sum(budget.counter.count_message(view[i]) for i in step)
    return share if reserved or newest <= share else 0


def _over(
    view: tuple[Message, ...], shape: Shape, budget: Budget, cut: CutPoint | None, size: int
) -> bool:
    """Whether ``cut`` (None: no cut) with a checkpoint of ``size`` leaves the view over."""
    if budget.tokens <= budget.threshold:
        return False
    return cut is None or cut.kept_tokens > _room(view, shape, budget, size)


def _later_cut(
    view: tuple[Message, ...], shape: Shape, budget: Budget, keep: int, size: int
) -> CutPoint | None:
    """A cut keeping fewer than ``keep`` tokens, so a checkpoint of ``size`` fits with them.

    Without it a last-resort truncation would drop the oldest kept messages
    from the view with no summary at all. No slack either: keeping a turn
    whole would leave its head to that truncation. A split turn's user message
    counts as kept, so the kept tokens are tried without it, then the protected
    tail alone.
    """
    room = _room(view, shape, budget, size)
    last = shape.last_user
    user = budget.counter.count_message(view[last]) if last >= 0 else 0
    found = None
    for target in (min(keep, room), room - user, 0):
        later = find_cut_point(view, shape, budget.counter, max(0, target), slack_tokens=0)
        if later is not None:
            found = later
            if later.kept_tokens <= room:
                break
    return found


def _condense_by_part(call: SummaryCall, counter: TokenCounter) -> Ask:
    """Asks the summarizer to condense the body and the current request's section apart.

    Each part gets a share of ``max_tokens`` in proportion to its size, so the
    checkpoint keeps its layout (one section on the current request, last).
    """

    async def condense(text: str, max_tokens: int) -> str:
        body, prefix = split_prefix(text)
        if prefix is None:
            return await call.condense(text, max_tokens)
        if body is None:
            return join_prefix(None, await call.condense(prefix, max_tokens))
        body_tokens, prefix_tokens = counter.count_text(body), counter.count_text(prefix)
        share = max(1, max_tokens * body_tokens // max(1, body_tokens + prefix_tokens))
        shorter_body = await call.condense(body, share)
        return join_prefix(shorter_body, await call.condense(prefix, max(1, max_tokens - share)))

    return condense


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
