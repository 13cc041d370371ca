"""Cost-aware rewrites (``cost_aware=True``): old tool results are cleared when that pays."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError
from context_engine.formats.anthropic import to_anthropic
from context_engine.formats.breakpoints import breakpoints_of, cached_prefix, request_blocks
from context_engine.invariants import check_view
from context_engine.messages import TextBlock, ThinkingBlock, ToolCall
from context_engine.pricing import CACHE_PRICING
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.structure import CLEARED_KEY, TRIMMED_KEY
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter, synthetic_session

COUNTER = FixedTokenCounter()  # 4 characters a token


def step(n: int, result_tokens: int, text: str = "") -> list[Message]:
    call = ToolCall(f"c{n}", "read_file", f'{{"path": "src/f{n}.py"}}')
    return [
        Message.assistant(text or f"reading f{n}", tool_calls=[call]),
        Message.tool(f"c{n}", f"line {n}\n" * (result_tokens // 2)),
    ]


def session(steps: int, result_tokens: int = 1_000) -> list[Message]:
    messages = [Message.system("You fix bugs."), Message.user("Fix the parser.")]
    for n in range(steps):
        messages += step(n, result_tokens)
    return messages


def engine(strategies: list[Any] | None = None, **options: Any) -> ContextEngine:
    options.setdefault("pricing", "anthropic")
    options.setdefault("cost_aware", True)
    return ContextEngine(
        options.pop("window", 100_000),
        strategies if strategies is not None else [ToolResultMicrocompact()],
        token_counter=COUNTER,
        **options,
    )


def cleared(view: tuple[Message, ...]) -> list[str | None]:
    return [m.tool_call_id for m in view if m.metadata.get(CLEARED_KEY)]


# -- below the threshold: clear when that pays --------------------------------------------------


def test_cost_aware_clears_old_tool_results_below_the_threshold_when_that_pays() -> None:
    """A growing session far below the threshold gets its old results cleared, view-only."""
    agent = engine()
    messages = session(6)
    before = list(messages)
    first = agent.project_sync(messages)
    assert first.changed  # nothing cached yet: the cleared view is cheaper to write now
    assert first.event is not None
    assert first.event.strategy == "tool_result_microcompact"
    assert first.event.cost is not None
    assert first.event.cost.worth_it
    assert first.commit is None  # the caller's transcript keeps every result
    assert cleared(first.messages) == ["c0"]
    assert messages == before
    assert check_view(messages, first.messages) == []
    # The next call sends the cleared view plus what came after: the cache holds.
    grown = messages + step(6, 1_000)
    second = agent.project_sync(grown)
    assert second.messages[: len(first.messages)] == first.messages
    assert second.usage.prefix_stable is True


@pytest.mark.parametrize(("horizon", "clears"), [(10, False), (10_000, True)])
def test_a_fitting_view_is_not_rewritten_when_the_saving_does_not_pay(
    horizon: int, clears: bool
) -> None:
    """One small old result behind a long cached prefix: clearing it rewrites too much.

    Unless the session goes on long enough for the small saving to add up.
    """
    pricing = attrs.evolve(CACHE_PRICING["anthropic"], horizon_calls=horizon)
    agent = engine(pricing=pricing)
    long_text = [Message.assistant("notes " * 4_000) for _ in range(4)]  # about 24,000 tokens
    head = [Message.system("You fix bugs."), Message.user("Fix it."), *step(0, 200), *long_text]
    messages = head + [m for n in range(1, 5) for m in step(n, 200)]
    assert not agent.project_sync(messages).changed  # c0 is among the five newest calls
    grown = messages + step(5, 200)  # now c0 may be cleared
    result = agent.project_sync(grown)
    assert result.changed is clears
    assert cleared(result.messages) == (["c0"] if clears else [])
    assert (result.event is None) is not clears


def test_without_cost_aware_a_fitting_view_is_the_transcript() -> None:
    messages = session(6)
    result = engine(cost_aware=False).project_sync(messages)
    assert not result.changed
    assert result.messages == tuple(messages)


def reasoning_session(extra_steps: int) -> list[Message]:
    """Turn one reads a big result and reasons about it; turn two goes on with small steps."""
    call = ToolCall("a", "read_file", '{"path": "src/big.py"}')
    thought = ThinkingBlock("the bug is in the tokenizer " * 290, signature="sig")  # ~2,000
    messages = [
        Message.system("You fix bugs."),
        Message.user("Find the bug."),
        Message.assistant("reading", tool_calls=[call]),
        Message.tool("a", "code\n" * 4_000),  # about 5,000 tokens
        Message("assistant", (thought, TextBlock("found it"))),
        Message.user("Now fix it."),
    ]
    for n in range(extra_steps):
        messages += step(n, 100)
    return messages


@pytest.mark.parametrize(("reasoning", "clears"), [("drop", False), ("keep", True)])
def test_a_rewrite_that_saves_little_but_drops_much_reasoning_is_not_made(
    reasoning: str, clears: bool
) -> None:
    """Clearing the big result would drop the reasoning after it: priced as output, it loses."""
    agent = engine(reasoning=reasoning)
    agent.project_sync(reasoning_session(4))  # the big result is still among the newest five
    result = agent.project_sync(reasoning_session(5))
    assert ("a" in cleared(result.messages)) is clears
    if clears:
        assert result.event is not None
        assert result.event.cost is not None
        assert result.event.cost.reasoning_tokens_dropped == 0


def writing_session(steps: int) -> list[Message]:
    """Each step writes a whole file (about 1,500 tokens of arguments); results are short."""
    messages = [Message.system("You fix bugs."), Message.user("Write the modules.")]
    for n in range(steps):
        content = f"def f{n}():\n    return {n}\n" * 250
        arguments = json.dumps({"path": f"src/m{n}.py", "content": content})
        messages += [
            Message.assistant(f"writing m{n}", tool_calls=[ToolCall(f"w{n}", "write", arguments)]),
            Message.tool(f"w{n}", "ok"),
        ]
    return messages


def test_cost_aware_trims_old_file_contents_in_tool_calls_when_that_pays() -> None:
    """Nothing to clear (the results are short): the old calls' file contents go, view-only."""
    agent = engine([ToolResultMicrocompact(), LightTrim()])
    messages = writing_session(8)
    result = agent.project_sync(messages)
    assert result.changed
    assert result.event is not None
    assert result.event.strategy == "light_trim"
    assert result.event.cost is not None
    assert result.event.cost.worth_it
    assert result.commit is None
    assert check_view(messages, result.messages) == []
    shortened = [m for m in result.messages if TRIMMED_KEY in m.metadata]
    assert shortened
    for message in shortened:
        (call,) = message.tool_calls
        arguments = json.loads(call.arguments)
        assert list(arguments) == ["path", "content"]
        assert arguments["path"].startswith("src/m")
        assert "characters trimmed]" in arguments["content"]
    # The newest step (the protected tail) keeps its file whole.
    assert result.messages[-2] is messages[-2]
    # Without a LightTrim in the pipeline, nothing may be shortened: the view is the transcript.
    plain = engine([ToolResultMicrocompact()]).project_sync(messages)
    assert not plain.changed


def test_above_the_threshold_a_cost_aware_light_trim_trims_old_assistant_messages_to_fit() -> None:
    """Default-built `LightTrim`: the cost-aware engine trims old calls before any summary."""
    strategies = [
        ToolResultMicrocompact(),
        LightTrim(),
        FullSummary(summarizer=ExtractiveSummarizer()),
        HardTruncate(),
    ]
    messages = writing_session(12)
    plain = engine(strategies, window=12_000, cost_aware=False).project_sync(messages)
    aware = engine(strategies, window=12_000).project_sync(messages)
    assert plain.strategy == "full_summary"
    assert aware.strategy == "light_trim"
    assert aware.usage.tokens <= aware.usage.threshold
    assert check_view(messages, aware.messages) == []


def test_a_cost_aware_engine_shows_the_light_trim_it_runs_and_leaves_the_callers_alone() -> None:
    """`engine.strategies` is what runs: its `LightTrim` trims old assistant messages to fit."""
    given = LightTrim()
    strategies = [ToolResultMicrocompact(), given, HardTruncate()]
    aware = engine(strategies, window=12_000)
    plain = engine(strategies, window=12_000, cost_aware=False)
    (running,) = [s for s in aware.strategies if isinstance(s, LightTrim)]
    assert running.trim_assistant_to_fit
    assert running == attrs.evolve(given, trim_assistant_to_fit=True)
    assert given.trim_assistant_to_fit is False  # the caller's strategy is not mutated
    assert plain.strategies == tuple(strategies)


# -- above the threshold ------------------------------------------------------------------------


def summarizing(**options: Any) -> ContextEngine:
    strategies = [
        ToolResultMicrocompact(),
        FullSummary(summarizer=ExtractiveSummarizer()),
        HardTruncate(),
    ]
    return engine(strategies, window=20_000, **options)


def test_above_the_threshold_the_same_cache_break_clears_every_result_that_pays() -> None:
    """The pipeline clears just enough to fit; cost-aware, the rest goes in the same rewrite."""
    messages = session(15, result_tokens=1_200)
    plain = summarizing(cost_aware=False).project_sync(messages)
    aware = summarizing().project_sync(messages)
    assert plain.strategy == aware.strategy == "tool_result_microcompact"
    assert len(cleared(aware.messages)) > len(cleared(plain.messages))
    assert set(cleared(plain.messages)) < set(cleared(aware.messages))
    assert aware.usage.tokens < plain.usage.tokens <= plain.usage.threshold
    assert aware.commit is None
    assert check_view(messages, aware.messages) == []


def test_cost_aware_views_fit_and_keep_the_invariants_over_a_long_session() -> None:
    agent = summarizing()
    transcript: list[Message] = []
    for message in synthetic_session(80):
        if transcript and message.role == "assistant":
            result = agent.project_sync(transcript)
            assert result.usage.tokens <= result.usage.threshold
            assert check_view(transcript, result.messages) == []
            if result.commit is not None:
                transcript = list(result.commit)
        transcript.append(message)


# -- a cache written at breakpoints (Anthropic) -------------------------------------------------


def behind_a_long_prefix() -> tuple[list[Message], list[Message]]:
    """A large result c0 behind 24,000 tokens of notes, and the session one step later.

    In the first, c0 is among the five newest calls; in the second it may be cleared.
    """
    notes = [Message.assistant("notes " * 4_000) for _ in range(4)]  # about 24,000 tokens
    head = [Message.system("You fix bugs."), Message.user("Fix it."), *notes]
    first = head + step(0, 3_000) + [m for n in range(1, 5) for m in step(n, 200)]
    return first, first + step(5, 200)


@pytest.mark.parametrize(("lookback", "clears"), [(None, True), (20, False)])
def test_on_anthropic_a_rewrite_behind_the_last_breakpoint_is_priced_as_a_full_cache_write(
    lookback: int | None, clears: bool
) -> None:
    """Without the engine's breakpoints, clearing c0 re-writes all after the system prompt.

    A prefix cache (``breakpoint_lookback_blocks=None``) would keep the notes
    cached and the clearing would pay; Anthropic's cache, read only at the
    previous request's breakpoints (assumed after the system prompt and at
    the end), keeps none of them, and the 24,000 tokens written again at
    1.25x outweigh what clearing c0 saves.
    """
    pricing = attrs.evolve(CACHE_PRICING["anthropic"], breakpoint_lookback_blocks=lookback)
    agent = engine(pricing=pricing)
    first, grown = behind_a_long_prefix()
    assert not agent.project_sync(first).changed
    result = agent.project_sync(grown)
    assert result.changed is clears
    assert cleared(result.messages) == (["c0"] if clears else [])


def test_the_engine_marks_the_clearing_frontier_so_the_next_clearing_keeps_its_prefix_cached() -> (
    None
):
    """With ``cache_breakpoints=True`` a breakpoint sits just before c0: clearing c0 pays.

    The request before the clearing wrote a cache entry up to the frontier
    (the assistant message that called c0); the clearing request carries a
    breakpoint within Anthropic's 20-block lookback after it, so only what
    follows the frontier is written again, and the event prices it so.
    """
    agent = engine(cache_breakpoints=True)
    first, grown = behind_a_long_prefix()
    frontier = 6  # the assistant message whose call c0 answers, after the notes
    before = agent.project_sync(first)
    assert not before.changed
    assert breakpoints_of(before.messages[frontier])
    result = agent.project_sync(grown)
    assert cleared(result.messages) == ["c0"]
    assert result.event is not None
    assert result.event.cost is not None
    after_frontier = sum(COUNTER.count_message(m) for m in first[frontier + 1 :])  # about 3,400
    assert result.event.prefix_reused_tokens > 24_000  # the notes are still read
    assert 0 < result.event.cost.invalidated_tokens < after_frontier + 100
    # The cleared view's frontier moved to the call of c1, and it is marked in turn.
    assert breakpoints_of(result.messages[frontier + 2])
    assert cleared(result.messages[: frontier + 1]) == []


def test_a_breakpoint_cache_serves_only_an_entry_its_lookback_reaches() -> None:
    """An entry 20 or more blocks behind every breakpoint of the request is not read."""
    view = [Message.system("rules"), *(Message.user(f"turn {n}") for n in range(30))]
    assert cached_prefix(view, 31, [5], [24], 20) == 6  # 19 blocks after the entry
    assert cached_prefix(view, 31, [5], [25], 20) == 0  # 20 blocks after it
    assert cached_prefix(view, 31, [5, 20], [25], 20) == 21  # the deepest one reached
    assert cached_prefix(view, 10, [5, 20], [24], 20) == 6  # 20 is past the shared prefix
    assert cached_prefix(view, 31, [5], [25], None) == 31  # a prefix cache: all it shares


def test_the_lookback_counts_a_tool_call_once_as_the_request_carries_it() -> None:
    """An assistant turn with text and a call is two blocks in the request, not three."""
    turn = [Message.assistant("reading", tool_calls=[ToolCall("c1", "read_file", "{}")])]
    (written,) = to_anthropic(turn)["messages"]
    assert request_blocks(turn[0]) == len(written["content"]) == 2
    # Six such steps (18 blocks) behind the last message: its entry is still read.
    view = [Message.system("rules"), Message.user("go"), *step(0, 10)]
    for n in range(1, 7):
        view += step(n, 10)
    assert cached_prefix(view, len(view), [3], [len(view) - 1], 20) == 4


# -- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"cost_aware": True, "pricing": None}, "pass pricing= too"),
        ({"cost_aware": "yes"}, "cost_aware must be True or False"),
    ],
    ids=["without-pricing", "not-a-bool"],
)
def test_cost_aware_settings_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        engine(**options)
