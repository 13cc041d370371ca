"""A summarizer backed by any Chat Completions endpoint, through the ``openai`` client.

Install the extra: ``pip install 'context-engine[openai]'``. Any OpenAI-compatible
server (vLLM, llama.cpp, Ollama, LiteLLM proxy, Azure) works through the
client's ``base_url``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Literal

from context_engine._validate import check_number
from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.formats.openai import to_openai
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
    import openai
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "OpenAISummarizer needs the openai package; install it with "
        "pip install 'context-engine[openai]'"
    ) from _missing

__all__ = ["OpenAISummarizer"]

logger = logging.getLogger(__name__)

TokenParameter = Literal["max_completion_tokens", "max_tokens"]


class OpenAISummarizer:
    """Writes checkpoints with a Chat Completions model.

    The client's own retries are switched off for these calls
    (``client.with_options(max_retries=0)``); `RetryPolicy` retries instead.
    A blocking ``openai.OpenAI`` client works too: its call runs in a worker
    thread, which a timeout can abandon but not stop.

    Args:
        client: An ``openai.AsyncOpenAI`` (preferred) or ``openai.OpenAI``; its
            ``base_url``, ``api_key`` and ``timeout`` are used as configured.
        model: The model name sent with each request.
        max_output_tokens: Ceiling on the answer length; the request's
            ``max_tokens`` is lowered to it when larger. None: no ceiling.
        temperature: Sampling temperature; None leaves the server's default.
        token_parameter: The request field carrying the answer budget:
            ``max_completion_tokens`` (current OpenAI API, required by reasoning
            models) or ``max_tokens`` (older OpenAI-compatible servers).
        extra_body: More JSON fields merged into every request body.
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.
        prefix: Send the agent's own request (its system prompt, ``tools``,
            history and ``prompt_cache_key``) with the summary instruction
            appended, so the summary's input is read from the agent's prompt
            cache; use the agent's model. With ``AgentPrefix.view`` the
            history goes as the agent last sent it (cleared results and
            trimmed texts included) and the originals of what it shortened
            follow the instruction; a history the view does not hold (a
            later chunk, a retry with fewer turns) is sent apart, since no
            cache holds it. None: a separate request with the conversation
            serialized as data.

    Raises:
        ConfigurationError: an argument cannot work.
    """

    def __init__(
        self,
        client: openai.AsyncOpenAI | openai.OpenAI,
        model: str,
        *,
        max_output_tokens: int | None = None,
        temperature: float | None = None,
        token_parameter: TokenParameter = "max_completion_tokens",
        extra_body: Mapping[str, Any] | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
        prefix: AgentPrefix | None = None,
    ) -> None:
        if not isinstance(client, (openai.AsyncOpenAI, openai.OpenAI)):
            raise ConfigurationError(
                f"OpenAISummarizer needs an openai.AsyncOpenAI or openai.OpenAI client, got "
                f"{type(client).__name__}; pass openai.AsyncOpenAI(base_url=..., api_key=...)"
            )
        _check_options(model, max_output_tokens, retry, "OpenAISummarizer")
        check_number(temperature, "OpenAISummarizer", "temperature", optional=True)
        if token_parameter not in ("max_completion_tokens", "max_tokens"):
            raise ConfigurationError(
                "token_parameter must be 'max_completion_tokens' or 'max_tokens', "
                f"got {token_parameter!r}"
            )
        self._client = client.with_options(max_retries=0)
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.temperature = temperature
        self.token_parameter: TokenParameter = token_parameter
        self.extra_body = dict(extra_body) if extra_body else None
        self.retry = retry
        self.rebuild = rebuild
        if prefix is not None and not isinstance(prefix, AgentPrefix):
            raise ConfigurationError(f"prefix must be an AgentPrefix, got {type(prefix).__name__}")
        self.prefix = prefix
        self.provider = _provider_name(str(client.base_url))

    def __repr__(self) -> str:
        return f"OpenAISummarizer(model={self.model!r}, provider={self.provider!r})"

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
            transient=(openai.APIConnectionError,),
            rebuild=self.rebuild,
        )

    def arguments(self, request: SummaryRequest) -> dict[str, Any]:
        """The keyword arguments of ``chat.completions.create`` for ``request``."""
        budget = request.max_tokens
        if self.max_output_tokens is not None:
            budget = min(budget, self.max_output_tokens)
        reusing = reusing_prompt(self.prefix, request) if self.prefix is not None else None
        arguments: dict[str, Any] = {
            "model": self.model,
            "messages": _messages(request, reusing),
            self.token_parameter: budget,
        }
        if self.prefix is not None and reusing is not None:
            if self.prefix.tools:
                # Sent for the cache only; no tool_choice, which could change the prefix.
                arguments["tools"] = [dict(tool) for tool in self.prefix.tools]
            if self.prefix.cache_key is not None:
                arguments["prompt_cache_key"] = self.prefix.cache_key
        if self.temperature is not None:
            arguments["temperature"] = self.temperature
        if self.extra_body:
            arguments["extra_body"] = self.extra_body
        return arguments

    async def _send(self, request: SummaryRequest) -> str:
        arguments = self.arguments(request)
        client = self._client
        if isinstance(client, openai.AsyncOpenAI):
            completion = await client.chat.completions.create(**arguments)
        else:
            sync_client = client
            completion = await asyncio.to_thread(
                lambda: sync_client.chat.completions.create(**arguments)
            )
        return self._answer_text(completion)

    def _answer_text(self, completion: Any) -> str:
        usage = getattr(completion, "usage", None)
        details = getattr(usage, "prompt_tokens_details", None)
        prompt = getattr(usage, "prompt_tokens", None)
        record_cache_usage(
            prompt if isinstance(prompt, int) else 0,
            _count(getattr(details, "cached_tokens", None)),
            _count(getattr(details, "cache_write_tokens", None)),
        )
        record_model_usage(
            getattr(usage, "prompt_tokens", None),
            getattr(usage, "completion_tokens", None),
            getattr(completion, "model", None),
        )
        where = f"{self.provider} summarizer ({self.model})"
        choices = getattr(completion, "choices", None) or []
        if not choices:
            raise SummarizerError(f"{where} returned no choices; check the server's response")
        choice = choices[0]
        content = getattr(choice.message, "content", None)
        reason = getattr(choice, "finish_reason", None)
        if isinstance(content, str) and content.strip():
            if reason == "length":
                logger.warning("model=<%s> | summary cut at the token limit", self.model)
            return content
        refusal = getattr(choice.message, "refusal", None)
        if refusal:
            raise SummarizerError(f"{where} refused to summarize: {str(refusal)[:200]}")
        hint = (
            "raise the strategy's max_summary_tokens (reasoning models spend output tokens "
            "on thinking)"
            if reason == "length"
            else "check the model name and that it follows chat prompts"
        )
        raise SummarizerError(
            f"{where} returned an empty answer (finish_reason={reason!r}); {hint}"
        )


def _messages(request: SummaryRequest, reusing: ReusingPrompt | None) -> list[dict[str, Any]]:
    """The agent's messages and the appended instruction, or the request's own prompt."""
    if reusing is None:
        return to_openai(request.prompt_messages, include_reasoning=False, include_usage=False)
    lead = to_openai(reusing.lead, include_reasoning=False, include_usage=False)
    return [*lead, {"role": "user", "content": reusing.appended}]


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


def _provider_name(base_url: str) -> str:
    if "api.openai.com" in base_url:
        return "OpenAI"
    return f"OpenAI-compatible endpoint {base_url.rstrip('/')}"
