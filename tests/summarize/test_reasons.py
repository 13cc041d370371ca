"""The reason a summary is written reaches the summarizer (seed 001's ``reason``)."""

from __future__ import annotations

import pytest

from context_engine import Message, SummaryRequest, ToolCall
from context_engine.engine import ContextEngine
from context_engine.strategies import FullSummary, HardTruncate
from context_engine.summarize.request import summary_reason
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.fakes import agent_session


def long_request() -> list[Message]:
    messages = agent_session(20, result_chars=400)
    for i in range(12):
        call = ToolCall(f"more_{i}", "read_file", f'{{"path": "b/{i}.py"}}')
        messages += [Message.assistant(f"Reading {i}.", tool_calls=[call])]
        messages += [Message.tool(call.id, f"body {i}\n" * 50)]
    return messages


def engine_for(summarizer: object) -> ContextEngine:
    return ContextEngine(
        3000,
        [FullSummary(summarizer=summarizer, keep_recent_tokens=600), HardTruncate()],  # type: ignore[arg-type]
        reserve_tokens=1000,
        token_counter=FixedTokenCounter(),
    )


async def test_each_public_call_names_its_reason_to_the_summarizer() -> None:
    seen: dict[str, set[str]] = {}
    for call in ("project", "compact", "recover_overflow"):
        summarizer = RecordingSummarizer()
        engine = engine_for(summarizer)
        if call == "project":
            result = await engine.project(long_request())
        elif call == "compact":
            result = await engine.compact(long_request())
        else:
            result = await engine.recover_overflow(long_request(), "prompt is too long")
        assert result.changed
        seen[call] = {request.reason for request in summarizer.requests}
    assert seen == {
        "project": {"reactive_full"},
        "compact": {"manual"},
        "recover_overflow": {"overflow"},
    }


async def test_a_summarizer_can_pick_a_model_by_reason() -> None:
    """A plain function reading ``request.reason`` (the protocol is unchanged: one argument)."""
    models: list[str] = []

    def summarize(request: SummaryRequest) -> str:
        models.append("small" if request.reason == "reactive_micro" else "large")
        return "<summary>Read the modules; the parser bug is in tokenize().</summary>"

    result = await engine_for(summarize).project(long_request())
    assert result.strategy == "full_summary"
    assert models
    assert set(models) == {"large"}


@pytest.mark.parametrize(
    ("pipeline", "micro", "reason"),
    [
        ("threshold", False, "reactive_full"),
        ("threshold", True, "reactive_micro"),
        ("manual", False, "manual"),
        ("overflow", False, "overflow"),
        ("request_boundary", False, "request_boundary"),
    ],
    ids=["full-tier", "micro-tier", "compact", "recovery", "request-boundary"],
)
def test_pipeline_reasons_map_to_summary_reasons(pipeline: str, micro: bool, reason: str) -> None:
    assert summary_reason(pipeline, micro=micro) == reason
