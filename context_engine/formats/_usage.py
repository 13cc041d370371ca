"""Rendering `Usage` in the providers' shapes, which differ only in their key names."""

from __future__ import annotations

from typing import Any

from context_engine.messages import Usage

__all__ = ["render_usage"]


def render_usage(
    usage: Usage,
    *,
    input_key: str,
    output_key: str,
    details_key: str,
    read_key: str,
    write_key: str,
) -> dict[str, Any]:
    """``usage`` as a provider dict: counts, total, and cache details only when non-zero."""
    rendered: dict[str, Any] = {
        input_key: usage.input_tokens,
        output_key: usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }
    details = {}
    if usage.cache_read_tokens:
        details[read_key] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        details[write_key] = usage.cache_write_tokens
    if details:
        rendered[details_key] = details
    return rendered
