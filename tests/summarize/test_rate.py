"""A reactive checkpoint removes at least the minimum (`context_engine.summarize.rate`)."""

from __future__ import annotations

from context_engine import ContextEngine, Message, ToolCall
from context_engine.strategies import FullSummary
from context_engine.structure import analyze
from context_engine.summarize.cut import find_cut_point
from context_engine.summarize.rate import MIN_REMOVED_ROUNDS, deepened, removes_enough
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter()


def loop(rounds: int) -> list[Message]:
    """One request and ``rounds`` tool rounds of about 100 tokens each."""
    messages = [Message.system("You are a coder."), Message.user("Fix the parser.")]
    for i in range(rounds):
        call = ToolCall(f"c{i}", "read_file", f'{{"path": "m{i}.py"}}')
        messages += [Message.assistant(f"Reading {i}.", tool_calls=[call])]
        messages += [Message.tool(call.id, "x" * 340)]
    return messages


def test_a_cut_that_removes_one_round_moves_later_until_it_removes_the_minimum() -> None:
    view = loop(30)
    shape = analyze(view)
    keep = sum(COUNTER.count_message(m) for m in view[5:])  # removes only the first round
    cut = find_cut_point(view, shape, COUNTER, keep, slack_tokens=0)
    assert cut is not None
    threshold = 4000
    assert not removes_enough(view, cut, COUNTER, threshold // 10)[0]
    later = deepened(view, shape, COUNTER, cut, threshold)
    enough, removed = removes_enough(view, later, COUNTER, threshold // 10)
    assert enough
    assert later.index > cut.index
    assert removed >= threshold // 10
    assert later.index < shape.tail_start + 1  # the protected tail is never cut


def test_a_cut_that_removes_enough_is_kept() -> None:
    view = loop(30)
    shape = analyze(view)
    cut = find_cut_point(view, shape, COUNTER, 1000)
    assert cut is not None
    assert deepened(view, shape, COUNTER, cut, 4000) == cut


def test_when_the_tail_allows_less_the_latest_cut_is_taken() -> None:
    view = loop(MIN_REMOVED_ROUNDS + 1)
    shape = analyze(view)
    cut = find_cut_point(view, shape, COUNTER, 0, slack_tokens=0)
    assert cut is not None
    assert deepened(view, shape, COUNTER, cut, 100_000) == cut


async def test_a_reactive_full_summary_removes_the_minimum_even_with_a_large_keep() -> None:
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        4_000,
        [FullSummary(summarizer=summarizer, keep_recent_tokens=3_000)],
        reserve_tokens=1_000,
        token_counter=COUNTER,
    )
    view = [*loop(2)]
    for turn in range(14):  # short turns: the cut lands on a turn boundary
        view += [Message.user(f"Next file {turn}."), *loop(2)[2:]]
        view = [*view[:-4], *_renamed(view[-4:], turn)]
    result = await engine.project(view)
    assert result.strategy == "full_summary"
    assert result.event is not None
    assert result.event.info is not None
    removed = sum(COUNTER.count_message(m) for m in summarizer.requests[0].messages)
    assert removed >= engine.threshold // 10
    assert summarizer.requests[0].reason == "reactive_full"


def _renamed(round_messages: list[Message], turn: int) -> list[Message]:
    """The two rounds of ``loop(2)`` with call ids unique to ``turn``."""
    out = []
    for message in round_messages:
        if message.role == "assistant":
            call = message.tool_calls[0]
            out.append(
                Message.assistant(
                    message.text,
                    tool_calls=[ToolCall(f"t{turn}{call.id}", call.name, call.arguments)],
                )
            )
        else:
            out.append(Message.tool(f"t{turn}{message.tool_call_id}", message.text))
    return out
