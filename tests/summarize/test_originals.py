"""The summarizer reads the original messages, never an earlier strategy's placeholders."""

from __future__ import annotations

from typing import Any

import attrs

from context_engine import ContextSummary, Message, ToolCall
from context_engine.strategies import FullSummary, ToolResultMicrocompact
from context_engine.strategies.base import Budget
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY
from context_engine.summarize.originals import restore_originals, whole_newest_user
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter()
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "app.py", line 3, in <module>\n'
    "    Query()\n"
    "NameError: name 'Query' is not defined\n" + "context line\n" * 60
)


def measure(messages: Any) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


def budget(view: list[Message], threshold: int) -> Budget:
    return Budget(
        tokens=measure(view), window=100_000, threshold=threshold, counter=COUNTER, measure=measure
    )


def session(steps: int) -> list[Message]:
    messages = [Message.system("sys"), Message.user("Fix app.py")]
    for n in range(steps):
        call = ToolCall(f"c{n}", "bash", f'{{"command": "python app.py --step {n}"}}')
        messages.append(Message.assistant(f"step {n}", tool_calls=[call]))
        messages.append(Message.tool(f"c{n}", TRACEBACK if n == 1 else "ok\n" * 200, name="bash"))
    return messages


def test_cleared_results_are_replaced_by_their_originals_in_order() -> None:
    """Each cleared message gets its original back; the others stay the very same objects."""
    transcript = session(6)
    cleared = ToolResultMicrocompact(keep_recent=1).rewrite(
        transcript, budget(transcript, measure(transcript) // 3)
    )
    assert cleared.applied
    view = cleared.messages
    assert sum(bool(m.metadata.get(CLEARED_KEY)) for m in view) >= 3
    restored = restore_originals(view, transcript)
    assert len(restored) == len(view)
    assert all(a is b for a, b in zip(restored, transcript, strict=True))


def test_a_message_with_no_original_in_the_transcript_stays_as_it_is() -> None:
    """A checkpoint or a result shortened before it reached the transcript is kept."""
    checkpoint = ContextSummary(summary="## Goal\n- fix it")
    orphan = attrs.evolve(
        Message.tool("zz", "[cleared]", name="bash"), metadata={CLEARED_KEY: True}
    )
    transcript = session(2)
    restored = restore_originals([checkpoint, orphan], transcript)
    assert restored == (checkpoint, orphan)


async def test_the_summarizer_reads_the_failure_microcompact_cleared_in_the_same_call() -> None:
    """FullSummary after microcompact: the request carries the traceback, not the placeholder."""
    transcript = session(8)
    pressure = budget(transcript, measure(transcript) // 3)
    cleared = ToolResultMicrocompact(keep_recent=1).rewrite(transcript, pressure)
    placeholders = [m for m in cleared.messages if m.metadata.get(CLEARED_KEY)]
    assert any("NameError" in m.text for m in placeholders)  # cleared: only its key line left
    recorder = RecordingSummarizer()
    strategy = FullSummary(summarizer=recorder, keep_recent_tokens=1)
    after = budget(list(cleared.messages), pressure.threshold)
    result = await strategy.apply(transcript, cleared.messages, after)
    assert result.applied
    assert recorder.calls >= 1
    sent = [m for request in recorder.requests for m in request.messages]
    assert not any(m.metadata.get(CLEARED_KEY) for m in sent)
    assert any(TRACEBACK in m.text for m in sent)


def test_whole_newest_user_puts_a_trimmed_request_back_for_the_commit() -> None:
    """Only the newest user message, only when trimmed, only from a longer original."""
    task = Message.user("Fix the parser. " * 50)
    trimmed = attrs.evolve(
        task, content="Fix the parser.\n[700 characters trimmed]\n", metadata={TRIMMED_KEY: 1}
    )
    transcript = [Message.system("sys"), task, Message.assistant("On it.")]
    view = (transcript[0], trimmed, transcript[2])
    assert whole_newest_user(view, transcript) == tuple(transcript)
    assert whole_newest_user(transcript, transcript) == tuple(transcript)
    # A transcript that already holds the trimmed text has nothing better to give.
    assert whole_newest_user(view, list(view)) == view
