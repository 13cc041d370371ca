"""Real ``openai`` / ``anthropic`` exception objects, built the way the clients build them."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai

_OPENAI_CLASSES: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    404: openai.NotFoundError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}
_ANTHROPIC_CLASSES: dict[int, type[anthropic.APIStatusError]] = {
    400: anthropic.BadRequestError,
    401: anthropic.AuthenticationError,
    404: anthropic.NotFoundError,
    408: anthropic.RequestTimeoutError,
    413: anthropic.ContentTooLargeError,
    429: anthropic.RateLimitError,
    529: anthropic.OverloadedError,
}


def _response(status: int, body: Any, headers: dict[str, str] | None, url: str) -> httpx2.Response:
    request = httpx2.Request("POST", url)
    return httpx2.Response(status, json=body, headers=headers or {}, request=request)


def openai_status_error(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
    base_url: str = "https://api.openai.com/v1",
) -> openai.APIStatusError:
    """As ``openai`` raises it: body is the ``error`` object, message gets the prefix."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    response = _response(status, body, headers, f"{base_url}/chat/completions")
    default = openai.InternalServerError if status >= 500 else openai.APIStatusError
    cls = _OPENAI_CLASSES.get(status, default)
    return cls(f"Error code: {status} - {message}", response=response, body=body["error"])


def anthropic_status_error(
    status: int,
    message: str,
    *,
    kind: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> anthropic.APIStatusError:
    """As ``anthropic`` raises it: the whole body, and its repr in the message."""
    body = {"type": "error", "error": {"type": kind, "message": message}}
    response = _response(status, body, headers, "https://api.anthropic.com/v1/messages")
    default = anthropic.InternalServerError if status >= 500 else anthropic.APIStatusError
    cls = _ANTHROPIC_CLASSES.get(status, default)
    return cls(f"Error code: {status} - {body}", response=response, body=body)


def openai_timeout() -> openai.APITimeoutError:
    return openai.APITimeoutError(request=httpx2.Request("POST", "https://api.openai.com/v1"))


def anthropic_connection_error() -> anthropic.APIConnectionError:
    return anthropic.APIConnectionError(request=httpx2.Request("POST", "https://x.invalid"))
