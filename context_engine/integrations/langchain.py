"""LangChain v1: `ContextEngineMiddleware`, an ``AgentMiddleware`` built on `ContextEngine`.

Add it to ``langchain.agents.create_agent(..., middleware=[...])``. Around
every model call it:

* projects the request's messages (the system prompt included, so its tokens
  count) and sends the model the engine's view; the agent state keeps the
  full history;
* when the engine says to commit, replaces the state's messages with the
  checkpoint and the kept tail (``RemoveMessage(REMOVE_ALL_MESSAGES)`` in a
  state update returned with the model's answer);
* when the model rejects the prompt as too long, runs
  `ContextEngine.recover_overflow` from the history as committed so far,
  retries the call once with the recovered view and commits it; a second
  failure surfaces;
* when the last message is a ``/compact [instructions]`` user message, runs
  `ContextEngine.compact` instead of calling the model, commits, and answers
  with a short note;
* around every tool call (``wrap_tool_call``), caps the ``ToolMessage`` the
  tool returned with `ContextEngine.cap_tool_result` before LangGraph adds it
  to the state, so the state itself never holds a 60k-token output (the
  original goes to the engine's archive); ``cap_tool_results=False`` keeps
  results whole;
* reports every rewrite to the run's callbacks as a LangChain custom event
  (``context_engine.project``, ``context_engine.recover_overflow``,
  ``context_engine.compact``; see `context_engine.integrations._langchain_events`),
  before the model is sent the rewritten view.

`from_clear_tool_uses` carries a ``ContextEditingMiddleware``'s
``ClearToolUsesEdit`` (``exclude_tools``, ``keep``, ``placeholder``) over to
the engine's `ToolResultMicrocompact`.

The policy is `context_engine.turn`'s, shared by every adapter: the sync
(``invoke``, ``stream``) and async (``ainvoke``, ``astream``,
``astream_events``) hooks drive it with `run_turn_sync` and `run_turn`; this
module converts messages and writes commits into the state.
A checkpoint the projection wrote is where an overflow recovery starts, so the
retry sends it and the state keeps it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from context_engine.boundary import DEFAULT_MIN_MESSAGES, DEFAULT_TRIGGER_TOKENS, checked_boundary
from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError, ContextEngineError
from context_engine.integrations._sizing import Sizing, Trigger, mapping_int, schema_text
from context_engine.integrations.conversations import Conversations, EnginePool
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.results import CompactResult
from context_engine.turn import TurnResult, run_turn, run_turn_sync

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core import exceptions as _lc_exceptions
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AnyMessage,
        BaseMessage,
        RemoveMessage,
        ToolMessage,
    )
    from langchain_core.utils.function_calling import convert_to_openai_tool
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

    from context_engine.formats.langchain import (
        message_from_langchain,
        message_to_langchain,
        to_langchain,
    )
except ImportError as exc:  # pragma: no cover - a test hides the package to check the message
    raise ImportError(
        "context_engine.integrations.langchain needs langchain and langchain-core; "
        "install the extra with: pip install 'context-engine[langchain]'"
    ) from exc

from context_engine.integrations._langchain_edits import ExcludeTools, from_clear_tool_uses
from context_engine.integrations._langchain_events import adispatch_rewrite, dispatch_rewrite

__all__ = [
    "ContextEngineMiddleware",
    "ExcludeTools",
    "RequestBoundaryMiddleware",
    "from_clear_tool_uses",
]

logger = logging.getLogger(__name__)

# langchain-core's own overflow error (provider integrations raise subclasses of it).
_OVERFLOW_TYPES: tuple[type[BaseException], ...] = tuple(
    t
    for t in (getattr(_lc_exceptions, "ContextOverflowError", None),)
    if isinstance(t, type) and issubclass(t, BaseException)
)

_Result: TypeAlias = "ModelResponse[Any] | ExtendedModelResponse[Any]"
_Transcript: TypeAlias = tuple[Message, ...]


_Fields: TypeAlias = tuple[Any, ...]
_MESSAGE_FIELDS = (
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "tool_call_id",
    "artifact",
    "status",
)


def _fields(message: BaseMessage) -> _Fields:
    """The attribute values of ``message``; a reassigned attribute gives another object."""
    return (
        message.content,
        message.id,
        message.name,
        message.additional_kwargs,
        message.response_metadata,
        *(getattr(message, key, None) for key in _MESSAGE_FIELDS),
    )


class _Reader:
    """Converts the state's messages, reusing the `Message` read before for the same object.

    The engine trusts a provider's usage anchor, and reuses its token counts,
    only for the very message objects it saw on the previous call. LangGraph
    hands the middleware the same LangChain objects on every model call of a
    run, so each is read once; the messages a commit writes into the state map
    to the engine's own objects. An object whose attributes were reassigned
    since is read again.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[BaseMessage, _Fields, Message]] = {}

    def read(
        self, system: BaseMessage | None, messages: Sequence[BaseMessage]
    ) -> tuple[_Transcript, _Transcript]:
        """The system prompt (none or one message) and the messages, as messages."""
        known: dict[int, tuple[BaseMessage, _Fields, Message]] = {}
        lead = () if system is None else (self._one(system, None, known),)
        transcript = tuple(self._one(m, i, known) for i, m in enumerate(messages))
        self._known = known
        return lead, (*lead, *transcript)

    def _one(self, message: BaseMessage, index: int | None, known: dict[int, Any]) -> Message:
        fields = _fields(message)
        entry = self._known.get(id(message))
        if entry is not None and entry[0] is message and all(map(_is, entry[1], fields)):
            read = entry[2]
        else:
            read = message_from_langchain(message, index=index)
        known[id(message)] = (message, fields, read)
        return read

    def write(self, messages: Sequence[Message]) -> list[AnyMessage]:
        """``messages`` for the agent state, remembered as the engine's objects."""
        written = _state_messages(messages, 0)
        for converted, message in zip(written, messages, strict=True):
            if converted.id is None:  # LangGraph would set one in place; set it first
                converted.id = str(uuid.uuid4())
            self._known[id(converted)] = (converted, _fields(converted), message)
        return written


def _is(first: object, second: object) -> bool:
    return first is second


class ContextEngineMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Keeps every model call of a LangChain agent under the context window.

    One engine stands for one conversation (it remembers the last view for
    cache-friendly extension and its circuit breaker). An app that serves many
    LangGraph threads passes an `EnginePool`: each ``thread_id`` (from the
    run's ``config["configurable"]``) gets its own engine, so one thread's
    views never depend on another's; a run without a ``thread_id`` is the
    conversation ``"default"``.

    Every rewrite reaches the run's callbacks as a custom event named after
    the engine call (``context_engine.project``, ``.recover_overflow``,
    ``.compact``) with `rewrite_fields` as its data, before the model is sent
    the rewritten view; ``astream_events`` yields it as ``on_custom_event``.

    Args:
        engine: The engine that decides what the model sees, or an
            `EnginePool` giving one per ``thread_id``.
        compact_command: Treat a last user message ``/compact [instructions]``
            as a manual compaction instead of a question to the model.
        cap_tool_results: Cap every ``ToolMessage`` a tool returns with
            `ContextEngine.cap_tool_result` before it enters the agent state
            (a ``Command`` a tool returns passes as it is).
        context_window: The window in tokens; None reads the model profile's
            ``max_input_tokens`` (as ``SummarizationMiddleware`` does), else
            keeps the engine's own. An explicit value always wins.
        trigger: ``("fraction", 0.8)`` or ``("tokens", n)``: where compaction
            starts, like ``SummarizationMiddleware``'s trigger; None keeps the
            engine's reserve.
        count_request: Count the request's tool schemas into the engine's
            overhead on every call (the system prompt is counted as a message).

    Raises:
        ConfigurationError: ``engine`` is not a `ContextEngine` or an
            `EnginePool`, or a setting is of the wrong type.
    """

    def __init__(
        self,
        engine: ContextEngine | EnginePool,
        *,
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
        for flag, value in (
            ("compact_command", compact_command),
            ("cap_tool_results", cap_tool_results),
        ):
            if not isinstance(value, bool):
                raise ConfigurationError(f"{flag} must be True or False, got {value!r}")
        self.engine: ContextEngine | None = engine if isinstance(engine, ContextEngine) else None
        self.pool: EnginePool | None = engine if isinstance(engine, EnginePool) else None
        self._threads = None if self.pool is None else Conversations(self.pool, _Reader)
        self.compact_command = compact_command
        self.cap_tool_results = cap_tool_results
        self.tools = []
        self.sizing = Sizing(context_window, trigger, count_request=count_request)
        self._reader = _Reader()

    def _conversation(self, runtime: object) -> tuple[ContextEngine, _Reader]:
        """The engine and reader of the thread this call belongs to (``runtime``: the request's)."""
        if self._threads is None:
            assert self.engine is not None
            return self.engine, self._reader
        return self._threads.get(_thread_id(runtime))

    def _size(self, engine: ContextEngine, request: ModelRequest[Any]) -> None:
        """Size the engine to the request's model window and tool schemas."""
        tools = request.tools if self.sizing.count_request else ()
        self.sizing.apply(
            engine,
            model_window=_profile_window(request.model),
            request_text=(schema_text(_tool_schema(t) for t in tools),) if tools else (),
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> _Result:
        """Project, call the model, commit or recover (blocking; used by ``invoke``)."""
        engine, reader = self._conversation(getattr(request, "runtime", None))
        self._size(engine, request)
        lead, transcript = reader.read(request.system_message, request.messages)
        turn = run_turn_sync(
            engine,
            transcript,
            lambda view: handler(_with_view(request, view, transcript, len(lead))),
            compact_command=self.compact_command,
            is_overflow=_is_overflow,
            on_event=dispatch_rewrite,
        )
        return _answer(reader, turn, request, len(lead))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> _Result:
        """Project, call the model, commit or recover (used by ``ainvoke``)."""
        engine, reader = self._conversation(getattr(request, "runtime", None))
        self._size(engine, request)
        lead, transcript = reader.read(request.system_message, request.messages)
        turn = await run_turn(
            engine,
            transcript,
            lambda view: handler(_with_view(request, view, transcript, len(lead))),
            compact_command=self.compact_command,
            is_overflow=_is_overflow,
            on_event=adispatch_rewrite,
        )
        return _answer(reader, turn, request, len(lead))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; cap the ``ToolMessage`` it returns (blocking; used by ``invoke``)."""
        result = handler(request)
        if not self.cap_tool_results or not isinstance(result, ToolMessage):
            return result
        message = message_from_langchain(result)
        return _capped_result(
            result,
            message,
            self._conversation(getattr(request, "runtime", None))[0].cap_tool_result_sync(message),
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Run the tool; cap the ``ToolMessage`` it returns (used by ``ainvoke``)."""
        result = await handler(request)
        if not self.cap_tool_results or not isinstance(result, ToolMessage):
            return result
        message = message_from_langchain(result)
        return _capped_result(
            result,
            message,
            await self._conversation(getattr(request, "runtime", None))[0].cap_tool_result(message),
        )


def _thread_id(runtime: object) -> str:
    """The LangGraph ``thread_id`` of the run in progress, or ``"default"`` without one.

    Read from the request's runtime first (a model call's carries
    ``execution_info``, a tool call's its ``config``): on Python 3.10 an async
    run does not pass LangGraph's context variables into its tasks, so
    ``get_config()`` fails there and every thread would share one engine.
    """
    thread = getattr(getattr(runtime, "execution_info", None), "thread_id", None)
    config = getattr(runtime, "config", None)
    if thread is None and isinstance(config, Mapping):
        thread = (config.get("configurable") or {}).get("thread_id")
    if thread is None:
        try:
            thread = (get_config().get("configurable") or {}).get("thread_id")
        except RuntimeError:  # called outside a LangGraph run (a test calling the hook directly)
            return "default"
    return "default" if thread is None else str(thread)


def _profile_window(model: object) -> int | None:
    """The model profile's ``max_input_tokens``, or None when the model has no profile."""
    if not isinstance(model, BaseChatModel):
        return None
    return mapping_int(model.profile, "max_input_tokens")


def _tool_schema(tool: Any) -> Any:
    """A tool as the OpenAI-style schema a provider is sent; a dict is taken as it is."""
    if isinstance(tool, dict):
        return tool
    try:
        return convert_to_openai_tool(tool)
    except (TypeError, ValueError, NotImplementedError):  # a tool LangChain cannot describe
        logger.debug("tool=<%r> | no schema; counted by its name", tool, exc_info=True)
        return getattr(tool, "name", repr(tool))


def _capped_result(result: ToolMessage, read: Message, capped: Message) -> ToolMessage:
    """``result`` itself when the cap left ``read`` as it was, else the preview as a ToolMessage.

    The preview keeps the result's id, ``tool_call_id``, name, status and
    artifact (the converter carries them in the message's metadata).
    """
    if capped is read:
        return result
    written = message_to_langchain(capped)
    assert isinstance(written, ToolMessage)  # a tool message converts to one
    return written


def _answer(
    reader: _Reader, turn: TurnResult[ModelResponse[Any]], request: ModelRequest[Any], lead: int
) -> _Result:
    """The hook's result: the model's answer or the ``/compact`` note, with the commit."""
    if turn.command is not None:
        return _compacted(reader, turn.compacted, lead, request.messages[-1])
    assert turn.response is not None  # the model answered: run_turn raises otherwise
    return _respond(reader, turn.response, turn.commit, lead)


def _is_overflow(error: BaseException) -> bool:
    return isinstance(error, _OVERFLOW_TYPES) or is_context_overflow(error)


def _with_view(
    request: ModelRequest[Any], view: _Transcript, transcript: _Transcript, lead: int
) -> ModelRequest[Any]:
    """The request with the view's messages; the system prompt stays where LangChain keeps it."""
    if view == transcript:  # identity first: cheap, and the request keeps the state's objects
        return request
    return request.override(messages=_state_messages(view, lead))


def _state_messages(messages: Sequence[Message], lead: int) -> list[AnyMessage]:
    converted: list[BaseMessage] = to_langchain(messages[lead:])
    return converted  # type: ignore[return-value]  # to_langchain builds the four AnyMessage kinds


def _replace_state(messages: list[Any]) -> Command[Any]:
    return Command(update={"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages]})


def _respond(
    reader: _Reader, response: ModelResponse[Any], commit: Sequence[Message] | None, lead: int
) -> _Result:
    """The model's answer, with a state update that commits ``commit`` when there is one."""
    if commit is None:
        return response
    kept = reader.write(commit[lead:])
    return ExtendedModelResponse(
        model_response=response, command=_replace_state([*kept, *response.result])
    )


def _replaced(result: CompactResult) -> int:
    return result.info.compacted_count if result.info else 0


def _kept(result: CompactResult) -> int:
    return result.info.kept_count if result.info else len(result.messages)


def _compacted(
    reader: _Reader, result: CompactResult | None, lead: int, command: AnyMessage
) -> _Result:
    """The answer to ``/compact``: a note, and the compacted history committed before it."""
    if result is None or not result.changed:
        note = AIMessage(content="Nothing to compact: the conversation is already short.")
        return ModelResponse(result=[note])
    note = AIMessage(
        content=(
            f"Compacted the conversation ({result.strategy}): {_replaced(result)} "
            f"messages replaced by a checkpoint, {_kept(result)} kept verbatim."
        )
    )
    kept = reader.write((result.commit or result.messages)[lead:])  # never provider blocks
    return ExtendedModelResponse(
        model_response=ModelResponse(result=[note]),
        command=_replace_state([*kept, command, note]),
    )


class RequestBoundaryMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """Compacts a thread's stored history once, when a run starts (request-boundary compaction).

    LangGraph's checkpointer hands every run the thread's whole history. This
    middleware's ``before_agent`` hook runs `ContextEngine.compact_if_needed`
    on it, with the engine `ContextEngineMiddleware` uses for the thread: above
    ``trigger_tokens`` and with at least ``min_messages`` messages, one
    checkpoint is written (``on_compact`` fires with reason
    ``request_boundary``) and the state's messages are replaced by it, so the
    checkpointer stores the compacted thread and the run starts from it. Put it
    next to the middleware it reads the engine from:
    ``create_agent(..., middleware=[RequestBoundaryMiddleware(engine_mw), engine_mw])``.

    A compaction that fails leaves the state as it is (logged): the run's own
    projections still keep every model call under the window.

    Args:
        middleware: The `ContextEngineMiddleware` of the same agent (its engine,
            or its pool's engine for the run's ``thread_id``).
        trigger_tokens: As `ContextEngine.compact_if_needed`.
        min_messages: As `ContextEngine.compact_if_needed`.
        on_start: As `ContextEngine.compact_if_needed` (a server's own event).
        on_end: As `ContextEngine.compact_if_needed`.

    Raises:
        ConfigurationError: ``middleware`` is not a `ContextEngineMiddleware`,
            or a bound is not an int >= 0.
    """

    def __init__(
        self,
        middleware: ContextEngineMiddleware,
        *,
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> None:
        if not isinstance(middleware, ContextEngineMiddleware):
            raise ConfigurationError(
                f"RequestBoundaryMiddleware needs the agent's ContextEngineMiddleware, "
                f"got {middleware!r}"
            )
        self.middleware = middleware
        self.trigger_tokens, self.min_messages = checked_boundary(trigger_tokens, min_messages)
        self.on_start, self.on_end = on_start, on_end
        self.tools = []

    def before_agent(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        """Compact the stored history when it is long enough (blocking; used by ``invoke``)."""
        engine, reader = self.middleware._conversation(runtime)
        _, transcript = reader.read(None, state["messages"])
        try:
            result = engine.compact_if_needed_sync(transcript, **self._bounds())
        except ContextEngineError:
            logger.warning("request-boundary compaction failed; the run goes on", exc_info=True)
            return None
        return _boundary_update(reader, result)

    async def abefore_agent(self, state: AgentState[Any], runtime: Any) -> dict[str, Any] | None:
        """Compact the stored history when it is long enough (used by ``ainvoke``)."""
        engine, reader = self.middleware._conversation(runtime)
        _, transcript = reader.read(None, state["messages"])
        try:
            result = await engine.compact_if_needed(transcript, **self._bounds())
        except ContextEngineError:
            logger.warning("request-boundary compaction failed; the run goes on", exc_info=True)
            return None
        return _boundary_update(reader, result)

    def _bounds(self) -> dict[str, Any]:
        return {
            "trigger_tokens": self.trigger_tokens,
            "min_messages": self.min_messages,
            "on_start": self.on_start,
            "on_end": self.on_end,
        }


def _boundary_update(reader: _Reader, result: CompactResult | None) -> dict[str, Any] | None:
    """The state update that stores a request-boundary checkpoint, or None."""
    if result is None or result.commit is None:
        return None
    kept = reader.write(result.commit)  # the transcript part: provider blocks are never kept
    return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *kept]}
