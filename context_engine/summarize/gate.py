"""The quality gate: a checkpoint that forgets what the agent needs is not used.

A checkpoint, a model-written one above all, is checked against the
originals it replaces before it goes into the view. It is rejected when it

* drops a tracked file: a file the originals (or the previous checkpoint)
  modified is neither in its file list, nor in what its size bound condensed
  out (kept in its metadata);
* drops the last failure: the key line of the most recent failed tool result
  among the originals is not in its text;
* drops a user instruction: the task statement or a constraint sentence is
  neither in its text nor counted by the section's "earlier constraints" note;
* grows the view: the view with it is no smaller than the view before.

A rejected checkpoint is replaced by the extractive digest
(`ExtractiveSummarizer`, no model), and the reason is recorded on the
checkpoint's `SummaryInfo.rejected` and the strategy's `RewriteStep.rejected`.
Everything here is a pure function of its arguments.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

import attrs
import regex

from context_engine.messages import ContextSummary, Message
from context_engine.summarize.bound import Condensed
from context_engine.summarize.files import DEFAULT_FILE_TOOLS, FileToolRule, merge, track_files
from context_engine.summarize.instructions import UserInstructions

__all__ = ["Review", "gated", "last_failure_line"]

logger = logging.getLogger(__name__)

_NOTE = regex.compile(r"\(\+(\d+) earlier constraints")
_KEY_CHARS = 60  # of a key line that must appear: placeholders and summaries clip long lines


def _flat(text: str) -> str:
    return " ".join(text.split())


def last_failure_line(messages: Sequence[Message]) -> str | None:
    """The key line of the most recent failed tool result in ``messages``, or None."""
    # Imported here: the placeholder module belongs to the strategies package,
    # which imports this one.
    from context_engine.strategies._placeholder import outcome

    for message in reversed(messages):
        if message.role != "tool":
            continue
        ended = outcome(message)
        if ended.failed and ended.key_line:
            return ended.key_line
    return None


@attrs.frozen(kw_only=True)
class Review:
    """What a checkpoint replacing ``originals`` must keep.

    Attributes:
        originals: The messages the checkpoint replaces (not the previous checkpoint).
        previous: The checkpoint it updates, or None.
        tokens_before: Tokens of the view before the checkpoint.
        measure: Tokens of the view with a given checkpoint in it.
        file_tools: File tools, as for `track_files`.
        redact: What the checkpoint's redactor does to the text it quotes, or None.
    """

    originals: tuple[Message, ...]
    previous: Message | None
    tokens_before: int
    measure: Callable[[ContextSummary], int]
    file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
    redact: Callable[[str], str] | None = None

    def problems(self, checkpoint: ContextSummary) -> list[str]:
        """Why ``checkpoint`` is not good enough; empty when it passes."""
        found = [*self._files(checkpoint), *self._failure(checkpoint)]
        found += self._instructions(checkpoint)
        after = self.measure(checkpoint)
        if after >= self.tokens_before:
            found.append(f"it grows the view ({self.tokens_before} -> {after} tokens)")
        return found

    def _files(self, checkpoint: ContextSummary) -> list[str]:
        activity = track_files(self.originals, self.file_tools)
        if isinstance(self.previous, ContextSummary):
            activity = merge(self.previous.read_files, self.previous.modified_files, activity)
        kept = {*checkpoint.modified_files, *Condensed.of(checkpoint).modified_files}
        missing = [path for path in activity.modified if path not in kept]
        return [f"it drops the modified file(s) {', '.join(missing)}"] if missing else []

    def _failure(self, checkpoint: ContextSummary) -> list[str]:
        line = last_failure_line(self.originals)
        if line is None:
            return []
        key = _flat(line.rstrip("…"))[:_KEY_CHARS]
        if key in _flat(checkpoint.summary):
            return []
        return [f"it drops the last failure ({line})"]

    def _instructions(self, checkpoint: ContextSummary) -> list[str]:
        wanted = UserInstructions.of(self.previous).extended(self.originals)
        wanted = wanted.redacted(self.redact)
        text = _flat(checkpoint.summary)
        problems = []
        if wanted.task is not None and _flat(wanted.task)[:_KEY_CHARS] not in text:
            problems.append("it drops the task statement")
        absent = [rule for rule in wanted.constraints if _flat(rule) not in text]
        noted = sum(int(count) for count in _NOTE.findall(checkpoint.summary))
        if len(absent) > noted:
            problems.append(f"it drops {len(absent) - noted} user constraint(s)")
        return problems


async def gated(
    write: Callable[[], Awaitable[ContextSummary]],
    fallback: Callable[[], Awaitable[ContextSummary]] | None,
    review: Review,
) -> tuple[ContextSummary, str | None]:
    """``(checkpoint, rejection)``: ``write``'s checkpoint, or ``fallback``'s when it fails review.

    ``rejection`` says why the first was rejected (None when it was used).
    Without a ``fallback`` (the checkpoint already is the extractive digest)
    the checkpoint is used as it is and its problems are only logged.
    """
    checkpoint = await write()
    problems = review.problems(checkpoint)
    if not problems:
        return checkpoint, None
    reason = "; ".join(problems)
    if fallback is None:
        logger.info("problems=<%s> | the extractive checkpoint is used as it is", reason)
        return checkpoint, None
    logger.warning("problems=<%s> | checkpoint rejected; the extractive digest is used", reason)
    return await fallback(), f"checkpoint rejected: {reason}; the extractive digest was used"
