"""The Agents SDK's ``call_model_input_filter``: the engine before every model call.

`ContextEngineInputFilter` lives here so `context_engine.integrations.openai_agents`
(which re-exports it) holds the wrappers and the one-object form beside it.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Generator, Sequence
from typing import Any

import attrs
from agents.items import TResponseInputItem
from agents.run_config import CallModelData, ModelInputData
from agents.tracing import custom_span
from agents.tracing.spans import NoOpSpan

from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.events import RewriteEvent
from context_engine.formats.openai_agents import to_openai_agents, usage_from_openai_agents
from context_engine.integrations._openai_agents_state import (
    Commit,
    Commits,
    MessageCache,
    MessageCaches,
)
from context_engine.integrations._reporting import rewrite_fields
from context_engine.integrations._sizing import Sizing, Trigger, schema_text
from context_engine.messages import Message
from context_engine.overflow import is_context_overflow
from context_engine.turn import ModelCallStep, TurnResult, TurnStep, advance_turn, turn_flow

__all__ = ["ContextEngineInputFilter"]

# Logged under the public module, where users configure the adapter's logging.
logger = logging.getLogger("context_engine.integrations.openai_agents")

_PENDING_TURNS = 16  # model calls in flight at once (parallel sub-agents) whose turn is kept


@attrs.frozen
class _Prepared:
    """One call's input as the engine sees it."""

    transcript: tuple[Message, ...]  # the SDK's history, converted
    head: Message | None  # the instructions, as the leading system message
    messages: tuple[Message, ...]  # the turn's transcript: head, commit applied
    instructions: str | None
    cache: MessageCache = attrs.field(eq=False, repr=False)


@attrs.define(eq=False)
class _Turn:
    """One model call's `turn_flow`, waiting at its model call between the filter and the model."""

    prepared: _Prepared
    flow: Generator[TurnStep, Any, TurnResult[Any]]
    sent: list[Any] = attrs.field(factory=list)  # the items the model is sent

    def sends(self, items: Any, instructions: str | None) -> bool:
        return self.prepared.instructions == instructions and self.sent == items

    def data(self) -> ModelInputData:
        """What the model is sent."""
        return ModelInputData(input=self.sent, instructions=self.prepared.instructions)


def _without_head(messages: Sequence[Message], head: Message | None) -> tuple[Message, ...]:
    if head is not None and messages and messages[0] == head:
        return tuple(messages[1:])
    return tuple(messages)


def _tool_schemas(agent: Any) -> list[Any]:
    """The schemas the agent's model call carries: its tools and its handoffs.

    A function tool is sent as its name, description and JSON schema; a hosted
    tool by its name; a handoff as a tool named after the agent it hands to.
    """
    schemas: list[Any] = []
    for tool in getattr(agent, "tools", None) or ():
        schemas.append(
            {
                "name": getattr(tool, "name", type(tool).__name__),
                "description": getattr(tool, "description", None),
                "parameters": getattr(tool, "params_json_schema", None),
            }
        )
    for handoff in getattr(agent, "handoffs", None) or ():
        schemas.append(
            {
                "name": getattr(handoff, "tool_name", None) or getattr(handoff, "name", ""),
                "description": getattr(handoff, "tool_description", None)
                or getattr(handoff, "handoff_description", None),
                "parameters": getattr(handoff, "input_json_schema", None),
            }
        )
    return schemas


def _is(first: object, second: object) -> bool:
    return first is second


def _describe(
    span: Any, engine: ContextEngine, step: ModelCallStep, events: Sequence[RewriteEvent]
) -> None:
    """Record what the engine did on the SDK's custom span (when tracing records it).

    With a rewrite, its facts (`rewrite_fields`: reason, tokens before and
    after, every step) join the view's size and whether it was committed.
    """
    if isinstance(span, NoOpSpan):
        return
    snapshot = engine.snapshot()
    data = {
        "tokens": snapshot.usage.tokens if snapshot is not None else 0,
        "threshold": engine.threshold,
        "changed": step.changed,
        "strategy": snapshot.last_strategy if snapshot is not None and step.changed else None,
        "committed": step.commit is not None,
    }
    if events:
        data.update({k: v for k, v in rewrite_fields(events[-1]).items() if k not in data})
    span.span_data.data.update(data)


class ContextEngineInputFilter:
    """The engine as the Agents SDK's ``call_model_input_filter``.

    Pass it as ``RunConfig(call_model_input_filter=ContextEngineInputFilter(engine))``.
    Use one filter and one engine per conversation: both remember the last view.
    Sub-agents run with ``Agent.as_tool`` under the same run config share them;
    the filter tells their conversations apart by their histories and keeps a
    commit for each.

    Args:
        engine: The engine that decides what each model call sees.
        cap_tool_results: Cap each new tool output with `ContextEngine.cap_tool_result`
            and commit the capped history (the original goes to the engine's archive).
        context_window: The window in tokens; None keeps the engine's own (the
            SDK's models do not state their window).
        trigger: ``("fraction", 0.8)`` or ``("tokens", n)``: where compaction
            starts; None keeps the engine's reserve.
        count_request: Count the calling agent's tool schemas and handoffs into
            the engine's overhead on every call (its instructions are counted
            as the leading system message).

    Raises:
        ConfigurationError: ``engine`` is not a `ContextEngine`, or a setting
            is of the wrong type.
    """

    def __init__(
        self,
        engine: ContextEngine,
        *,
        cap_tool_results: bool = True,
        context_window: int | None = None,
        trigger: Trigger | None = None,
        count_request: bool = True,
    ) -> None:
        if not isinstance(engine, ContextEngine):
            raise ConfigurationError(
                f"ContextEngineInputFilter needs a ContextEngine, got {engine!r}; "
                "build one with ContextEngine.default(context_window=..., summarizer=...)"
            )
        if not isinstance(cap_tool_results, bool):
            raise ConfigurationError(
                f"cap_tool_results must be True or False, got {cap_tool_results!r}"
            )
        self.engine = engine
        self.cap_tool_results = cap_tool_results
        self.sizing = Sizing(context_window, trigger, count_request=count_request)
        self._caches = MessageCaches()
        self._commits = Commits()
        self._head: Message | None = None
        self._turns: deque[_Turn] = deque(maxlen=_PENDING_TURNS)

    @property
    def commit(self) -> tuple[Message, ...] | None:
        """The commit made or applied last: a checkpoint and the messages kept after it."""
        latest = self._commits.latest
        return latest.messages if latest is not None else None

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Project the input of one model call; the SDK calls this before every call."""
        model_data = data.model_data
        tools = _tool_schemas(data.agent) if self.sizing.count_request else []
        self.sizing.apply(self.engine, request_text=(schema_text(tools),) if tools else ())
        prepared = await self._capped(self._prepare(model_data.input, model_data.instructions))
        turn = await self._start(prepared)
        return turn.data()

    async def recover(
        self,
        error: BaseException,
        *,
        input: str | list[TResponseInputItem],
        instructions: str | None,
    ) -> ModelInputData | None:
        """Shrink the input a model call was rejected for as too long.

        The call's turn goes on (`context_engine.turn`): the engine recovers
        from the history as committed so far, a checkpoint the call's own
        projection wrote included, and the recovery is committed: later calls
        start from it. Once per call: asked again for the retry's input, it
        answers None. `ContextEngineModel` calls this; call it yourself around
        your own model calls.

        Args:
            error: The provider's context-length error.
            input: The input items of the rejected call.
            instructions: Its system instructions.

        Returns:
            The input to retry with, or None when the error should surface (it
            is not a context-length error, nothing could be shrunk, or it is
            the retry's own overflow).
        """
        if not isinstance(error, Exception) or not is_context_overflow(error):
            return None
        turn = self._take_turn(input, instructions)
        if turn is None:
            # A call the filter did not prepare (no filter in the run config): its turn starts now.
            turn = await self._start(self._prepare(input, instructions))
            self._turns.remove(turn)
        with custom_span("context_engine.recover_overflow") as span:
            events: list[RewriteEvent] = []
            try:
                step = await advance_turn(self.engine, turn.flow, error, on_event=events.append)
            except Exception as raised:
                if raised is error:
                    return None
                raise
            assert isinstance(step, ModelCallStep)  # the flow returns only after a model answer
            _describe(span, self.engine, step, events)
        logger.warning(
            "error=<%s> | the model rejected the prompt as too long; retrying once",
            type(error).__name__,
        )
        return self._send(turn, step).data()

    def remember_usage(self, output_items: Sequence[Any], usage: Any) -> None:
        """Record the usage a model response reported, to anchor the next estimates.

        Args:
            output_items: The response's output as input items
                (``ModelResponse.to_input_items()``).
            usage: ``ModelResponse.usage`` or a Responses ``ResponseUsage``.
        """
        if usage is not None:
            self._caches.usage.remember(output_items, usage_from_openai_agents(usage))

    def apply_commit(self, items: Sequence[TResponseInputItem]) -> list[TResponseInputItem]:
        """``items`` with the commit of their conversation in place of the history it stands for.

        Use it to store a conversation's history after a run (``result.to_input_list()``)
        in its committed form; a copy of ``items`` when no commit applies.
        """
        committed = self._committed_items(items)
        return committed if committed is not None else list(items)

    def reset(self) -> None:
        """Forget every commit, pending turn and conversion cache (new conversations start)."""
        self._caches = MessageCaches()
        self._commits.clear()
        self._turns.clear()

    def _committed_items(self, items: Sequence[Any]) -> list[TResponseInputItem] | None:
        listed = list(items)
        cache = self._caches.for_items(listed)
        transcript = cache.convert(listed)
        commit = self._commits.find(transcript)
        if commit is not None:
            covered = len(commit.source)
        else:
            newer = self._commits.find_after_stored(transcript)
            if newer is None:
                return None
            commit, covered = newer
        written = self._write(cache, commit.messages)
        # Read back as a later read of the store will (items keep no message metadata).
        self._commits.handed_out(commit, MessageCache(self._caches.usage).convert(written))
        return [*written, *listed[cache.item_count(covered) :]]

    def _prepare(self, items: str | Sequence[Any], instructions: str | None) -> _Prepared:
        listed = [{"role": "user", "content": items}] if isinstance(items, str) else list(items)
        cache = self._caches.for_items(listed)
        transcript = cache.convert(listed)
        commit = self._commits.find(transcript)
        effective = commit.apply(transcript) if commit is not None else None
        head = self._head
        if instructions and (head is None or head.text != instructions):
            head = self._head = Message.system(instructions)
        head = head if instructions else None
        body = effective if effective is not None else transcript
        messages = (head, *body) if head is not None else body
        return _Prepared(transcript, head, messages, instructions, cache)

    async def _capped(self, prepared: _Prepared) -> _Prepared:
        """``prepared`` with its tool results capped; a cap is committed, so it lasts.

        A result the commit already stands for is its preview (or was under
        the cap), so only the results that arrived since are read again.
        """
        if not self.cap_tool_results:
            return prepared
        head = prepared.head
        body = _without_head(prepared.messages, head)
        capped = tuple([await self._cap(message) for message in body])
        if all(map(_is, capped, body)):
            return prepared
        self._commits.add(Commit(prepared.transcript, capped))
        messages = (head, *capped) if head is not None else capped
        return attrs.evolve(prepared, messages=messages)

    async def _cap(self, message: Message) -> Message:
        return await self.engine.cap_tool_result(message) if message.role == "tool" else message

    async def _start(self, prepared: _Prepared) -> _Turn:
        """Start the call's turn: project, commit what the engine says to, and send the view."""
        flow = turn_flow(prepared.messages, compact_command=False)
        with custom_span("context_engine.project") as span:
            events: list[RewriteEvent] = []
            step = await advance_turn(self.engine, flow, on_event=events.append)
            assert isinstance(step, ModelCallStep)  # without /compact the flow waits for the model
            _describe(span, self.engine, step, events)
        return self._send(_Turn(prepared, flow), step)

    def _send(self, turn: _Turn, step: ModelCallStep) -> _Turn:
        """Keep the step's commit, and the turn until its model call is answered."""
        prepared = turn.prepared
        if step.commit is not None:
            kept = _without_head(step.commit, prepared.head)
            self._commits.add(Commit(prepared.transcript, kept))
        turn.sent = self._write(prepared.cache, _without_head(step.messages, prepared.head))
        self._turns.append(turn)
        return turn

    def _take_turn(self, items: Any, instructions: str | None) -> _Turn | None:
        """The pending turn whose model call was sent ``items``, no longer pending; or None."""
        for turn in reversed(self._turns):
            if turn.sends(items, instructions):
                self._turns.remove(turn)
                return turn
        return None

    def _write(self, cache: MessageCache, messages: Sequence[Message]) -> list[TResponseInputItem]:
        items: list[TResponseInputItem] = []
        for message in messages:
            original = cache.items_of(message)
            if original is None or any("usage" in item for item in original):
                items.extend(to_openai_agents([message]))
            else:
                items.extend(original)
        return items
