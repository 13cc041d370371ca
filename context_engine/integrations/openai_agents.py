"""Plug `ContextEngine` into the OpenAI Agents SDK.

Install with ``pip install 'context-engine[openai-agents]'``. Three pieces; the
first is the adapter, the other two are optional:

* `ContextEngineInputFilter` is a ``RunConfig(call_model_input_filter=...)``.
  Before every model call it converts the run's input items, lets the engine
  project them (the agent's instructions counted as the leading system
  message) and gives the model the view. The SDK keeps its own history (the
  run's input and generated items, or a ``Session``) and a filter cannot change
  it, so the filter remembers each commit and puts it in place of the history
  it stands for on every later call, in this run and in later runs that
  continue the same history.
* `ContextEngineModel` wraps the agent's ``Model``: when the provider rejects
  the prompt as too long, the engine recovers (`ContextEngine.recover_overflow`,
  committed like any commit) and the call is retried once; a second overflow
  surfaces. It also passes each response's usage to the filter, which anchors
  the engine's token estimate.
* `ContextEngineSession` wraps a ``Session``: the stored history takes the
  filter's commit at the start of the next run, and `ContextEngineSession.compact`
  is what a ``/compact`` command maps to.

The SDK traces with its own tracing, not OpenTelemetry: every engine call is a
custom span ``context_engine.project`` / ``context_engine.recover_overflow`` in
the SDK's trace. The engine's OpenTelemetry spans are children of whatever
OpenTelemetry span is current around ``Runner.run``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.formats.openai_agents import (
    from_openai_agents,
    to_openai_agents,
    usage_from_openai_agents,
)
from context_engine.integrations._openai_agents_state import Commit, MessageCache
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.results import CompactResult, Projection, RecoveryResult

try:
    from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
    from agents.memory import Session
    from agents.models.interface import Model
    from agents.run_config import CallModelData, ModelInputData
    from agents.tracing import custom_span
    from agents.usage import Usage as AgentsUsage
except ImportError as exc:  # pragma: no cover - exercised by a test that hides the package
    raise ImportError(
        "context_engine.integrations.openai_agents needs the OpenAI Agents SDK; "
        "install it with: pip install 'context-engine[openai-agents]'"
    ) from exc

if TYPE_CHECKING:
    from agents.memory import SessionSettings
    from agents.retry import ModelRetryAdvice, ModelRetryAdviceRequest

__all__ = ["ContextEngineInputFilter", "ContextEngineModel", "ContextEngineSession"]

logger = logging.getLogger(__name__)

_Result = Projection | RecoveryResult


@attrs.frozen
class _Prepared:
    """One call's input as the engine sees it."""

    transcript: tuple[Message, ...]
    head: Message | None
    messages: tuple[Message, ...]
    instructions: str | None
    sent: list[Any] = attrs.field(factory=list, eq=False)


def _without_head(messages: Sequence[Message], head: Message | None) -> tuple[Message, ...]:
    if head is not None and messages and messages[0] == head:
        return tuple(messages[1:])
    return tuple(messages)


def _describe(span: Any, result: _Result) -> None:
    """Record what the engine did on the SDK's custom span."""
    event = result.event
    span.span_data.data.update(
        {
            "tokens": result.usage.tokens,
            "threshold": result.usage.threshold,
            "changed": result.changed,
            "strategy": result.strategy,
            "committed": bool(event is not None and event.committed),
        }
    )


class ContextEngineInputFilter:
    """The engine as the Agents SDK's ``call_model_input_filter``.

    Pass it as ``RunConfig(call_model_input_filter=ContextEngineInputFilter(engine))``.
    Use one filter and one engine per conversation: both remember the last view.

    Args:
        engine: The engine that decides what each model call sees.
    """

    def __init__(self, engine: ContextEngine) -> None:
        if not isinstance(engine, ContextEngine):
            raise ConfigurationError(
                f"ContextEngineInputFilter needs a ContextEngine, got {engine!r}; "
                "build one with ContextEngine.default(context_window=..., summarizer=...)"
            )
        self.engine = engine
        self._converter = MessageCache()
        self._committed: Commit | None = None
        self._head: Message | None = None
        self._last: _Prepared | None = None

    @property
    def commit(self) -> tuple[Message, ...] | None:
        """The committed view (checkpoint, kept messages) standing for the history's start."""
        return self._committed.messages if self._committed is not None else None

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Project the input of one model call; the SDK calls this before every call."""
        model_data = data.model_data
        prepared = self._prepare(model_data.input, model_data.instructions)
        return (await self._run("project", prepared, self.engine.project))[0]

    async def recover(
        self,
        error: BaseException,
        *,
        input: str | list[TResponseInputItem],
        instructions: str | None,
    ) -> ModelInputData | None:
        """Shrink the input a model call was rejected for as too long.

        The recovery is committed: later calls start from it. `ContextEngineModel`
        calls this; call it yourself around your own model calls.

        Args:
            error: The provider's context-length error.
            input: The input items of the rejected call.
            instructions: Its system instructions.

        Returns:
            The input to retry with, or None when nothing could be shrunk (the
            error should surface).
        """
        last = self._last
        if last is not None and last.instructions == instructions and last.sent == input:
            # Recover from the history as committed so far (the turn policy): a checkpoint
            # the rejected call's own projection wrote is the start, never thrown away.
            applied = self._committed.apply(last.transcript) if self._committed else None
            prepared = last
            if applied is not None:
                head = (last.head,) if last.head is not None else ()
                prepared = attrs.evolve(last, messages=(*head, *applied))
        else:
            prepared = self._prepare(input, instructions)
        recover = functools.partial(self.engine.recover_overflow, error=error)
        retry, changed = await self._run("recover_overflow", prepared, recover)
        return retry if changed else None

    def remember_usage(self, output_items: Sequence[Any], usage: Any) -> None:
        """Record the usage a model response reported, to anchor the next estimates.

        Args:
            output_items: The response's output as input items
                (``ModelResponse.to_input_items()``).
            usage: ``ModelResponse.usage`` or a Responses ``ResponseUsage``.
        """
        if usage is not None:
            self._converter.remember_usage(output_items, usage_from_openai_agents(usage))

    def apply_commit(self, items: Sequence[TResponseInputItem]) -> list[TResponseInputItem]:
        """``items`` with the last commit in place of the history it stands for.

        Use it to store a conversation's history after a run (``result.to_input_list()``)
        in its committed form; a copy of ``items`` when no commit applies.
        """
        committed = self._committed_items(items)
        return committed if committed is not None else list(items)

    def reset(self) -> None:
        """Forget the commit and the conversion cache (a new conversation starts)."""
        self._converter = MessageCache()
        self._committed = None
        self._last = None

    def _committed_items(self, items: Sequence[Any]) -> list[TResponseInputItem] | None:
        commit = self._committed
        if commit is None:
            return None
        listed = list(items)
        if commit.apply(self._converter.convert(listed)) is None:
            return None
        covered = self._converter.item_count(len(commit.source))
        return [*self._write(commit.messages), *listed[covered:]]

    def _prepare(self, items: str | Sequence[Any], instructions: str | None) -> _Prepared:
        listed = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)
        transcript = self._converter.convert(listed)
        effective = transcript
        if self._committed is not None:
            applied = self._committed.apply(transcript)
            if applied is None:
                logger.debug("history no longer starts with the committed part | commit dropped")
                self._committed = None
            else:
                effective = applied
        head = self._head
        if instructions and (head is None or head.text != instructions):
            head = self._head = Message.system(instructions)
        head = head if instructions else None
        messages = (head, *effective) if head is not None else effective
        return _Prepared(transcript, head, messages, instructions)

    async def _run(
        self,
        operation: str,
        prepared: _Prepared,
        call: Callable[[tuple[Message, ...]], Awaitable[_Result]],
    ) -> tuple[ModelInputData, bool]:
        with custom_span(f"context_engine.{operation}") as span:
            result = await call(prepared.messages)
            _describe(span, result)
        if result.commit is not None:
            kept = _without_head(result.commit, prepared.head)
            self._committed = Commit(prepared.transcript, kept)
        items = self._write(_without_head(result.messages, prepared.head))
        self._last = attrs.evolve(prepared, sent=items)
        return ModelInputData(input=items, instructions=prepared.instructions), result.changed

    def _write(self, messages: Sequence[Message]) -> list[TResponseInputItem]:
        items: list[TResponseInputItem] = []
        for message in messages:
            original = self._converter.items_of(message)
            if original is None or any("usage" in item for item in original):
                items.extend(to_openai_agents([message]))
            else:
                items.extend(original)
        return items


class ContextEngineModel(Model):
    """A ``Model`` that recovers once from a context-length error.

    Use it as the agent's model (``Agent(model=ContextEngineModel(model, input_filter))``).
    On an overflow error from ``model`` (`is_context_overflow`) the filter's
    engine recovers and the call is retried once with the recovered input; a
    second overflow, an overflow nothing could be cut for, and every other
    error surface unchanged. A streamed call is retried only when the error
    came before its first event. Each response's usage goes to the filter.

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

        def call(
            instructions: str | None, items: str | list[TResponseInputItem]
        ) -> Awaitable[ModelResponse]:
            return self.model.get_response(instructions, items, *args, **kwargs)

        try:
            response = await call(system_instructions, input)
        except Exception as error:
            retry = await self._recover(error, input, system_instructions)
            if retry is None:
                raise
        else:
            self.input_filter.remember_usage(response.to_input_items(), response.usage)
            return response
        response = await call(retry.instructions, retry.input)
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

        def stream(
            instructions: str | None, items: str | list[TResponseInputItem]
        ) -> AsyncIterator[TResponseStreamEvent]:
            return self.model.stream_response(instructions, items, *args, **kwargs)

        started = False
        try:
            async for event in stream(system_instructions, input):
                started = True
                self._observe(event)
                yield event
            return
        except Exception as error:
            retry = None if started else await self._recover(error, input, system_instructions)
            if retry is None:
                raise
        async for event in stream(retry.instructions, retry.input):
            self._observe(event)
            yield event

    async def _recover(
        self, error: Exception, input: str | list[TResponseInputItem], instructions: str | None
    ) -> ModelInputData | None:
        """The input to retry with after ``error``, or None when the error must surface."""
        if not is_context_overflow(error):
            return None
        retry = await self.input_filter.recover(error, input=input, instructions=instructions)
        logger.warning(
            "error=<%s> retried=<%s> | the model rejected the prompt as too long",
            type(error).__name__,
            retry is not None,
        )
        return retry

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
        result = await self.input_filter.engine.compact(from_openai_agents(items), instructions)
        if result.changed:
            await self._replace(to_openai_agents(result.messages))
            self.input_filter.reset()
        return result

    async def _replace(self, items: list[TResponseInputItem]) -> None:
        await self.session.clear_session()
        await self.session.add_items(items)
