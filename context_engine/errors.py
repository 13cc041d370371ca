"""Exceptions raised by context-engine.

The tree:

    ContextEngineError
    ├── InvalidMessageError (ValueError)        a message breaks the model's rules
    │   └── TranscriptFormatError               a transcript file cannot be read
    ├── ConfigurationError (ValueError)         a setting cannot work
    │   └── RuleFileError                       an assembly rule file is malformed
    ├── BlockingCallInEventLoopError (RuntimeError)
    │                                           a ``*_sync`` twin called inside a running loop
    ├── CompactionError (RuntimeError)          the pipeline failed; ``.view`` is usable
    │   └── CompactionRefusedError              an agent's compaction past the cap or breaker
    ├── SummarizerError (RuntimeError)          a summarizer failed or returned nothing usable
    │   └── SummaryTimeoutError                 a summary outlasted its summary-wide deadline
    └── ArchiveError (RuntimeError)             an archive store failed or holds unreadable data
        ├── ArchiveCodecError                   the codec refused a message no store keeps as is
        └── RecallError (LookupError)           a reference is not in this session's archive

Every error is a ``ContextEngineError``; where a builtin fits, it is a subclass of
that builtin too, so existing ``except ValueError`` code keeps working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from context_engine.messages import Message

__all__ = [
    "ArchiveCodecError",
    "ArchiveError",
    "BlockingCallInEventLoopError",
    "CompactionError",
    "CompactionRefusedError",
    "ConfigurationError",
    "ContextEngineError",
    "InvalidMessageError",
    "RecallError",
    "RuleFileError",
    "SummarizerError",
    "SummaryTimeoutError",
    "TranscriptFormatError",
]


class ContextEngineError(Exception):
    """Base class of every error context-engine raises on purpose."""


class InvalidMessageError(ContextEngineError, ValueError):
    """A message, block or transcript breaks the message model.

    Attributes:
        index: Position of the offending message in the transcript, when known.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        where = f"message {index}: " if index is not None else ""
        super().__init__(where + message)
        self.index = index


class ConfigurationError(ContextEngineError, ValueError):
    """A configuration value cannot work; the message says how to fix it."""


class RuleFileError(ConfigurationError):
    """An assembly rule file cannot be read or holds a malformed rule.

    Attributes:
        path: The file.
        rule: The rule's name (or ``#n``, its position), when one rule is at fault.
        field: The rule's field at fault, when one is.
    """

    def __init__(
        self, problem: str, *, path: str, rule: str | None = None, field: str | None = None
    ) -> None:
        where = path
        if rule is not None:
            where += f", rule {rule!r}"
        if field is not None:
            where += f", field {field!r}"
        super().__init__(f"{where}: {problem}")
        self.path, self.rule, self.field = path, rule, field


class BlockingCallInEventLoopError(ContextEngineError, RuntimeError):
    """A blocking ``*_sync`` method was called from inside a running event loop."""


class SummarizerError(ContextEngineError, RuntimeError):
    """A summarizer raised, timed out, or returned text that cannot be a checkpoint."""


class SummaryTimeoutError(SummarizerError):
    """A summary made of several summarizer requests outlasted ``summary_timeout_seconds``.

    The requests answered before the deadline are kept by the strategy, so the
    next attempt resumes after them instead of paying for them again.

    Attributes:
        seconds: The summary-wide deadline that passed, in seconds.
        finished: Summarizer requests answered (and kept) before it passed.
    """

    def __init__(self, seconds: float, finished: int) -> None:
        super().__init__(
            f"the summary did not finish within summary_timeout_seconds={seconds} s "
            f"({finished} summarizer request(s) answered and kept for the next attempt); "
            "raise summary_timeout_seconds, or a larger summarizer_window needs fewer requests"
        )
        self.seconds = seconds
        self.finished = finished


class ArchiveError(ContextEngineError, RuntimeError):
    """An archive store could not be reached, refused a write, or holds unreadable data.

    During ``project``, ``compact`` and ``recover_overflow`` a failed write is
    raised as `CompactionError` (``strategy="archive"``) with this error as its
    cause: the rewrite is then not applied, so no view loses what the store
    did not keep.
    """


class ArchiveCodecError(ArchiveError):
    """The archive codec refused a message: its metadata would not come back as itself.

    Raised by ``encode_messages`` (and so by ``reference_for`` and by every
    store's ``put``: memory, SQLite and Redis alike) when a message's metadata
    holds a value JSON cannot represent as itself: a non-str key, a tuple, a
    set, an arbitrary object. Nothing is stored. Retrying cannot help, unlike a
    store that is down; during ``project``, ``compact`` and ``recover_overflow``
    the engine then makes the view fit with rewrites that archive nothing, and
    commits nothing. A subclass of `ArchiveError`, so ``except ArchiveError``
    code keeps catching it.
    """


class RecallError(ArchiveError, LookupError):
    """A reference is unknown to the archive of this session (or belongs to another one).

    Attributes:
        reference: The reference asked for.
        session_id: The session it was looked up in.
    """

    def __init__(self, reference: str, session_id: str) -> None:
        super().__init__(
            f"reference {reference!r} is not in the archive of session {session_id!r}; "
            "references are only valid in the session whose view showed them"
        )
        self.reference = reference
        self.session_id = session_id


class CompactionError(ContextEngineError, RuntimeError):
    """The strategy pipeline failed during ``project``.

    The original exception is chained as ``__cause__``.

    Attributes:
        view: The best view reached before the failure. It keeps every invariant
            and can be sent as is (it may still be above the threshold).
        strategy: Name of the strategy that failed.
        failures: Consecutive failures counted by the circuit breaker, this one included.
        commit: The transcript to keep when a checkpoint was paid for before
            the failure, else None.
    """

    def __init__(
        self,
        message: str,
        *,
        view: Sequence[Message],
        strategy: str,
        failures: int,
        commit: Sequence[Message] | None = None,
    ) -> None:
        super().__init__(message)
        self.view: tuple[Message, ...] = tuple(view)
        self.strategy = strategy
        self.failures = failures
        self.commit: tuple[Message, ...] | None = tuple(commit) if commit is not None else None


class CompactionRefusedError(CompactionError):
    """A compaction the agent asked for was refused before the summarizer was called.

    Raised by ``compact(..., requested_by="agent")`` (what `CompactTool`
    calls) when the current request has had its ``max_llm_rewrites_per_request``
    or the circuit breaker is open. Nothing was paid for; ``.commit`` is None.

    Attributes:
        reason: Why, as the skipped step records it (``"per-request cap
            reached: ..."`` or ``"circuit breaker open"``).
    """

    def __init__(
        self,
        message: str,
        *,
        view: Sequence[Message],
        strategy: str,
        failures: int,
        reason: str,
    ) -> None:
        super().__init__(message, view=view, strategy=strategy, failures=failures)
        self.reason = reason


class TranscriptFormatError(InvalidMessageError):
    """A transcript file has no shape the readers know, or a line or message in it is malformed.

    Attributes:
        path: The file, as given.
        line: The 1-based line of a JSONL file where the problem is, when known.
        index: Position of the offending message, when known.
    """

    def __init__(
        self, message: str, *, path: str, line: int | None = None, index: int | None = None
    ) -> None:
        if line is not None:
            where = f"{path}: line {line}: "
        elif index is not None:
            where = f"{path}: message {index}: "
        else:
            where = f"{path}: "
        ContextEngineError.__init__(self, where + message)
        self.index = index
        self.path = path
        self.line = line
