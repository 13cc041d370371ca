"""A summarizer backed by a Strands model: the agent's own ``Model``, or an ``Agent``'s.

Install the extra: ``pip install 'context-engine[strands]'``. The model is
called directly (``model.stream``, no tools), as Strands' own summarizing
conversation manager does, so no agent loop runs, nothing is appended to an
agent's messages, and an agent whose conversation is being compacted can pass
itself without waiting on its own invocation lock. The prompts, retries and
handling of the summarizer's own context-length error are those of the SDK
summarizers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterable
from contextlib import aclosing
from typing import Any

from context_engine.errors import ConfigurationError, SummarizerError
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.retry import (
    DEFAULT_RETRY_POLICY,
    RebuildHook,
    RetryPolicy,
    _check_options,
    summarize_with_retries,
)
from context_engine.telemetry import record_model_usage

try:
    from strands.agent.agent import Agent
    from strands.event_loop.streaming import process_stream
    from strands.models import Model
    from strands.types.exceptions import ModelThrottledException
    from strands.types.streaming import StreamEvent

    from context_engine.formats.strands import to_strands
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "StrandsSummarizer needs Strands Agents; install it with "
        "pip install 'context-engine[strands]'"
    ) from _missing

__all__ = ["StrandsSummarizer"]

logger = logging.getLogger(__name__)


class StrandsSummarizer:
    """Writes checkpoints with a Strands model provider.

    Retries follow `RetryPolicy`: Strands' ``ModelThrottledException`` (what
    every Strands provider raises for a rate limit), HTTP 408/429/5xx,
    timeouts and connection errors; ``ContextWindowOverflowException`` shrinks
    the prompt. The provider client's own retries (boto3's, the ``openai``
    client's ``max_retries``) still run inside each attempt.

    Strands sends no answer budget per call: the answer's length is bounded by
    the model's own configuration (``max_tokens`` in its config).

    Args:
        model: A Strands ``Model`` (``BedrockModel``, ``OpenAIModel``, ...), or
            an ``Agent``, whose ``aux_model`` (the model Strands uses for side
            calls such as summaries; the agent's ``model`` unless set) is read
            at every call. The agent itself is never invoked: its messages,
            system prompt, tools and hooks are left alone.
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.
        transient: More error classes worth retrying (a provider's own error
            that carries no HTTP status).

    Raises:
        ConfigurationError: ``model`` is neither a Strands ``Model`` nor an
            ``Agent``, or an option cannot work.
    """

    def __init__(
        self,
        model: Model | Agent,
        *,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
        transient: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not isinstance(model, (Model, Agent)):
            raise ConfigurationError(
                f"StrandsSummarizer needs a Strands Model or Agent, got {model!r}"
            )
        _check_options(_model_name(_resolve(model)), None, retry, "StrandsSummarizer")
        if not isinstance(transient, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in transient
        ):
            raise ConfigurationError(
                f"transient must be a tuple of exception classes, got {transient!r}"
            )
        self.model = model
        self.retry = retry
        self.rebuild = rebuild
        self.transient = transient

    @property
    def name(self) -> str:
        """The model id of the model a call goes to (an agent's current ``aux_model``)."""
        return _model_name(_resolve(self.model))

    def __repr__(self) -> str:
        return f"StrandsSummarizer(model={self.name!r})"

    async def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``.

        Raises:
            SummarizerError: the call failed for good, or the answer was empty.
        """
        return await summarize_with_retries(
            self._send,
            request,
            provider="Strands",
            model=self.name,
            policy=self.retry,
            transient=(ModelThrottledException, *self.transient),
            rebuild=self.rebuild,
        )

    async def _send(self, request: SummaryRequest) -> str:
        model = _resolve(self.model)
        name = _model_name(model)
        lead = [m for m in request.prompt_messages if m.role in ("system", "developer")]
        system = "\n\n".join(message.text for message in lead) or None
        # to_strands leaves the leading system messages out: they travel as system_prompt.
        chunks = model.stream(
            to_strands(request.prompt_messages), tool_specs=None, system_prompt=system
        )
        stop_reason, message, usage = await _final(chunks)
        record_model_usage(usage.get("inputTokens"), usage.get("outputTokens"), name)
        text = "".join(_texts(message.get("content", [])))
        if not text.strip():
            hint = (
                "raise max_tokens in the model's config (reasoning models spend output "
                "tokens on thinking)"
                if stop_reason == "max_tokens"
                else "check that the model answers chat prompts with text"
            )
            raise SummarizerError(
                f"Strands summarizer ({name}) returned no text "
                f"(stop_reason={stop_reason!r}); {hint}"
            )
        if stop_reason == "max_tokens":
            logger.warning("model=<%s> | summary cut at the token limit", name)
        return text


def _resolve(model: Model | Agent) -> Model:
    """The model to call: an agent's ``aux_model`` (its ``model`` unless one was set)."""
    return model.aux_model if isinstance(model, Agent) else model


async def _final(chunks: AsyncIterable[StreamEvent]) -> tuple[str, Any, Any]:
    """The stop reason, message and usage Strands assembles from a model's stream."""
    # Closed on return: a stream left suspended is closed by the loop's finalizer
    # later, or warned about at interpreter exit when the loop is gone.
    async with aclosing(process_stream(chunks)) as events:
        async for event in events:
            if "stop" in event:
                stop_reason, message, usage, _metrics = event["stop"]
                return stop_reason, message, usage
    # process_stream ends every stream with its stop event, an empty one included.
    raise AssertionError("unreachable: the stream ended without a stop event")  # pragma: no cover


def _texts(content: list[Any]) -> list[str]:
    """The answer's text blocks, cited text included; reasoning and tool blocks are not text."""
    texts: list[str] = []
    for block in content:
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif "citationsContent" in block:
            cited = block["citationsContent"].get("content", [])
            texts.extend(part["text"] for part in cited if isinstance(part.get("text"), str))
    return texts


def _model_name(model: Model) -> str:
    """The model id from the provider's config, else the provider class name."""
    try:
        config = model.get_config()
    except Exception:  # a provider's config is informative here, never required
        config = None
    if isinstance(config, dict):
        for key in ("model_id", "model", "model_name"):
            value = config.get(key)
            if isinstance(value, str) and value:
                return value
    return type(model).__name__
