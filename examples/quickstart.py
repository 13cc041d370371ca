"""Quickstart: a long tool-using agent session pushed through `ContextEngine.default`.

The agent loop below does what a runtime does before every LLM call: it asks the
engine for the view to send, commits the view when the engine says so (after a
checkpoint), and appends the model's next step. The checkpoints are written by
the offline `ExtractiveSummarizer`; pass an `OpenAISummarizer` or
`AnthropicSummarizer` to have a model write them. Rewrites are printed as they
happen (a light rewrite that repeats on every call is printed once), and the
last checkpoint is shown at the end.

Run with `make demo` (or `python examples/quickstart.py`).
"""

from __future__ import annotations

import asyncio
from collections import Counter

from context_engine import ContextEngine, ExtractiveSummarizer, RewriteEvent
from context_engine.testing import synthetic_session

WINDOW = 32_000


def show(event: RewriteEvent, step: int) -> None:
    tried = ", ".join(f"{s.name}{'*' if s.applied else ''}" for s in event.steps)
    print(
        f"step {step:4d}  {event.reason:<9} {event.strategy:<26} "
        f"{event.tokens_before:>7,} -> {event.tokens_after:>7,} tokens"
        f"{'  committed' if event.committed else ''}   [{tried}]"
    )


async def main() -> None:
    session = synthetic_session(600)
    engine = ContextEngine.default(WINDOW, summarizer=ExtractiveSummarizer())
    print(
        f"window {WINDOW:,} tokens, threshold {engine.threshold:,}; "
        f"session of {len(session)} messages; * = strategy applied\n"
    )
    transcript = session[:2]
    sent = 0
    tally: Counter[str] = Counter()
    last_shown = ""
    for step, message in enumerate(session[2:], start=1):
        transcript.append(message)
        if message.role != "tool":
            continue  # the model is called after each tool result
        projection = await engine.project(transcript)
        sent += projection.usage.tokens
        event = projection.event
        if event is not None:
            tally[event.strategy] += 1
            # The same light rewrite repeats on every call until a commit; show changes only.
            if event.committed or event.strategy != last_shown:
                show(event, step)
                last_shown = event.strategy
        if projection.commit is not None:
            transcript = list(projection.commit)
    full = sum(engine.counter.count_message(m) for m in session)
    checkpoint = next((m for m in transcript if m.is_summary), None)
    if checkpoint is not None:
        print("\nlast checkpoint (first 40 lines):")
        print("\n".join(checkpoint.text.splitlines()[:40]))
    print(f"\nrewrites by strategy: {dict(tally)}")
    print(
        f"the full session is {full:,} tokens; the last view "
        f"{engine.usage.tokens if engine.usage else 0:,}; {sent:,} tokens sent in all."
    )


if __name__ == "__main__":
    asyncio.run(main())
