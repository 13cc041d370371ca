"""Anthropic's compaction on demand: a Messages request with ``compaction``.

Shapes, as the installed SDK types them (anthropic 2.14.0):

* Request: ``client.beta.messages.create(..., compaction={"type":
  "summarize", "instructions": ...}, betas=["compact-2026-09-04"])``
  (``BetaCompactionConfigParam``). "When set on ``POST /v1/messages``, the
  request is a compaction request: the conversation in ``messages`` is
  summarized and the response holds only the resulting ``compaction`` block
  (``stop_reason`` ``"compaction"``), which later requests send first in
  ``messages`` in place of the messages it summarizes." It cannot be
  combined with ``context_management``; ``instructions`` replace the
  server's summarization prompt for that request. The beta flag is the one
  the SDK's tool runner names for ``compact_before_next_turn()``.
* Response: a message whose content is one ``compaction`` block
  (``BetaCompactionBlock``: ``content``, ``encrypted_content``,
  ``signature``, ``tool_changes``); ``content`` None means the compaction
  failed.

The block is held as the server returned it (the raw JSON), so it goes back
byte for byte. Works on the request dicts of `context_engine.formats.anthropic`;
the ``anthropic`` package itself is only the client you pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from context_engine._validate import positive_int
from context_engine.errors import SummarizerError
from context_engine.formats.anthropic import message_from_anthropic, to_anthropic
from context_engine.messages import Message
from context_engine.native._compact_call import (
    CompactCallBase,
    Compacted,
    async_method,
    call_failed,
    model_name,
)
from context_engine.native._compact_plan import CompactPlan
from context_engine.native.options import COMPACT_CALL_BETA, NativeProvider, RequestOptions
from context_engine.strategies.base import Budget
from context_engine.summarize.reuse import record_cache_usage
from context_engine.telemetry import record_model_usage

__all__ = ["AnthropicCompactCall"]


@attrs.frozen(kw_only=True)
class AnthropicCompactCall(CompactCallBase):
    """Compacts older history with an Anthropic compaction request when the view is too long.

    The leading system messages (as ``system``) and the history before the
    cut go to ``client.beta.messages.create`` with ``compaction``; the
    returned assistant message, one ``compaction`` block, replaces that
    history in the view, right after the system messages, as the server
    returned it; the replaced messages are archived under one reference.
    The block is opaque: no strategy edits it, and `to_anthropic` writes it
    back byte for byte on every later request. An earlier block right after
    the system messages is sent again and replaced (the server folds it in).

    An LLM strategy (``uses_llm``): the circuit breaker guards it, and when
    the call fails the pipeline's next strategies still make the view fit.
    Also force-capable: a ``/compact``'s instructions go with the request.
    Its request options add the ``compact-2026-09-04`` beta flag to the
    agent's requests, which carry the block; it cannot share a pipeline with
    `AnthropicCompaction` (the API takes no compaction block together with a
    ``compact_20260112`` edit, per the SDK's tool runner).

    Attributes:
        client: An ``anthropic.AsyncAnthropic``; its base URL, key, timeout
            and ``max_retries`` are used as configured.
        model: The model sent with the call (use the agent's model).
        max_tokens: The request's ``max_tokens`` (the summary's ceiling); the
            cut leaves this much room for the block.
        instructions: Replace the server's summarization prompt; None keeps
            the server's own (a ``/compact``'s instructions are added to these).
    """

    name: ClassVar[str] = "anthropic_compact_call"
    provider: ClassVar[NativeProvider] = "anthropic"
    provider_label: ClassVar[str] = "Anthropic"
    send_split_user: ClassVar[bool] = True

    client: Any = attrs.field(
        validator=async_method("beta", "messages", "with_raw_response", "create")
    )
    model: str = attrs.field(validator=model_name)
    max_tokens: int = attrs.field(default=4096, validator=positive_int())
    instructions: str | None = None

    def request_options(self, view: Sequence[Message]) -> RequestOptions:
        """The beta flag the agent's requests carrying a compaction block need."""
        return RequestOptions(provider="anthropic", betas=(COMPACT_CALL_BETA,))

    def arguments(self, plan: CompactPlan, instructions: str | None = None) -> dict[str, Any]:
        """The keyword arguments of ``client.beta.messages.create`` for ``plan``.

        System, tools and messages are what the agent's own request starts
        with (its ``cache_control`` breakpoints kept), so the call reads its
        prompt cache; ``compaction`` makes it a compaction request.
        """
        body = to_anthropic((*plan.lead, *plan.sent), request=True)
        compaction: dict[str, Any] = {"type": "summarize"}
        text = "\n\n".join(part for part in (self.instructions, instructions) if part)
        if text:
            compaction["instructions"] = text
        arguments: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": body["messages"],
        }
        system = body.get("system") or (self.prefix.system if self.prefix is not None else None)
        if system:
            arguments["system"] = system
        if self.prefix is not None and self.prefix.tools:
            arguments["tools"] = [dict(tool) for tool in self.prefix.tools]
        arguments["compaction"] = compaction
        arguments["betas"] = [COMPACT_CALL_BETA]
        return arguments

    def expected(self, budget: Budget) -> Callable[[Sequence[Message]], int]:
        """The summary's ceiling, ``max_tokens``, whatever is sent."""
        return lambda sent: self.max_tokens

    async def call(self, plan: CompactPlan, instructions: str | None) -> Compacted:
        """One compaction request; the returned message as the window.

        Raises:
            SummarizerError: the request failed, or returned no compaction
                block with a summary (a failed compaction).
        """
        try:
            raw = await self.client.beta.messages.with_raw_response.create(
                **self.arguments(plan, instructions)
            )
            body = await raw.json()
        except Exception as exc:
            raise call_failed(self.provider_label, self.model, exc) from exc
        content = body.get("content") if isinstance(body, Mapping) else None
        if not isinstance(content, list):
            raise SummarizerError(f"Anthropic compaction call ({self.model}) returned no content")
        summaries = [
            block["content"]
            for block in content
            if isinstance(block, Mapping)
            and block.get("type") == "compaction"
            and isinstance(block.get("content"), str)
            and block["content"]
        ]
        if not summaries:
            raise SummarizerError(
                f"Anthropic compaction call ({self.model}) returned no compaction summary "
                f"(stop_reason={body.get('stop_reason')!r}); the server could not compact"
            )
        _record_usage(body)
        window = message_from_anthropic({"role": "assistant", "content": content})
        return Compacted(window=tuple(window), summary_chars=sum(map(len, summaries)))


def _record_usage(body: Mapping[str, Any]) -> None:
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return
    read = _count(usage.get("cache_read_input_tokens"))
    write = _count(usage.get("cache_creation_input_tokens"))
    prompt = usage.get("input_tokens")
    if isinstance(prompt, int):
        # Anthropic's input_tokens leave out the cached parts; the whole prompt includes them.
        record_cache_usage(prompt + read + write, read, write)
    whole = prompt + read + write if isinstance(prompt, int) else None
    record_model_usage(whole, usage.get("output_tokens"), body.get("model"))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
