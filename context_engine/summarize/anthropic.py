"""A summarizer backed by Anthropic's Messages API, through the ``anthropic`` client.

Install the extra: ``pip install 'context-engine[anthropic]'``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.formats.anthropic import to_anthropic
from context_engine.messages import Message
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.retry import (
    DEFAULT_RETRY_POLICY,
    RebuildHook,
    RetryPolicy,
    _check_options,
    summarize_with_retries,
)
from context_engine.summarize.reuse import (
    AgentPrefix,
    ReusingPrompt,
    record_cache_usage,
    reusing_prompt,
)
from context_engine.telemetry import record_model_usage

try:
    import anthropic
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "AnthropicSummarizer needs the anthropic package; install it with "
        "pip install 'context-engine[anthropic]'"
    ) from _missing

__all__ = ["AnthropicSummarizer", "to_anthropic_prompt"]

logger = logging.getLogger(__name__)


class AnthropicSummarizer:
    """Writes checkpoints with a Claude model through ``anthropic.AsyncAnthropic``.

    The system prompt travels in the ``system`` parameter, the other prompt
    messages as user/assistant text. The client's own retries are switched off
    for these calls (``client.with_options(max_retries=0)``); `RetryPolicy`
    retries instead.

    Args:
        client: An ``anthropic.AsyncAnthropic``; its ``base_url``, ``api_key``
            and ``timeout`` are used as configured.
        model: The model name sent with each request.
        max_output_tokens: Ceiling on the answer length; the request's
            ``max_tokens`` is lowered to it when larger. None: no ceiling.
        extra_body: More JSON fields merged into every request body (for
            example sampling options the installed client has no argument for).
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.
        prefix: Send the agent's own request (system prompt, ``tools`` and
            history, its ``cache_control`` breakpoints kept) with the summary
            instruction appended as a last user message, so the summary's input
            is read from the agent's prompt cache; use the agent's model. With
            ``AgentPrefix.view`` the history goes as the agent last sent it
            (cleared results and trimmed texts included) and the originals of
            what it shortened follow the instruction. The instruction carries
            no breakpoint: nothing will reuse this request. When the history
            carries no breakpoint, one is put on its last block, since the API
            reads the cache only at breakpoints. A history the view does not
            hold (a later chunk, a retry with fewer turns) is sent apart, with
            no breakpoint: no cache holds it, and a write would be read by
            nothing. None: a separate request with the conversation
            serialized as data.

    Raises:
        ConfigurationError: an argument cannot work.
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        model: str,
        *,
        max_output_tokens: int | None = None,
        extra_body: Mapping[str, Any] | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
        prefix: AgentPrefix | None = None,
    ) -> None:
        if not isinstance(client, anthropic.AsyncAnthropic):
            raise ConfigurationError(
                f"AnthropicSummarizer needs an anthropic.AsyncAnthropic client, got "
                f"{type(client).__name__}; pass anthropic.AsyncAnthropic(api_key=...)"
            )
        _check_options(model, max_output_tokens, retry, "AnthropicSummarizer")
        self._client = client.with_options(max_retries=0)
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.extra_body = dict(extra_body) if extra_body else None
        self.retry = retry
        self.rebuild = rebuild
        if prefix is not None and not isinstance(prefix, AgentPrefix):
            raise ConfigurationError(f"prefix must be an AgentPrefix, got {type(prefix).__name__}")
        self.prefix = prefix
        self.provider = "Anthropic"

    def __repr__(self) -> str:
        return f"AnthropicSummarizer(model={self.model!r})"

    async def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``.

        Raises:
            SummarizerError: the call failed for good, or the answer was empty;
                the message names the provider, the status and what to do.
        """
        return await summarize_with_retries(
            self._send,
            request,
            provider=self.provider,
            model=self.model,
            policy=self.retry,
            transient=(anthropic.APIConnectionError,),
            rebuild=self.rebuild,
        )

    def arguments(self, request: SummaryRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``."""
        budget = request.max_tokens
        if self.max_output_tokens is not None:
            budget = min(budget, self.max_output_tokens)
        reusing = reusing_prompt(self.prefix, request) if self.prefix is not None else None
        if reusing is not None:
            system, messages = _reusing_body(reusing)
        else:
            system, messages = to_anthropic_prompt(request.prompt_messages)
        arguments: dict[str, Any] = {
            "model": self.model,
            "max_tokens": budget,
            "messages": messages,
        }
        if system:
            arguments["system"] = system
        if self.prefix is not None and reusing is not None and self.prefix.tools:
            arguments["tools"] = [dict(tool) for tool in self.prefix.tools]
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        return arguments

    async def _send(self, request: SummaryRequest) -> str:
        message = await self._client.messages.create(**self.arguments(request))
        return self._answer_text(message)

    def _answer_text(self, message: Any) -> str:
        usage = getattr(message, "usage", None)
        cached = sum(
            value
            for value in (
                getattr(usage, "cache_read_input_tokens", 0),
                getattr(usage, "cache_creation_input_tokens", 0),
            )
            if isinstance(value, int)
        )
        prompt = getattr(usage, "input_tokens", None)
        if isinstance(prompt, int):
            record_cache_usage(
                prompt + cached,
                _count(getattr(usage, "cache_read_input_tokens", None)),
                _count(getattr(usage, "cache_creation_input_tokens", None)),
            )
        record_model_usage(
            prompt + cached if isinstance(prompt, int) else None,
            getattr(usage, "output_tokens", None),
            getattr(message, "model", None),
        )
        where = f"Anthropic summarizer ({self.model})"
        blocks = getattr(message, "content", None) or []
        text = "".join(block.text for block in blocks if getattr(block, "type", None) == "text")
        reason = getattr(message, "stop_reason", None)
        if text.strip():
            if reason == "max_tokens":
                logger.warning("model=<%s> | summary cut at the token limit", self.model)
            return text
        if reason == "refusal":
            raise SummarizerError(f"{where} refused to summarize (stop_reason='refusal')")
        hint = (
            "raise the strategy's max_summary_tokens (extended thinking spends output tokens)"
            if reason == "max_tokens"
            else "check the model name and the prompt"
        )
        raise SummarizerError(f"{where} returned no text (stop_reason={reason!r}); {hint}")


def to_anthropic_prompt(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """Split prompt messages into Anthropic's ``system`` text and text-only ``messages``.

    System and developer messages form the system text. Assistant messages stay
    assistant; every other role is sent as user text. Consecutive messages of the
    same role are merged, since the API expects the roles to alternate.
    """
    system = "\n\n".join(m.text for m in messages if m.role in ("system", "developer") and m.text)
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role in ("system", "developer") or not message.text:
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += "\n\n" + message.text
        else:
            turns.append({"role": role, "content": message.text})
    return system, turns


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _reusing_body(prompt: ReusingPrompt) -> tuple[Any, list[dict[str, Any]]]:
    """The agent's system and messages, then the instruction as a last user message."""
    body = to_anthropic(prompt.lead, request=True)
    system = body.get("system")
    messages: list[dict[str, Any]] = body["messages"]
    if messages and _breakpoints(body) == 0:
        _mark_last_block(messages[-1])
    messages.append({"role": "user", "content": prompt.appended})
    return system, messages


def _breakpoints(value: object) -> int:
    if isinstance(value, dict):
        own = 1 if "cache_control" in value else 0
        return own + sum(_breakpoints(item) for item in value.values())
    if isinstance(value, list):
        return sum(_breakpoints(item) for item in value)
    return 0


def _mark_last_block(message: dict[str, Any]) -> None:
    """A read breakpoint on the last block of ``message`` (a fresh dict: the body is ours)."""
    content = message["content"]
    if isinstance(content, str):
        message["content"] = [{"type": "text", "text": content, "cache_control": dict(_EPHEMERAL)}]
    elif content and content[-1].get("type") not in ("thinking", "redacted_thinking"):
        # Thinking blocks cannot carry a breakpoint; then the API reads none.
        content[-1] = {**content[-1], "cache_control": dict(_EPHEMERAL)}


_EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
