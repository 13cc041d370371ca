"""Issue 14's repros, each asserting the fixed behaviour.

Overflow recovery folds what it must drop into the checkpoint (summary, else an
extractive digest) and never commits a bare truncation; the recovery target is
discounted once; a failing summarizer still gives fitting views; an image-only
newest user message makes the floor honest; a flaky summarizer rarely opens the
breaker.
"""

from __future__ import annotations

import json

import pytest

from context_engine import ContextEngine, ContextSummary, ImageBlock, Message, ToolCall
from context_engine._transcript import recovery_target
from context_engine.archive import MemoryArchive
from context_engine.overflow import overflow_token_counts
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact
from context_engine.strategies.hard_truncate import is_truncation_marker, truncation_marker
from context_engine.summarize import ExtractiveSummarizer
from context_engine.summarize.bound import Condensed
from context_engine.testing import RecordingSummarizer
from tests.reliability.support import COUNTER, FlakySummarizer, turns, valid

# The provider counted far more than the estimate: recovery must go deep.
OVERFLOW = "prompt is too long: 60000 tokens > 8000 maximum"
CREATED = [f"src/module_{index}.py" for index in range(5)]


def agent_session(steps: int = 40) -> list[Message]:
    """One request worked through ``steps`` tool steps; the first five create files."""
    messages = [
        Message.system("You are a coding agent."),
        Message.user("Split the parser into modules and keep the tests green."),
    ]
    for index in range(steps):
        if index < len(CREATED):
            name, arguments = "write_file", {"path": CREATED[index], "content": "pass\n"}
        else:
            name, arguments = "bash", {"command": f"pytest -k case_{index}"}
        call = ToolCall(id=f"call_{index}", name=name, arguments=json.dumps(arguments))
        messages.append(Message.assistant(f"Step {index}.", tool_calls=(call,)))
        messages.append(Message.tool(f"call_{index}", f"step {index} output " + "x" * 1500))
    return messages


def default_engine(summarizer: object = None, **options: object) -> ContextEngine:
    return ContextEngine.default(8_000, summarizer=summarizer, token_counter=COUNTER, **options)


def fixed_keep_engine(summarizer: object, **options: object) -> ContextEngine:
    """The default pipeline with the summary keeping a fixed 2,000 tokens.

    With the default keep the summary cuts later when its checkpoint and the
    kept messages could not fit (issue 15), so the recovery needs no fold; a
    caller's own keep_recent_tokens is kept to, and the truncation folds in.
    """
    strategies = [
        ToolResultMicrocompact(),
        LightTrim(),
        FullSummary(summarizer=summarizer, keep_recent_tokens=2_000),  # type: ignore[arg-type]
        HardTruncate(),
    ]
    return ContextEngine(8_000, strategies, token_counter=COUNTER, **options)  # type: ignore[arg-type]


def modified_files(checkpoint: ContextSummary) -> set[str]:
    """The files a checkpoint lists as modified, those condensed into its metadata included."""
    return {*checkpoint.modified_files, *Condensed.of(checkpoint).modified_files}


def step_names(result: object) -> dict[str, object]:
    event = getattr(result, "event", None)
    assert event is not None
    return {step.name: step for step in event.steps}


# -- a recovery that must drop history folds it into the checkpoint ------------------------


DOWN = RecordingSummarizer(fail=ConnectionError("summarizer down"))


@pytest.mark.parametrize(
    ("summarizer", "writer"),
    [
        pytest.param(None, "truncation_digest", id="no-summarizer"),
        pytest.param(DOWN, "truncation_digest", id="summarizer-down"),
        pytest.param(RecordingSummarizer(), "truncation_summary", id="summarizer-healthy"),
    ],
)
async def test_a_recovery_that_drops_history_commits_a_checkpoint_not_a_bare_truncation(
    summarizer: RecordingSummarizer | None, writer: str
) -> None:
    """Every created file survives in the committed checkpoint, and the view fits the target."""
    if summarizer is None:
        engine = default_engine(summarizer, tool_result_cap=None)
    else:
        engine = fixed_keep_engine(summarizer)
    transcript = agent_session()
    result = await engine.recover_overflow(transcript, OVERFLOW)
    steps = step_names(result)
    assert steps[writer].applied  # type: ignore[attr-defined]
    assert result.strategy == writer
    assert result.commit == result.messages
    assert not any(is_truncation_marker(m) for m in result.commit)
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    assert set(CREATED) <= modified_files(checkpoint)
    target = engine.estimate(transcript).tokens * engine.threshold // 60_000
    assert result.usage.tokens <= target
    assert result.info is not None
    assert result.info.compacted_count > 0
    valid(transcript, result.messages)


async def test_the_summary_fold_updates_the_checkpoint_the_recovery_just_wrote() -> None:
    """FullSummary writes a checkpoint, the cut after it is folded in by one more request."""
    summarizer = RecordingSummarizer()
    engine = fixed_keep_engine(summarizer)
    result = await engine.recover_overflow(agent_session(), OVERFLOW)
    steps = step_names(result)
    assert steps["full_summary"].applied  # type: ignore[attr-defined]
    assert steps["truncation_summary"].applied  # type: ignore[attr-defined]
    assert "truncation_digest" not in steps  # the view fitted after the summary fold
    checkpoints = [m for m in result.messages if m.is_summary]
    assert len(checkpoints) == 1
    # The fold's request updated the text the first summary wrote.
    last = summarizer.requests[-1]
    assert last.previous_summary is not None
    assert "Checkpoint" in checkpoints[0].summary
    assert engine.breaker_state == "closed"


async def test_a_failing_summary_fold_falls_back_to_the_digest_and_keeps_the_breaker_count() -> (
    None
):
    """The summarizer answers the recovery's summary, then fails the fold: a digest, recorded."""
    summarizer = RecordingSummarizer()

    def on_strategy(name: str) -> None:
        if name == "truncation_summary":
            summarizer.fail = ConnectionError("reset")

    engine = fixed_keep_engine(summarizer, on_strategy=on_strategy)
    transcript = agent_session()
    result = await engine.recover_overflow(transcript, OVERFLOW)
    steps = step_names(result)
    assert steps["full_summary"].applied  # type: ignore[attr-defined]
    assert "ConnectionError" in (steps["truncation_summary"].error or "")  # type: ignore[attr-defined]
    assert steps["truncation_digest"].applied  # type: ignore[attr-defined]
    assert result.commit is not None
    assert not any(is_truncation_marker(m) for m in result.commit)
    assert set(CREATED) <= modified_files(result.commit[1])  # type: ignore[arg-type]
    assert engine.consecutive_failures == 0  # recoveries never count on the breaker
    valid(transcript, result.messages)


async def test_with_an_archive_the_folded_originals_are_recallable_through_the_checkpoint() -> None:
    """Every message of the transcript is in the commit or behind the checkpoint's reference."""
    engine = ContextEngine(
        8_000, [HardTruncate()], token_counter=COUNTER, archive=MemoryArchive(), session_id="s-14"
    )
    transcript = agent_session()
    result = await engine.recover_overflow(transcript, OVERFLOW)
    assert result.commit is not None
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    assert len(checkpoint.references) == 1
    recalled = await engine.recall(checkpoint.references[0])
    present = [m for m in (*result.commit, *recalled) if m in transcript]
    assert all(m in present for m in transcript[2:])  # every step of the request
    assert transcript[1] in result.commit  # the request itself stays verbatim


async def test_the_fold_merges_an_earlier_checkpoint_and_marker_into_one() -> None:
    """A committed checkpoint and an old bare marker are replaced by one checkpoint."""
    earlier = ContextSummary(summary="## Goal\n- Port the CLI.", modified_files=("cli.py",))
    transcript = [
        Message.system("You are a coding agent."),
        earlier,
        truncation_marker(7),
        *agent_session()[1:],
    ]
    engine = default_engine(tool_result_cap=None)
    result = await engine.recover_overflow(transcript, OVERFLOW)
    assert result.commit is not None
    assert sum(m.is_summary for m in result.commit) == 1
    assert not any(is_truncation_marker(m) for m in result.commit)
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    assert {"cli.py", *CREATED} <= modified_files(checkpoint)
    assert "Port the CLI." in checkpoint.summary


async def test_a_truncation_marker_never_becomes_the_checkpoints_goal() -> None:
    """Regression: a digest of a transcript opening with a bare marker took it for the request."""
    transcript = [Message.system("sys"), truncation_marker(12), *turns(30)[1:]]
    engine = default_engine()
    result = await engine.recover_overflow(transcript, "prompt is too long")
    assert result.commit is not None
    checkpoint = result.commit[1]
    assert isinstance(checkpoint, ContextSummary)
    goal = checkpoint.summary.split("## Goal\n", 1)[1].split("\n\n", 1)[0]
    assert "Context truncated" not in checkpoint.summary
    assert goal.startswith("- s request 0 ")


def test_the_extractive_summarizer_skips_truncation_markers() -> None:
    """The marker is the engine's note, not something the user asked."""
    from context_engine import SummaryRequest

    messages = (truncation_marker(3), Message.user("Fix the flaky test."), Message.assistant("Ok."))
    text = ExtractiveSummarizer()(SummaryRequest(messages=messages, prompt_messages=()))
    assert "## Goal\n- Fix the flaky test." in text
    assert "truncated" not in text


# -- (a) the recovery target is discounted once ---------------------------------------------


@pytest.mark.parametrize(
    ("error", "limit", "prompt"),
    [
        pytest.param(
            "This model's maximum context length is 12000 tokens. However, your messages "
            "resulted in 12100 tokens. Please reduce the length of the messages.",
            12_000,
            12_100,
            id="limit-and-prompt",
        ),
        pytest.param(
            "prompt is too long: 12100 tokens > 12000 maximum", 12_000, 12_100, id="anthropic"
        ),
        pytest.param(
            "This model's maximum context length is 12000 tokens.", 12_000, None, id="limit-only"
        ),
    ],
)
def test_a_stated_limit_below_the_window_discounts_the_target_once(
    error: str, limit: int, prompt: int | None
) -> None:
    """Scaled back to the provider's count, the target lands right at its limit minus the reserve.

    The double discount scaled by the window instead of the stated limit and gave
    about a third less (the issue's 3,618 instead of ~6,025 tokens).
    """
    assert overflow_token_counts(error) == (prompt, limit)
    window, reserve, estimated = 16_000, 4_096, 11_000
    target = recovery_target(estimated, window, window - reserve, error)
    actual = prompt or limit + 1
    true_size = target * actual / estimated
    assert limit - reserve - 2 <= true_size <= limit - reserve
    assert target > (limit - reserve) * estimated // (window + 1)  # what two discounts gave


# -- (b) a failing summarizer still gives fitting views --------------------------------------


async def test_a_raising_summarizer_on_1200_short_messages_gives_fitting_views() -> None:
    """Replayed call by call, every view fits (it was ~21k tokens against 3,904)."""
    summarizer = RecordingSummarizer(fail=ConnectionError("summarizer down"))
    engine = ContextEngine.default(8_000, summarizer=summarizer)
    chat: list[Message] = []
    for index in range(600):
        chat.append(Message.user(f"Question {index}: what about item {index}?"))
        chat.append(Message.assistant(f"Answer {index}: item {index} is fine."))
    assert engine.estimate(chat).tokens > 4 * engine.threshold
    sizes, truncated = [], 0
    for end in range(20, len(chat) + 1, 20):
        result = await engine.project(chat[:end])
        sizes.append(result.usage.tokens)
        truncated += result.strategy == "hard_truncate"
        valid(chat[:end], result.messages)
    assert len(sizes) == 60
    assert max(sizes) <= engine.threshold
    assert truncated > 40  # the calls above the threshold were cut by the last resort
    assert summarizer.calls > 0  # the summarizer was tried (and failed), not silently skipped


# -- (c) an image-only newest user message ----------------------------------------------------


async def test_an_image_only_newest_user_message_is_futile_and_pays_for_no_summary() -> None:
    """Images cannot be trimmed: the floor counts them whole, so no summary is bought."""
    summarizer = RecordingSummarizer()
    engine = ContextEngine(
        8_000,
        [FullSummary(summarizer=summarizer), HardTruncate()],
        token_counter=COUNTER,
    )
    picture = ImageBlock(data="iVBORw0KGgo=" * 20, media_type="image/png")
    image = Message("user", (picture,) * 60)  # screenshots, no text
    assert COUNTER.count_message(image) > engine.threshold  # share-capped, it would not be
    transcript = [*turns(10), image]
    projected = await engine.project(transcript)
    assert projected.event is not None
    assert projected.event.futile
    assert projected.event.floor_tokens >= COUNTER.count_message(image)
    recovered = await engine.recover_overflow(transcript, "prompt is too long")
    assert recovered.event is not None
    assert recovered.event.futile
    assert summarizer.calls == 0
    assert image in projected.messages
    assert image in recovered.messages


async def test_an_image_only_message_that_fits_its_share_is_not_futile() -> None:
    """The honest floor does not over-report: a smaller image leaves room, and the view fits."""
    engine = ContextEngine(8_000, [HardTruncate()], token_counter=COUNTER)
    picture = ImageBlock(data="iVBORw0KGgo=" * 20, media_type="image/png")
    image = Message("user", (picture,) * 10)
    assert COUNTER.count_message(image) < engine.threshold // 2
    result = await engine.project([*turns(10), image])
    assert result.event is not None
    assert not result.event.futile
    assert result.usage.fits


# -- (d) a flaky summarizer rarely opens the breaker ---------------------------------------


async def test_a_summarizer_failing_half_its_requests_opens_the_breaker_in_a_minority() -> None:
    """300 seeded sessions of six calls, each call one summarizer request failing at p = 0.5.

    The breaker counts one failure per call and a success closes it, so it opens
    only after three failed calls in a row: 1 - 44/64 ≈ 31 % of six-call
    sessions. Measured: 94 of 300. It opened in all 300 when the failures of
    several requests added up.
    """
    opened = requests = failures = 0
    for seed in range(300):
        summarizer = FlakySummarizer(seed)
        summary = FullSummary(
            summarizer=summarizer, keep_recent_tokens=1_000, summarizer_window=1_000_000
        )
        engine = ContextEngine(8_000, [summary, HardTruncate()], token_counter=COUNTER)
        transcript = turns(4, tag=f"x{seed}")
        tripped = False
        for call in range(6):
            transcript = transcript + turns(4, tag=f"r{call}")[1:]
            result = await engine.project(transcript)
            assert result.usage.fits
            if result.commit is not None:
                transcript = list(result.commit)
            tripped = tripped or engine.breaker_state != "closed"
        opened += tripped
        requests += summarizer.calls
        failures += summarizer.failures
    assert 0.45 <= failures / requests <= 0.55  # the summarizer did fail half the time
    assert opened < 150  # a minority of the sessions
    assert abs(opened / 300 - (1 - 44 / 64)) < 0.08  # what per-call counting predicts


async def test_with_the_default_keep_the_recovery_summary_covers_what_it_must_drop() -> None:
    """Issue 15: the summary cuts late enough to fit; no truncation drops anything unsummarized."""
    engine = default_engine(RecordingSummarizer(), tool_result_cap=None)
    transcript = agent_session()
    result = await engine.recover_overflow(transcript, OVERFLOW)
    steps = step_names(result)
    assert result.strategy == "full_summary"
    assert "hard_truncate" not in steps
    assert "truncation_summary" not in steps
    assert result.commit == result.messages
    assert not any(is_truncation_marker(m) for m in result.messages)
    assert set(CREATED) <= modified_files(result.commit[1])  # type: ignore[arg-type]
    valid(transcript, result.messages)
