"""What the runtime agent-loop tests share: a big-output tool, request checks, recall chains."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from context_engine import ContextEngine, Message
from context_engine.archive import find_references

WINDOWS = [8_000, 16_000]
"""The windows every runtime's loop runs at (the issue's "an 8k and a 16k window")."""
TRIGGER = 0.8
"""The fraction of the window compaction starts at, like the runtimes' own managers."""
LOOP_STEPS = 45
"""Tool steps of one agent loop; the model answers once more to finish."""
INSTRUCTIONS = "You search code bases and answer with file and line numbers. " * 10


def grep_size(step: int) -> int:
    """How many matches the ``step``-th search returns: 80 to 319 lines, 1,400-6,000 tokens."""
    return 80 + (step * 97) % 240


def grep_output(pattern: str, max_results: int) -> str:
    """A repository search's output: ``max_results`` matching lines, about 19 tokens each."""
    lines = (
        f"src/pkg/module_{n % 37:02d}.py:{n * 3 + 1}: def {pattern}_{n}(value): return value * {n}"
        for n in range(max_results)
    )
    return f"{max_results} matches for {pattern!r}:\n" + "\n".join(lines)


def orphans(request: Sequence[Message]) -> list[str]:
    """The tool calls without their result and the results without their call in ``request``.

    A result must come after the call it answers; a request never ends with a
    pending call here (the loop sends a request only once every call is answered).
    """
    problems: list[str] = []
    called: set[str] = set()
    answered: set[str] = set()
    for message in request:
        if message.role == "assistant":
            called.update(call.id for call in message.tool_calls)
        elif message.role == "tool":
            if message.tool_call_id not in called:
                problems.append(f"result {message.tool_call_id!r} without its call")
            answered.add(message.tool_call_id or "")
    problems += [f"call {c!r} without its result" for c in sorted(called - answered)]
    return problems


async def recall_all(engine: ContextEngine, texts: Iterable[str]) -> set[str]:
    """Every text reachable from the references ``texts`` name, following recalled texts' own.

    A checkpoint names the range it replaced; placeholders and previews in
    that range name their own originals, so the whole chain must resolve.
    """
    pending = [r for text in texts for r in find_references(text)]
    seen, found = set(pending), set()
    while pending:
        for message in await engine.recall(pending.pop()):
            found.add(message.text)
            for reference in find_references(message.text):
                if reference not in seen:
                    seen.add(reference)
                    pending.append(reference)
    return found
