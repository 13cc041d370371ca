"""Plug `ContextEngine` into the OpenAI Agents SDK.

Install with ``pip install 'context-engine[openai-agents]'``.

`ContextEngineProvider` is the one object a runtime user needs: built once
from an engine factory, it gives each session its own engine (an `EnginePool`
keyed by ``Session.session_id``) and each run a ``RunConfig``
(`ContextEngineProvider.run_config`) wired with the three pieces below, for
agents whose ``model`` is a name (``model="gpt-5.1"``) or left to the default:

* `ContextEngineInputFilter` is a ``RunConfig(call_model_input_filter=...)``.
  Before every model call it converts the run's input items and starts the
  call's turn (`context_engine.turn`): the engine projects them (the agent's
  instructions counted as the leading system message) and the model gets the
  view. The SDK keeps its own history (the run's input and generated items, or
  a ``Session``) and a filter cannot change it, so the filter remembers each
  commit and puts it in place of the history it stands for on every later
  call, in this run and in later runs that continue the same history. Every
  conversation under the run config keeps its own commit: a sub-agent run
  through ``Agent.as_tool`` (fresh input, the parent's run config) neither
  drops nor re-summarizes the parent's. The filter also caps each new tool
  output (``function_call_output`` and the like) with
  `ContextEngine.cap_tool_result` when it first converts it, and commits the
  capped history: the SDK's hooks cannot change a tool's output, and wrapping
  the caller's tools would change what they registered, so the filter is
  where the cap takes hold. The SDK's in-run items (``result.new_items``,
  ``result.to_input_list()``) still hold the whole output;
  `ContextEngineInputFilter.apply_commit` and `ContextEngineSession` store the
  preview.
* `ContextEngineModel` wraps the agent's ``Model`` and resumes the turn when
  the provider rejects the prompt as too long: the engine recovers from the
  history as committed so far (a checkpoint the rejected call's own projection
  wrote included), the recovery is committed, and the call is retried once; a
  second overflow surfaces. It also passes each response's usage to the filter,
  which anchors the engine's token estimate.
* `ContextEngineSession` wraps a ``Session``: the stored history takes the
  filter's commit (`ContextEngineSession.persist_commit`; the provider's runs
  do it when each run ends, a wrapped session at the start of the next run),
  and `ContextEngineSession.compact` is what a ``/compact`` command maps to.

The SDK traces with its own tracing, not OpenTelemetry: every engine call is a
custom span ``context_engine.project`` / ``context_engine.recover_overflow`` /
``context_engine.compact`` in the SDK's trace, its data the view's size and,
after a rewrite, the rewrite's facts (reason, tokens before and after, every
strategy tried). The engine's OpenTelemetry spans are children of whatever
OpenTelemetry span is current around ``Runner.run``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from context_engine.boundary import DEFAULT_MIN_MESSAGES, DEFAULT_TRIGGER_TOKENS
from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents
from context_engine.integrations.conversations import (
    _LRU,
    DEFAULT_MAX_CONVERSATIONS,
    EnginePool,
)
from context_engine.results import CompactResult

try:
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.memory import Session
    from agents.models.interface import Model, ModelProvider
    from agents.models.multi_provider import MultiProvider
    from agents.run_config import RunConfig
    from agents.tracing import custom_span
    from agents.tracing.spans import NoOpSpan
    from agents.usage import Usage as AgentsUsage
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "context_engine.integrations.openai_agents needs the OpenAI Agents SDK; "
        "install it with: pip install 'context-engine[openai-agents]'"
    ) from exc

from context_engine.integrations._openai_agents_filter import ContextEngineInputFilter
from context_engine.integrations._reporting import rewrite_fields
from context_engine.integrations._sizing import Sizing, Trigger

if TYPE_CHECKING:
    from agents.memory import SessionSettings
    from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest

__all__ = [
    "ContextEngineInputFilter",
    "ContextEngineModel",
    "ContextEngineProvider",
    "ContextEngineSession",
]

logger = logging.getLogger(__name__)


class ContextEngineModel(Model):
    """A ``Model`` that recovers once from a context-length error.

    Use it as the agent's model (``Agent(model=ContextEngineModel(model, input_filter))``).
    On an overflow error from ``model`` (`is_context_overflow`) the filter
    resumes the call's turn: the engine recovers from the history as committed
    so far and the call is retried once with the recovered input; a second
    overflow, an overflow nothing could be cut for, and every other error
    surface unchanged. A streamed call is retried only when the error came
    before its first event. Each response's usage goes to the filter.

    Args:
        model: The model to call, e.g. ``OpenAIResponsesModel(...)``.
        input_filter: The filter of the run, for its engine and history.
    """

    def __init__(self, model: Model, input_filter: ContextEngineInputFilter) -> None:
        self.model = model
        self.input_filter = input_filter

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        """Call the model; recover and retry once on a context-length error.

        The other arguments (settings, tools, handoffs, tracing, ...) go to the
        wrapped model as given.
        """
        instructions, items = system_instructions, input
        try:
            response = await self.model.get_response(instructions, items, *args, **kwargs)
        except Exception as error:
            retry = await self.input_filter.recover(error, input=items, instructions=instructions)
            if retry is None:
                raise
            instructions, items = retry.instructions, retry.input
            try:
                response = await self.model.get_response(instructions, items, *args, **kwargs)
            finally:
                self.input_filter._take_turn(items, instructions)  # the one retry was made
        else:
            self.input_filter._take_turn(items, instructions)
        self.input_filter.remember_usage(response.to_input_items(), response.usage)
        return response

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Stream the model; recover and retry once on a context-length error before any event."""
        started = False
        try:
            async for event in self.model.stream_response(
                system_instructions, input, *args, **kwargs
            ):
                started = True
                self._observe(event)
                yield event
        except Exception as error:
            retry = None
            if not started:
                retry = await self.input_filter.recover(
                    error, input=input, instructions=system_instructions
                )
            if retry is None:
                raise
        else:
            self.input_filter._take_turn(input, system_instructions)
            return
        try:
            async for event in self.model.stream_response(
                retry.instructions, retry.input, *args, **kwargs
            ):
                self._observe(event)
                yield event
        finally:
            self.input_filter._take_turn(retry.input, retry.instructions)  # the one retry was made

    def _observe(self, event: TResponseStreamEvent) -> None:
        if getattr(event, "type", None) != "response.completed":
            return
        response = event.response  # type: ignore[union-attr]  # a ResponseCompletedEvent
        output = ModelResponse(output=list(response.output), usage=AgentsUsage(), response_id=None)
        self.input_filter.remember_usage(output.to_input_items(), response.usage)

    def get_retry_advice(self, request: ModelRetryAdviceRequest) -> ModelRetryAdvice | None:
        """The wrapped model's retry advice."""
        return self.model.get_retry_advice(request)

    async def close(self) -> None:
        """Close the wrapped model."""
        await self.model.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        # The runner calls this private hook on the model it used; pass it on.
        await self.model._cleanup_on_run_end(owner)


class ContextEngineSession:
    """A ``Session`` whose stored history takes the engine's commits.

    Wraps any ``Session`` (``SQLiteSession``, ...). At the start of each run
    (the runner reads the whole history) the filter's commit, if the stored
    history starts with what it stands for, replaces that part of the stored
    history: a new process resuming the session starts from the checkpoint.
    Replacing is ``clear_session`` then ``add_items`` on the wrapped session.

    Args:
        session: The session that stores the items.
        input_filter: The filter of the runs that use this session.
    """

    def __init__(self, session: Session, input_filter: ContextEngineInputFilter) -> None:
        self.session = session
        self.input_filter = input_filter
        self.session_id: str = session.session_id
        self.session_settings: SessionSettings | None = getattr(session, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The stored history (latest ``limit`` items); a pending commit is persisted first."""
        if limit is None:
            await self.persist_commit()
        return await self.session.get_items(limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Store new items."""
        await self.session.add_items(items)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item."""
        return await self.session.pop_item()

    async def clear_session(self) -> None:
        """Forget the history, and the filter's commit with it."""
        await self.session.clear_session()
        self.input_filter.reset()

    async def persist_commit(self) -> bool:
        """Write the filter's commit into the stored history; True when it did."""
        if self.input_filter.commit is None:
            return False
        committed = self.input_filter._committed_items(await self.session.get_items())
        if committed is None:
            return False
        await self._replace(committed)
        return True

    async def compact(self, instructions: str | None = None) -> CompactResult:
        """Compact the stored history now: what a ``/compact [instructions]`` command does.

        Args:
            instructions: What the checkpoint should focus on.
        """
        items = await self.session.get_items()
        with custom_span("context_engine.compact") as span:
            engine = self.input_filter.engine
            result = await engine.compact(from_openai_agents(items), instructions)
            _describe_compact(span, result)
        if result.commit is not None:  # the transcript part: provider blocks are never kept
            await self._replace(to_openai_agents(result.commit))
            self.input_filter.reset()
        return result

    async def compact_if_needed(
        self,
        trigger_tokens: int = DEFAULT_TRIGGER_TOKENS,
        min_messages: int = DEFAULT_MIN_MESSAGES,
        *,
        on_start: Callable[[int], Any] | None = None,
        on_end: Callable[[CompactResult | None], Any] | None = None,
    ) -> CompactResult | None:
        """Compact the stored history at the start of a request, when it is long enough.

        `ContextEngine.compact_if_needed` on the stored items (a pending commit
        stored first): above ``trigger_tokens`` and with at least
        ``min_messages`` messages, one checkpoint (reason ``request_boundary``)
        replaces the stored history, and the run that follows reads it. Call
        it before ``Runner.run``; None when nothing was due.

        Raises:
            ConfigurationError: a bound is not an int >= 0.
            CompactionError: As `ContextEngine.compact_if_needed`; the session is left as is.
        """
        items = await self.get_items()
        result = await self.input_filter.engine.compact_if_needed(
            from_openai_agents(items),
            trigger_tokens,
            min_messages,
            on_start=on_start,
            on_end=on_end,
        )
        if result is not None and result.commit is not None:
            await self._replace(to_openai_agents(result.commit))
            self.input_filter.reset()
        return result

    async def _replace(self, items: list[TResponseInputItem]) -> None:
        await self.session.clear_session()
        await self.session.add_items(items)


def _describe_compact(span: Any, result: CompactResult) -> None:
    """Record a ``/compact`` on its SDK custom span (when tracing records it)."""
    if result.event is not None and not isinstance(span, NoOpSpan):
        span.span_data.data.update(rewrite_fields(result.event))


class _SessionModel(ContextEngineModel):
    """A `ContextEngineModel` that stores its conversation's commit when a run ends.

    The runner tells every model it used that the run is over
    (``Model._cleanup_on_run_end``), after it stored the run's items in the
    session: the commit is written then, so a worker that serves one request
    and exits leaves its checkpoint in the session.
    """

    def __init__(
        self, model: Model, input_filter: ContextEngineInputFilter, session: Session | None
    ) -> None:
        super().__init__(model, input_filter)
        self.session = session

    async def _cleanup_on_run_end(self, owner: object) -> None:
        try:
            await super()._cleanup_on_run_end(owner)
        finally:
            if self.session is not None:
                await _persist(ContextEngineSession(self.session, self.input_filter))


async def _persist(session: ContextEngineSession) -> None:
    """Store the commit; a failure is logged, as the commit stays in memory for the next run."""
    try:
        await session.persist_commit()
    except Exception:
        logger.warning(
            "session=<%s> | could not store the commit in the session; "
            "the next run of this conversation applies it and tries again",
            session.session_id,
            exc_info=True,
        )


class _ConversationModels(ModelProvider):
    """The models of one conversation's runs: each name resolved once and wrapped.

    One wrapper per name, so the runner's end-of-run notice reaches each model
    once, however many turns it served.
    """

    def __init__(
        self,
        resolver: ModelProvider,
        input_filter: ContextEngineInputFilter,
        session: Session | None,
    ) -> None:
        self.resolver = resolver
        self.input_filter = input_filter
        self.session = session
        self._models: dict[str | None, _SessionModel] = {}

    def get_model(self, model_name: str | None) -> Model:
        """The named model (the resolver's default for None), wrapped for this conversation."""
        model = self._models.get(model_name)
        if model is None:
            model = self._models[model_name] = self.wrap(self.resolver.get_model(model_name))
        return model

    def wrap(self, model: Model) -> _SessionModel:
        """``model`` wrapped for this conversation."""
        return _SessionModel(model, self.input_filter, self.session)


def _session_id(session: object) -> str:
    if not isinstance(session, Session):
        raise ConfigurationError(
            f"session must be an Agents SDK Session (SQLiteSession, ...), got {session!r}"
        )
    return _checked_id(session.session_id, "session.session_id")


def _checked_id(conversation_id: object, what: str) -> str:
    if not isinstance(conversation_id, str) or not conversation_id:
        raise ConfigurationError(f"{what} must be a non-empty str, got {conversation_id!r}")
    return conversation_id


class ContextEngineProvider:
    """The engine for the Agents SDK in one object: an engine per session, a ``RunConfig`` per run.

    Build it once per process and pass ``run_config=provider.run_config(session)``
    to every ``Runner.run(agent, input, session=session, ...)``. Each session
    gets its own engine from ``engines`` (keyed by ``session.session_id``) and
    its own `ContextEngineInputFilter`; the run config sends every model call
    through that filter, resolves model names (``Agent(model="gpt-5.1")``,
    ``RunConfig.model``) with ``model_provider`` and wraps each model in a
    `ContextEngineModel` (overflow recovery, usage anchors). When a run ends,
    its commit is written into the session, so a new process, or a worker that
    serves one request, resumes from the checkpoint. Handoffs continue the
    session's conversation and sub-agents (``Agent.as_tool``) keep their own,
    under the same filter.

    An agent whose ``model`` is a ``Model`` instance is not wrapped: its calls
    are projected, but it neither recovers from an overflow nor stores the
    commit when the run ends (`ContextEngineSession` stores it at the start of
    the next run). Give it by name, with a ``model_provider`` that resolves it.

    Args:
        engines: An `EnginePool`, or the factory of one: builds the engine of a
            new conversation from its id, e.g.
            ``lambda session_id: ContextEngine.default(128_000, summarizer=s)``.
        model_provider: Resolves model names; the SDK's ``MultiProvider``
            (OpenAI, ``litellm/...``) by default.
        max_conversations: With a factory, the sessions whose engine is kept
            (the least recently used is dropped past it; default
            `DEFAULT_MAX_CONVERSATIONS`, 256). A dropped session gets a fresh
            engine on its next run and starts from the checkpoint stored in
            its session.
        cap_tool_results: As `ContextEngineInputFilter`.
        context_window: As `ContextEngineInputFilter`.
        trigger: As `ContextEngineInputFilter`.
        count_request: As `ContextEngineInputFilter`.

    Raises:
        ConfigurationError: ``engines`` is a single engine (one engine holds one
            conversation) or not callable, or a setting is invalid.
    """

    def __init__(
        self,
        engines: EnginePool | Callable[[str], ContextEngine],
        *,
        model_provider: ModelProvider | None = None,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        cap_tool_results: bool = True,
        context_window: int | None = None,
        trigger: Trigger | None = None,
        count_request: bool = True,
    ) -> None:
        self.pool = _pool(engines, max_conversations)
        if model_provider is not None and not isinstance(model_provider, ModelProvider):
            raise ConfigurationError(
                f"model_provider must be an Agents SDK ModelProvider, got {model_provider!r}"
            )
        self.model_provider = model_provider if model_provider is not None else MultiProvider()
        if not isinstance(cap_tool_results, bool):
            raise ConfigurationError(
                f"cap_tool_results must be True or False, got {cap_tool_results!r}"
            )
        Sizing(context_window, trigger, count_request=count_request)  # fails here, not at a run
        self._filter_options: dict[str, Any] = {
            "cap_tool_results": cap_tool_results,
            "context_window": context_window,
            "trigger": trigger,
            "count_request": count_request,
        }
        self._filters: _LRU[ContextEngineInputFilter] = _LRU(self.pool.max_conversations)

    def input_filter(self, conversation_id: str) -> ContextEngineInputFilter:
        """The filter of a conversation (a session id), over the pool's engine for it."""
        _checked_id(conversation_id, "conversation_id")
        engine = self.pool.engine(conversation_id)
        held = self._filters.get(conversation_id, lambda: self._new_filter(engine))
        if held.engine is not engine:  # the pool dropped the engine and built a new one
            held = self._new_filter(engine)
            self._filters.put(conversation_id, held)
        return held

    def run_config(
        self,
        session: Session | None = None,
        *,
        conversation_id: str | None = None,
        **options: Any,
    ) -> RunConfig:
        """A ``RunConfig`` for a run of ``session``'s conversation.

        Pass the same session to ``Runner.run``. ``options`` are the other
        ``RunConfig`` fields (``workflow_name``, ``model_settings``, ...); a
        ``model`` given as a name is resolved by the provider, as a ``Model``
        it is wrapped like a resolved one.

        Args:
            session: The session the run reads and stores; its ``session_id``
                picks the engine, and the run's commit is stored in it when
                the run ends.
            conversation_id: The conversation's id for a run without a
                session (you pass and store the history yourself; see
                `ContextEngineInputFilter.apply_commit`), or to key a session
                by something else than its ``session_id``.
            **options: Further ``RunConfig`` fields.

        Raises:
            ConfigurationError: neither a session nor a ``conversation_id``,
                or ``options`` set ``call_model_input_filter`` or
                ``model_provider`` (the provider sets both).
        """
        if conversation_id is None:
            if session is None:
                raise ConfigurationError(
                    "run_config needs the run's session, or conversation_id= for a run "
                    "without one: the engine is chosen per conversation"
                )
            conversation_id = _session_id(session)
        elif session is not None:
            _session_id(session)
        for name in ("call_model_input_filter", "model_provider"):
            if name in options:
                raise ConfigurationError(
                    f"run_config sets {name} itself; give the provider model_provider= "
                    "when it is built, or build the RunConfig yourself from "
                    "ContextEngineInputFilter and ContextEngineModel"
                )
        models = _ConversationModels(
            self.model_provider, self.input_filter(conversation_id), session
        )
        if isinstance(options.get("model"), Model):
            options["model"] = models.wrap(options["model"])
        return RunConfig(
            model_provider=models, call_model_input_filter=models.input_filter, **options
        )

    def session(self, session: Session) -> ContextEngineSession:
        """``session`` wrapped with its conversation's filter: ``/compact``, storing the commit.

        ``await provider.session(session).compact(instructions)`` is what a
        ``/compact`` command maps to; ``clear_session()`` on it also forgets
        the conversation's commits.
        """
        return ContextEngineSession(session, self.input_filter(_session_id(session)))

    async def aclose(self) -> None:
        """Close the model provider (its clients and cached models)."""
        await self.model_provider.aclose()

    def _new_filter(self, engine: ContextEngine) -> ContextEngineInputFilter:
        return ContextEngineInputFilter(engine, **self._filter_options)


def _pool(engines: object, max_conversations: int) -> EnginePool:
    if isinstance(engines, EnginePool):
        if max_conversations != DEFAULT_MAX_CONVERSATIONS:
            raise ConfigurationError(
                "max_conversations is set on the EnginePool you pass, not beside it"
            )
        return engines
    if isinstance(engines, ContextEngine):
        raise ConfigurationError(
            "ContextEngineProvider needs an engine per session, not one engine: pass a factory, "
            "e.g. lambda session_id: ContextEngine.default(128_000, summarizer=...), "
            "or an EnginePool"
        )
    if not callable(engines):
        raise ConfigurationError(
            f"engines must be an EnginePool or a factory taking a session id, got {engines!r}"
        )
    return EnginePool(engines, max_conversations=max_conversations)
