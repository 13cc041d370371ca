"""The independent floor of `fits.py`: a view that keeps every invariant and is as small as we know.

"A fitting view existed" must not be decided by the engine's own floor code
(that code is what is being measured), so it is decided here by building a
witness: an actual view, checked with `context_engine.invariants.check_view`,
made of

* the leading system/developer messages, verbatim;
* the newest user message, verbatim and whole (images included, never trimmed);
* the newest tool group after it (the assistant message with tool calls and
  the results answering it), each result longer than `PREVIEW_TOKENS` cut to
  its head plus a one-line marker;
* tool calls still pending at the end, verbatim.

Everything else is dropped. The witness is counted with the engine's token
counter, provider usage anchors ignored, plus `REQUEST_OVERHEAD_TOKENS` and the
engine's ``overhead_tokens``: the same arithmetic the engine's estimate does on
a view without anchors. A fitting view existed when the witness is at or under
the threshold. The floor is conservative: the engine may do better (trim a
huge newest user message, drop the newest group's results entirely), so a
view above the threshold counted against it is a view the engine could have
avoided without breaking an invariant.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine import Message
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS, TokenCounter

__all__ = ["PREVIEW_TOKENS", "measure", "witness"]

PREVIEW_TOKENS = 200
"""Tokens of a tool result's head the witness keeps (a Codex- or Strands-sized preview)."""


def measure(view: Sequence[Message], counter: TokenCounter, overhead_tokens: int = 0) -> int:
    """Tokens of ``view`` as a prompt: every message counted, usage anchors ignored."""
    return sum(map(counter.count_message, view)) + REQUEST_OVERHEAD_TOKENS + overhead_tokens


def _is_user(message: Message) -> bool:
    return message.role == "user" and not message.is_summary


def _pending_start(messages: Sequence[Message], start: int) -> int:
    """Index of a trailing assistant message whose calls still wait, or ``len(messages)``."""
    for index in range(len(messages) - 1, start - 1, -1):
        message = messages[index]
        if message.role == "tool":
            continue
        if message.role != "assistant" or not message.tool_calls:
            break
        answered = {m.tool_call_id for m in messages[index + 1 :]}
        if any(call.id not in answered for call in message.tool_calls):
            return index
        break
    return len(messages)


def _preview(result: Message, counter: TokenCounter) -> Message:
    """``result`` with its text cut to about `PREVIEW_TOKENS` tokens and images dropped."""
    text = result.text
    if counter.count_message(result) <= PREVIEW_TOKENS + 8:
        return result
    size = min(len(text), PREVIEW_TOKENS * 4)
    while size and counter.count_text(text[:size]) > PREVIEW_TOKENS:
        size = size * 3 // 4
    marker = f"\n[preview: {size:,} of {len(text):,} characters]"
    return Message.tool(result.tool_call_id or "", text[:size] + marker, name=result.name)


def witness(messages: Sequence[Message], counter: TokenCounter) -> tuple[Message, ...]:
    """The smallest invariant-keeping view of ``messages`` this benchmark vouches for."""
    lead_end = 0
    while lead_end < len(messages) and messages[lead_end].role in ("system", "developer"):
        lead_end += 1
    users = [i for i in range(lead_end, len(messages)) if _is_user(messages[i])]
    newest_user = users[-1] if users else -1
    after = max(newest_user + 1, lead_end)
    pending = _pending_start(messages, after)
    kept: list[Message] = list(messages[:lead_end])
    if newest_user >= 0:
        kept.append(messages[newest_user])
    elif lead_end < len(messages) and messages[lead_end].role == "user":
        kept.append(messages[lead_end])  # a checkpoint must stay first when nothing else can
    groups = [i for i in range(after, pending) if messages[i].tool_calls]
    if groups:
        call = messages[groups[-1]]
        ids = {c.id for c in call.tool_calls}
        results = [
            _preview(m, counter)
            for m in messages[groups[-1] + 1 : pending]
            if m.role == "tool" and m.tool_call_id in ids
        ]
        kept += [attrs.evolve(call, usage=None), *results]
    kept += messages[pending:]
    return tuple(kept)
