"""A summarizer backed by a LangChain chat model or runnable: the agent's own model.

Install the extra: ``pip install 'context-engine[langchain]'``. Pass the chat
model the agent already uses (``ChatOpenAI``, ``ChatAnthropic``, ...) as
``SummarizationMiddleware`` takes one; the prompts, retries and handling of
the summarizer's own context-length error are those of the SDK summarizers.
"""

from __future__ import annotations

import logging
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
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import Runnable

    from context_engine.formats.langchain import to_langchain
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "LangChainSummarizer needs langchain-core; install it with "
        "pip install 'context-engine[langchain]'"
    ) from _missing

__all__ = ["LangChainSummarizer"]

logger = logging.getLogger(__name__)


class LangChainSummarizer:
    """Writes checkpoints with a LangChain chat model (or any runnable taking messages).

    Retries follow `RetryPolicy` (HTTP 408/429/5xx of the provider package's
    errors, timeouts, connection errors, and ``transient``); a context-length
    error (langchain-core's ``ContextOverflowError`` or a provider's) shrinks
    the prompt as for the SDK summarizers. The model's own retries
    (``max_retries`` of ``ChatOpenAI`` and the like) still run inside each
    attempt: set them to 0 on the model you pass to leave retrying to the policy.

    Args:
        model: A ``BaseChatModel``, or a ``Runnable`` taking a list of
            messages and returning a message or a string.
        max_output_tokens: Ceiling on the answer length, bound to a chat
            model as ``max_tokens`` (None: the model's own setting).
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.
        transient: More error classes worth retrying (a provider's rate-limit
            error that carries no HTTP status).

    Raises:
        ConfigurationError: ``model`` is not a LangChain runnable, or an option cannot work.
    """

    def __init__(
        self,
        model: BaseChatModel | Runnable[Any, Any],
        *,
        max_output_tokens: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
        transient: tuple[type[BaseException], ...] = (),
    ) -> None:
        if not isinstance(model, Runnable):
            raise ConfigurationError(
                f"LangChainSummarizer needs a LangChain chat model or runnable, got {model!r}"
            )
        name = _model_name(model)
        _check_options(name, max_output_tokens, retry, "LangChainSummarizer")
        if not isinstance(transient, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in transient
        ):
            raise ConfigurationError(
                f"transient must be a tuple of exception classes, got {transient!r}"
            )
        self.model = model
        self.name = name
        self.max_output_tokens = max_output_tokens
        self.retry = retry
        self.rebuild = rebuild
        self.transient = transient
        self._runnable: Runnable[Any, Any] = (
            model.bind(max_tokens=max_output_tokens)
            if max_output_tokens is not None and isinstance(model, BaseChatModel)
            else model
        )

    def __repr__(self) -> str:
        return f"LangChainSummarizer(model={self.name!r})"

    async def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``.

        Raises:
            SummarizerError: the call failed for good, or the answer was empty.
        """
        return await summarize_with_retries(
            self._send,
            request,
            provider="LangChain",
            model=self.name,
            policy=self.retry,
            transient=self.transient,
            rebuild=self.rebuild,
        )

    async def _send(self, request: SummaryRequest) -> str:
        answer = await self._runnable.ainvoke(to_langchain(request.prompt_messages))
        if isinstance(answer, BaseMessage):
            usage = getattr(answer, "usage_metadata", None) or {}
            record_model_usage(usage.get("input_tokens"), usage.get("output_tokens"), self.name)
            text = str(answer.text)
        else:
            text = answer if isinstance(answer, str) else ""
        if not text.strip():
            raise SummarizerError(
                f"LangChain summarizer ({self.name}) returned an empty answer ({answer!r:.200}); "
                "check that the model answers chat prompts with text"
            )
        return text


def _model_name(model: Runnable[Any, Any]) -> str:
    """The model's name as its provider knows it, else the runnable's class name."""
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__
