"""What `ContextEngine.project`, `compact` and `recover_overflow` return."""

from __future__ import annotations

import attrs

from context_engine.events import ContextUsage, RewriteEvent
from context_engine.messages import Message

__all__ = ["CommitResult", "Projection", "RecoveryResult"]


@attrs.frozen(kw_only=True)
class _Result:
    """Fields every result has.

    Attributes:
        messages: The view to send.
        usage: Its estimated usage.
        changed: Whether the view differs from the input.
        strategy: The last strategy that applied, or None.
        event: The `RewriteEvent`, or None when nothing was rewritten.
    """

    messages: tuple[Message, ...] = attrs.field(repr=False)
    usage: ContextUsage
    changed: bool
    strategy: str | None = None
    event: RewriteEvent | None = None


@attrs.frozen(kw_only=True)
class Projection(_Result):
    """The view for one LLM call.

    Attributes:
        should_commit: A strategy listed in ``commit_strategies`` applied: the
            caller should replace its transcript with ``commit_messages``.
        commit_messages: The view to commit, or None.
    """

    should_commit: bool = False
    commit_messages: tuple[Message, ...] | None = attrs.field(default=None, repr=False)

    @property
    def fits(self) -> bool:
        """Whether the view is at or below the threshold."""
        return self.usage.fits


@attrs.frozen(kw_only=True)
class CommitResult(_Result):
    """The outcome of a manual ``compact``; commit ``messages`` when ``changed``.

    Attributes:
        compacted_count: Messages a checkpoint replaced.
        kept_count: Messages kept verbatim after it.
        split_turn: Whether the cut fell inside a turn.
    """

    compacted_count: int = 0
    kept_count: int = 0
    split_turn: bool = False


@attrs.frozen(kw_only=True)
class RecoveryResult(CommitResult):
    """The outcome of ``recover_overflow``.

    Attributes:
        should_commit: The caller should replace its transcript with
            ``commit_messages`` before retrying (true whenever the view changed,
            so the next call does not send the rejected history again).
        commit_messages: The view to commit, or None.
    """

    should_commit: bool = False
    commit_messages: tuple[Message, ...] | None = attrs.field(default=None, repr=False)
