"""The compaction tool: the model asks for a checkpoint, bounded by the cap and the breaker."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from context_engine import (
    CompactionRefusedError,
    CompactTool,
    ConfigurationError,
    ContextEngine,
    Message,
    RewriteEvent,
    ToolCall,
)
from context_engine.compact_tool import COMPACT_TOOL_NAME, MAX_FOCUS_CHARS
from context_engine.invariants import check_view
from context_engine.pipeline import BREAKER_OPEN
from context_engine.request_cap import cap_reached
from context_engine.strategies import FullSummary, HardTruncate, LightTrim
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from tests.fakes import agent_session

FOCUS = "keep the failing test names and the planned fix in parser.py"


def engine_with(
    summarizer: RecordingSummarizer, *, events: list[RewriteEvent] | None = None, **options: object
) -> ContextEngine:
    settings: dict[str, object] = {
        "reserve_tokens": 2_000,
        "token_counter": FixedTokenCounter(),
        **options,
    }
    if events is not None:
        settings["on_compact"] = events.append
    return ContextEngine(
        40_000,
        [LightTrim(), FullSummary(summarizer=summarizer), HardTruncate()],
        **settings,  # type: ignore[arg-type]
    )


def asking(messages: Sequence[Message], number: int = 0) -> tuple[list[Message], ToolCall]:
    """``messages`` with an assistant message that calls the tool appended."""
    call = ToolCall(f"compact_{number}", COMPACT_TOOL_NAME, json.dumps({"focus": FOCUS}))
    return [*messages, Message.assistant("Compacting before the next phase.", [call])], call


def more_steps(messages: Sequence[Message], start: int, steps: int = 6) -> list[Message]:
    out = list(messages)
    for step in range(start, start + steps):
        call = ToolCall(f"read_{step}", "read_file", json.dumps({"path": f"src/m{step}.py"}))
        out += [Message.assistant(tool_calls=[call]), Message.tool(call.id, f"code {step}\n" * 250)]
    return out


# -- what a call does ---------------------------------------------------------------------------


async def test_a_call_writes_a_checkpoint_with_the_focus_as_the_summarizer_instructions() -> None:
    summarizer, events = RecordingSummarizer(), []
    tool = CompactTool(engine=engine_with(summarizer, events=events))
    messages, call = asking(agent_session(20))

    answer = await tool(call.arguments, messages)

    assert answer.refused is None
    assert summarizer.calls >= 1
    assert {r.instructions for r in summarizer.requests} == {FOCUS}
    assert {r.reason for r in summarizer.requests} == {"manual"}
    assert answer.commit is not None
    assert answer.commit[1].is_summary
    assert answer.commit[-1] is messages[-1]  # the pending call stays, as it was
    assert len(answer.commit) < len(messages)
    assert answer.content.startswith("Checkpoint written with the focus you gave")
    assert [e.reason for e in events] == ["manual"]


async def test_the_next_project_works_on_the_committed_history() -> None:
    """The caller keeps the commit and the tool's answer; the next call sends that view."""
    engine = engine_with(RecordingSummarizer())
    tool = CompactTool(engine=engine)
    messages, call = asking(agent_session(20))

    answer = await tool(call.arguments, messages)
    transcript = answer.transcript(messages, call.id)
    view = await engine.project(transcript)

    assert answer.commit is not None
    assert transcript[: len(answer.commit)] == answer.commit
    assert transcript[-1].role == "tool"
    assert transcript[-1].tool_call_id == call.id
    assert transcript[-1].text == answer.content
    assert not view.changed  # the committed history fits: nothing is rewritten again
    assert view.messages == transcript
    assert check_view(messages, transcript[:-1]) == []


async def test_a_fourth_call_in_one_request_is_refused_with_the_cap_reason() -> None:
    summarizer = RecordingSummarizer()
    tool = CompactTool(engine=engine_with(summarizer))
    transcript: list[Message] = agent_session(20)
    answers = []
    for number in range(4):
        messages, call = asking(transcript, number)
        before = summarizer.calls
        answer = await tool(call.arguments, messages)
        answers.append((answer, summarizer.calls - before))
        transcript = more_steps(answer.transcript(messages, call.id), start=100 * number)

    assert [a.refused is None for a, _ in answers] == [True, True, True, False]
    refused, paid = answers[3]
    assert refused.refused == cap_reached(3)
    assert paid == 0  # refused before the summarizer was called
    assert refused.commit is None
    assert refused.result is None
    assert refused.content.startswith("No checkpoint was written: this request already had")


async def test_a_new_user_message_lets_the_agent_compact_again() -> None:
    tool = CompactTool(engine=engine_with(RecordingSummarizer(), max_llm_rewrites_per_request=1))
    messages, call = asking(agent_session(20))
    first = await tool(call.arguments, messages)
    transcript = more_steps(first.transcript(messages, call.id), start=100)
    messages, call = asking(transcript, 1)
    assert (await tool(call.arguments, messages)).refused == cap_reached(1)

    transcript = more_steps([*messages[:-1], Message.user("Now fix the lexer too.")], start=200)
    messages, call = asking(transcript, 2)
    again = await tool(call.arguments, messages)

    assert again.refused is None
    assert again.commit is not None


async def test_a_checkpoint_the_agent_asked_for_counts_toward_the_cap_project_obeys() -> None:
    """One request, one LLM rewrite allowed: after the tool's, project is past the cap."""
    summarizer = RecordingSummarizer()
    engine = engine_with(summarizer, max_llm_rewrites_per_request=1)
    messages, call = asking(agent_session(20))
    answer = await CompactTool(engine=engine)(call.arguments, messages)
    grown = more_steps(answer.transcript(messages, call.id), start=100, steps=90)
    paid = summarizer.calls

    view = await engine.project(grown)

    assert summarizer.calls == paid
    assert view.event is not None
    assert [s.error for s in view.event.steps if s.name == "full_summary"] == [cap_reached(1)]
    assert view.fits


async def test_the_users_compact_is_never_refused_by_the_cap() -> None:
    engine = engine_with(RecordingSummarizer(), max_llm_rewrites_per_request=1)
    tool = CompactTool(engine=engine)
    messages, call = asking(agent_session(20))
    first = await tool(call.arguments, messages)
    transcript = more_steps(first.transcript(messages, call.id), start=100)

    result = await engine.compact(transcript, "keep the parser notes")

    assert result.commit is not None
    with pytest.raises(CompactionRefusedError) as refused:
        await engine.compact(transcript, requested_by="agent")
    assert refused.value.reason == cap_reached(1)
    assert refused.value.commit is None


# -- the breaker --------------------------------------------------------------------------------


async def test_an_open_breaker_refuses_without_calling_the_summarizer() -> None:
    summarizer = RecordingSummarizer(fail=RuntimeError("summary endpoint down"))
    engine = engine_with(summarizer, max_consecutive_failures=1)
    view = await engine.project(agent_session(200))  # the summary fails: the breaker opens
    assert view.fits
    assert engine.breaker_state == "open"
    paid = summarizer.calls
    messages, call = asking(agent_session(20))

    answer = await CompactTool(engine=engine)(call.arguments, messages)

    assert answer.refused == BREAKER_OPEN
    assert summarizer.calls == paid
    assert answer.content.startswith("No checkpoint was written: summaries are paused")
    assert engine.breaker_state == "open"  # the tool does not spend the project's cool-down


async def test_failed_summaries_the_agent_asked_for_open_the_breaker() -> None:
    summarizer = RecordingSummarizer(fail=RuntimeError("summary endpoint down"))
    engine = engine_with(summarizer, max_consecutive_failures=2)
    tool = CompactTool(engine=engine)
    messages, call = asking(agent_session(20))

    first = await tool(call.arguments, messages)
    assert engine.consecutive_failures == 1
    second = await tool(call.arguments, messages)
    paid = summarizer.calls
    third = await tool(call.arguments, messages)

    assert first.content.startswith("No checkpoint was written: the summary could not be made")
    assert second.content == first.content
    assert engine.breaker_state == "open"
    assert third.refused == BREAKER_OPEN
    assert summarizer.calls == paid
    assert "summary endpoint down" not in first.content  # details go to the log, not the model


async def test_a_checkpoint_the_agent_asked_for_closes_a_half_open_breaker() -> None:
    summarizer = RecordingSummarizer(fail=RuntimeError("down"))
    engine = engine_with(summarizer, max_consecutive_failures=1)
    await engine.project(agent_session(200))  # opens
    await engine.project(agent_session(201))  # skipped: the cool-down ends, half-open
    assert engine.breaker_state == "half_open"
    summarizer.fail = None
    messages, call = asking(agent_session(20))

    answer = await CompactTool(engine=engine)(call.arguments, messages)

    assert answer.refused is None
    assert engine.breaker_state == "closed"


# -- what the model may send --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        pytest.param("{not json", "must be JSON", id="not-json"),
        pytest.param("[1, 2]", "must be an object", id="a-list"),
        pytest.param({"focus": 42}, "focus must be text", id="focus-not-text"),
        pytest.param(
            {"focus": "x" * (MAX_FOCUS_CHARS + 1)}, "2,001 characters long", id="focus-too-long"
        ),
    ],
)
async def test_arguments_of_the_wrong_shape_get_a_sentence_and_no_summary(
    arguments: object, says: str
) -> None:
    summarizer = RecordingSummarizer()
    tool = CompactTool(engine=engine_with(summarizer))
    messages, _ = asking(agent_session(20))

    answer = await tool(arguments, messages)  # type: ignore[arg-type]

    assert says in answer.content
    assert answer.refused == answer.content
    assert answer.commit is None
    assert summarizer.calls == 0


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param("", id="empty-text"),
        pytest.param("{}", id="empty-object"),
        pytest.param({"focus": "   "}, id="blank-focus"),
        pytest.param({"focus": None}, id="null-focus"),
    ],
)
async def test_no_focus_asks_for_a_general_summary(arguments: object) -> None:
    summarizer = RecordingSummarizer()
    tool = CompactTool(engine=engine_with(summarizer))
    messages, _ = asking(agent_session(20))

    answer = await tool(arguments, messages)  # type: ignore[arg-type]

    assert answer.refused is None
    assert summarizer.calls >= 1
    assert {r.instructions for r in summarizer.requests} == {None}
    assert answer.content.startswith("Checkpoint written: ")


async def test_a_short_history_has_nothing_to_compact() -> None:
    summarizer = RecordingSummarizer()
    tool = CompactTool(engine=engine_with(summarizer))
    messages, call = asking([Message.system("You are a coder."), Message.user("Hi")])

    answer = await tool(call.arguments, messages)

    assert answer.content.startswith("Nothing to compact")
    assert answer.result is not None
    assert answer.commit is None
    assert summarizer.calls == 0


async def test_a_call_beside_another_tool_call_keeps_both_pairs() -> None:
    """The model read a file and asked for a checkpoint in one message: both get answers."""
    tool = CompactTool(engine=engine_with(RecordingSummarizer()))
    read = ToolCall("read_x", "read_file", '{"path": "x.py"}')
    compact = ToolCall("compact_x", COMPACT_TOOL_NAME, "{}")
    messages = [
        *agent_session(20),
        Message.assistant(tool_calls=[read, compact]),
        Message.tool(read.id, "print('x')"),
    ]

    answer = await tool(compact.arguments, messages)
    transcript = answer.transcript(messages, compact.id)

    assert answer.commit is not None
    assert answer.commit[-2:] == tuple(messages[-2:])
    assert check_view(messages, answer.commit) == []
    assert [m.tool_call_id for m in transcript[-2:]] == [read.id, compact.id]


def test_call_sync_answers_like_the_coroutine() -> None:
    summarizer = RecordingSummarizer()
    tool = CompactTool(engine=engine_with(summarizer))
    messages, call = asking(agent_session(20))

    answer = tool.call_sync(call.arguments, messages)

    assert answer.refused is None
    assert {r.instructions for r in summarizer.requests} == {FOCUS}


# -- schemas and configuration ------------------------------------------------------------------


def test_the_three_schemas_describe_one_tool() -> None:
    tool = CompactTool(engine=engine_with(RecordingSummarizer()))
    chat, responses, anthropic = tool.openai_schema, tool.responses_schema, tool.anthropic_schema

    assert chat["function"]["name"] == responses["name"] == anthropic["name"] == COMPACT_TOOL_NAME
    parameters = chat["function"]["parameters"]
    assert parameters == responses["parameters"] == anthropic["input_schema"]
    assert parameters["properties"]["focus"]["maxLength"] == MAX_FOCUS_CHARS
    assert "required" not in parameters  # focus may be left out
    for schema in (chat, responses, anthropic):
        assert json.loads(json.dumps(schema)) == schema  # plain JSON on the wire


def test_an_engine_that_cannot_write_a_checkpoint_is_refused_at_construction() -> None:
    engine = ContextEngine(40_000, [LightTrim(), HardTruncate()])
    with pytest.raises(ConfigurationError, match="FullSummary"):
        CompactTool(engine=engine)


async def test_requested_by_must_be_user_or_agent() -> None:
    engine = engine_with(RecordingSummarizer())
    with pytest.raises(ConfigurationError, match="requested_by='model'"):
        await engine.compact(agent_session(4), requested_by="model")  # type: ignore[arg-type]


# -- an agent loop ------------------------------------------------------------------------------


class ScriptedAgent:
    """A fake model: reads files, asks for a checkpoint at ``compact_at``, then finishes."""

    def __init__(self, *, steps: int, compact_at: int) -> None:
        self.steps, self.compact_at = steps, compact_at
        self.calls = 0
        self.views: list[tuple[Message, ...]] = []

    def __call__(self, view: Sequence[Message]) -> Message:
        self.views.append(tuple(view))
        self.calls += 1
        if self.calls == self.compact_at:
            arguments = json.dumps({"focus": FOCUS})
            return Message.assistant(tool_calls=[ToolCall("c1", COMPACT_TOOL_NAME, arguments)])
        if self.calls > self.steps:
            return Message.assistant("The parser is fixed.")
        call = ToolCall(f"r{self.calls}", "read_file", json.dumps({"path": f"m{self.calls}.py"}))
        return Message.assistant(f"Reading m{self.calls}.py.", tool_calls=[call])


async def test_an_agent_loop_where_the_model_calls_the_tool() -> None:
    summarizer, events = RecordingSummarizer(), []
    engine = engine_with(summarizer, events=events)
    tool = CompactTool(engine=engine)
    model = ScriptedAgent(steps=30, compact_at=20)
    transcript: list[Message] = [Message.system("You are a coder."), Message.user("Fix parser.py")]
    answers = []

    while True:
        view = await engine.project(transcript)
        assert check_view(transcript, view.messages) == []
        if view.commit is not None:
            transcript = list(view.commit)
        reply = model(view.messages)
        transcript.append(reply)
        if not reply.tool_calls:
            break
        (call,) = reply.tool_calls
        if call.name == COMPACT_TOOL_NAME:
            answer = await tool(call.arguments, transcript)
            answers.append(answer)
            transcript = list(answer.transcript(transcript, call.id))
        else:
            transcript.append(Message.tool(call.id, f"contents of {call.arguments}\n" * 60))

    assert len(answers) == 1
    assert answers[0].refused is None
    assert [e.reason for e in events] == ["manual"]
    assert {r.instructions for r in summarizer.requests} == {FOCUS}
    after = model.views[20]  # the first view the model saw after the checkpoint
    assert after[1].is_summary
    assert after[-1].role == "tool"
    assert after[-1].text.startswith("Checkpoint written")
    assert all(v[1].is_summary for v in model.views[20:])  # later calls keep the checkpoint
    assert len(after) < len(model.views[19])
    assert transcript[-1].text == "The parser is fixed."
