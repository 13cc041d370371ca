"""The shared transcript strategies generate what they promise."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from context_engine.invariants import check_view
from context_engine.messages import Message
from context_engine.structure import analyze, is_user_message
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import estimate_usage
from tests.transcripts import COMMON_WINDOWS, transcripts, windows

FAST = settings(max_examples=40, deadline=None)


def _waiting_calls(transcript: list[Message]) -> set[str]:
    """Ids of calls without a result, read from the messages directly."""
    answered = {m.tool_call_id for m in transcript if m.role == "tool"}
    return {c.id for m in transcript for c in m.tool_calls if c.id not in answered}


@FAST
@given(transcripts())
def test_generated_transcript_passes_check_view_against_itself(transcript: list[Message]) -> None:
    """An untouched transcript keeps every invariant."""
    assert check_view(transcript, transcript) == []


@FAST
@given(transcripts())
def test_every_call_is_answered_after_it_except_trailing_pending_ones(
    transcript: list[Message],
) -> None:
    """Results follow their call; only the last assistant message may still wait."""
    seen_calls: set[str] = set()
    for message in transcript:
        if message.role == "tool":
            assert message.tool_call_id in seen_calls
        seen_calls.update(c.id for c in message.tool_calls)
    waiting = _waiting_calls(transcript)
    if waiting:
        shape = analyze(transcript)
        owner = transcript[shape.pending_start]
        assert waiting <= {c.id for c in owner.tool_calls}
        assert all(m.role == "tool" for m in transcript[shape.pending_start + 1 :])


@FAST
@given(transcripts())
def test_call_ids_are_unique(transcript: list[Message]) -> None:
    ids = [c.id for m in transcript for c in m.tool_calls]
    assert len(ids) == len(set(ids))


@FAST
@given(transcripts())
def test_first_message_after_leading_block_is_user_or_checkpoint(
    transcript: list[Message],
) -> None:
    shape = analyze(transcript)
    assert all(m.role in ("system", "developer") for m in transcript[: shape.lead_end])
    assert transcript[shape.lead_end].role == "user"
    assert shape.last_user >= 0
    assert is_user_message(transcript[shape.last_user])


@FAST
@given(transcripts(pending=True))
def test_pending_knob_leaves_calls_waiting_at_the_end(transcript: list[Message]) -> None:
    shape = analyze(transcript)
    assert shape.pending_start < len(transcript)
    assert _waiting_calls(transcript)


@FAST
@given(transcripts(pending=False, system=False, summary=False))
def test_knobs_forbid_pending_calls_system_messages_and_checkpoints(
    transcript: list[Message],
) -> None:
    assert _waiting_calls(transcript) == set()
    assert transcript[0].role == "user"
    assert not any(m.is_summary or m.role in ("system", "developer") for m in transcript)


@FAST
@given(transcripts(usage=True, min_turns=2))
def test_usage_anchors_are_plausible_for_a_four_chars_per_token_count(
    transcript: list[Message],
) -> None:
    """Anchors grow along the transcript and the hybrid estimate trusts them."""
    anchors = [m.usage.input_tokens for m in transcript if m.usage is not None]
    assert anchors == sorted(anchors)
    estimate = estimate_usage(transcript, FixedTokenCounter(4))
    has_anchor = bool(anchors)
    assert (estimate.last_usage_index >= 0) == has_anchor


@FAST
@given(transcripts(max_turns=1, max_steps=0, pending=False))
def test_max_knobs_bound_the_shape(transcript: list[Message]) -> None:
    assert sum(is_user_message(m) for m in transcript) == 1
    assert not any(m.tool_calls for m in transcript)


@FAST
@given(st.data())
def test_windows_stay_in_range(data: st.DataObject) -> None:
    window = data.draw(windows(min_tokens=1_000, max_tokens=200_000))
    assert 1_000 <= window <= 200_000
    assert data.draw(windows(min_tokens=8_192, max_tokens=8_192)) == COMMON_WINDOWS[0]
