"""A summarizer backed by an OpenAI Agents SDK model: the agent's own ``Model`` or model name.

Install the extra: ``pip install 'context-engine[openai-agents]'``. The request
goes through ``Model.get_response`` (no tools, no handoffs, no output schema),
so any model the SDK runs (``OpenAIResponsesModel``,
``OpenAIChatCompletionsModel``, a LiteLLM model, ``agents.testing.ScriptedModel``
in tests) writes the checkpoints with the SDK summarizers' prompts, retries
and handling of its own context-length error.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

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
    import openai
    from agents import ModelSettings
    from agents.items import ItemHelpers, ModelResponse
    from agents.models.interface import Model, ModelProvider, ModelTracing
    from agents.models.multi_provider import MultiProvider

    from context_engine.formats.openai_agents import to_openai_agents
except ImportError as _missing:  # pragma: no cover - depends on the environment
    raise ImportError(
        "OpenAIAgentsSummarizer needs the OpenAI Agents SDK; install it with "
        "pip install 'context-engine[openai-agents]'"
    ) from _missing

try:  # The runner's own switch for the clients' retries; private, so optional.
    from agents.models._retry_runtime import provider_managed_retries_disabled
except ImportError:  # pragma: no cover - depends on the SDK version

    @contextlib.contextmanager
    def provider_managed_retries_disabled(disabled: bool) -> Iterator[None]:
        """Without the SDK's switch the model's client retries inside each attempt."""
        yield


__all__ = ["OpenAIAgentsSummarizer"]

logger = logging.getLogger(__name__)


class OpenAIAgentsSummarizer:
    """Writes checkpoints with an Agents SDK ``Model``.

    Retries follow `RetryPolicy`: the ``openai`` client's ``RateLimitError``
    (HTTP 429) and other 408/5xx errors, timeouts and connection errors (the
    client's ``APIConnectionError`` and ``APITimeoutError``); a
    context-length error (``BadRequestError`` with ``context_length_exceeded``,
    and the other providers' wordings) shrinks the prompt. The SDK's models
    are asked to switch their client's own retries off during these calls, as
    the runner does when it retries itself, so retrying happens in one place.

    Args:
        model: An Agents SDK ``Model``, or a model name for ``provider``.
        provider: Resolves a model name, once, at the first call; by default
            ``MultiProvider()``, what ``RunConfig`` uses (a bare name is an
            OpenAI model, ``"litellm/..."`` a LiteLLM one). Only with a name.
        model_settings: Settings sent with every request (temperature,
            reasoning, ``extra_args``, ...); ``max_tokens`` is set from the
            request's budget.
        max_output_tokens: Ceiling on the answer length; the request's budget
            is sent as ``max_tokens`` and lowered to it when larger.
        retry: Retry policy.
        rebuild: Builds the request for fewer messages when the model says the
            prompt is too long; by default the request's own ``rebuild``.
        tracing: How the call shows in the SDK's trace when one is active: by
            default as a span without its input and output (the transcript
            would be copied into the trace a second time).

    Raises:
        ConfigurationError: ``model`` is neither a ``Model`` nor a name, or an
            option cannot work.
    """

    def __init__(
        self,
        model: Model | str,
        *,
        provider: ModelProvider | None = None,
        model_settings: ModelSettings | None = None,
        max_output_tokens: int | None = None,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        rebuild: RebuildHook | None = None,
        tracing: ModelTracing = ModelTracing.ENABLED_WITHOUT_DATA,
    ) -> None:
        if not isinstance(model, (Model, str)):
            raise ConfigurationError(
                f"OpenAIAgentsSummarizer needs an Agents SDK Model or model name, got {model!r}"
            )
        if provider is not None and not isinstance(provider, ModelProvider):
            raise ConfigurationError(f"provider must be a ModelProvider, got {provider!r}")
        if provider is not None and not isinstance(model, str):
            raise ConfigurationError(
                "provider resolves a model name; it cannot be used with a Model: pass the "
                "name instead, or leave provider out"
            )
        if model_settings is not None and not isinstance(model_settings, ModelSettings):
            raise ConfigurationError(
                f"model_settings must be an agents.ModelSettings, got {model_settings!r}"
            )
        if not isinstance(tracing, ModelTracing):
            raise ConfigurationError(f"tracing must be a ModelTracing, got {tracing!r}")
        self.name = model if isinstance(model, str) else _model_name(model)
        _check_options(self.name, max_output_tokens, retry, "OpenAIAgentsSummarizer")
        self.model = model
        self.provider = provider
        self.model_settings = model_settings or ModelSettings()
        self.max_output_tokens = max_output_tokens
        self.retry = retry
        self.rebuild = rebuild
        self.tracing = tracing
        self._resolved: Model | None = None if isinstance(model, str) else _unwrap(model)

    def __repr__(self) -> str:
        return f"OpenAIAgentsSummarizer(model={self.name!r})"

    async def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``.

        Raises:
            SummarizerError: the call failed for good, or the answer was empty.
        """
        return await summarize_with_retries(
            self._send,
            request,
            provider="OpenAI Agents SDK",
            model=self.name,
            policy=self.retry,
            transient=(openai.APIConnectionError,),
            rebuild=self.rebuild,
        )

    def settings(self, request: SummaryRequest) -> ModelSettings:
        """The ``ModelSettings`` sent for ``request``: the given ones with its answer budget."""
        budget = request.max_tokens
        if self.max_output_tokens is not None:
            budget = min(budget, self.max_output_tokens)
        return self.model_settings.resolve(ModelSettings(max_tokens=budget))

    def _model(self) -> Model:
        if self._resolved is None:
            assert isinstance(self.model, str)
            provider = self.provider if self.provider is not None else MultiProvider()
            self._resolved = _unwrap(provider.get_model(self.model))
        return self._resolved

    async def _send(self, request: SummaryRequest) -> str:
        lead = [m for m in request.prompt_messages if m.role in ("system", "developer")]
        rest = [m for m in request.prompt_messages if m.role not in ("system", "developer")]
        model = self._model()
        with provider_managed_retries_disabled(True):
            response = await model.get_response(
                system_instructions="\n\n".join(message.text for message in lead) or None,
                input=to_openai_agents(rest),
                model_settings=self.settings(request),
                tools=[],
                output_schema=None,
                handoffs=[],
                tracing=self.tracing,
                previous_response_id=None,
                conversation_id=None,
                prompt=None,
            )
        return self._answer_text(response)

    def _answer_text(self, response: ModelResponse) -> str:
        usage = response.usage
        record_model_usage(usage.input_tokens, usage.output_tokens, self.name)
        text = "".join(ItemHelpers.extract_text(item) or "" for item in response.output)
        if text.strip():
            return text
        where = f"OpenAI Agents SDK summarizer ({self.name})"
        refusal = next((r for r in map(ItemHelpers.extract_refusal, response.output) if r), None)
        if refusal:
            raise SummarizerError(f"{where} refused to summarize: {refusal[:200]}")
        kinds = sorted(
            {str(getattr(item, "type", type(item).__name__)) for item in response.output}
        )
        raise SummarizerError(
            f"{where} returned no text (output items: {kinds or 'none'}); raise the strategy's "
            "max_summary_tokens (reasoning models spend output tokens on thinking) or check "
            "that the model answers chat prompts"
        )


def _unwrap(model: Model) -> Model:
    """The model a ``ContextEngineModel`` wraps: its turn bookkeeping is for agent calls only."""
    from context_engine.integrations.openai_agents import ContextEngineModel

    return model.model if isinstance(model, ContextEngineModel) else model


def _model_name(model: Model) -> str:
    """The model's name as its provider knows it, else the class name."""
    inner = _unwrap(model)
    value = getattr(inner, "model", None)
    return value if isinstance(value, str) and value else type(inner).__name__
