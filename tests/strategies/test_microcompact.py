"""ToolResultMicrocompact: old tool results give way to a placeholder, oldest first."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from context_engine import Message, ToolCall
from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.messages import ImageBlock, TextBlock
from context_engine.strategies._placeholder import MAX_PLACEHOLDER_CHARS
from context_engine.strategies.base import Budget, Strategy, StrategyResult
from context_engine.strategies.microcompact import FAILURE_GRACE, ToolResultMicrocompact
from context_engine.structure import CLEARED_KEY, analyze
from context_engine.summarize.outcome import ENDED_KEY
from context_engine.testing import FixedTokenCounter
from tests.conftest import load_corpus_dicts

UTC = dt.timezone.utc
NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def step(call_id: str, tool: str, args: str, text: str) -> list[Message]:
    """One assistant call and its result."""
    return [
        Message.assistant(tool_calls=[ToolCall(call_id, tool, args)]),
        Message.tool(call_id, text, name=tool),
    ]


def session(
    calls: Sequence[tuple[str, str]], *, size: int = 800, closing_user: bool = True
) -> list[Message]:
    """System, user, one step per (tool, arguments), then a new user message."""
    messages = [Message.system("You are a coding agent."), Message.user("Fix the bug.")]
    for number, (tool, args) in enumerate(calls):
        messages += step(f"call_{number}", tool, args, f"output {number} " + "x" * size)
    if closing_user:
        messages.append(Message.user("Carry on."))
    return messages


def reads(count: int) -> list[tuple[str, str]]:
    """``count`` distinct read_file calls."""
    return [("read_file", f'{{"path": "f{n}.py"}}') for n in range(count)]


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


def cleared(view: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(view) if m.metadata.get(CLEARED_KEY)]


def result_indices(view: Sequence[Message]) -> list[int]:
    return [i for i, m in enumerate(view) if m.role == "tool"]


async def run(
    strategy: ToolResultMicrocompact,
    view: Sequence[Message],
    counter: FixedTokenCounter,
    threshold: int = 0,
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
    return result


def test_is_a_strategy_named_tool_result_microcompact() -> None:
    strategy = ToolResultMicrocompact()
    assert isinstance(strategy, Strategy)
    assert strategy.name == "tool_result_microcompact"


async def test_keeps_the_newest_results_and_clears_the_rest(counter: FixedTokenCounter) -> None:
    view = session(reads(8))
    result = await run(ToolResultMicrocompact(keep_recent=5), view, counter)
    results = result_indices(view)
    assert cleared(result.messages) == results[:3]
    for index in results[3:]:
        assert result.messages[index] is view[index]


@pytest.mark.parametrize(
    ("calls", "keep_recent", "expected_cleared"),
    [
        pytest.param(
            [
                ("read_file", '{"path": "a"}'),
                ("read_file", '{"path": "b"}'),
                ("read_file", '{"path": "a"}'),
            ],
            2,
            [0],
            id="repeated-call-supersedes-its-older-result",
        ),
        pytest.param(
            [
                ("read_file", '{"path": "a"}'),
                ("read_file", '{"path": "a"}'),
                ("read_file", '{"path": "a"}'),
                ("ls", "{}"),
            ],
            2,
            [0, 1],
            id="every-superseded-duplicate-cleared",
        ),
        pytest.param(
            [
                ("read_file", '{"path": "a", "lines": 5}'),
                ("ls", "{}"),
                ("read_file", '{ "lines":5,"path":"a" }'),
            ],
            2,
            [0],
            id="same-arguments-spelled-differently-are-one-call",
        ),
        pytest.param(
            [("read_file", '{"path": "a"}'), ("cat", '{"path": "a"}')],
            2,
            [],
            id="same-arguments-other-tool-is-another-call",
        ),
        pytest.param(
            [("run", "not json"), ("run", "not json"), ("run", "not  json")],
            2,
            [0],
            id="unparseable-arguments-compared-as-text",
        ),
        pytest.param(
            [("read_file", '{"path": "a"}'), ("ls", "{}"), ("grep", '{"q": "x"}')],
            0,
            [0, 1, 2],
            id="keep-recent-zero-clears-all",
        ),
        pytest.param(
            [("ls", "{}"), ("ls", "{}"), ("ls", "{}"), ("grep", "{}"), ("cat", "{}")],
            5,
            [0, 1],
            id="fewer-distinct-calls-than-keep-recent",
        ),
    ],
)
async def test_keep_recent_counts_distinct_calls(
    counter: FixedTokenCounter,
    calls: list[tuple[str, str]],
    keep_recent: int,
    expected_cleared: list[int],
) -> None:
    view = session(calls)
    result = await run(ToolResultMicrocompact(keep_recent=keep_recent), view, counter)
    results = result_indices(view)
    assert cleared(result.messages) == [results[n] for n in expected_cleared]


async def test_reused_call_ids_resolve_to_the_nearest_earlier_call(
    counter: FixedTokenCounter,
) -> None:
    """Some providers reuse ids like ``call_0``; each result answers the call just before it."""
    view = [Message.system("s"), Message.user("go")]
    view += step("call_0", "ls", "{}", "x" * 800)
    view += step("call_0", "grep", "{}", "y" * 800)
    view += step("call_0", "ls", "{}", "z" * 800)
    view.append(Message.user("more"))
    result = await run(ToolResultMicrocompact(keep_recent=2), view, counter)
    assert cleared(result.messages) == [3]


async def test_classifier_limits_which_results_may_go(counter: FixedTokenCounter) -> None:
    calls = [("read_file", '{"path": "a"}'), ("bash", '{"cmd": "ls"}')] * 3
    calls = [(tool, args.replace("}", f', "n": {n}}}')) for n, (tool, args) in enumerate(calls)]
    view = session(calls)
    seen: list[tuple[str, str | None]] = []

    def only_reads(call: ToolCall, message: Message) -> bool:
        seen.append((call.id, message.tool_call_id))
        return call.name == "read_file"

    result = await run(ToolResultMicrocompact(keep_recent=0, classifier=only_reads), view, counter)
    assert [result.messages[i].name for i in cleared(result.messages)] == ["read_file"] * 3
    assert all(call_id == answered for call_id, answered in seen)
    assert len(seen) == 6


async def test_classifier_keeps_results_whose_call_is_not_in_the_view(
    counter: FixedTokenCounter,
) -> None:
    view = [Message.system("s"), Message.user("go"), Message.tool("gone", "x" * 800, name="ls")]
    view += [Message.user("next")]
    accept_all = ToolResultMicrocompact(keep_recent=0, classifier=lambda call, msg: True)
    assert not (await run(accept_all, view, counter)).applied
    assert (await run(ToolResultMicrocompact(keep_recent=0), view, counter)).applied


@pytest.mark.parametrize(
    ("min_result_tokens", "expected"),
    [
        pytest.param(0, 2, id="zero-clears-even-small-results-that-save-something"),
        pytest.param(64, 1, id="default-keeps-the-small-one"),
        pytest.param(10_000, 0, id="nothing-large-enough"),
    ],
)
async def test_min_result_tokens_keeps_small_results(
    counter: FixedTokenCounter, min_result_tokens: int, expected: int
) -> None:
    view = [Message.system("s"), Message.user("go")]
    view += step("a", "ls", "{}", "x" * 160)  # 40 + framing: below 64, above the placeholder
    view += step("b", "cat", "{}", "y" * 2000)
    view.append(Message.user("next"))
    strategy = ToolResultMicrocompact(keep_recent=0, min_result_tokens=min_result_tokens)
    assert strategy.min_result_tokens == min_result_tokens
    result = await run(strategy, view, counter)
    assert len(cleared(result.messages)) == expected


async def test_a_result_smaller_than_its_placeholder_is_kept(counter: FixedTokenCounter) -> None:
    view = [Message.system("s"), Message.user("go"), *step("a", "ls", "{}", "ok")]
    view.append(Message.user("next"))
    result = await run(ToolResultMicrocompact(keep_recent=0, min_result_tokens=0), view, counter)
    assert not result.applied


async def test_default_min_result_tokens_is_64() -> None:
    assert ToolResultMicrocompact().min_result_tokens == 64


async def test_cleared_result_keeps_role_id_name_and_drops_images(
    counter: FixedTokenCounter,
) -> None:
    stamp = dt.datetime(2025, 1, 1, tzinfo=UTC)
    original = Message(
        "tool",
        (TextBlock("x" * 800), ImageBlock(url="https://example.invalid/a.png")),
        tool_call_id="a",
        name="screenshot",
        metadata={"mine": 1},
        timestamp=stamp,
    )
    view = [
        Message.system("s"),
        Message.user("go"),
        Message.assistant(tool_calls=[ToolCall("a", "screenshot")]),
        original,
        Message.user("next"),
    ]
    result = await run(ToolResultMicrocompact(keep_recent=0), view, counter)
    new = result.messages[3]
    assert (new.role, new.tool_call_id, new.name) == ("tool", "a", "screenshot")
    assert new.timestamp == stamp
    assert new.content == (
        TextBlock(
            "[Output of `screenshot` cleared to save context space (1 line of output). "
            "Run the tool again if you need it.]"
        ),
    )
    ended = {"exit_status": None, "failed": False, "key_line": None}  # how the original ended
    assert new.metadata == {"mine": 1, CLEARED_KEY: True, ENDED_KEY: ended}
    assert result.replaced == (original,)


async def test_custom_placeholder_text(counter: FixedTokenCounter) -> None:
    view = session(reads(2))
    result = await run(ToolResultMicrocompact(keep_recent=1, placeholder="[gone]"), view, counter)
    assert [result.messages[i].text for i in cleared(result.messages)] == ["[gone]"]


async def test_placeholder_fn_gets_the_call_and_the_result(counter: FixedTokenCounter) -> None:
    view = session(reads(3))
    view.insert(2, Message.tool("lost", "z" * 800, name="ls"))  # its call is not in the view
    calls: list[tuple[ToolCall | None, Message]] = []

    def describe(call: ToolCall | None, message: Message) -> str:
        calls.append((call, message))
        what = f"{call.name} {call.arguments}" if call else message.tool_call_id
        return f"[output of {what} cleared]"

    strategy = ToolResultMicrocompact(keep_recent=1, placeholder_fn=describe)
    result = await run(strategy, view, counter)
    assert [result.messages[i].text for i in cleared(result.messages)] == [
        "[output of lost cleared]",
        '[output of read_file {"path": "f0.py"} cleared]',
        '[output of read_file {"path": "f1.py"} cleared]',
    ]
    assert [message for _, message in calls] == list(result.replaced)
    assert calls[0][0] is None


@pytest.mark.parametrize("bad", ["", "   ", None], ids=["empty", "blank", "not-a-str"])
async def test_placeholder_fn_must_return_text(counter: FixedTokenCounter, bad: Any) -> None:
    view = session(reads(2))
    strategy = ToolResultMicrocompact(keep_recent=1, placeholder_fn=lambda call, msg: bad)
    with pytest.raises(ConfigurationError, match="placeholder_fn"):
        await strategy.apply(view, view, budget_for(view, counter))


def stamped(view: list[Message], stamp: dt.datetime | None) -> list[Message]:
    """``view`` with ``stamp`` on its last assistant message."""
    index = max(i for i, m in enumerate(view) if m.role == "assistant")
    return [*view[:index], attrs.evolve(view[index], timestamp=stamp), *view[index + 1 :]]


@pytest.mark.parametrize(
    ("stamp", "expected_cleared"),
    [
        pytest.param(NOW - dt.timedelta(minutes=1), 0, id="warm-cache-left-alone"),
        pytest.param(NOW - dt.timedelta(minutes=5), 0, id="exactly-at-threshold-still-warm"),
        pytest.param(NOW - dt.timedelta(minutes=10), 2, id="cold-cache-rewritten"),
        pytest.param(None, 2, id="no-timestamp-counts-as-cold"),
        pytest.param(dt.datetime(2025, 6, 1, 11, 58), 0, id="naive-timestamp-read-as-utc"),
        pytest.param(
            dt.datetime(2025, 6, 1, 13, 50, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            2,
            id="other-timezone-compared-correctly",
        ),
    ],
)
async def test_idle_threshold_waits_for_a_cold_prompt_cache(
    counter: FixedTokenCounter, stamp: dt.datetime | None, expected_cleared: int
) -> None:
    view = stamped(session(reads(3)), stamp)
    strategy = ToolResultMicrocompact(
        keep_recent=1, idle_threshold=dt.timedelta(minutes=5), clock=lambda: NOW
    )
    result = await run(strategy, view, counter)
    assert len(cleared(result.messages)) == expected_cleared


async def test_idle_threshold_looks_at_the_newest_assistant_message_only(
    counter: FixedTokenCounter,
) -> None:
    view = session(reads(3))
    view[2] = attrs.evolve(view[2], timestamp=NOW - dt.timedelta(hours=1))
    view = stamped(view, NOW)
    strategy = ToolResultMicrocompact(
        keep_recent=1, idle_threshold=dt.timedelta(minutes=5), clock=lambda: NOW
    )
    assert not (await run(strategy, view, counter)).applied


async def test_default_clock_is_timezone_aware_utc() -> None:
    now = ToolResultMicrocompact().clock()
    assert now.utcoffset() == dt.timedelta(0)
    assert abs(dt.datetime.now(UTC) - now) < dt.timedelta(minutes=1)


async def test_protected_tail_is_never_cleared(counter: FixedTokenCounter) -> None:
    """The newest tool group of the current turn stays even with keep_recent=0."""
    view = session(reads(3), closing_user=False)
    result = await run(ToolResultMicrocompact(keep_recent=0), view, counter)
    results = result_indices(view)
    assert cleared(result.messages) == results[:2]
    assert result.messages[-1] is view[-1]


async def test_newest_parallel_group_stays_whole(counter: FixedTokenCounter) -> None:
    view = session(reads(1), closing_user=False)
    view.append(Message.assistant(tool_calls=[ToolCall("p1", "ls"), ToolCall("p2", "cat")]))
    view += [Message.tool("p1", "a" * 800, name="ls"), Message.tool("p2", "b" * 800, name="cat")]
    result = await run(ToolResultMicrocompact(keep_recent=0), view, counter)
    assert cleared(result.messages) == [3]


async def test_pending_calls_are_untouched(counter: FixedTokenCounter) -> None:
    """Calls still waiting at the end (one of two answered) stay exactly as they were."""
    view = session(reads(3), closing_user=False)
    view.append(Message.assistant(tool_calls=[ToolCall("p1", "ls"), ToolCall("p2", "approve")]))
    view.append(Message.tool("p1", "a" * 800, name="ls"))
    result = await run(ToolResultMicrocompact(keep_recent=0), view, counter)
    assert result.messages[-2:] == tuple(view[-2:])
    assert result.messages[-1] is view[-1]
    assert cleared(result.messages) == result_indices(view)[:2]


async def test_already_cleared_results_are_left_alone(counter: FixedTokenCounter) -> None:
    view = session(reads(3))
    view[3] = attrs.evolve(view[3], metadata={CLEARED_KEY: True})  # large but marked
    result = await run(ToolResultMicrocompact(keep_recent=0), view, counter)
    assert result.messages[3] is view[3]
    assert len(result.replaced) == 2


async def test_second_run_changes_nothing(counter: FixedTokenCounter) -> None:
    view = session(reads(6) + reads(2))
    strategy = ToolResultMicrocompact(keep_recent=2)
    first = await run(strategy, view, counter)
    assert len(first.replaced) == 6  # two superseded duplicates and four beyond keep_recent
    second = await run(strategy, first.messages, counter)
    assert not second.applied
    assert second.messages == first.messages


async def test_same_input_gives_equal_views(counter: FixedTokenCounter) -> None:
    strategy = ToolResultMicrocompact(keep_recent=2, placeholder_fn=lambda c, m: f"[{c and c.id}]")
    one = await run(strategy, session(reads(5)), counter)
    two = await run(strategy, session(reads(5)), counter)
    assert one.messages == two.messages


async def test_stops_as_soon_as_the_view_fits(counter: FixedTokenCounter) -> None:
    view = session(reads(6))
    measure = measure_with(counter)
    per_clear = counter.count_message(view[3]) - counter.count_message(
        ToolResultMicrocompact().clear(view[2].tool_calls[0], view[3])
    )
    threshold = measure(view) - 2 * per_clear  # two clears are exactly enough
    strategy = ToolResultMicrocompact(keep_recent=1, clearing_step=0)
    result = await run(strategy, view, counter, threshold)
    assert cleared(result.messages) == result_indices(view)[:2]
    assert result.tokens_saved == 2 * per_clear
    assert measure(result.messages) <= threshold


async def test_clears_everything_allowed_when_it_cannot_fit(counter: FixedTokenCounter) -> None:
    view = session(reads(4))
    result = await run(ToolResultMicrocompact(keep_recent=1), view, counter, threshold=1)
    assert len(result.replaced) == 3
    assert measure_with(counter)(result.messages) > 1


async def test_below_threshold_nothing_happens(counter: FixedTokenCounter) -> None:
    view = session(reads(8))
    result = await run(ToolResultMicrocompact(), view, counter, threshold=10**6)
    assert not result.applied
    assert result.messages == tuple(view)


async def test_candidates_list_clearable_results_oldest_first(counter: FixedTokenCounter) -> None:
    view = session(reads(4))
    strategy = ToolResultMicrocompact(keep_recent=2)
    assert strategy.candidates(view, counter) == tuple(result_indices(view)[:2])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        pytest.param({"keep_recent": -1}, "keep_recent", id="negative-keep-recent"),
        pytest.param({"keep_recent": True}, "keep_recent", id="bool-keep-recent"),
        pytest.param({"min_result_tokens": -5}, "min_result_tokens", id="negative-min-tokens"),
        pytest.param({"placeholder": ""}, "placeholder", id="empty-placeholder"),
        pytest.param({"classifier": "read_file"}, "classifier", id="classifier-not-callable"),
        pytest.param({"placeholder_fn": 3}, "placeholder_fn", id="placeholder-fn-not-callable"),
        pytest.param({"idle_threshold": 300}, "timedelta", id="idle-threshold-not-timedelta"),
        pytest.param({"clock": None}, "clock", id="clock-not-callable"),
        pytest.param({"idle_threshold": dt.timedelta(seconds=-1)}, "timedelta", id="negative-idle"),
    ],
)
def test_bad_configuration_fails_at_construction(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        ToolResultMicrocompact(**kwargs)


async def test_corpus_views_keep_invariants_and_are_stable(
    corpus_path: Path, counter: FixedTokenCounter
) -> None:
    transcript = from_openai(load_corpus_dicts(corpus_path))
    strategy = ToolResultMicrocompact()
    expected = len(strategy.candidates(transcript, counter))
    first = await run(strategy, transcript, counter, threshold=0)
    assert len(first.replaced) == expected
    assert len(cleared(first.messages)) == expected
    if len(result_indices(transcript)) > 2 * strategy.keep_recent:
        assert first.applied
    # What survives outside the protected tail comes from at most keep_recent distinct calls.
    shape = analyze(first.messages)
    call_of = {c.id: c for m in transcript for c in m.tool_calls}

    def key(m: Message) -> tuple[str, str]:
        call = call_of[m.tool_call_id or ""]
        return call.name, json.dumps(json.loads(call.arguments), sort_keys=True)

    survivors = {
        key(m)
        for i, m in enumerate(first.messages)
        if m.role == "tool"
        and i < shape.tail_start
        and not m.metadata.get(CLEARED_KEY)
        and counter.count_message(m) >= strategy.min_result_tokens
    }
    assert len(survivors) <= strategy.keep_recent
    second = await run(strategy, first.messages, counter, threshold=0)
    assert not second.applied
    assert second.messages == first.messages


async def test_clears_in_steps_so_the_cleared_boundary_stays_put_as_the_session_grows(
    counter: FixedTokenCounter,
) -> None:
    """A stable prefix is what a provider's prompt cache reuses between calls."""
    strategy = ToolResultMicrocompact(keep_recent=1)
    base = session(reads(30))
    threshold = measure_with(counter)(base) * 2 // 3
    boundaries = []
    for extra in range(8):
        view = session(reads(30 + extra))
        result = await run(strategy, view, counter, threshold)
        assert measure_with(counter)(result.messages) <= threshold
        boundaries.append(tuple(cleared(result.messages)))
    changes = sum(1 for a, b in itertools.pairwise(boundaries) if a != b)
    exact = ToolResultMicrocompact(keep_recent=1, clearing_step=0)
    exact_boundaries = [
        tuple(cleared((await run(exact, session(reads(30 + e)), counter, threshold)).messages))
        for e in range(8)
    ]
    exact_changes = sum(1 for a, b in itertools.pairwise(exact_boundaries) if a != b)
    assert exact_changes == 7  # exactly enough moves the boundary on every call
    assert changes <= exact_changes // 2


def test_clearing_step_must_be_a_share() -> None:
    with pytest.raises(ConfigurationError, match="clearing_step"):
        ToolResultMicrocompact(clearing_step=1.5)


NAME_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "app.py", line 3, in <module>\n'
    "    raise_query()\n"
    "NameError: name 'Query' is not defined\n"
)


@pytest.mark.parametrize(
    ("arguments", "text", "says"),
    [
        ('{"command": "cd /testbed && python app.py"}',
         "<returncode>1</returncode>\n<output>\n" + NAME_ERROR + "</output>",
         "`bash cd /testbed && python app.py` cleared to save context space (exit status 1, "
         "error; key line: NameError: name 'Query' is not defined)"),
        ('{"command": "python app.py"}', NAME_ERROR,
         "`bash python app.py` cleared to save context space (error; key line: NameError: "
         "name 'Query' is not defined)"),
        ('{"command": "pytest -x"}', "collected 3 items\n...\nFAILED tests/t.py::test_q\n",
         "`bash pytest -x` cleared to save context space (error; key line: FAILED tests/t.py"),
        ('{"command": "ls"}', "Exit code: 0\n" + "a.py\n" * 200,
         "`bash ls` cleared to save context space (exit status 0)"),
        ('{"path": "src/a.py"}', "x = 1\n" * 200,
         "`bash src/a.py` cleared to save context space (200 lines of output)"),
        ('{"command": "cat > f.py << EOF\\nprint(1)\\nEOF"}', "ok\n" * 200,
         "`bash cat > f.py << EOF …` cleared"),
    ],
    ids=["exit-status-and-exception", "traceback-without-status", "failed-test-line",
         "exit-zero", "path-argument", "multi-line-command"],
)  # fmt: skip
def test_the_placeholder_names_tool_arguments_outcome_and_key_line(
    arguments: str, text: str, says: str
) -> None:
    """A cleared result says what ran and how it ended, without running it again."""
    call = ToolCall("c1", "bash", arguments)
    cleared_text = ToolResultMicrocompact().clear(call, Message.tool("c1", text)).text
    assert cleared_text.startswith("[Output of " + says)


def test_the_placeholder_is_bounded_and_the_same_on_every_call() -> None:
    """Huge names, commands and error lines are shortened; equal input, equal text."""
    call = ToolCall("c1", "t" * 5_000, '{"command": "' + "x" * 10_000 + '"}')
    result = Message.tool("c1", "ValueError: " + "y" * 50_000 + "\nexit status 2")
    first = ToolResultMicrocompact().clear(call, result).text
    again = ToolResultMicrocompact().clear(ToolCall("c1", call.name, call.arguments), result).text
    fresh = ToolResultMicrocompact().clear(call, Message.tool("c1", result.text)).text
    assert first == again == fresh
    assert len(first) <= MAX_PLACEHOLDER_CHARS
    assert "exit status 2, error" in first


def failing_session() -> list[Message]:
    """Five results, the third of them the agent's latest failure."""
    texts = ["listing " + "x" * 800, "file " + "y" * 800, NAME_ERROR + "z" * 800]
    texts += ["grep " + "w" * 800, "file " + "v" * 800]
    messages = [Message.system("s"), Message.user("Fix the bug.")]
    for number, text in enumerate(texts):
        call = ToolCall(f"call_{number}", "bash", f'{{"command": "step {number}"}}')
        messages += [Message.assistant(tool_calls=[call]), Message.tool(call.id, text)]
    return [*messages, Message.user("Carry on.")]


async def test_the_newest_failure_is_cleared_last(counter: FixedTokenCounter) -> None:
    """Trimming old results keeps the latest error output while successes go first."""
    view = failing_session()
    strategy = ToolResultMicrocompact(keep_recent=1, clearing_step=0)
    failing = result_indices(view)[2]
    assert strategy.candidates(view, counter)[-1] == failing
    saving = sum(
        counter.count_message(view[i])
        - counter.count_message(strategy.clear(view[i - 1].tool_calls[0], view[i]))
        for i in result_indices(view)[:2] + result_indices(view)[3:4]
    )
    threshold = budget_for(view, counter).tokens - saving
    result = await run(strategy, view, counter, threshold)
    assert len(result.replaced) == 3
    assert failing not in cleared(result.messages)
    assert "NameError: name 'Query' is not defined" in result.messages[failing].text
    assert [m.tool_call_id for m in result.replaced] == ["call_0", "call_1", "call_3"]


def test_an_older_failure_waits_a_few_results_but_goes_before_the_newest(
    counter: FixedTokenCounter,
) -> None:
    """A failure is cleared as if FAILURE_GRACE results younger; the newest failure last."""
    messages = [Message.system("s"), Message.user("go")]
    outputs = [NAME_ERROR] + ["fine"] * 8 + [NAME_ERROR] + ["fine"] * 2
    for number, text in enumerate(outputs):
        call = ToolCall(f"c{number}", "bash", f'{{"command": "run {number}"}}')
        messages += [Message.assistant(tool_calls=[call]), Message.tool(call.id, text + "x" * 800)]
    messages.append(Message.user("next"))
    order = [messages[i].tool_call_id for i in ToolResultMicrocompact(keep_recent=0).candidates(
        messages, counter)]  # fmt: skip
    grace = FAILURE_GRACE
    assert order.index("c0") == grace
    assert order[-1] == "c9"
    assert sorted(order) == sorted(f"c{n}" for n in range(12))
