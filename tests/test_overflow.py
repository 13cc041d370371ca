"""is_context_overflow and overflow_token_counts on real-looking provider errors."""

from __future__ import annotations

from typing import Any

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))

import openai

from context_engine.errors import CompactionError, SummarizerError
from context_engine.overflow import is_context_overflow, overflow_token_counts
from tests.provider_errors import (
    anthropic_connection_error,
    anthropic_status_error,
    openai_status_error,
    openai_timeout,
)

pytestmark = pytest.mark.extra("openai", "anthropic")


class ContextWindowExceededError(openai.BadRequestError):
    """Shaped like LiteLLM's: a BadRequestError subclass whose class name says it all."""


def litellm_error() -> ContextWindowExceededError:
    base = openai_status_error(400, "Request failed")
    return ContextWindowExceededError(
        "litellm.ContextWindowExceededError: litellm.BadRequestError: OpenAIException - "
        "Request failed",
        response=base.response,
        body=base.body,
    )


def chained() -> RuntimeError:
    try:
        raise anthropic_status_error(400, "prompt is too long: 201000 tokens > 200000 maximum")
    except Exception as exc:
        try:
            raise RuntimeError("agent step failed") from exc
        except RuntimeError as outer:
            return outer


# (error, prompt tokens, limit tokens)
OVERFLOWS: list[tuple[Any, int | None, int | None]] = [
    (
        "This model's maximum context length is 128000 tokens. However, your messages resulted "
        "in 130532 tokens (129000 in the messages, 1532 in the functions). Please reduce the "
        "length of the messages or functions.",
        130532,
        128000,
    ),
    (
        "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
        "(8000 in the messages, 1000 in the completion). Please reduce the length of the "
        "messages or completion.",
        8000,
        8192,
    ),
    (
        "Your input exceeds the context window of this model. Please adjust your input and try "
        "again.",
        None,
        None,
    ),
    ("prompt is too long: 210000 tokens > 200000 maximum", 210000, 200000),
    (
        "input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease "
        "input length or `max_tokens` and try again",
        195000,
        200000,
    ),
    (
        "This model's maximum context length is 32768 tokens. However, your request has 40000 "
        "input tokens. Please reduce the length of the input messages.",
        40000,
        32768,
    ),
    (
        "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum "
        "context length is 4096 tokens and your request has 2778 input tokens "
        "(8000 > 4096 - 2778).",
        2778,
        4096,
    ),
    ("the request exceeds the available context size, try increasing it", None, None),
    (
        "request (8196 tokens) exceeds the available context size (8192 tokens), try increasing it",
        8196,
        8192,
    ),
    ("the input length exceeds the context length", None, None),
    ("Error: Input length 6491 exceeds context length 1500", 6491, 1500),
    ("Requested tokens (5000) exceed context window of 4096", 5000, 4096),
    (
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
        1200000,
        1048576,
    ),
    (
        "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 "
        "maximum context length",
        40000,
        32768,
    ),
    (
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: "
        "4000 `inputs` tokens and 200 `max_new_tokens`",
        4000,
        4096,
    ),
    ("Input is too long for requested model.", None, None),
    (
        "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received "
        "4500. Try using a shorter prompt",
        4500,
        4081,
    ),
    (
        openai_status_error(
            400,
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 131000 tokens. Please reduce the length of the messages.",
            code="context_length_exceeded",
        ),
        131000,
        128000,
    ),
    (openai_status_error(400, "Request too long", code="context_length_exceeded"), None, None),
    (
        anthropic_status_error(400, "prompt is too long: 210000 tokens > 200000 maximum"),
        210000,
        200000,
    ),
    (
        openai_status_error(
            400,
            "This model's maximum context length is 4096 tokens. However, your request has "
            "5000 input tokens. Please reduce the length of the input messages.",
            kind="BadRequestError",
            base_url="http://127.0.0.1:8000/v1",
        ),
        5000,
        4096,
    ),
    (litellm_error(), None, None),
    (chained(), 201000, 200000),
]
OVERFLOW_IDS = [
    "openai-functions",
    "openai-completion",
    "openai-responses",
    "anthropic",
    "anthropic-input-plus-max-tokens",
    "vllm-input-tokens",
    "vllm-max-tokens-too-large",
    "llamacpp-server",
    "llamacpp-server-counts",
    "ollama",
    "lmstudio",
    "llama-cpp-python",
    "gemini",
    "mistral",
    "tgi",
    "bedrock",
    "cohere",
    "openai-exception",
    "openai-exception-code-only",
    "anthropic-exception",
    "vllm-exception-via-openai-client",
    "litellm-class",
    "chained-cause",
]


@pytest.mark.parametrize(("error", "prompt", "limit"), OVERFLOWS, ids=OVERFLOW_IDS)
def test_provider_overflow_errors_are_recognised(
    error: Any, prompt: int | None, limit: int | None
) -> None:
    assert is_context_overflow(error)
    assert overflow_token_counts(error) == (prompt, limit)


def test_llamacpp_body_counts_win_over_the_message() -> None:
    """llama.cpp puts n_prompt_tokens and n_ctx in its error body."""
    error = openai_status_error(400, "request exceeds the available context size")
    assert isinstance(error.body, dict)
    error.body.update(type="exceed_context_size_error", n_prompt_tokens=9000, n_ctx=8192)
    assert is_context_overflow(error)
    assert overflow_token_counts(error) == (9000, 8192)


NOT_OVERFLOWS: list[Any] = [
    None,
    "",
    "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, "
    "Used 25000, Requested 8000.",
    "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, "
    "whereas you provided 100000.",
    "max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for "
    "claude-test",
    "Invalid 'messages[0].content': string too long. Expected a string with maximum length "
    "10485760, but got a string with length 20000000 instead.",
    "The context length setting of this server is 4096.",
    openai_status_error(
        429,
        "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 45000.",
        kind="tokens",
        code="rate_limit_exceeded",
    ),
    openai_status_error(429, "This model's maximum context length is 8192 tokens."),
    openai_status_error(401, "Incorrect API key provided.", kind="invalid_request_error"),
    openai_status_error(404, "The model `gpt-x` does not exist.", code="model_not_found"),
    openai_status_error(500, "The server had an error while processing your request."),
    anthropic_status_error(
        413, "Request exceeds the maximum allowed number of bytes.", kind="request_too_large"
    ),
    anthropic_status_error(529, "Overloaded", kind="overloaded_error"),
    openai_timeout(),
    anthropic_connection_error(),
    ValueError("context manager exited"),
    SummarizerError("the summary prompt is longer than the model's maximum context length"),
    CompactionError("failed", view=(), strategy="full_summary", failures=1),
]
NOT_OVERFLOW_IDS = [
    "none",
    "empty",
    "tpm-rate-limit-text",
    "openai-output-limit",
    "anthropic-output-limit",
    "string-too-long",
    "context-length-mentioned",
    "tpm-rate-limit-429",
    "429-even-with-context-words",
    "401",
    "404",
    "500",
    "anthropic-413-bytes",
    "anthropic-529",
    "timeout",
    "connection",
    "unrelated-context-word",
    "own-summarizer-error",
    "own-compaction-error",
]


@pytest.mark.parametrize("error", NOT_OVERFLOWS, ids=NOT_OVERFLOW_IDS)
def test_other_errors_are_not_overflow(error: Any) -> None:
    assert not is_context_overflow(error)
    assert overflow_token_counts(error) == (None, None)


def test_our_own_error_wrapping_an_overflow_is_not_the_callers_overflow() -> None:
    """A summarizer's overflow, wrapped by context-engine, must not trigger recover_overflow."""
    inner = anthropic_status_error(400, "prompt is too long: 9010 tokens > 8192 maximum")
    with pytest.raises(SummarizerError) as caught:
        raise SummarizerError("summarizer failed") from inner
    assert caught.value.__cause__ is inner
    assert is_context_overflow(inner)
    assert not is_context_overflow(caught.value)


def test_strands_overflow_exception_is_recognised_by_its_class() -> None:
    """Strands raises ContextWindowOverflowException, often with the provider's own wording."""
    from strands.types.exceptions import ContextWindowOverflowException

    assert is_context_overflow(ContextWindowOverflowException("model refused the request"))


def test_langchain_context_overflow_error_is_recognised_by_its_class() -> None:
    from langchain_core.exceptions import ContextOverflowError

    assert is_context_overflow(ContextOverflowError("the model refused the request"))
