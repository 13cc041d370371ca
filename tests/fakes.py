"""Strategies and transcripts for engine tests: small, predictable, invariant-keeping."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine import ContextSummary, Message, ToolCall
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.structure import analyze


def agent_session(
    steps: int, *, result_chars: int = 2000, system: str = "You are a coder."
) -> list[Message]:
    """A system prompt, one user request and ``steps`` tool calls with large results."""
    messages = [Message.system(system), Message.user("Fix the failing test in parser.py")]
    for step in range(steps):
        call = ToolCall(f"call_{step}", "read_file", f'{{"path": "src/mod_{step}.py"}}')
        messages.append(Message.assistant(f"Reading module {step}.", tool_calls=[call]))
        messages.append(Message.tool(call.id, f"line {step}\n" * (result_chars // 8)))
    return messages


@attrs.define
class ShrinkToolResults:
    """Replaces every unprotected tool result with a short text; records its calls."""

    name: str = "shrink"
    uses_llm: bool = False
    calls: int = 0

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        self.calls += 1
        shape = analyze(view)
        out, replaced = [], []
        for index, message in enumerate(view):
            if message.role == "tool" and not shape.is_protected(index) and message.text != "gone":
                out.append(attrs.evolve(message, content="gone"))
                replaced.append(message)
            else:
                out.append(message)
        return StrategyResult(
            messages=out,
            applied=bool(replaced),
            removed=[Removal("tool_result", (m,)) for m in replaced],
        )


@attrs.define
class Exploding:
    """Raises on every apply (and force_apply)."""

    name: str = "exploding"
    uses_llm: bool = True
    calls: int = 0

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        self.calls += 1
        raise RuntimeError("summarizer endpoint is down")

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        self.calls += 1
        raise RuntimeError("summarizer endpoint is down")


@attrs.define
class Checkpointer:
    """An 'LLM' strategy: replaces everything between the system prompt and the tail
    with one checkpoint. Records calls and the instructions it was given."""

    name: str = "full_summary"
    uses_llm: bool = True
    calls: int = 0
    instructions: list[str | None] = attrs.Factory(list)
    summary: str = "Worked through the modules; parser bug is in tokenize()."

    def _rewrite(self, view: Sequence[Message]) -> StrategyResult:
        shape = analyze(view)
        start = shape.lead_end
        keep = [i for i in range(start, len(view)) if shape.is_protected(i)]
        removed = [view[i] for i in range(start, len(view)) if i not in keep]
        if not removed:
            return StrategyResult.unchanged(view)
        checkpoint = ContextSummary(summary=self.summary, tokens_before=0)
        out = [*view[:start], checkpoint, *(view[i] for i in keep)]
        return StrategyResult(messages=out, applied=True, removed=[Removal("messages", removed)])

    async def apply(
        self, transcript: Sequence[Message], view: Sequence[Message], budget: Budget
    ) -> StrategyResult:
        self.calls += 1
        self.instructions.append(None)
        return self._rewrite(view)

    async def force_apply(
        self,
        transcript: Sequence[Message],
        budget: Budget,
        *,
        instructions: str | None = None,
    ) -> StrategyResult:
        self.calls += 1
        self.instructions.append(instructions)
        return self._rewrite(transcript)
