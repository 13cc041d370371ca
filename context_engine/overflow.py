"""Recognise a provider's "the prompt is longer than the context window" error.

An agent loop catches the error of its model call and asks `is_context_overflow`
whether `ContextEngine.recover_overflow` can help::

    try:
        reply = await client.chat.completions.create(model=model, messages=view)
    except Exception as exc:
        if not is_context_overflow(exc):
            raise
        recovery = await engine.recover_overflow(transcript, exc)

The check works on the exception objects of the ``openai`` and ``anthropic``
clients (and of clients built the same way: LiteLLM, OpenAI-compatible servers
reached through ``base_url``), on any exception whose message states the
overflow, and on plain strings. It reads, in order: the HTTP status (401, 403,
404 and 429 are never an overflow: a tokens-per-minute rate limit mentions
tokens too), the error class name (LiteLLM's ``ContextWindowExceededError``),
the error code (``context_length_exceeded``, ``prompt_too_long``) and the
message text. Errors raised by context-engine itself are never an overflow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping

import regex

from context_engine.errors import ContextEngineError

__all__ = ["is_context_overflow", "overflow_token_counts", "warn_unless_overflow"]

logger = logging.getLogger("context_engine.engine")

_NOT_OVERFLOW_STATUS = frozenset({401, 403, 404, 429})

_OVERFLOW_CODES = frozenset(
    {
        "context_length_exceeded",
        "context_window_exceeded",
        "model_context_window_exceeded",
        "prompt_too_long",
        "exceed_context_size_error",
    }
)

_OVERFLOW_CLASS_NAMES = (
    "ContextWindowExceeded",
    "ContextLengthExceeded",
    "ContextOverflow",  # langchain-core: ContextOverflowError
    "ContextWindowOverflow",  # Strands: ContextWindowOverflowException
    "PromptTooLong",
)

_OVERFLOW_TEXT = regex.compile(
    r"""
      maximum\ context\ length                                  # OpenAI, vLLM, DeepSeek, Mistral
    | context[_\ ]length[_\ ]exceeded
    | context[_\ ]window[_\ ]exceeded
    | prompt\ is\ too\ long                                     # Anthropic
    | input\ is\ too\ long\ for\ (?:the\ )?requested\ model     # Bedrock
    | exceed_context_size_error                                 # llama.cpp error type
    | exceeds?\ the\ available\ context\ size                   # llama.cpp server
    | exceeds?\ context\ window                                 # llama-cpp-python
    | exceeds?\ (?:the\ )?(?:model'?s?\ |maximum\ )?context\ (?:window|length|size|limit)
    | exceed\ context\ limit                                    # Anthropic, input + max_tokens
    | (?:longer|larger|greater)\ than\ (?:the\ )?(?:model'?s?\ )?context\ (?:window|length|size)
    | exceeds?\ the\ maximum\ number\ of\ tokens                # Gemini
    | total\ number\ of\ tokens\ in\ the\ prompt\ cannot\ exceed
    | `inputs`\ tokens\ \+\ `max_new_tokens`\ must\ be          # text-generation-inference
    """,
    regex.IGNORECASE | regex.VERBOSE,
)

_N = r"(\d[\d,]*)"
# Patterns that state the prompt size and/or the limit, most specific first.
_PROMPT_PATTERNS = tuple(
    regex.compile(p, regex.IGNORECASE)
    for p in (
        rf"{_N} \+ {_N} > {_N}",  # Anthropic "195000 + 8192 > 200000": prompt first
        rf"\({_N} in the messages, {_N} in the completion",  # the completion is not prompt
        rf"resulted in {_N} tokens",
        rf"request(?:ed)? \(?{_N} tokens",
        rf"Requested tokens \({_N}\)",
        rf"(?:has|contains) {_N} (?:input )?tokens",
        rf"input token count \(?{_N}",
        rf"{_N} tokens? > {_N}",
        rf"Given: {_N} `inputs` tokens",
        rf"received {_N}",
        rf"input length {_N}",
    )
)
_LIMIT_PATTERNS = tuple(
    regex.compile(p, regex.IGNORECASE)
    for p in (
        rf"{_N} \+ {_N} > (?P<limit>{_N})",
        rf"maximum context length is (?P<limit>{_N})",
        rf"with (?P<limit>{_N}) maximum context length",
        rf"available context size \((?P<limit>{_N})",
        rf"context window of (?P<limit>{_N})",
        rf"maximum number of tokens allowed \((?P<limit>{_N})",
        rf"tokens? > (?P<limit>{_N}) maximum",
        rf"must be <= (?P<limit>{_N})",
        rf"cannot exceed (?P<limit>{_N})",
        rf"exceeds context length (?P<limit>{_N})",
    )
)


def is_context_overflow(error: BaseException | str | None) -> bool:
    """Whether ``error`` says the prompt did not fit in the model's context window.

    Args:
        error: The exception the model call raised (its ``__cause__`` chain is
            followed), the error message as text, or None.

    Returns:
        True for a context-length error of OpenAI, Anthropic, Gemini, LiteLLM,
        vLLM, llama.cpp, TGI and other OpenAI-compatible servers; False for
        anything else, rate limits on tokens per minute included.
    """
    if error is None:
        return False
    if isinstance(error, str):
        return _OVERFLOW_TEXT.search(error) is not None
    return any(_one_is_overflow(exc) for exc in _chain(error))


def overflow_token_counts(error: BaseException | str | None) -> tuple[int | None, int | None]:
    """The prompt size and the limit an overflow error states, when it states them.

    Args:
        error: As for `is_context_overflow`.

    Returns:
        ``(prompt_tokens, limit_tokens)``; either is None when the message does
        not say it, both are None when ``error`` is not a context overflow. For
        an error about prompt plus ``max_tokens`` (Anthropic, vLLM) the prompt
        part is returned.
    """
    if error is None or not is_context_overflow(error):
        return None, None
    stated: tuple[int | None, int | None] = (None, None)
    if isinstance(error, str):
        text = error
    else:
        text, stated = "\n".join(_texts(error)), _body_counts(error)
    prompt = stated[0] or _first_number(_PROMPT_PATTERNS, text, group=1)
    limit = stated[1] or _first_number(_LIMIT_PATTERNS, text, group="limit")
    return prompt, limit


# ------------------------------------------------------------------- helpers


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and its causes, stopping at context-engine's own errors."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, ContextEngineError):
            return
        seen.add(id(current))
        yield current
        current = current.__cause__


def _one_is_overflow(exc: BaseException) -> bool:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status in _NOT_OVERFLOW_STATUS:
        return False
    names = [cls.__name__ for cls in type(exc).__mro__]
    if any(marker in name for name in names for marker in _OVERFLOW_CLASS_NAMES):
        return True
    if _codes(exc) & _OVERFLOW_CODES:
        return True
    return any(_OVERFLOW_TEXT.search(text) for text in _own_texts(exc))


def _codes(exc: BaseException) -> set[str]:
    """Error codes and types the exception carries, as attributes or in its body."""
    found = {
        value.lower()
        for value in (getattr(exc, "code", None), getattr(exc, "error_code", None))
        if isinstance(value, str)
    }
    body = getattr(exc, "body", None)
    for mapping in _mappings(body):
        for key in ("code", "type", "error_code"):
            value = mapping.get(key)
            if isinstance(value, str):
                found.add(value.lower())
    return found


def _mappings(body: object, depth: int = 0) -> Iterator[Mapping[str, object]]:
    """The body and the mappings nested in it (``error``, ``details``), a few levels deep."""
    if not isinstance(body, Mapping) or depth > 3:
        return
    yield body
    for value in body.values():
        yield from _mappings(value, depth + 1)


def _own_texts(exc: BaseException) -> Iterator[str]:
    yield str(exc)
    message = getattr(exc, "message", None)
    if isinstance(message, str):
        yield message
    body = getattr(exc, "body", None)
    if isinstance(body, str):
        yield body
    for mapping in _mappings(body):
        for key in ("message", "detail", "error"):
            value = mapping.get(key)
            if isinstance(value, str):
                yield value


def _texts(error: BaseException) -> Iterator[str]:
    for exc in _chain(error):
        yield from _own_texts(exc)


def _body_counts(error: BaseException) -> tuple[int | None, int | None]:
    """Counts a server puts in the error body (llama.cpp: ``n_prompt_tokens``, ``n_ctx``)."""
    for exc in _chain(error):
        for mapping in _mappings(getattr(exc, "body", None)):
            prompt, limit = mapping.get("n_prompt_tokens"), mapping.get("n_ctx")
            if isinstance(prompt, int) and isinstance(limit, int):
                return prompt, limit
    return None, None


def _first_number(
    patterns: tuple[regex.Pattern[str], ...], text: str, *, group: int | str
) -> int | None:
    for pattern in patterns:
        match = pattern.search(text)
        if match is not None:
            return int(match.group(group).replace(",", ""))
    return None


def warn_unless_overflow(error: BaseException | str | None) -> None:
    """Log a warning when a recovery is given an error that is not a context-length error."""
    if error is not None and not is_context_overflow(error):
        logger.warning(
            "error=<%s> | recover_overflow was given an error that does not look like a "
            "context-length error; compacting anyway",
            type(error).__name__ if isinstance(error, BaseException) else "str",
        )
