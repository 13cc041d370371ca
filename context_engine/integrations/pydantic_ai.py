"""pydantic-ai adapter: a capability and a history processor built on `ContextEngine`.

`ContextEngineCapability` is the complete form, for ``Agent(capabilities=[...])``:

* before each attempt at a model request (``prepare_model_request``) the
  history is converted, projected by the engine, and the view is sent for that
  attempt only; when the engine says to commit, the run's history
  (``ctx.messages``) is replaced by the committed view, so later steps and
  ``result.all_messages()`` start from the checkpoint;
* when the model call fails with a context-length error
  (``ModelContextWindowExceededError`` or any error `is_context_overflow`
  recognises), the history as committed so far (a checkpoint this very
  attempt wrote included) is recovered with ``recover_overflow``, committed,
  and the request is attempted once more (``RetryModelRequest``); a second
  overflow in the same step surfaces;
* a user prompt ``/compact [instructions]`` compacts the history instead of
  calling the model, and answers with what was done;
* after each tool call (``after_tool_execute``), a result above the engine's
  cap is replaced by its preview (`ContextEngine.cap_tool_result`) before
  pydantic-ai makes it a ``ToolReturnPart``, so the run's history and
  ``result.all_messages()`` never hold the whole output (the original goes to
  the engine's archive); ``cap_tool_results=False`` keeps results whole;
* every rewrite is emitted into the run's event stream as a
  `ContextRewriteEvent` and written onto the request's span (``chat ...``
  under ``Instrumentation``) as ``context_engine.*`` attributes.

`history_processor` is the plain form, for ``ProcessHistory(...)``: pydantic-ai
writes a processor's result back as the run's history, so every view it
returns is committed.

Both are thin: convert with `context_engine.formats.pydantic_ai`, call the
engine, convert back. The capability's policy is `context_engine.turn`'s: its
flow is started in ``prepare_model_request``, waits at the model call, and is
resumed by ``on_model_request_error``. pydantic-ai runs its hooks as coroutines under
``run``, ``run_sync``, ``run_stream``, ``run_stream_events`` and ``iter`` alike,
so there is one async body and no blocking twin.

Importing this module needs pydantic-ai: ``pip install 'context-engine[pydantic-ai]'``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

try:
    from pydantic_ai import ToolDenied
    from pydantic_ai import messages as pm
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import RetryModelRequest, SkipModelRequest
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import RunContext, ToolDefinition
except ImportError as exc:  # pragma: no cover - exercised by hiding the package in a test
    raise ImportError(
        "context_engine.integrations.pydantic_ai needs pydantic-ai; "
        "install it with: pip install 'context-engine[pydantic-ai]'"
    ) from exc

from context_engine.engine import ContextEngine
from context_engine.errors import CompactionError, ConfigurationError
from context_engine.formats._pydantic_ai_write import Group
from context_engine.formats.pydantic_ai import from_pydantic_ai, read_groups, write_history
from context_engine.integrations._pydantic_ai_events import ContextRewriteEvent, emit_rewrite
from context_engine.integrations._reporting import annotate_current_span
from context_engine.integrations._sizing import Sizing, Trigger, schema_text
from context_engine.integrations.conversations import Conversations, EnginePool
from context_engine.messages import Message, TextBlock
from context_engine.results import CompactResult
from context_engine.turn import ModelCallStep, TurnResult, TurnStep, advance_turn, turn_flow

__all__ = ["ContextEngineCapability", "ContextRewriteEvent", "history_processor"]

logger = logging.getLogger(__name__)

HistoryProcessor = Callable[[list[pm.ModelMessage]], Awaitable[list[pm.ModelMessage]]]


class _Reader:
    """Reads histories, giving back the very messages it gave before for unchanged objects.

    The engine trusts a provider usage anchor, and reuses its token counts,
    only for message objects it has seen before. pydantic-ai keeps its message
    objects from step to step, so an object read again (and still reading the
    same) maps to the messages it was read as, or written from, last time.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[pm.ModelMessage, tuple[Message, ...]]] = {}

    def read(self, history: Sequence[pm.ModelMessage]) -> _Bridge:
        groups: list[Group] = []
        known: dict[int, tuple[pm.ModelMessage, tuple[Message, ...]]] = {}
        for item, group in read_groups(history):
            entry = self._known.get(id(item))
            if entry is not None and entry[0] is item and entry[1] == group:
                group = entry[1]
            known[id(item)] = (item, group)
            groups.append((item, group))
        self._known = known
        return _Bridge(self, history, groups)

    def remember(self, written: Sequence[pm.ModelMessage], sources: Sequence[Any]) -> None:
        for item, group in zip(written, sources, strict=True):
            if group:
                self._known[id(item)] = (item, tuple(group))


class _Bridge:
    """One pydantic-ai history read once: the transcript, and writing views back."""

    def __init__(
        self, reader: _Reader, history: Sequence[pm.ModelMessage], groups: list[Group]
    ) -> None:
        self.reader = reader
        self.history = list(history)
        self.groups = groups
        self.transcript = tuple(message for _, group in groups for message in group)

    def write(self, messages: Sequence[Message], *, kept: bool) -> list[pm.ModelMessage]:
        """``messages`` as pydantic-ai messages; unchanged ones are the original objects.

        ``kept``: the result becomes the run's history, so the next read maps its
        objects back to these very messages.
        """
        sources: list[tuple[Message, ...]] = []
        written = write_history(messages, self.groups, sources=sources)
        if kept:
            self.reader.remember(written, sources)
        return written


@dataclasses.dataclass(frozen=True)
class _Projected:
    view: list[pm.ModelMessage]
    commit: list[pm.ModelMessage] | None


async def _project(engine: ContextEngine, bridge: _Bridge, *, view_kept: bool) -> _Projected:
    """Project the history; a failed pipeline still gives its best view (the breaker counts it)."""
    try:
        projection = await engine.project(bridge.transcript)
    except CompactionError as exc:
        logger.warning(
            "strategy=<%s> failures=<%d> | projection failed, sending the best view reached",
            exc.strategy,
            exc.failures,
        )
        view, commit, changed = exc.view, exc.commit, exc.view != bridge.transcript
    else:
        view, changed = projection.messages, projection.changed
        commit = projection.commit
        if projection.event is not None:
            annotate_current_span(projection.event)
    return _Projected(
        view=bridge.write(view, kept=view_kept) if changed else bridge.history,
        commit=bridge.write(commit, kept=True) if commit is not None else None,
    )


def _no_providers(engine: ContextEngine) -> None:
    if engine.providers:
        raise ConfigurationError(
            "history_processor commits every view it returns, so context providers' blocks "
            "would be stored in the run's history; use ContextEngineCapability with providers"
        )


def history_processor(engine: ContextEngine) -> HistoryProcessor:
    """A pydantic-ai history processor that projects each request through ``engine``.

    Use it as ``Agent(model, capabilities=[ProcessHistory(history_processor(engine))])``.
    pydantic-ai replaces the run's history with what a processor returns, so
    every view is committed: rewritten messages stay rewritten for the rest of
    the run and in ``result.all_messages()``. Use `ContextEngineCapability` to
    keep the full history and commit only checkpoints, and for overflow recovery.

    Args:
        engine: The engine of the session (one per conversation).

    Returns:
        An async callable taking and returning ``list[ModelMessage]``.

    Raises:
        ConfigurationError: ``engine`` has context providers (their blocks
            would be committed with the view); use `ContextEngineCapability`.
    """
    reader = _Reader()
    _no_providers(engine)

    async def process(messages: list[pm.ModelMessage]) -> list[pm.ModelMessage]:
        _no_providers(engine)
        return (await _project(engine, reader.read(messages), view_kept=True)).view

    return process


@dataclasses.dataclass
class ContextEngineCapability(AbstractCapability[Any]):
    """Keeps every model request of a pydantic-ai agent under the context window.

    Args:
        engine: The engine of the session (one per conversation: it remembers
            the last view for usage anchors, snapshots and its circuit breaker),
            or an `EnginePool` giving each run the engine of its
            ``conversation_id`` (``agent.run(..., conversation_id=...)``, or
            the one pydantic-ai reads from ``message_history``).
        recover_overflow: Recover from a context-length error and retry once.
        compact_command: Treat a user prompt ``/compact [instructions]`` as a
            request to compact the history now, without calling the model.
        cap_tool_results: Replace a tool's result above the engine's cap by its
            preview (`ContextEngine.cap_tool_result`) when the tool returns it.
            A result the preview cannot stand for (images, a denied call) is
            kept; a ``ToolReturn`` keeps its content and metadata, only its
            ``return_value`` is capped.
        context_window: The window in tokens; None reads the model profile's
            ``context_window`` (a ``FallbackModel``'s is the smallest of its
            models'), else keeps the engine's own. An explicit value always wins.
        trigger: ``("fraction", 0.8)`` or ``("tokens", n)``: where compaction
            starts; None keeps the engine's reserve.
        count_request: Count each request's tool definitions (function and
            output tools) and ``instructions`` into the engine's overhead;
            pydantic-ai sends them beside the message history.

    Raises:
        ConfigurationError: ``context_window`` or ``trigger`` is malformed.
    """

    engine: ContextEngine | EnginePool
    recover_overflow: bool = True
    compact_command: bool = True
    cap_tool_results: bool = True
    context_window: int | None = None
    trigger: Trigger | None = None
    count_request: bool = True
    _reader: _Reader = dataclasses.field(default_factory=_Reader, init=False, repr=False)
    _turn: _Turn | None = dataclasses.field(default=None, init=False, repr=False)
    _sizing: Sizing = dataclasses.field(init=False, repr=False)
    _conversations: Conversations[_Reader] | None = dataclasses.field(
        default=None, init=False, repr=False
    )
    # The engine of the run's conversation (the engine itself without a pool).
    _engine: ContextEngine | None = dataclasses.field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.engine, (ContextEngine, EnginePool)):
            raise ConfigurationError(
                f"engine must be a ContextEngine or an EnginePool, got {self.engine!r}"
            )
        self._sizing = Sizing(self.context_window, self.trigger, count_request=self.count_request)
        if isinstance(self.engine, ContextEngine):
            self._engine = self.engine
        else:
            self._conversations = Conversations(self.engine, _Reader)

    @property
    def _run_engine(self) -> ContextEngine:
        """The engine of the run in progress."""
        if self._engine is None:
            raise ConfigurationError(
                "a ContextEngineCapability with an EnginePool picks its engine per run: "
                "use it through an Agent"
            )
        return self._engine

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """Not buildable from an agent spec: it holds a live engine."""
        return None

    async def for_run(self, ctx: RunContext[Any]) -> ContextEngineCapability:
        """A copy with its own per-run state; the engine and the read messages are shared.

        With an `EnginePool` the copy holds the engine (and the read messages)
        of the run's ``conversation_id``.
        """
        run = dataclasses.replace(self)
        run._sizing, run._conversations = self._sizing, self._conversations
        if self._conversations is None:
            run._engine, run._reader = self._engine, self._reader
        else:
            run._engine, run._reader = self._conversations.get(ctx.conversation_id or "default")
        return run

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Send the engine's view for this attempt; commit to the run's history when told to."""
        turn = self._turn
        if turn is not None and turn.retry:
            # The attempt after a recovery: its view is the recovery, already the history.
            turn.retry = False
            request_context.messages = list(ctx.messages)
            return request_context
        self._sizing.apply(
            self._run_engine,
            model_window=request_context.model.context_window,
            request_text=_request_text(request_context) if self.count_request else (),
        )
        bridge = self._reader.read(request_context.messages)
        last_group = bridge.groups[-1][1] if bridge.groups else ()
        flow = turn_flow(
            bridge.transcript, compact_command=self.compact_command and len(last_group) == 1
        )
        self._turn = turn = _Turn(flow, bridge)
        step = await advance_turn(
            self._run_engine, flow, on_event=functools.partial(emit_rewrite, ctx)
        )
        if isinstance(step, TurnResult):
            raise _compacted(ctx, bridge, step)
        if step.commit is not None:
            ctx.messages[:] = bridge.write(step.commit, kept=True)
        request_context.messages = (
            bridge.write(step.messages, kept=False) if step.changed else bridge.history
        )
        return request_context

    async def after_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: pm.ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        result: Any,
    ) -> Any:
        """The tool's result, or its capped preview when the engine's cap shortened it."""
        if not self.cap_tool_results or isinstance(result, ToolDenied):
            return result
        returned = isinstance(result, pm.ToolReturn)
        value = result.return_value if returned else result
        part = pm.ToolReturnPart(
            tool_name=call.tool_name, content=value, tool_call_id=call.tool_call_id
        )
        (read,) = from_pydantic_ai([pm.ModelRequest(parts=[part])])
        capped = await self._run_engine.cap_tool_result(read)
        if capped is read or not all(isinstance(b, TextBlock) for b in capped.content):
            return result  # images stay whole: a text preview cannot stand for them
        return dataclasses.replace(result, return_value=capped.text) if returned else capped.text

    async def on_model_request_error(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, error: Exception
    ) -> pm.ModelResponse:
        """After a context-length error: recover, commit, and attempt the request once more."""
        turn, self._turn = self._turn, None
        if not self.recover_overflow or turn is None:
            raise error
        step = await advance_turn(  # raises ``error`` when it must
            self._run_engine, turn.flow, error, on_event=functools.partial(emit_rewrite, ctx)
        )
        assert isinstance(step, ModelCallStep)  # the flow returns only after a model answer
        ctx.messages[:] = turn.bridge.write(step.messages, kept=True)
        turn.retry = True
        self._turn = turn
        logger.info("step=<%d> | context overflow recovered, retrying", ctx.run_step)
        raise RetryModelRequest()


def _request_text(request_context: ModelRequestContext) -> tuple[str, ...]:
    """What the request sends beside the history: tool definitions and instructions."""
    parameters = request_context.model_request_parameters
    tools = [*parameters.function_tools, *parameters.output_tools]
    schemas = schema_text(
        {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters_json_schema,
        }
        for tool in tools
    )
    parts = parameters.instruction_parts or ()
    instructions = pm.InstructionPart.join(parts) or ""
    return (schemas if tools else "", instructions)


@dataclasses.dataclass
class _Turn:
    """One model call's `turn_flow`, suspended at its model call between pydantic-ai's hooks."""

    flow: Generator[TurnStep, Any, TurnResult[Any]]
    bridge: _Bridge
    retry: bool = False


def _compacted(ctx: RunContext[Any], bridge: _Bridge, turn: TurnResult[Any]) -> SkipModelRequest:
    """Answer ``/compact`` without the model; the compacted history precedes the command."""
    if turn.commit is not None:
        ctx.messages[:] = [*bridge.write(turn.commit, kept=True), bridge.groups[-1][0]]
    return SkipModelRequest(pm.ModelResponse(parts=[pm.TextPart(_compact_reply(turn.compacted))]))


def _compact_reply(result: CompactResult | None) -> str:
    if result is None or not result.changed:
        return "Nothing to compact."
    info = result.info
    return (
        f"Compacted {info.compacted_count if info else 0} messages into a checkpoint; "
        f"kept {info.kept_count if info else len(result.messages)} "
        f"(about {result.usage.tokens} tokens now)."
    )
