"""Strands Agents adapter: a conversation manager backed by `ContextEngine`.

``Agent(conversation_manager=ContextEngineConversationManager(engine))`` puts
the engine in front of every model call of the agent:

* Before each call, an ``InvokeModelStage.Input`` middleware (added when the
  agent is built) projects ``agent.messages``, with the system prompt in front,
  and sends the view instead. The agent's history is not touched, except when
  the engine says to commit (a checkpoint was written): then ``agent.messages``
  is replaced, in place, by the checkpoint and the kept tail.
* ``apply_management`` (Strands calls it after every invocation) does the same
  projection and commits when the engine says so.
* ``reduce_context`` follows Strands' contract. With the model's
  ``ContextWindowOverflowException`` it commits `ContextEngine.recover_overflow`
  and lets Strands retry once; when there is nothing left to remove, or the
  retry overflows too, it raises that exception. Without one (proactive
  compression) it compacts on a best-effort basis and never raises.
* A ``/compact ...`` prompt compacts instead of calling the model
  (`context_engine.commands.parse_compact_command`).
* An ``AfterToolCallEvent`` hook caps every tool result with
  `ContextEngine.cap_tool_result` before Strands appends it to
  ``agent.messages`` (its ``result`` is writable), so the history itself never
  holds a 60k-token output; the original goes to the engine's archive.
  ``cap_tool_results=False`` keeps results whole.
* Every rewrite is invoked on ``agent.hooks`` as a `ContextRewriteEvent`
  (subscribe with a ``HookProvider``) and written onto the current Strands
  span as ``context_engine.*`` attributes.

Strands calls ``apply_management`` and ``reduce_context`` synchronously from
inside its event loop; they run the engine's coroutine on a worker thread
(OpenTelemetry context included) while the loop waits, as Strands' own
summarizing manager does. ``compact_sync`` does the same.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import functools
import logging
from collections.abc import Callable, Coroutine, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import attrs

from context_engine._aio import run_blocking
from context_engine.boundary import DEFAULT_MIN_MESSAGES, DEFAULT_TRIGGER_TOKENS
from context_engine.commands import parse_compact_command
from context_engine.engine import ContextEngine
from context_engine.errors import (
    CompactionError,
    ConfigurationError,
    ContextEngineError,
    InvalidMessageError,
)
from context_engine.messages import Message
from context_engine.results import CompactResult
from context_engine.turn import ModelCallStep, TurnResult, TurnStep, advance_turn, turn_flow

try:
    import strands  # noqa: F401  (the guard: fail here with the install line)
    from strands.agent.conversation_manager import (
        ConversationManager,
        ProactiveCompressionConfig,
    )
    from strands.hooks import (
        AfterModelCallEvent,
        AfterToolCallEvent,
        AgentInitializedEvent,
        BeforeInvocationEvent,
        HookRegistry,
    )
    from strands.middleware import InvokeModelContext, InvokeModelStage
    from strands.types.content import Message as StrandsMessage
    from strands.types.exceptions import ContextWindowOverflowException
except ImportError as exc:
    raise ImportError(
        "context_engine.integrations.strands needs Strands Agents; "
        "install it with: pip install 'context-engine[strands]'"
    ) from exc

from context_engine.formats.strands import (
    message_from_strands,
    system_from_strands,
    to_strands,
)
from context_engine.integrations._sizing import Sizing, Trigger, schema_text
from context_engine.integrations._strands_events import ContextRewriteEvent, emit_rewrite
from context_engine.integrations.conversations import EnginePool

if TYPE_CHECKING:
    from strands.agent.agent import Agent

__all__ = ["ContextEngineConversationManager", "ContextRewriteEvent"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _run(factory: Callable[[], Coroutine[Any, Any, T]], method: str) -> T:
    """Run an engine coroutine from synchronous code, also inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_blocking(factory, method)
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="context-engine") as pool:
        return pool.submit(context.run, lambda: asyncio.run(factory())).result()


def _system_prompt(agent: Any) -> Any:
    """The agent's system prompt in the form its model requests carry it."""
    content = getattr(agent, "system_prompt_content", None)
    return content if content is not None else getattr(agent, "system_prompt", None)


def _conversation_id(agent: Any) -> str:
    """``session_id/agent_id`` under a session manager, else the ``agent_id``."""
    agent_id = str(getattr(agent, "agent_id", "default"))
    session = getattr(getattr(agent, "_session_manager", None), "session_id", None)
    return agent_id if session is None else f"{session}/{agent_id}"


class _Transcripts:
    """Converts ``agent.messages``, reusing the `Message` objects of unchanged dicts.

    The engine caches token counts per message object and compares prefixes
    identity first; converting only what changed makes a call that appends one
    step cost that step instead of a conversion and comparison of the history.
    """

    def __init__(self) -> None:
        self._system: tuple[Any, Message | None] = (None, None)
        self._dicts: list[StrandsMessage] = []  # copies, so changes in place are seen
        self._pieces: list[list[Message]] = []

    def convert(self, messages: Sequence[StrandsMessage], system_prompt: Any) -> list[Message]:
        """``from_strands(messages, system_prompt=...)``, with the objects of the last call."""
        if system_prompt != self._system[0]:
            message = system_from_strands(system_prompt) if system_prompt else None
            self._system = (copy.deepcopy(system_prompt), message)
        keep = 0
        while keep < min(len(messages), len(self._dicts)) and messages[keep] == self._dicts[keep]:
            keep += 1
        del self._dicts[keep:], self._pieces[keep:]
        for index in range(keep, len(messages)):
            previous = self._pieces[-1][-1] if self._pieces else None
            self._pieces.append(
                message_from_strands(messages[index], previous=previous, index=index)
            )
            self._dicts.append(copy.deepcopy(messages[index]))
        system = self._system[1]
        return [*([system] if system else []), *(m for group in self._pieces for m in group)]

    def adopt(self, messages: Sequence[StrandsMessage], view: Sequence[Message]) -> None:
        """Remember that ``messages`` were written from ``view``: reuse its objects next time."""
        self._dicts, self._pieces = [], []
        converted = self.convert(messages, self._system[0])
        if converted != list(view):
            return
        objects = iter(view[len(view) - sum(len(group) for group in self._pieces) :])
        self._pieces = [[next(objects) for _ in group] for group in self._pieces]


@attrs.define
class _Turn:
    """The `turn_flow` of the model call in flight, waiting at its model call."""

    flow: Generator[TurnStep, Any, TurnResult[Any]]
    retry: tuple[Message, ...] | None = None  # the recovered view Strands' retry is sent
    recovered: bool = False  # the flow recovered once and waits at the retry


def _same_message(a: StrandsMessage, b: StrandsMessage) -> bool:
    """The same stored message: by ``tracking_id``, or by role and content without one."""
    if "tracking_id" in a or "tracking_id" in b:
        return a.get("tracking_id") == b.get("tracking_id")
    return a["role"] == b["role"] and a["content"] == b["content"]


def _common_tail(old: Sequence[StrandsMessage], new: Sequence[StrandsMessage]) -> int:
    """How many messages at the end of ``new`` are the messages at the end of ``old``."""
    count = 0
    while count < min(len(old), len(new)) and _same_message(old[-1 - count], new[-1 - count]):
        count += 1
    return count


class ContextEngineConversationManager(ConversationManager):
    """A Strands ``ConversationManager`` that lets a `ContextEngine` shape every model call.

    Use one manager per agent: the engine remembers the views it returned for
    that conversation.

    Args:
        engine: The engine of this agent's session, or an `EnginePool` shared
            by the managers of many agents: each agent then takes the engine
            of its conversation, the session manager's ``session_id`` and the
            ``agent_id`` (the ``agent_id`` alone without a session manager),
            so an app that builds an agent per request keeps one engine per
            session across requests.
        proactive_compression: Strands' proactive compression setting: when its
            estimate of the next call passes the ratio, ``reduce_context`` is
            called without an error and compacts. Usually unnecessary, since
            every call is projected under the engine's threshold anyway.
        compact_command: Treat a prompt that is a ``/compact ...`` command as a
            manual compaction (the model is not called for it).
        cap_tool_results: Cap every tool result with `ContextEngine.cap_tool_result`
            when the tool returns it, before it enters ``agent.messages``.
        context_window: The window in tokens; None reads the model's
            ``context_window_limit``, else keeps the engine's own. An explicit
            value always wins.
        trigger: ``("fraction", 0.8)`` or ``("tokens", n)``: where compaction
            starts; None keeps the engine's reserve.
        count_request: Count the call's ``tool_specs`` into the engine's
            overhead on every call (the system prompt is counted as a message).

    Attributes:
        engine: The engine (with a pool: the agent's, once the agent is built).
        commits: How many times ``agent.messages`` was replaced by a committed view.
        removed_message_count: Stored messages a commit removed from the front of
            the history (Strands' session managers skip that many when restoring).
    """

    def __init__(
        self,
        engine: ContextEngine | EnginePool,
        *,
        proactive_compression: bool | ProactiveCompressionConfig | None = None,
        compact_command: bool = True,
        cap_tool_results: bool = True,
        context_window: int | None = None,
        trigger: Trigger | None = None,
        count_request: bool = True,
    ) -> None:
        if not isinstance(engine, (ContextEngine, EnginePool)):
            raise ConfigurationError(
                f"engine must be a ContextEngine or an EnginePool, got {engine!r}; "
                "build one with ContextEngine.default(context_window=..., summarizer=...)"
            )
        if not isinstance(cap_tool_results, bool):
            raise ConfigurationError(
                f"cap_tool_results must be True or False, got {cap_tool_results!r}"
            )
        super().__init__(proactive_compression=proactive_compression)
        self.pool = engine if isinstance(engine, EnginePool) else None
        self._engine = engine if isinstance(engine, ContextEngine) else None
        self.compact_command = compact_command
        self.cap_tool_results = cap_tool_results
        self.commits = 0
        self.sizing = Sizing(context_window, trigger, count_request=count_request)
        # Messages in front of the stored ones (the checkpoint, a kept prompt): agent.messages
        # is this head plus the stored messages after the first removed_message_count.
        self._head: list[StrandsMessage] = []
        self._transcripts = _Transcripts()
        # The turn of the model call in flight: projected in the middleware, resumed by
        # reduce_context after an overflow, dropped once the model answered.
        self._turn: _Turn | None = None

    # -- Strands hooks -------------------------------------------------------------

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Register the projection middleware and the bookkeeping hooks with the agent."""
        super().register_hooks(registry, **kwargs)
        registry.add_callback(AgentInitializedEvent, self._on_agent_initialized)
        registry.add_callback(BeforeInvocationEvent, self._on_before_invocation)
        registry.add_callback(AfterModelCallEvent, self._on_after_model_call)
        registry.add_callback(AfterToolCallEvent, self._on_after_tool_call)

    @property
    def engine(self) -> ContextEngine:
        """The engine of this agent's conversation.

        Raises:
            ConfigurationError: a pool was given and no agent was built with the manager yet.
        """
        if self._engine is None:
            raise ConfigurationError(
                "this manager takes its engine from an EnginePool when its agent is built; "
                "pass it to Agent(conversation_manager=...) first"
            )
        return self._engine

    def _on_agent_initialized(self, event: AgentInitializedEvent) -> None:
        if self.pool is not None:
            self._engine = self.pool.engine(_conversation_id(event.agent))
        event.agent.add_middleware(InvokeModelStage.Input, self._project_request)

    async def _on_before_invocation(self, event: BeforeInvocationEvent) -> None:
        self._turn = None
        command = self._command(event.messages)
        if command is None:
            return
        result = await self.compact(event.agent, command)
        event.cancel = (
            f"Compacted {result.info.compacted_count if result.info else 0} messages "
            "into a checkpoint."
            if result.changed
            else "Nothing to compact."
        )

    def _command(self, messages: Sequence[StrandsMessage] | None) -> str | None:
        """The instructions of a ``/compact`` prompt ("" without any), or None."""
        if not self.compact_command or not messages or len(messages) != 1:
            return None
        blocks = messages[0]["content"]
        if messages[0]["role"] != "user" or len(blocks) != 1 or set(blocks[0]) != {"text"}:
            return None
        command = parse_compact_command(blocks[0]["text"])
        return None if command is None else command.instructions or ""

    def _on_after_model_call(self, event: AfterModelCallEvent) -> None:
        if event.stop_response is not None:
            self._turn = None

    async def _on_after_tool_call(self, event: AfterToolCallEvent) -> None:
        """Replace the tool's result with its capped preview, when the cap shortened it."""
        if not self.cap_tool_results:
            return
        try:
            (read,) = message_from_strands(
                {"role": "user", "content": [{"toolResult": event.result}]}
            )
        except (InvalidMessageError, ValueError):  # not a result the converter reads: keep it
            logger.debug("tool result not readable; left uncapped", exc_info=True)
            return
        capped = await self.engine.cap_tool_result(read)
        if capped is not read:
            (written,) = to_strands([capped])[0]["content"]
            event.result = written["toolResult"]

    async def _project_request(self, context: InvokeModelContext) -> InvokeModelContext:
        """Send the engine's view of the history instead of the history itself."""
        turn = self._turn
        if turn is not None and turn.retry is not None:
            view, turn.retry = turn.retry, None  # the one retry after a recovery
            return context.replace(messages=to_strands(view))
        self._size(context.model, context.tool_specs)
        step = await self._start(context.agent, context.system_prompt)
        return context.replace(messages=to_strands(step.messages)) if step.changed else context

    def _size(self, model: Any, tool_specs: Sequence[Any] | None) -> None:
        """Size the engine to the model's ``context_window_limit`` and the call's tool specs."""
        specs = tool_specs if self.sizing.count_request and tool_specs else ()
        self.sizing.apply(
            self.engine,
            model_window=getattr(model, "context_window_limit", None),
            request_text=(schema_text(specs),) if specs else (),
        )

    def _size_for(self, agent: Any) -> None:
        """`_size` outside a model call: the agent's model and all its tools."""
        registry = getattr(agent, "tool_registry", None)
        specs = registry.get_all_tool_specs() if registry is not None else None
        self._size(getattr(agent, "model", None), specs)

    async def _start(self, agent: Any, system_prompt: Any) -> ModelCallStep:
        """Start the turn of a model call: project, and commit what the engine says to."""
        flow = turn_flow(
            self._transcripts.convert(agent.messages, system_prompt), compact_command=False
        )
        step = await advance_turn(
            self.engine, flow, on_event=functools.partial(emit_rewrite, agent)
        )
        assert isinstance(step, ModelCallStep)  # without /compact the flow waits for the model
        if step.commit is not None:
            self._commit(agent, step.commit)
        self._turn = _Turn(flow)
        return step

    # -- the shared bodies -----------------------------------------------------------

    async def _project(self, agent: Any, system_prompt: Any) -> Sequence[Message] | None:
        """Project the agent's history, commit when the engine says so; None when unchanged."""
        self._size_for(agent)
        transcript = self._transcripts.convert(agent.messages, system_prompt)
        try:
            projection = await self.engine.project(transcript)
        except CompactionError as error:
            logger.warning(
                "strategy=<%s> failures=<%d> | projection failed, sending the best view reached",
                error.strategy,
                error.failures,
            )
            if error.commit is not None:
                self._commit(agent, error.commit)
            return error.view
        if projection.commit is not None:
            self._commit(agent, projection.commit)
        if projection.event is not None:
            await emit_rewrite(agent, projection.event)
        return projection.messages if projection.changed else None

    async def _recover(self, agent: Any, error: Exception) -> ModelCallStep:
        """Resume the turn with the overflow: the retry's step, committed; raises ``error``."""
        turn, self._turn = self._turn, None
        if turn is None:  # called outside a model call: start one as the middleware would
            await self._start(agent, _system_prompt(agent))
            turn, self._turn = self._turn, None
        assert turn is not None
        step = await advance_turn(
            self.engine, turn.flow, error, on_event=functools.partial(emit_rewrite, agent)
        )
        assert isinstance(step, ModelCallStep)
        if step.commit is not None:
            self._commit(agent, step.commit)
        turn.retry, turn.recovered = step.messages, True
        self._turn = turn
        return step

    def _commit(self, agent: Any, view: Sequence[Message]) -> None:
        """Replace ``agent.messages`` in place with a committed view.

        The messages the view ends with that are still the history's own stay
        where Strands' session store has them; the ones before them become the
        head kept in `get_state`, and the stored messages no longer sent count
        in ``removed_message_count``.
        """
        new = to_strands(view)
        old = agent.messages
        stored = max(0, len(old) - len(self._head))
        kept = min(_common_tail(old, new), stored)
        self.removed_message_count += stored - kept
        self._head = copy.deepcopy(new[: len(new) - kept])
        old[:] = new
        self._transcripts.adopt(new, view)
        self.commits += 1
        logger.debug(
            "messages=<%d> head=<%d> removed=<%d> | committed the view to agent.messages",
            len(new),
            len(self._head),
            self.removed_message_count,
        )

    # -- ConversationManager ---------------------------------------------------------------

    def apply_management(self, agent: Agent, **kwargs: Any) -> None:
        """Project the history and commit when the engine says so (after each invocation).

        Best effort: an engine error is logged, not raised, since Strands calls
        this while finishing an invocation that may already be failing.
        """
        try:
            _run(lambda: self._project(agent, _system_prompt(agent)), "project")
        except ContextEngineError:
            logger.warning("history management failed; agent.messages left as is", exc_info=True)

    def reduce_context(self, agent: Agent, e: Exception | None = None, **kwargs: Any) -> None:
        """Shrink ``agent.messages``: overflow recovery when ``e`` is set, else a compaction.

        The policy is `context_engine.turn`'s: the recovery starts from the
        history as committed so far (a checkpoint the failed call's projection
        wrote included), is committed, and the middleware sends it on Strands'
        retry.

        Raises:
            ContextWindowOverflowException: with the reason, when the recovery
                removes nothing or fails; ``e`` itself when the retry after a
                recovery overflowed again.
        """
        if e is None:
            try:
                self.compact_sync(agent)
            except ContextEngineError:
                logger.warning("proactive compaction failed; continuing", exc_info=True)
            return
        retried = self._turn is not None and self._turn.recovered
        try:
            _run(lambda: self._recover(agent, e), "recover_overflow")
        except Exception as raised:
            if raised is not e or retried:
                raise
            # The runtime's own error, saying why: Strands then ends the invocation cleanly.
            raise ContextWindowOverflowException(
                f"context-engine could not shrink the history below the model's window "
                f"(nothing left that may be removed, or the recovery failed): {e}"
            ) from e

    async def compact(self, agent: Agent, instructions: str | None = None) -> CompactResult:
        """Compact the agent's history now and commit the result (``/compact``).

        Args:
            agent: The agent whose ``messages`` are compacted in place.
            instructions: What the checkpoint should focus on.

        Raises:
            CompactionError: As `ContextEngine.compact`; the history is left as is.
        """
        self._size_for(agent)
        transcript = self._transcripts.convert(agent.messages, _system_prompt(agent))
        result = await self.engine.compact(transcript, instructions or None)
        if result.commit is not None:  # the transcript part: provider blocks are never kept
            self._commit(agent, result.commit)
        if result.event is not None:
            await emit_rewrite(agent, result.event)
        return result

    def compact_sync(self, agent: Agent, instructions: str | None = None) -> CompactResult:
        """Blocking `compact`; it may also be called from inside a running event loop."""
        return _run(lambda: self.compact(agent, instructions), "compact")

    async def compact_if_needed(
        self,
        agent: Agent,
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        *,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> CompactResult | None:
        """Compact the history a session restored, at the start of a request, when it is long.

        `ContextEngine.compact_if_needed` on ``agent.messages``: above
        ``trigger_tokens`` and with at least ``min_messages`` messages, one
        checkpoint (reason ``request_boundary``) replaces the history in place,
        and the session manager stores it as it stores any commit. Call it
        before ``agent(prompt)``; None when nothing was due.

        Raises:
            ConfigurationError: a bound is not an int >= 0.
            CompactionError: As `ContextEngine.compact_if_needed`; the history is left as is.
        """
        self._size_for(agent)
        transcript = self._transcripts.convert(agent.messages, _system_prompt(agent))
        result = await self.engine.compact_if_needed(
            transcript, trigger_tokens, min_messages, on_start=on_start, on_end=on_end
        )
        if result is not None and result.commit is not None:
            self._commit(agent, result.commit)
        return result

    def compact_if_needed_sync(
        self,
        agent: Agent,
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        *,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> CompactResult | None:
        """Blocking `compact_if_needed`; it may also be called from inside a running event loop."""
        return _run(
            lambda: self.compact_if_needed(
                agent, trigger_tokens, min_messages, on_start=on_start, on_end=on_end
            ),
            "compact_if_needed",
        )

    # -- sessions ------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Strands' state plus the head: the messages in front of the stored ones."""
        return {**super().get_state(), "head": copy.deepcopy(self._head)}

    def restore_from_session(self, state: dict[str, Any]) -> list[StrandsMessage] | None:
        """Restore the state; the head goes back in front of the restored messages.

        Raises:
            ValueError: ``state`` belongs to another conversation manager.
        """
        super().restore_from_session(state)
        self._head = copy.deepcopy(list(state.get("head") or []))
        return copy.deepcopy(self._head) or None
