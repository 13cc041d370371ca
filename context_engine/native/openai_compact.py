"""OpenAI's explicit compaction: ``POST /responses/compact``, called when the view must shrink.

Shapes, as the installed SDK types them (openai 3.57.0):

* Request: ``client.responses.compact(model=..., input=[...],
  instructions=..., prompt_cache_key=...)`` (``ResponseCompactParams``; the
  endpoint also takes ``previous_response_id``, ``prompt_cache_options``,
  ``prompt_cache_retention``, ``service_tier`` and ``image``, unused here).
* Response: ``CompactedResponse`` (``object: "response.compaction"``) whose
  ``output`` is "a list of all user messages, followed by a single
  compaction item" (``ResponseCompactionItem``: ``type: "compaction"``,
  ``id``, ``encrypted_content``, ``created_by``), and ``usage``
  (``ResponseUsage``).

The output is the new context window: the next ``responses.create`` sends it
as input in place of the items it compacted. The items are held as the
server returned them (the raw JSON, not a re-serialised model), so they go
back byte for byte.

Needs the ``openai`` client and the Responses item converter
(`context_engine.formats.openai_agents`): ``pip install
'context-engine[openai,openai-agents]'``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs

from context_engine._validate import non_negative_int
from context_engine.errors import SummarizerError
from context_engine.formats.openai_agents import from_openai_agents, to_openai_agents
from context_engine.messages import Message
from context_engine.native._compact_call import (
    CompactCallBase,
    Compacted,
    async_method,
    call_failed,
    model_name,
)
from context_engine.native._compact_plan import CompactPlan
from context_engine.strategies.base import Budget
from context_engine.structure import is_user_message
from context_engine.summarize.reuse import record_cache_usage
from context_engine.telemetry import record_model_usage

__all__ = ["OpenAICompactCall"]

_LEAD_ROLES = ("system", "developer")


@attrs.frozen(kw_only=True)
class OpenAICompactCall(CompactCallBase):
    """Compacts older history with OpenAI's ``responses.compact`` when the view is too long.

    The leading system/developer messages and the history before the cut go
    to ``POST /responses/compact``; the returned window (the user messages,
    then one encrypted ``compaction`` item) replaces that history in the
    view, as the server returned it, and the replaced messages are archived
    under one reference. The window is opaque: no strategy edits it, and
    `to_openai_agents` writes it back byte for byte on every later request.
    An earlier window right after the leading block is sent again and
    replaced (the server folds it in).

    An LLM strategy (``uses_llm``): the circuit breaker guards it, and when
    the call fails the pipeline's next strategies still make the view fit.
    Also force-capable (``compact``, ``recover_overflow``).

    Attributes:
        client: An ``openai.AsyncOpenAI``; its base URL, key, timeout and
            ``max_retries`` are used as configured. ``prefix.tools`` is not
            sent: the endpoint takes no tools.
        model: The model sent with the call (use the agent's model).
        expected_checkpoint_tokens: Tokens the ``compaction`` item is assumed
            to take when choosing the cut (the returned user messages are
            counted as they are).
    """

    name: ClassVar[str] = "openai_compact_call"
    provider_label: ClassVar[str] = "OpenAI"
    send_split_user: ClassVar[bool] = False

    client: Any = attrs.field(validator=async_method("responses", "with_raw_response", "compact"))
    model: str = attrs.field(validator=model_name)
    expected_checkpoint_tokens: int = attrs.field(default=4096, validator=non_negative_int())

    def arguments(self, plan: CompactPlan, instructions: str | None = None) -> dict[str, Any]:
        """The keyword arguments of ``client.responses.compact`` for ``plan``.

        ``input`` is the leading block and the compacted history as
        Responses items (what the agent's own request starts with, so the
        call reads its prompt cache). ``instructions`` is the agent's system
        prompt from ``prefix`` and, for a ``/compact``, the user's
        instructions after it: the endpoint has no summary-instruction field,
        and its ``instructions`` is the system message of the compaction.
        """
        arguments: dict[str, Any] = {
            "model": self.model,
            "input": to_openai_agents((*plan.lead, *plan.sent)),
        }
        system = self.prefix.system if self.prefix is not None else None
        text = "\n\n".join(part for part in (system, instructions) if part)
        if text:
            arguments["instructions"] = text
        if self.prefix is not None and self.prefix.cache_key:
            arguments["prompt_cache_key"] = self.prefix.cache_key
        return arguments

    def expected(self, budget: Budget) -> Callable[[Sequence[Message]], int]:
        """The returned user messages as they are, plus the assumed item size."""

        def tokens(sent: Sequence[Message]) -> int:
            users = sum(budget.counter.count_message(m) for m in sent if is_user_message(m))
            return users + self.expected_checkpoint_tokens

        return tokens

    async def call(self, plan: CompactPlan, instructions: str | None) -> Compacted:
        """One ``POST /responses/compact``; the returned window as messages.

        Raises:
            SummarizerError: the call failed, or its output holds no compaction item.
        """
        try:
            raw = await self.client.responses.with_raw_response.compact(
                **self.arguments(plan, instructions)
            )
            body = raw.http_response.json()
        except Exception as exc:
            raise call_failed(self.provider_label, self.model, exc) from exc
        return Compacted(window=self._window(body))

    def _window(self, body: object) -> tuple[Message, ...]:
        where = f"OpenAI compaction call ({self.model})"
        if not isinstance(body, Mapping):
            raise SummarizerError(f"{where} returned no JSON object")
        output = body.get("output")
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise SummarizerError(f"{where} returned no output list")
        if not any(_is_compaction(item) for item in output):
            raise SummarizerError(
                f"{where} returned no compaction item with encrypted_content; "
                "check that the model supports compaction"
            )
        _record_usage(body)
        # The leading block is kept in the view already: an echo of it is not sent twice.
        window = [item for item in output if item.get("role") not in _LEAD_ROLES]
        return tuple(from_openai_agents(window))


def _is_compaction(item: Mapping[str, Any]) -> bool:
    return item.get("type") == "compaction" and isinstance(item.get("encrypted_content"), str)


def _record_usage(body: Mapping[str, Any]) -> None:
    usage = body.get("usage")
    if not isinstance(usage, Mapping):
        return
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    prompt = usage.get("input_tokens")
    if isinstance(prompt, int):
        record_cache_usage(
            prompt, _count(details.get("cached_tokens")), _count(details.get("cache_write_tokens"))
        )
    record_model_usage(prompt, usage.get("output_tokens"), body.get("model"))


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
