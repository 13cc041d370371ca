"""The recovery's folds: what a cut drops is written into the checkpoint from its originals."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from context_engine.messages import ContextSummary, Message, TextBlock, ToolCall
from context_engine.recovery import recovery_strategies
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.strategies.base import Budget
from context_engine.structure import CLEARED_KEY
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.ledger import LEDGER_KEY
from context_engine.testing import FixedTokenCounter

COUNTER = FixedTokenCounter()
FAILURE = "AssertionError: expected 3 rows, got 2"


def measure(messages: Sequence[Message]) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


def session() -> list[Message]:
    messages = [Message.system("You fix bugs."), Message.user("Make the row count right.")]
    for n in range(8):
        command = f"pytest tests/test_rows.py -k case{n}"
        output = "collected 1 item\n" + "noise line\n" * 60
        if n == 0:
            output += f"E   {FAILURE}\n1 failed in 0.1s\nexit code 1"
        messages += [
            Message.assistant(
                tool_calls=[ToolCall(f"c{n}", "bash", f'{{"command": "{command}"}}')]
            ),
            Message.tool(f"c{n}", output),
        ]
    return [*messages, Message.user("And now?"), Message.assistant("Looking.")]


def overflow_budget(view: Sequence[Message], threshold: int) -> Budget:
    """The budget a recovery gets for ``view`` after an overflow at ``threshold``."""
    return Budget(
        tokens=measure(view),
        window=threshold * 2,
        threshold=threshold,
        counter=COUNTER,
        measure=measure,
        reason="overflow",
    )


async def test_a_recovery_fold_writes_the_checkpoint_from_the_originals_of_cleared_results() -> (
    None
):
    transcript = session()
    failing = transcript[3]
    cleared = attrs.evolve(
        failing, content=(TextBlock("[result cleared]"),), metadata={CLEARED_KEY: True}
    )
    view = tuple(cleared if m is failing else m for m in transcript)
    budget = overflow_budget(view, measure(view) // 2)
    writer = FullSummary(summarizer=ExtractiveSummarizer())
    (digest, _) = recovery_strategies([HardTruncate()], [writer], summary_failed=True)
    result = await digest.apply(transcript, view, budget)
    assert result.applied
    assert result.info is not None
    checkpoint = next(m for m in result.messages if m.is_summary)
    assert FAILURE in checkpoint.text


async def test_a_fold_a_little_smaller_than_the_checkpoint_it_replaces_still_logs_the_cut() -> None:
    """A fold with a bit less room than the old checkpoint beats a cut that logs nothing.

    The plain cut would keep the checkpoint and drop the tail's calls for good;
    the fold keeps them in its work log (and the old checkpoint's in metadata).
    """
    transcript = session()
    threshold = measure(transcript) // 2
    writer = FullSummary(summarizer=ExtractiveSummarizer(), max_checkpoint_share=0.2)
    limit = writer.checkpoint_limit(threshold)
    words = 1
    while COUNTER.count_message(ContextSummary(summary="Earlier work. " * words)) < limit * 1.1:
        words += 1
    old = ContextSummary(summary="Earlier work. " * words)
    assert limit < COUNTER.count_message(old) < limit * 4 // 3
    view = (transcript[0], old, *transcript[1:])
    budget = overflow_budget(view, threshold)
    (digest, _) = recovery_strategies([HardTruncate()], [writer], summary_failed=True)
    result = await digest.apply(view, view, budget)
    assert result.applied
    checkpoint = next(m for m in result.messages if m.is_summary)
    assert checkpoint is not old
    assert "pytest tests/test_rows.py -k case0" in str(checkpoint.metadata[LEDGER_KEY])


async def test_a_checkpoint_grown_into_a_small_windows_room_is_folded_not_cut() -> None:
    """A small window's checkpoint may grow past `checkpoint_limit` into free room; a
    recovery then folds at its size rather than refusing and cutting it to a marker."""
    transcript = session()
    threshold = measure(transcript) // 2
    writer = FullSummary(summarizer=ExtractiveSummarizer())
    limit, grown = writer.checkpoint_limit(threshold), writer.grown_limit(threshold)
    assert limit < grown  # a small window
    words = 1
    while COUNTER.count_message(ContextSummary(summary="Earlier work. " * words)) < limit * 1.4:
        words += 1
    old = ContextSummary(summary="Earlier work. " * words)
    assert limit * 4 // 3 < COUNTER.count_message(old) <= grown
    view = (transcript[0], old, *transcript[1:])
    (digest, _) = recovery_strategies([HardTruncate()], [writer], summary_failed=True)
    result = await digest.apply(view, view, overflow_budget(view, threshold))
    assert result.applied
    checkpoint = next(m for m in result.messages if m.is_summary)
    assert checkpoint is not old
    assert "pytest tests/test_rows.py -k case0" in str(checkpoint.metadata[LEDGER_KEY])
    assert measure(result.messages) <= threshold
