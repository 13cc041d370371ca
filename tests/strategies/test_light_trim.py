"""LightTrim: long text blocks in older messages keep their head and tail around a marker."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from context_engine import ContextEngine, ContextSummary, Message, ToolCall
from context_engine.archive import MemoryArchive, find_references
from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.messages import TextBlock, ThinkingBlock
from context_engine.strategies import HardTruncate
from context_engine.strategies.base import Budget, Strategy, StrategyResult
from context_engine.strategies.light_trim import LightTrim, trim_arguments, trim_text
from context_engine.structure import TRIMMED_KEY, analyze
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts

MARKER = regex.compile(r"\n\[(\d+) characters trimmed\]\n")
LONG = "L" * 1000
SMALL = {"text_threshold": 200, "preserve_head": 60, "preserve_tail": 40}


def measure_with(counter: FixedTokenCounter) -> Any:
    return lambda messages: sum(counter.count_message(m) for m in messages)


def budget_for(view: Sequence[Message], counter: FixedTokenCounter, threshold: int = 0) -> Budget:
    measure = measure_with(counter)
    return Budget(
        tokens=measure(view),
        window=1_000_000,
        threshold=threshold,
        counter=counter,
        measure=measure,
    )


def trimmed(view: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(view) if TRIMMED_KEY in m.metadata]


def assert_marker_honest(original: str, new: str) -> None:
    """The marker's N is exactly the number of characters that went."""
    found = MARKER.findall(new)
    assert len(found) == 1
    marker = f"\n[{found[0]} characters trimmed]\n"
    assert len(original) - int(found[0]) == len(new) - len(marker)
    head, tail = new.split(marker)
    assert original.startswith(head)
    assert original.endswith(tail)


async def run(
    strategy: LightTrim, view: Sequence[Message], counter: FixedTokenCounter, threshold: int = 0
) -> StrategyResult:
    """Apply, and check the invariants and the bookkeeping every run must keep."""
    before = copy.deepcopy(list(view))
    result = await strategy.apply(view, view, budget_for(view, counter, threshold))
    assert list(view) == before, "input mutated"
    assert check_view(view, result.messages) == []
    measure = measure_with(counter)
    assert result.tokens_saved == measure(view) - measure(result.messages)
    assert len(result.messages) == len(view), "a message was removed"
    changed = [m for m, new in zip(view, result.messages, strict=True) if m is not new]
    assert list(result.replaced) == changed
    assert all(a is b for a, b in zip(result.replaced, changed, strict=True))
    assert result.applied == bool(changed)
    for old, new in zip(view, result.messages, strict=True):
        assert (old.role, old.tool_call_id, old.name) == (new.role, new.tool_call_id, new.name)
        for old_block, new_block in zip(old.content, new.content, strict=True):
            if old_block == new_block:
                continue
            if isinstance(old_block, ToolCall):
                assert isinstance(new_block, ToolCall)
                assert_arguments_trimmed(old_block, new_block)
                continue
            assert isinstance(old_block, TextBlock)
            assert isinstance(new_block, TextBlock)
            assert_marker_honest(old_block.text, new_block.text)
    return result


def assert_arguments_trimmed(old: ToolCall, new: ToolCall) -> None:
    """Same id and name; the arguments parse to the same keys, long strings cut with a marker."""
    assert (old.id, old.name) == (new.id, new.name)
    assert_same_shape(json.loads(old.arguments), json.loads(new.arguments))


def assert_same_shape(old: object, new: object) -> None:
    if isinstance(old, dict):
        assert isinstance(new, dict)
        assert list(old) == list(new)
        for key in old:
            assert_same_shape(old[key], new[key])
    elif isinstance(old, list):
        assert isinstance(new, list)
        assert len(old) == len(new)
        for a, b in zip(old, new, strict=True):
            assert_same_shape(a, b)
    elif isinstance(old, str) and old != new:
        assert isinstance(new, str)
        assert_marker_honest(old, new)
    else:
        assert old == new


@pytest.mark.parametrize(
    ("text", "head", "tail", "expected"),
    [
        pytest.param("abcdefghij", 2, 3, "ab\n[5 characters trimmed]\nhij", id="plain"),
        pytest.param("abcdefghij", 0, 3, "\n[7 characters trimmed]\nhij", id="no-head"),
        pytest.param("abcdefghij", 2, 0, "ab\n[8 characters trimmed]\n", id="no-tail"),
        pytest.param("abcde", 2, 3, "abcde", id="short-enough-unchanged"),
        pytest.param(
            "ab\r\ncdefgh", 3, 2, "ab\n[6 characters trimmed]\ngh", id="crlf-at-head-cut-goes-whole"
        ),
        pytest.param(
            "abcdef\r\ngh", 2, 3, "ab\n[6 characters trimmed]\ngh", id="crlf-at-tail-cut-goes-whole"
        ),
        pytest.param(
            "a\ud83d\ude00bcdefgh",
            2,
            2,
            "a\n[7 characters trimmed]\ngh",
            id="surrogate-pair-at-head-cut-goes-whole",
        ),
        pytest.param(
            "abcdefg\ud83d\ude00h",
            2,
            2,
            "ab\n[7 characters trimmed]\nh",
            id="surrogate-pair-at-tail-cut-goes-whole",
        ),
        pytest.param(
            "😀é漢字😀😀", 1, 1, "😀\n[4 characters trimmed]\n😀", id="code-points-never-cut"
        ),
    ],
)
def test_trim_text_keeps_head_and_tail_around_an_exact_marker(
    text: str, head: int, tail: int, expected: str
) -> None:
    assert trim_text(text, head=head, tail=tail) == expected


PIECES = st.sampled_from(["a", "b", "\r", "\n", "\r\n", "\ud83d\ude00", "é", "漢"])


@given(
    text=st.lists(PIECES, max_size=60).map("".join),
    head=st.integers(0, 20),
    tail=st.integers(0, 20),
)
def test_trim_text_never_splits_a_pair_and_counts_exactly(text: str, head: int, tail: int) -> None:
    result = trim_text(text, head=head, tail=tail)
    if len(text) <= head + tail:
        assert result == text
        return
    assert_marker_honest(text, result)
    kept_head, kept_tail = MARKER.split(result)[0], MARKER.split(result)[2]
    assert head - 1 <= len(kept_head) <= head
    assert tail - 1 <= len(kept_tail) <= tail
    assert not (kept_head.endswith("\r") and text[len(kept_head)] == "\n")
    assert not (kept_tail.startswith("\n") and text[-len(kept_tail) - 1] == "\r")
    assert not kept_head.endswith("\ud83d")
    assert not kept_tail.startswith("\ude00")


def test_is_a_strategy_named_light_trim() -> None:
    strategy = LightTrim()
    assert isinstance(strategy, Strategy)
    assert strategy.name == "light_trim"
    assert (strategy.keep_recent, strategy.text_threshold) == (4, 4000)
    assert (strategy.assistant_threshold, strategy.assistant_head) == (200, 100)
    assert strategy.trim_assistant_to_fit is False
    assert (strategy.preserve_head, strategy.preserve_tail) == (1200, 800)


def mixed_view() -> list[Message]:
    args = json.dumps({"path": "a.py", "content": LONG})
    return [
        Message.system(LONG),  # 0 leading block
        Message.user(LONG),  # 1 older user
        Message("assistant", (TextBlock(LONG), ToolCall("c1", "write", args))),  # 2 text only
        Message.tool("c1", LONG, name="write"),  # 3 tool result
        Message("assistant", (ThinkingBlock(LONG), TextBlock("short"))),  # 4 nothing long
        Message.user(LONG),  # 5 newest user
        Message.assistant(LONG),  # 6 after it
        Message.assistant(tool_calls=[ToolCall("c2", "ls")]),  # 7 kept (recent)
        Message.tool("c2", LONG, name="ls"),  # 8 kept (recent)
    ]


async def test_trims_older_text_and_results_but_not_the_protected_ones(
    counter: FixedTokenCounter,
) -> None:
    """By ``text_threshold`` alone (old assistant messages further: see below)."""
    view = mixed_view()
    result = await run(LightTrim(keep_recent=2, assistant_threshold=None, **SMALL), view, counter)
    assert trimmed(result.messages) == [2, 3, 6]
    assert result.messages[2].tool_calls == view[2].tool_calls
    assert json.loads(result.messages[2].tool_calls[0].arguments)["content"] == LONG
    assert result.messages[4] is view[4]
    for index in (0, 1, 5, 7, 8):
        assert result.messages[index] is view[index]
    assert [result.messages[i].metadata[TRIMMED_KEY] for i in (2, 3, 6)] == [1, 1, 1]


async def test_never_trims_a_user_message_not_even_the_task_statement(
    counter: FixedTokenCounter,
) -> None:
    """A long first request keeps the constraint in its middle once a second request arrives."""
    constraint = "You DON'T have to modify the testing logic. "
    task = "Fix the parser. " + "context " * 400 + constraint + "x" * 3000
    view = [
        Message.system("s"),
        Message.user(task),
        Message.assistant(LONG),
        Message.user(LONG),
        Message.assistant(LONG),
        Message.user("and now the docs"),
    ]
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter, threshold=0)
    assert trimmed(result.messages) == [2, 4]
    assert [m for m in result.messages if m.role == "user"] == [view[1], view[3], view[5]]


@pytest.mark.parametrize(
    ("keep_recent", "expected"),
    [
        pytest.param(0, [2, 3, 6, 8], id="zero-trims-up-to-the-end"),
        pytest.param(2, [2, 3, 6], id="two-keeps-the-last-group"),
        pytest.param(4, [2, 3], id="four-keeps-from-the-newest-user-on"),
        pytest.param(20, [], id="more-than-the-view-trims-nothing"),
    ],
)
async def test_keep_recent_leaves_the_newest_messages_alone(
    counter: FixedTokenCounter, keep_recent: int, expected: list[int]
) -> None:
    view = mixed_view()
    result = await run(LightTrim(keep_recent=keep_recent, **SMALL), view, counter)
    assert trimmed(result.messages) == expected


async def test_pending_calls_are_untouched(counter: FixedTokenCounter) -> None:
    """Calls still waiting at the end (one of two answered) stay exactly as they were."""
    view = [
        Message.system("s"),
        Message.user(LONG),
        Message.assistant(LONG),
        Message.user(LONG),
        Message("assistant", (TextBlock(LONG), ToolCall("p1", "ls"), ToolCall("p2", "cat"))),
        Message.tool("p1", LONG, name="ls"),
    ]
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter)
    assert trimmed(result.messages) == [2]
    assert result.messages[3:] == tuple(view[3:])


async def test_checkpoints_are_untouched(counter: FixedTokenCounter) -> None:
    summary = ContextSummary(summary=LONG, tokens_before=5000)
    view = [Message.system("s"), summary, Message.assistant(LONG), Message.user("next")]
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter)
    assert result.messages[1] is summary
    assert trimmed(result.messages) == [2]


async def test_trimmed_key_counts_the_blocks_trimmed(counter: FixedTokenCounter) -> None:
    two_long = Message("assistant", (TextBlock(LONG), TextBlock("short"), TextBlock(LONG)))
    earlier = Message.assistant(LONG, usage=None)
    earlier = attrs.evolve(earlier, metadata={TRIMMED_KEY: 1, "mine": "x"})
    view = [Message.system("s"), Message.user("go"), two_long, earlier, Message.user("next")]
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter)
    assert result.messages[2].metadata == {TRIMMED_KEY: 2}
    assert result.messages[2].content[1] == TextBlock("short")
    assert result.messages[3].metadata == {TRIMMED_KEY: 2, "mine": "x"}


@pytest.mark.parametrize(
    ("length", "expected"),
    [
        pytest.param(200, 0, id="at-threshold-kept"),
        pytest.param(201, 1, id="one-over-threshold-trimmed"),
    ],
)
async def test_only_blocks_over_the_threshold_are_trimmed(
    counter: FixedTokenCounter, length: int, expected: int
) -> None:
    view = [Message.system("s"), Message.user("go"), Message.assistant("y" * length)]
    view.append(Message.user("next"))
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter)
    assert len(trimmed(result.messages)) == expected


async def test_default_settings_trim_to_head_marker_tail(counter: FixedTokenCounter) -> None:
    text = "".join(chr(ord("a") + n % 26) for n in range(10_000))
    view = [Message.system("s"), Message.user("go"), Message.tool("t", text)]
    view = [*view[:2], Message.assistant(tool_calls=[ToolCall("t", "cat")]), view[2]]
    view += [Message.user(f"next {n}") for n in range(4)]
    result = await run(LightTrim(), view, counter)
    assert result.messages[3].text == text[:1200] + "\n[8000 characters trimmed]\n" + text[-800:]


def three_old_results() -> list[Message]:
    view = [Message.system("s"), Message.user("go")]
    for n in range(3):
        view += [
            Message.assistant(tool_calls=[ToolCall(f"c{n}", "cat")]),
            Message.tool(f"c{n}", str(n) * 1000, name="cat"),
        ]
    return [*view, Message.user("next")]


async def test_with_no_trimming_step_stops_as_soon_as_the_view_fits(
    counter: FixedTokenCounter,
) -> None:
    view = three_old_results()
    strategy = LightTrim(keep_recent=0, trimming_step=0.0, **SMALL)
    one_trim = counter.count_message(view[3]) - counter.count_message(strategy.trim(view[3]))
    threshold = measure_with(counter)(view) - one_trim
    result = await run(strategy, view, counter, threshold)
    assert trimmed(result.messages) == [3]
    assert result.tokens_saved == one_trim


async def test_trimming_step_leaves_head_room_of_whole_steps(counter: FixedTokenCounter) -> None:
    """With the default step it trims past the excess, so the next calls still fit."""
    view = three_old_results()
    strategy = LightTrim(keep_recent=0, **SMALL)
    one_trim = counter.count_message(view[3]) - counter.count_message(strategy.trim(view[3]))
    threshold = measure_with(counter)(view) - one_trim
    result = await run(strategy, view, counter, threshold)
    assert len(trimmed(result.messages)) >= 2
    goal = one_trim + int(0.1 * threshold)
    assert result.tokens_saved >= goal


async def test_below_threshold_nothing_happens(counter: FixedTokenCounter) -> None:
    view = three_old_results()
    result = await run(LightTrim(keep_recent=0, **SMALL), view, counter, threshold=10**6)
    assert not result.applied
    assert result.messages == tuple(view)


async def test_second_run_changes_nothing(counter: FixedTokenCounter) -> None:
    strategy = LightTrim(keep_recent=0, **SMALL)
    first = await run(strategy, three_old_results(), counter)
    assert len(first.replaced) == 3
    second = await run(strategy, first.messages, counter)
    assert not second.applied
    assert second.messages == first.messages


async def test_same_input_gives_equal_views(counter: FixedTokenCounter) -> None:
    strategy = LightTrim(keep_recent=1, **SMALL)
    one = await run(strategy, mixed_view(), counter)
    two = await run(strategy, mixed_view(), counter)
    assert one.messages == two.messages


def test_candidates_are_listed_oldest_first() -> None:
    assert LightTrim(keep_recent=2, **SMALL).candidates(mixed_view()) == (2, 3, 6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param(
            {"text_threshold": 100, "preserve_head": 60, "preserve_tail": 40},
            "text_threshold",
            id="head-plus-tail-equal-threshold",
        ),
        pytest.param(
            {"text_threshold": 100, "preserve_head": 30, "preserve_tail": 30},
            "marker",
            id="no-room-for-the-marker",
        ),
        pytest.param({"keep_recent": -1}, "keep_recent", id="negative-keep-recent"),
        pytest.param({"preserve_head": -1}, "preserve_head", id="negative-head"),
        pytest.param({"text_threshold": 4000.5}, "text_threshold", id="float-threshold"),
        pytest.param({"trimming_step": 1.0}, "trimming_step", id="step-of-the-whole-threshold"),
        pytest.param({"trimming_step": -0.1}, "trimming_step", id="negative-step"),
        pytest.param({"trim_assistant_to_fit": "yes"}, "True or False", id="flag-not-a-bool"),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        LightTrim(**kwargs)


def test_tightest_valid_configuration_is_idempotent() -> None:
    """head + tail + the largest marker fit exactly: a trimmed block is never trimmed again."""
    strategy = LightTrim(text_threshold=142, preserve_head=60, preserve_tail=40)
    once = strategy.trim(Message.assistant("z" * 10_000))
    assert len(once.text) <= 142
    assert strategy.trim(once) is once


@pytest.mark.parametrize(
    "strategy",
    [
        LightTrim(),
        LightTrim(keep_recent=0, text_threshold=1000, preserve_head=300, preserve_tail=200),
        LightTrim(trim_assistant_to_fit=True),
    ],
    ids=["defaults", "aggressive", "old-assistant-messages"],
)
async def test_corpus_views_keep_invariants_and_are_stable(
    corpus_path: Path, counter: FixedTokenCounter, strategy: LightTrim
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    first = await run(strategy, transcript, counter, threshold=0)
    shape = analyze(transcript)
    eligible = range(
        shape.lead_end, min(len(transcript) - strategy.keep_recent, shape.pending_start)
    )
    old = min(shape.tail_start, shape.pending_start) if strategy.trim_assistant_to_fit else 0
    assert strategy.assistant_threshold is not None
    further = strategy.assistant_threshold

    def too_long(index: int, block: object) -> bool:
        if index < old and transcript[index].role == "assistant":
            if isinstance(block, ToolCall):
                return trim_arguments(block.arguments, limit=further, head=0) != block.arguments
            limit = min(further, strategy.text_threshold)
        else:
            limit = strategy.text_threshold
        return isinstance(block, TextBlock) and len(block.text) > limit

    long_blocks = sum(
        1
        for i in eligible
        if transcript[i].role != "user"
        for b in transcript[i].content
        if too_long(i, b)
    )
    assert sum(m.metadata.get(TRIMMED_KEY, 0) for m in first.messages) == long_blocks
    second = await run(strategy, first.messages, counter, threshold=0)
    assert not second.applied
    assert second.messages == first.messages


# -- old assistant messages: prose and long tool-call argument strings ---------------------------

FILE = "def f():\n    return 1\n" * 200  # about 4,600 characters of file contents
PROSE = "I will now look at the parser and explain my plan in detail. " * 40


def writing_session() -> list[Message]:
    """Three finished steps (two wrote whole files), then a step of the current turn."""
    write = json.dumps({"path": "src/a.py", "content": FILE, "mode": 420, "lines": [FILE, "x"]})
    return [
        Message.system("You fix bugs."),
        Message.user("Fix the parser. " + "context " * 300),
        Message(
            "assistant",
            (
                ThinkingBlock(PROSE, signature="sig"),
                TextBlock(PROSE),
                ToolCall("w0", "write", write),
            ),
        ),
        Message.tool("w0", "ok", name="write"),
        Message.assistant(PROSE, tool_calls=[ToolCall("w1", "write", write)]),
        Message.tool("w1", "ok", name="write"),
        Message.assistant(PROSE, tool_calls=[ToolCall("b1", "bash", '{"command": "pytest -q"}')]),
        Message.tool("b1", "1 passed", name="bash"),
        Message.user("Now the docs. " + PROSE),
        Message.assistant(PROSE, tool_calls=[ToolCall("w2", "write", write)]),  # the tail
        Message.tool("w2", "ok", name="write"),
    ]


def assert_head_kept(original: str, trimmed_text: str) -> None:
    """Cut by the defaults' ``assistant_threshold``: the head and the marker, nothing else."""
    defaults = LightTrim()
    assert defaults.assistant_threshold is not None
    assert trimmed_text.startswith(original[: defaults.assistant_head])
    assert len(trimmed_text) <= defaults.assistant_threshold
    assert_marker_honest(original, trimmed_text)


async def test_old_assistant_prose_and_argument_strings_keep_their_head(
    counter: FixedTokenCounter,
) -> None:
    view = writing_session()
    result = await run(LightTrim(keep_recent=0, trim_assistant_to_fit=True), view, counter)
    assert trimmed(result.messages) == [2, 4, 6]
    prose, write = result.messages[4].content
    assert_head_kept(PROSE, prose.text)
    assert isinstance(write, ToolCall)
    assert (write.id, write.name) == ("w1", "write")
    arguments = json.loads(write.arguments)
    assert list(arguments) == ["path", "content", "mode", "lines"]
    assert arguments["path"] == "src/a.py"
    assert arguments["mode"] == 420
    assert_head_kept(FILE, arguments["content"])
    assert arguments["lines"] == [arguments["content"], "x"]
    assert result.messages[4].metadata[TRIMMED_KEY] == 2  # the prose and the call
    # A short command line is kept as written.
    assert result.messages[6].tool_calls == view[6].tool_calls


async def test_by_default_old_prose_over_200_characters_keeps_its_first_100(
    counter: FixedTokenCounter,
) -> None:
    """A 300-character plan or command before the tail is cut; a 150-character one is kept.

    The defaults are 200 and 100 (they were 400 and 200: the cost-aware engine's
    Anthropic dollars at 32k went from $7.21 to $6.96, docs/decisions.md).
    """
    plan = "I will open the parser, then run the failing test to see the traceback. " * 4
    command = json.dumps({"command": "python -c 'import parser; print(parser.parse(1))' " * 5})
    short = json.dumps({"command": "grep -rn 'def parse' src/ | head -n 20 " * 3})
    assert 200 < len(plan) < 400
    assert 200 < len(json.loads(command)["command"]) < 400
    assert 100 < len(json.loads(short)["command"]) <= 200
    view = [
        Message.system("You fix bugs."),
        Message.user("Fix the parser."),
        Message.assistant(plan, tool_calls=[ToolCall("b1", "bash", command)]),
        Message.tool("b1", "ok", name="bash"),
        Message.assistant(tool_calls=[ToolCall("b2", "bash", short)]),
        Message.tool("b2", "ok", name="bash"),
        Message.assistant(tool_calls=[ToolCall("b3", "bash", '{"command": "pytest -q"}')]),
        Message.tool("b3", "1 passed", name="bash"),
    ]
    result = await run(LightTrim(keep_recent=0, trim_assistant_to_fit=True), view, counter)
    prose, call = result.messages[2].content
    assert isinstance(prose, TextBlock)
    assert isinstance(call, ToolCall)
    assert prose.text == trim_text(plan, head=100, tail=0)
    cut = json.loads(call.arguments)["command"]
    assert cut == trim_text(json.loads(command)["command"], head=100, tail=0)
    assert result.messages[4] is view[4]  # a command of 200 characters or fewer stays whole


async def test_a_message_with_reasoning_keeps_its_thinking_and_its_calls(
    counter: FixedTokenCounter,
) -> None:
    """Only its prose is trimmed: the reasoning stays beside the calls it was written with."""
    view = writing_session()
    result = await run(LightTrim(keep_recent=0, trim_assistant_to_fit=True), view, counter)
    thinking, prose, write = result.messages[2].content
    assert thinking is view[2].content[0]
    assert_head_kept(PROSE, prose.text)
    assert write is view[2].content[2]
    assert result.messages[2].metadata[TRIMMED_KEY] == 1


async def test_never_trims_user_messages_or_the_protected_tail_further(
    counter: FixedTokenCounter,
) -> None:
    view = writing_session()
    result = await run(LightTrim(keep_recent=0, trim_assistant_to_fit=True), view, counter)
    assert analyze(view).tail_start == 9
    for index in (0, 1, 3, 5, 7, 8, 9, 10):
        assert result.messages[index] is view[index]


async def test_trimming_old_assistant_messages_again_changes_nothing(
    counter: FixedTokenCounter,
) -> None:
    strategy = LightTrim(keep_recent=0, trim_assistant_to_fit=True)
    view = writing_session()
    first = await run(strategy, view, counter)
    second = await run(strategy, first.messages, counter)
    assert not second.applied
    assert all(a is b for a, b in zip(first.messages, second.messages, strict=True))
    # The same transcript gives the same objects on the next call: the prompt prefix holds.
    again = await run(strategy, view, counter)
    assert all(a is b for a, b in zip(first.messages, again.messages, strict=True))


async def test_assistant_threshold_none_leaves_prose_and_arguments_alone(
    counter: FixedTokenCounter,
) -> None:
    result = await run(
        LightTrim(keep_recent=0, assistant_threshold=None), writing_session(), counter
    )
    assert not result.applied  # no text block over text_threshold, arguments never touched


async def test_a_message_in_the_tail_then_out_of_it_is_trimmed_further(
    counter: FixedTokenCounter,
) -> None:
    """The same message object, trimmed while protected and again once older."""
    strategy = LightTrim(
        keep_recent=0,
        text_threshold=2000,
        preserve_head=600,
        preserve_tail=400,
        trim_assistant_to_fit=True,
    )
    view = writing_session()
    first = await run(strategy, view, counter)
    assert first.messages[9].tool_calls == view[9].tool_calls
    assert TRIMMED_KEY in first.messages[9].metadata  # its prose, by text_threshold
    grown = [*view, Message.user("And the changelog."), Message.assistant("Done.")]
    second = await run(strategy, grown, counter)
    content = json.loads(second.messages[9].tool_calls[0].arguments)["content"]
    assert_head_kept(FILE, content)
    assert_head_kept(PROSE, second.messages[9].content[0].text)


@pytest.mark.parametrize(
    "arguments",
    ['{"command": "ls -la"}', "not json " + "x" * 2000, '["' + "y" * 900 + '"]', "{}"],
    ids=["short", "not-json", "under-the-limit", "empty"],
)
def test_trim_arguments_keeps_what_it_may_not_cut(arguments: str) -> None:
    assert trim_arguments(arguments, limit=1000, head=400) is arguments


def test_trim_arguments_gives_json_with_the_same_keys() -> None:
    value = {"a": {"b": ["z" * 5000, 1, None, True]}, "c": "é" * 3000}
    out = json.loads(trim_arguments(json.dumps(value), limit=1000, head=10))
    assert list(out) == ["a", "c"]
    assert out["a"]["b"][1:] == [1, None, True]
    assert_marker_honest("z" * 5000, out["a"]["b"][0])
    assert_marker_honest("é" * 3000, out["c"])


async def test_old_arguments_come_back_whole_from_the_archive() -> None:
    """Through the engine: the trimmed call names its original, and recall returns it."""
    counter = FixedTokenCounter()
    view = writing_session()
    engine = ContextEngine(
        12_000,
        [LightTrim(keep_recent=0, trim_assistant_to_fit=True), HardTruncate()],
        token_counter=counter,
        reserve_tokens=1_000,
        archive=MemoryArchive(),
        session_id="s1",
    )
    assert engine.estimate(view).tokens > engine.threshold
    projection = await engine.project(view)
    assert projection.usage.tokens <= engine.threshold
    assert projection.event is not None
    assert [s.name for s in projection.event.steps if s.applied] == ["light_trim"]
    assert check_view(view, projection.messages) == []
    shortened = projection.messages[4]
    assert TRIMMED_KEY in shortened.metadata
    (reference,) = find_references(shortened.text)
    (original,) = await engine.recall(reference)
    assert original == view[4]
    assert original.tool_calls[0].arguments == view[4].tool_calls[0].arguments


def test_assistant_head_must_fit_under_the_assistant_threshold() -> None:
    with pytest.raises(ConfigurationError, match="assistant_head"):
        LightTrim(assistant_threshold=300, assistant_head=290)
