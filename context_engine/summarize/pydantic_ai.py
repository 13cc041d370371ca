"""A summarizer backed by a pydantic-ai model: the agent's own ``Model`` or model name.

Install the extra: ``pip install 'context-engine[pydantic-ai]'``. The
request goes through ``pydantic_ai.direct.model_request``, so any model
pydantic-ai supports (``"openai:gpt-5"``, a ``FallbackModel``, a
``FunctionModel`` in tests) writes the checkpoints with the SDK summarizers'
prompts, retries and handling of its own context-length error.
"""

from __future__ import annotations

import logging

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
    from pydantic_ai import messages as pm
    from pydantic_ai.direct import model_request
    from pydantic_ai.exceptions import ModelRateLimitError
    from pydantic_ai.models import Model

    from context_engine.formats.pydantic_ai import to_pydantic_ai
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "PydanticAISummarizer needs pydantic-ai; install it with "
        "pip install 'context-engine[pydantic-ai]'"
    ) from _missing

__all__ = ["PydanticAISummarizer"]

logger = logging.getLogger(__name__)


class PydanticAISummarizer:
    """Writes checkpoints with a pydantic-ai model.

    Retries follow `RetryPolicy`: pydantic-ai's ``ModelRateLimitError`` (with
    or without an HTTP status), HTTP 408/429/5xx, timeouts and connection
    errors; ``ModelContextWindowExceededError`` shrinks the prompt.

    Args:
        model: A pydantic-ai ``Model``, or a model name pydantic-ai resolves
            (``"openai:gpt-5-mini"``).
        max_output_tokens: Ceiling on the answer length; the request's budget
            is sent as ``max_tokens`` and lowered to it when larger.
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.

    Raises:
        ConfigurationError: ``model`` is neither a ``Model`` nor a name, or an
            option cannot work.
    """

    def __init__(
        self,
        model: Model | str,
        *,
        max_output_tokens: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
    ) -> None:
        if not isinstance(model, (Model, str)):
            raise ConfigurationError(
                f"PydanticAISummarizer needs a pydantic-ai Model or model name, got {model!r}"
            )
        self.name = model if isinstance(model, str) else model.model_name
        _check_options(self.name, max_output_tokens, retry, "PydanticAISummarizer")
        self.model = model
        self.max_output_tokens = max_output_tokens
        self.retry = retry
        self.rebuild = rebuild

    def __repr__(self) -> str:
        return f"PydanticAISummarizer(model={self.name!r})"

    async def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``.

        Raises:
            SummarizerError: the call failed for good, or the answer was empty.
        """
        return await summarize_with_retries(
            self._send,
            request,
            provider="pydantic-ai",
            model=self.name,
            policy=self.retry,
            transient=(ModelRateLimitError,),
            rebuild=self.rebuild,
        )

    async def _send(self, request: SummaryRequest) -> str:
        budget = request.max_tokens
        if self.max_output_tokens is not None:
            budget = min(budget, self.max_output_tokens)
        response = await model_request(
            self.model,
            to_pydantic_ai(request.prompt_messages),
            model_settings={"max_tokens": budget},
        )
        usage = response.usage
        record_model_usage(usage.input_tokens, usage.output_tokens, response.model_name)
        text = "".join(part.content for part in response.parts if isinstance(part, pm.TextPart))
        if not text.strip():
            raise SummarizerError(
                f"pydantic-ai summarizer ({self.name}) returned no text "
                f"(finish_reason={response.finish_reason!r}); raise the strategy's "
                "max_summary_tokens or check that the model answers chat prompts"
            )
        return text
