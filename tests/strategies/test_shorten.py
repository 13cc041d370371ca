"""The shared shortening loop and its memo: a rewrite repeated on every call reuses its copies."""

from __future__ import annotations

import functools
import gc
import weakref
from collections.abc import Callable, Hashable, Iterator, Sequence

import pytest

from context_engine import Message, ToolCall
from context_engine.archive.reference import reference_for
from context_engine.invariants import check_view
from context_engine.messages import TextBlock
from context_engine.strategies._shorten import archived_copy, derived_copy, replace_oldest_first
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.structure import ARCHIVED_KEY
from context_engine.testing import FixedTokenCounter


def session(steps: int) -> list[Message]:
    """A system prompt, a request and ``steps`` tool calls with 2,000-character results."""
    messages = [Message.system("You are a coder."), Message.user("Fix the parser.")]
    for n in range(steps):
        call = ToolCall(f"call_{n}", "read_file", f'{{"path": "m{n}.py"}}')
        messages += [Message.assistant(tool_calls=[call]), Message.tool(call.id, "x" * 2000)]
    return messages


def budget_for(
    view: Sequence[Message], counter: FixedTokenCounter, *, archiving: bool = False
) -> Budget:
    return Budget(
        tokens=sum(counter.count_message(m) for m in view),
        window=1_000_000,
        threshold=0,
        counter=counter,
        measure=lambda msgs: sum(counter.count_message(m) for m in msgs),
        archiving=archiving,
    )


class Shortener:
    """Replaces a message with a short text and counts how often it had to build one."""

    def __init__(self, text: str = "[short]") -> None:
        self.text = text
        self.built = 0

    def make(self, original: Message) -> Message:
        self.built += 1
        return Message.tool(original.tool_call_id or "?", self.text)

    def replacements(self, view: Sequence[Message]) -> Iterator[tuple[int, Callable[[], Message]]]:
        for index, message in enumerate(view):
            if message.role == "tool":
                yield index, functools.partial(self.make, message)


def shorten(
    view: Sequence[Message],
    shortener: Shortener,
    counter: FixedTokenCounter,
    *,
    memo: Hashable = None,
    archiving: bool = False,
    goal: int = 10**9,
) -> StrategyResult:
    budget = budget_for(view, counter, archiving=archiving)
    result = replace_oldest_first(
        view,
        shortener.replacements(view),
        budget,
        goal,
        "tool_result",
        memo=memo,
    )
    assert check_view(view, result.messages) == []
    return result


def test_derived_copy_is_made_once_per_message_and_key() -> None:
    """The same message and key give the very same copy; another key makes another."""
    original = Message.user("a long text")
    made: list[str] = []

    def make(message: Message, suffix: str) -> Message:
        made.append(suffix)
        return Message.user(message.text[:6] + suffix)

    first = derived_copy(original, ("cut", "!"), make, "!")
    assert derived_copy(original, ("cut", "!"), make, "!") is first
    other = derived_copy(original, ("cut", "?"), make, "?")
    assert (first.text, other.text) == ("a long!", "a long?")
    assert made == ["!", "?"]


def test_derived_copies_are_not_part_of_the_message_value() -> None:
    """A message with copies cached on it equals and hashes like a fresh equal message."""
    original = Message.user("same")
    derived_copy(original, "k", lambda m: Message.user("other"))
    fresh = Message.user("same")
    assert original == fresh
    assert hash(original) == hash(fresh)
    assert "other" not in repr(original)


def test_archived_copy_is_made_once_per_shortened_message_and_reference() -> None:
    shortened = Message.tool("call_1", "[cleared]")
    first = archived_copy(shortened, "arc-0000000000000000000a")
    again = archived_copy(shortened, "arc-0000000000000000000a")
    other = archived_copy(shortened, "arc-0000000000000000000b")
    assert again is first
    assert other is not first
    assert first.metadata[ARCHIVED_KEY] == ["arc-0000000000000000000a"]
    assert first.content[0] == TextBlock("[cleared]")
    assert len(first.content) == 2


def test_with_a_memo_each_original_is_shortened_once_across_calls(
    counter: FixedTokenCounter,
) -> None:
    """The second call over the same originals builds nothing and reuses the same objects."""
    view = session(6)
    shortener = Shortener()
    first = shorten(view, shortener, counter, memo="mine")
    second = shorten(list(view), shortener, counter, memo="mine")
    assert shortener.built == 6
    assert len(first.removed) == len(second.removed) == 6
    assert all(a is b for a, b in zip(first.messages, second.messages, strict=True))
    assert second.tokens_saved == first.tokens_saved > 0
    assert [r.originals for r in second.removed] == [(m,) for m in view if m.role == "tool"]


def test_without_a_memo_every_call_builds_new_copies(counter: FixedTokenCounter) -> None:
    view = session(4)
    shortener = Shortener()
    first = shorten(view, shortener, counter)
    second = shorten(view, shortener, counter)
    assert shortener.built == 8
    assert first.messages == second.messages
    tools = [i for i, m in enumerate(view) if m.role == "tool"]
    assert not any(first.messages[i] is second.messages[i] for i in tools)


@pytest.mark.parametrize(
    ("first_archiving", "second_archiving"),
    [(False, True), (True, False), (True, True), (False, False)],
    ids=["plain-then-archived", "archived-then-plain", "archived-twice", "plain-twice"],
)
def test_memoized_copy_names_its_reference_exactly_when_the_budget_archives(
    counter: FixedTokenCounter, first_archiving: bool, second_archiving: bool
) -> None:
    """One memo per archiving mode: a plain copy never leaks into an archiving view or back."""
    view = session(3)
    shortener = Shortener()
    shorten(view, shortener, counter, memo="mine", archiving=first_archiving)
    result = shorten(view, shortener, counter, memo="mine", archiving=second_archiving)
    originals = [m for m in view if m.role == "tool"]
    shortened = [m for m in result.messages if m.role == "tool"]
    for original, copy in zip(originals, shortened, strict=True):
        if second_archiving:
            reference = reference_for((original,))
            assert copy.metadata[ARCHIVED_KEY] == [reference]
            assert reference in copy.text
        else:
            assert ARCHIVED_KEY not in copy.metadata
            assert copy.text == "[short]"
    assert shortener.built == (3 if first_archiving == second_archiving else 6)


def test_memo_keys_keep_different_settings_apart(counter: FixedTokenCounter) -> None:
    """A memo key names the settings: another key never sees the first key's copies."""
    view = session(2)
    short, shorter = Shortener("[short]"), Shortener("[s]")
    shorten(view, short, counter, memo=("mine", "[short]"))
    result = shorten(view, shorter, counter, memo=("mine", "[s]"))
    assert [m.text for m in result.messages if m.role == "tool"] == ["[s]", "[s]"]
    assert shorter.built == 2


def test_memoized_savings_are_per_counter() -> None:
    """The tokens a copy saves are remembered per counting rule, not reused across counters."""
    view = session(2)
    shortener = Shortener()
    by_four = shorten(view, shortener, FixedTokenCounter(4), memo="mine")
    by_one = shorten(view, shortener, FixedTokenCounter(1), memo="mine")
    assert by_one.tokens_saved > by_four.tokens_saved
    assert by_one.tokens_saved == 2 * (2000 - len("[short]"))


def test_a_memoized_copy_that_saves_nothing_stays_skipped(counter: FixedTokenCounter) -> None:
    """A copy no shorter than its original is remembered as useless, and skipped every time."""
    view = [Message.system("s"), Message.user("u"), *session(1)[2:]]
    view[-1] = Message.tool("call_0", "tiny")
    shortener = Shortener("[a placeholder longer than the result]")
    for _ in range(2):
        result = shorten(view, shortener, counter, memo="mine")
        assert not result.applied
        assert result.removed == ()
    assert shortener.built == 1


def test_stops_once_the_goal_is_met_and_builds_nothing_more(counter: FixedTokenCounter) -> None:
    view = session(5)
    shortener = Shortener()
    one = counter.count_message(view[3]) - counter.count_message(Message.tool("call_0", "[short]"))
    result = shorten(view, shortener, counter, memo="mine", goal=2 * one)
    assert len(result.removed) == 2
    assert shortener.built == 2


def test_the_memo_holds_no_reference_back_to_the_original() -> None:
    """Dropping the transcript frees its messages at once: the cache forms no cycle."""

    def run_once() -> weakref.ref[Message]:
        view = session(2)
        counter = FixedTokenCounter()  # its content cache holds messages too
        result = shorten(view, Shortener(), counter, memo="mine", archiving=True)
        assert result.applied
        return weakref.ref(view[3])

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert run_once()() is None
    finally:
        if was_enabled:
            gc.enable()


def test_removals_are_reused_while_the_last_result_holds_them(counter: FixedTokenCounter) -> None:
    """A result still held (the engine keeps its last outcome) lends its removals to the next."""
    view = session(3)
    shortener = Shortener()
    first = shorten(view, shortener, counter, memo="mine")
    second = shorten(view, shortener, counter, memo="mine")
    assert all(a is b for a, b in zip(first.removed, second.removed, strict=True))
    kept = [r.originals for r in second.removed]
    del first, second
    third = shorten(view, shortener, counter, memo="mine")
    assert [r.originals for r in third.removed] == kept
    assert shortener.built == 3
