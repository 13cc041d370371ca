"""What `ContextEngine.project`, `compact` and `recover_overflow` return."""

from __future__ import annotations

import attrs

from context_engine.assembly.trace import EMPTY_TRACE, AssemblyTrace
from context_engine.events import ContextUsage, RewriteEvent, SummaryInfo
from context_engine.messages import Message
from context_engine.native.options import RequestOptions

__all__ = ["CompactResult", "Projection", "RecoveryResult"]


@attrs.frozen(kw_only=True)
class _Result:
    """Fields every result has.

    Attributes:
        messages: The view to send.
        usage: Its estimated usage.
        changed: Whether the view differs from the input.
        strategy: The last strategy that applied, or None.
        event: The `RewriteEvent`, or None when nothing was rewritten.
        commit: The transcript the caller should keep from now on (a checkpoint
            was paid for, ``/compact`` ran, or recovery rewrote history), or
            None when the caller keeps its own.
        trace: Every decision of the call's assembly: provider items included,
            dropped, capped or excluded, and the strategies' clears, trims and
            summaries (`AssemblyTrace`; empty when nothing was decided).
        request_options: What the pipeline's native strategies ask the provider
            to do on its server (context editing, compaction), one
            `RequestOptions` per provider; merge them into the SDK call with
            `context_engine.native.apply_request_options`. Empty without
            native strategies.
    """

    messages: tuple[Message, ...] = attrs.field(repr=False)
    usage: ContextUsage
    changed: bool
    strategy: str | None = None
    event: RewriteEvent | None = None
    commit: tuple[Message, ...] | None = attrs.field(default=None, repr=False)
    trace: AssemblyTrace = attrs.field(default=EMPTY_TRACE, repr=False)
    request_options: tuple[RequestOptions, ...] = ()


@attrs.frozen(kw_only=True)
class Projection(_Result):
    """The view for one LLM call."""

    @property
    def fits(self) -> bool:
        """Whether the view is at or below the threshold."""
        return self.usage.fits


@attrs.frozen(kw_only=True)
class CompactResult(_Result):
    """The outcome of a manual ``compact``.

    Attributes:
        info: The checkpoint written, or None when no checkpoint was.
    """

    info: SummaryInfo | None = None


@attrs.frozen(kw_only=True)
class RecoveryResult(CompactResult):
    """The outcome of ``recover_overflow``; ``commit`` is set whenever the view changed.

    Committing it means the next call does not send the rejected history again.
    """
