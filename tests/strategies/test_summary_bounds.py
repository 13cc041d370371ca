"""FullSummary checkpoints stay bounded: one reference, one current-request section, a share cap."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest

from context_engine import (
    ConfigurationError,
    ContextSummary,
    ExtractiveSummarizer,
    Message,
    ToolCall,
)
from context_engine.invariants import check_view
from context_engine.strategies import FullSummary
from context_engine.strategies.base import Budget
from context_engine.summarize.bound import CONDENSED_KEY, Condensed
from context_engine.summarize.ledger import Ledger
from context_engine.summarize.pinned import Pinned
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.sections import PREFIX_HEADING
from context_engine.testing import FixedTokenCounter, RecordingSummarizer

COUNTER = FixedTokenCounter()
WINDOW, THRESHOLD = 8192, 4096
LIMIT = FullSummary(summarizer=RecordingSummarizer()).checkpoint_limit(THRESHOLD)
"""The default checkpoint's most tokens at this threshold."""
REQUEST = "Fix every failing test in the repository"


def measure(messages: Any) -> int:
    return sum(COUNTER.count_message(m) for m in messages)


def budget(view: list[Message], *, archiving: bool, threshold: int = THRESHOLD) -> Budget:
    return Budget(
        tokens=measure(view),
        window=WINDOW,
        threshold=threshold,
        counter=COUNTER,
        measure=measure,
        archiving=archiving,
    )


def steps(first: int, count: int) -> list[Message]:
    """Shell steps with ~600-character results, as an agent running tests makes them."""
    out: list[Message] = []
    for n in range(first, first + count):
        call = ToolCall(f"c{n}", "bash", f'{{"command": "pytest tests/test_{n}.py"}}')
        out.append(Message.assistant(f"Running batch {n}; the approach is to bisect.", [call]))
        out.append(Message.tool(call.id, f"test_{n}\n" + "ok line\n" * 75 + "1 passed"))
    return out


async def run_session(
    strategy: FullSummary, *, rounds: int, single_request: bool, archiving: bool
) -> list[tuple[list[Message], Any]]:
    """Grow a session, letting the strategy rewrite (and the caller commit) when above the
    threshold; returns every (view before, result) of an applied checkpoint."""
    view = [Message.system("You are a coding agent.")]
    if single_request:
        view.append(Message.user(REQUEST))
    applied = []
    for n in range(rounds):
        if single_request:
            view += steps(6 * n, 6)
        else:
            view += [Message.user(f"request {n}: fix test {n}"), *steps(4 * n, 4)]
            view.append(Message.assistant(f"done with request {n}"))
        pressure = budget(view, archiving=archiving)
        if pressure.tokens > THRESHOLD:
            result = await strategy.apply(view, view, pressure)
            if result.applied:
                applied.append((view, result))
                view = list(result.messages)
    return applied


def checkpoint_of(messages: Any) -> ContextSummary:
    return next(m for m in messages if isinstance(m, ContextSummary))


@pytest.mark.parametrize("archiving", [True, False], ids=["archive", "no-archive"])
async def test_a_hundred_checkpoints_stay_under_the_share_with_or_without_an_archive(
    archiving: bool,
) -> None:
    """Regression: each checkpoint re-listed every older reference (2,114 tokens after 100
    checkpoints against 559 without an archive; 3,491 against 1,038 after 390 here)."""
    applied = await run_session(
        FullSummary(summarizer=ExtractiveSummarizer()),
        rounds=400,
        single_request=False,
        archiving=archiving,
    )
    assert len(applied) >= 100
    limit = LIMIT
    for _, result in applied:
        checkpoint = checkpoint_of(result.messages)
        assert COUNTER.count_message(checkpoint) <= limit
        assert len(checkpoint.references) == (1 if archiving else 0)
        assert measure(result.messages) <= THRESHOLD


async def test_a_new_checkpoint_names_only_its_range_and_that_range_holds_the_previous_one() -> (
    None
):
    """Recalling the new reference returns the previous checkpoint, which names the older one."""
    applied = await run_session(
        FullSummary(summarizer=ExtractiveSummarizer()),
        rounds=40,
        single_request=False,
        archiving=True,
    )
    assert len(applied) >= 3
    for (_, earlier), (_, later) in itertools.pairwise(applied):
        previous, current = checkpoint_of(earlier.messages), checkpoint_of(later.messages)
        (removal,) = later.removed
        assert current.references == (removal.reference,)
        assert previous in removal.originals
        assert previous.references == (earlier.removed[0].reference,)


async def test_a_single_request_updated_thirty_times_keeps_one_section_and_the_view_fits() -> None:
    """Regression: every update appended another "Earlier in the current request" section
    (30 sections, 23.5k characters, views at 8.1k against a 4,096 threshold)."""
    applied = await run_session(
        FullSummary(summarizer=ExtractiveSummarizer()),
        rounds=80,
        single_request=True,
        archiving=True,
    )
    assert len(applied) >= 30
    for before, result in applied:
        checkpoint = checkpoint_of(result.messages)
        assert checkpoint.summary.count(PREFIX_HEADING) == 1
        assert COUNTER.count_message(checkpoint) <= LIMIT
        assert measure(result.messages) <= THRESHOLD
        assert result.messages[2] == Message.user(REQUEST)  # the request itself, verbatim
        assert check_view(before, result.messages) == []


async def test_the_current_request_section_is_updated_from_its_previous_text() -> None:
    """The turn-prefix request carries the earlier section as its previous summary."""
    summarizer = RecordingSummarizer()
    applied = await run_session(
        FullSummary(summarizer=summarizer), rounds=12, single_request=True, archiving=False
    )
    assert len(applied) >= 2
    prefix_requests = [r for r in summarizer.requests if r.kind == "turn_prefix"]
    assert len(prefix_requests) == len(applied)
    assert prefix_requests[0].previous_summary is None
    for earlier, later in itertools.pairwise(prefix_requests):
        assert later.previous_summary is not None
        assert f"Checkpoint {summarizer.requests.index(earlier) + 1}" in later.previous_summary
        assert "<previous-summary>" in later.prompt_messages[1].text
    final = checkpoint_of(applied[-1][1].messages)
    assert final.summary.count(PREFIX_HEADING) == 1


def _long_answer(request: SummaryRequest) -> str:
    items = "\n".join(f"- fact {n} about the module, worth keeping a while" for n in range(400))
    return f"## Progress\n{items}"


async def test_an_llm_checkpoint_over_its_share_is_asked_again_shorter_then_cut() -> None:
    """A model ignoring the budget: two condense requests with smaller budgets, then the
    oldest items go deterministically; every item left out is in the metadata."""
    summarizer = RecordingSummarizer()
    strategy = FullSummary(
        summarizer=lambda r: summarizer(r) and _long_answer(r), max_checkpoint_share=0.2
    )
    applied = await run_session(strategy, rounds=12, single_request=False, archiving=True)
    _, result = applied[0]
    kinds = [r.kind for r in summarizer.requests]
    assert kinds[:3] == ["history", "condense", "condense"]
    first, *condense = summarizer.requests[:3]
    assert condense[0].max_tokens < first.max_tokens
    assert condense[1].max_tokens < condense[0].max_tokens
    assert condense[0].previous_summary == _long_answer(first)
    checkpoint = checkpoint_of(result.messages)
    assert COUNTER.count_message(checkpoint) <= int(0.2 * THRESHOLD)
    kept = Condensed.of(checkpoint).items
    assert kept[0] == "- fact 0 about the module, worth keeping a while"  # oldest out first
    lines = _long_answer(first).splitlines()[1:]
    assert all(line in checkpoint.summary or line in kept for line in lines)
    assert "fact 399" in checkpoint.summary  # the newest stays


async def test_extractive_condensing_keeps_what_it_hides_in_the_metadata() -> None:
    """Every item of the unbounded extractive checkpoint is in the text or in the metadata."""
    view = [Message.system("sys"), Message.user("Fix the tests"), *steps(0, 60)]
    pressure = budget(view, archiving=False)
    # The same cut for both (a fixed keep): only the bound differs.
    same = {"summarizer": ExtractiveSummarizer(), "keep_recent_tokens": 2000}
    wide = await FullSummary(**same, max_checkpoint_share=1.0).apply(view, view, pressure)
    narrow = await FullSummary(**same, max_checkpoint_share=0.05).apply(view, view, pressure)
    full, small = checkpoint_of(wide.messages), checkpoint_of(narrow.messages)
    assert COUNTER.count_message(small) <= int(0.05 * THRESHOLD)
    assert COUNTER.count_message(full) > COUNTER.count_message(small)
    hidden = {item.removeprefix("- ") for item in Condensed.of(small).items}
    # The work log's calls the text has no room for stay in the ledger, whole.
    hidden |= {run.item().split("\n")[0] for run in Ledger.of(small).runs}
    assert hidden - {line.removeprefix("- ") for line in small.summary.splitlines()}
    items = [line.removeprefix("- ") for line in full.summary.splitlines() if line.startswith("- ")]
    items = [item for item in items if not item.startswith("(+")]
    assert all(item in small.summary or item in hidden for item in items)


@pytest.mark.parametrize("archiving", [True, False], ids=["archive", "no-archive"])
async def test_what_an_earlier_checkpoint_condensed_travels_on_only_without_an_archive(
    archiving: bool,
) -> None:
    earlier = ContextSummary(
        summary="## Goal\n- fix the parser",
        tokens_before=9000,
        metadata={CONDENSED_KEY: {"items": ["- an old detail"], "read_files": ["old.py"]}},
    )
    view = [Message.system("sys"), earlier, Message.user("Fix the tests"), *steps(0, 40)]
    result = await FullSummary(summarizer=ExtractiveSummarizer()).apply(
        view, view, budget(view, archiving=archiving, threshold=3000)
    )
    assert result.applied
    checkpoint = checkpoint_of(result.messages)
    carried = Condensed.of(checkpoint)
    if archiving:  # the earlier checkpoint is archived under the new reference instead
        assert "- an old detail" not in carried.items
        assert earlier in result.removed[0].originals
    else:
        assert carried.items[:1] == ("- an old detail",)
    # Files come back to the lists either way (and are bounded again): never dropped.
    assert "old.py" in (*checkpoint.read_files, *carried.read_files)


async def test_file_lists_give_up_their_oldest_entries_when_they_alone_exceed_the_share() -> None:
    many = tuple(f"src/package/module_{n:04d}.py" for n in range(400))
    earlier = ContextSummary(summary="## Goal\n- refactor", tokens_before=9000, read_files=many)
    view = [Message.system("sys"), earlier, Message.user("Refactor"), *steps(0, 40)]
    result = await FullSummary(summarizer=ExtractiveSummarizer()).apply(
        view, view, budget(view, archiving=False)
    )
    checkpoint = checkpoint_of(result.messages)
    assert COUNTER.count_message(checkpoint) <= LIMIT
    dropped = Condensed.of(checkpoint).read_files
    assert dropped == many[: len(dropped)]
    assert set(dropped) | set(checkpoint.read_files) >= set(many)
    assert many[-1] in checkpoint.read_files


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_checkpoint_share", 0),
        ("max_checkpoint_share", 1.5),
        ("max_checkpoint_share", True),
        ("summary_timeout_seconds", 0),
        ("summary_timeout_seconds", -1.0),
        ("summary_timeout_seconds", float("inf")),
        ("summary_timeout_seconds", float("nan")),
        ("summary_timeout_seconds", "60"),
        ("timeout_seconds", float("inf")),
        ("timeout_seconds", 0),
    ],
    ids=[
        "share-zero",
        "share-above-one",
        "share-bool",
        "deadline-zero",
        "deadline-negative",
        "deadline-infinite",
        "deadline-nan",
        "deadline-str",
        "timeout-infinite",
        "timeout-zero",
    ],
)
def test_bad_bounds_are_rejected_with_the_option_named(option: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        FullSummary(summarizer=ExtractiveSummarizer(), **{option: value})


def test_no_deadline_and_no_timeout_are_allowed() -> None:
    strategy = FullSummary(
        summarizer=ExtractiveSummarizer(), summary_timeout_seconds=None, timeout_seconds=None
    )
    assert strategy.summary_timeout_seconds is None
    assert strategy == FullSummary(
        summarizer=strategy.summarizer, summary_timeout_seconds=None, timeout_seconds=None
    )


def test_a_small_window_gives_the_checkpoint_room_for_its_work_log() -> None:
    """By default a checkpoint takes a fifth of the threshold, more in a small window.

    The session's log does not shrink with the window: at an 8k window a fifth
    (780 tokens) holds a few dozen calls of a hundred. A share the caller sets
    is kept to.
    """
    default = FullSummary(summarizer=RecordingSummarizer())
    assert default.checkpoint_limit(3_904) == int(0.4 * 3_904)  # 8k window: 40 %
    assert default.checkpoint_limit(6_000) == 1_600
    assert default.checkpoint_limit(11_904) == int(0.2 * 11_904)  # 16k window: a fifth
    assert default.checkpoint_limit(100_000) == 20_000
    chosen = FullSummary(summarizer=RecordingSummarizer(), max_checkpoint_share=0.2)
    assert chosen.checkpoint_limit(3_904) == int(0.2 * 3_904)


def probing_steps(count: int) -> list[Message]:
    """Distinct greps with short answers: a work log that outgrows a small window's checkpoint."""
    out: list[Message] = []
    for n in range(count):
        command = f"grep -rn 'def handler_{n}_' src/package/module_{n}/ --include=*.py"
        call = ToolCall(f"g{n}", "bash", f'{{"command": "{command}"}}')
        out.append(Message.assistant(f"Looking for handler {n}.", [call]))
        out.append(Message.tool(call.id, f"src/package/module_{n}/core.py:{n}: def handler_{n}_"))
    return out


async def test_a_small_window_checkpoint_grows_into_the_room_its_kept_messages_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cut is chosen for the planned size, so the same messages stay verbatim; the room
    they leave free (the next steps' headroom apart) lists more of the work log."""
    from context_engine.strategies import summary

    threshold = 3_904
    view = [Message.system("You are a coding agent."), Message.user(REQUEST)]
    view += probing_steps(250)
    pressure = budget(view, archiving=False, threshold=threshold)
    strategy = FullSummary(summarizer=ExtractiveSummarizer(), keep_recent_tokens=600)
    planned_limit = strategy.checkpoint_limit(threshold)
    grown = await strategy.apply(view, view, pressure)
    monkeypatch.setattr(summary, "SMALL_WINDOW_ROOM_SHARE", summary.SMALL_WINDOW_MAX_SHARE)
    planned = await strategy.apply(view, view, pressure)

    def kept(messages: tuple[Message, ...]) -> list[Message]:
        return [m for m in messages if m in view[2:]]

    assert kept(grown.messages) == kept(planned.messages)  # the same verbatim tail
    big, small = checkpoint_of(grown.messages), checkpoint_of(planned.messages)
    assert COUNTER.count_message(small) <= planned_limit < COUNTER.count_message(big)
    assert COUNTER.count_message(big) <= 0.6 * threshold
    assert measure(grown.messages) <= 0.9 * threshold  # headroom for the next steps

    def hidden(checkpoint: ContextSummary) -> int:
        note = checkpoint.text.partition("\n(+")[2]
        return int(note.split(" more)")[0]) if note else 0

    assert hidden(big) < hidden(small)


def short_and_long_step() -> tuple[list[Message], list[Message]]:
    """A session of short greps, and the same session ending with one long read."""
    short_step = [Message.system("You are a coding agent."), Message.user(REQUEST)]
    short_step += probing_steps(250)
    call = ToolCall("big", "bash", '{"command": "cat src/package/module_0/core.py"}')
    long_step = [*short_step, Message.assistant("Reading the core.", [call])]
    long_step.append(Message.tool(call.id, "def handler():\n    return 1\n" * 60))
    return short_step, long_step


async def test_a_small_window_checkpoint_leaves_no_headroom_a_step_like_the_newest_would_miss() -> (
    None
):
    """Headroom the size of a tenth of the threshold is kept for the next steps only when the
    newest step fits in it: a next step like a larger newest one rewrites the checkpoint on the
    next call all the same, so that room lists more of the work log instead."""
    threshold = 3_904
    short_step, long_step = short_and_long_step()
    # More kept verbatim than the newest step: the room left, not the share, bounds the log.
    strategy = FullSummary(summarizer=ExtractiveSummarizer(), keep_recent_tokens=1_500)
    headroom = int(0.1 * threshold)
    views = {}
    for name, view in (("short", short_step), ("long", long_step)):
        pressure = budget(view, archiving=False, threshold=threshold)
        result = await strategy.apply(view, view, pressure)
        assert result.applied
        views[name] = result.messages
    newest = COUNTER.count_message(long_step[-2]) + COUNTER.count_message(long_step[-1])
    assert newest > headroom  # the long step alone would not fit in the headroom
    assert measure(views["short"]) <= threshold - headroom  # room left for the next steps
    assert threshold - headroom < measure(views["long"]) <= threshold  # the room goes to the log
    assert long_step[-1] in views["long"]  # the newest step itself stays verbatim


async def test_a_small_window_checkpoint_keeps_the_headroom_pins_or_a_new_request_use() -> None:
    """The tenth stays free where it has a use after the checkpoint: pinned messages are
    re-injected there whole, and a new request's first steps come next."""
    threshold = 3_904
    headroom = int(0.1 * threshold)
    steps, long_step = short_and_long_step()
    strategy = FullSummary(summarizer=ExtractiveSummarizer(), keep_recent_tokens=1_500)
    rule = "Run the linter before you say a task is done. " * 24
    pinned = attrs.evolve(
        budget(long_step, archiving=False, threshold=threshold), pinned=Pinned(source=[rule])
    )
    assert headroom // 2 < COUNTER.count_text(rule) <= headroom
    result = await strategy.apply(long_step, long_step, pinned)
    assert result.applied
    assert any(m.text == rule for m in result.messages)  # re-injected whole, not shortened
    new_request = [*steps, Message.assistant("Found them all."), Message.user(REQUEST * 60)]
    assert COUNTER.count_message(new_request[-1]) > headroom
    pressure = budget(new_request, archiving=False, threshold=threshold)
    result = await strategy.apply(new_request, new_request, pressure)
    assert result.applied
    assert measure(result.messages) <= threshold - headroom  # room for the request's first steps
