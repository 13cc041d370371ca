"""The Agents SDK in one object: an engine per session, a ``RunConfig`` per run, commits stored.

Real runner loops: agents name their model (``model="gpt-test"``), a model
provider resolves the name to the SDK's scripted model, real ``@function_tool``s
return multi-thousand-token outputs, and ``SQLiteSession`` stores the history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests.extras import needs

pytest.importorskip("agents", reason=needs("openai-agents"))

import itertools

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.models.interface import Model, ModelProvider
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage as AgentsUsage

from context_engine import ContextEngine, Message
from context_engine.errors import ConfigurationError
from context_engine.formats.openai_agents import from_openai_agents
from context_engine.integrations._openai_agents_filter import _tool_schemas
from context_engine.integrations._sizing import schema_text
from context_engine.integrations.conversations import EnginePool
from context_engine.integrations.openai_agents import (
    ContextEngineInputFilter,
    ContextEngineModel,
    ContextEngineProvider,
)
from context_engine.testing import FixedTokenCounter, RecordingSummarizer
from context_engine.tokens import REQUEST_OVERHEAD_TOKENS
from tests.provider_errors import openai_status_error

pytestmark = pytest.mark.extra("openai-agents")

COUNTER = FixedTokenCounter()
INSTRUCTIONS = (
    "You are a careful coding agent. Read every module the parser imports before you "
    "change it, and say what you found in a full sentence after each read. "
) * 3


@function_tool
def read_file(path: str) -> str:
    """Read a source file of the repository, whole."""
    lines = (
        f"def handler_{n}(value):  # {path}\n    return value * {n} + OFFSET" for n in range(150)
    )
    return f"# {path}\n" + "\n".join(lines)  # about 3,000 tokens


def view(call: ModelCall) -> list[Message]:
    """What one model call was sent, as messages (the instructions are separate)."""
    return from_openai_agents(call.input)


def request_tokens(call: ModelCall) -> int:
    """The whole request: instructions, input, tool and handoff schemas, framing."""
    head = [Message.system(call.system_instructions)] if call.system_instructions else []
    agent = Agent(name="a", tools=list(call.tools), handoffs=list(call.handoffs))
    schemas = COUNTER.count_text(schema_text(_tool_schemas(agent)))
    messages = sum(COUNTER.count_message(m) for m in [*head, *view(call)])
    return messages + REQUEST_OVERHEAD_TOKENS + schemas


def orphans(messages: Sequence[Message]) -> set[str]:
    """Ids of tool calls without their result, and of results without their call."""
    calls = {call.id for m in messages for call in m.tool_calls}
    results = {m.tool_call_id for m in messages if m.role == "tool" and m.tool_call_id}
    return calls ^ results


def usage(call: ModelCall) -> AgentsUsage:
    """What a provider would bill for ``call``."""
    prompt = request_tokens(call)
    return AgentsUsage(requests=1, input_tokens=prompt, output_tokens=60, total_tokens=prompt + 60)


def task_tag(messages: Sequence[Message]) -> str:
    """The tag of the newest task: user messages read ``[tag] ...`` (the newest is never cut)."""
    newest = [m for m in messages if m.role == "user" and not m.is_summary][-1]
    return newest.text.split("]")[0].lstrip("[")


def steps_done(messages: Sequence[Message], prefix: str) -> int:
    """How many reads the newest result in the view shows done (no strategy drops it)."""
    done = [
        int(m.tool_call_id.rsplit("-", 1)[1])
        for m in messages
        if m.role == "tool" and m.tool_call_id and m.tool_call_id.startswith(f"{prefix}-")
    ]
    return max(done) + 1 if done else 0


@attrs.define
class Loop:
    """The model's side of an agent loop: a file read per step, then a final answer.

    Each answer follows from the call's input alone (the task's tag and the
    newest result, which no strategy drops), so a conversation gets the same
    answers whether it runs alone or interleaved with others.
    """

    steps: dict[str, int]
    prefix: str | None = None  # of the call ids; the task's tag by default

    async def answer(self, call: ModelCall) -> ModelStep:
        await asyncio.sleep(0)  # let other runs in; interleaving happens here
        messages = view(call)
        tag = task_tag(messages)
        prefix = self.prefix or tag
        n = steps_done(messages, prefix)
        if n >= self.steps[tag]:
            final = assistant_message(f"{tag} done", item_id=f"msg_{tag}_final")
            return ModelStep(output=[final], usage=usage(call))
        text = (
            f"Step {n}: module {n} is called by the parser on nested groups, so I read it "
            "next and note what each handler returns. "
        ) * 3
        output = [
            assistant_message(text, item_id=f"msg_{tag}_{n}"),
            function_call("read_file", {"path": f"src/{tag}/m{n}.py"}, call_id=f"{prefix}-{n}"),
        ]
        return ModelStep(output=output, usage=usage(call))


class Models(ModelProvider):
    """Resolves model names to the given models, as ``MultiProvider`` does to real ones."""

    def __init__(self, models: dict[str, Model]) -> None:
        self.models = models
        self.closed = False

    def get_model(self, model_name: str | None) -> Model:
        return self.models[model_name or "gpt-test"]

    async def aclose(self) -> None:
        self.closed = True


def scripted(answer: Callable[[ModelCall], Any], calls: int = 400) -> ScriptedModel:
    return ScriptedModel([ModelStep.respond(answer) for _ in range(calls)])


def coder(**options: Any) -> Agent[Any]:
    options.setdefault("tools", [read_file])
    return Agent(name="coder", instructions=INSTRUCTIONS, model="gpt-test", **options)


@attrs.define
class App:
    """One process of an app: a provider over a name-resolving model provider.

    ``summarizers`` holds the summarizer of each engine the pool built, by
    session id; ``built`` counts the engines built.
    """

    window: int
    model: ScriptedModel
    max_conversations: int = 256
    # Most tests follow every commit; past the per-request cap a call is sent an extracted
    # digest that is never committed, so the cap is lifted unless a test sets it.
    max_llm_rewrites: int | None = None
    summarizers: dict[str, RecordingSummarizer] = attrs.field(factory=dict)
    built: list[str] = attrs.field(factory=list)
    provider: ContextEngineProvider = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        models = Models({"gpt-test": self.model})
        self.provider = ContextEngineProvider(
            self.engine, model_provider=models, max_conversations=self.max_conversations
        )

    def engine(self, session_id: str) -> ContextEngine:
        self.built.append(session_id)
        summarizer = self.summarizers[session_id] = RecordingSummarizer()
        return ContextEngine.default(
            self.window,
            summarizer=summarizer,
            token_counter=COUNTER,
            max_llm_rewrites_per_request=self.max_llm_rewrites,
        )

    async def run(self, session: SQLiteSession, task: str, agent: Agent[Any] | None = None) -> Any:
        config = self.provider.run_config(session, tracing_disabled=True)
        result = await Runner.run(
            agent or coder(), task, session=session, run_config=config, max_turns=100
        )
        return result.final_output

    def threshold(self, session_id: str) -> int:
        return self.provider.input_filter(session_id).engine.threshold


def stored_in(db: Path, session_id: str) -> list[Message]:
    """What the database holds for the session, read as a new process would."""
    reader = SQLiteSession(session_id, db)
    try:
        return from_openai_agents(asyncio.run(reader.get_items()))
    finally:
        reader.close()


async def stored(session: SQLiteSession) -> list[Message]:
    return from_openai_agents(await session.get_items())


# ------------------------------------------------------------------- the agent loop


@pytest.mark.parametrize("window", [8_000, 16_000], ids=["8k", "16k"])
async def test_every_request_fits_with_its_tool_schemas_and_instructions_over_a_45_step_loop(
    window: int, tmp_path: Path
) -> None:
    """Each request, counted whole, is under the threshold; no orphan pairs; the agent finishes."""
    app = App(window, scripted(Loop({"alpha": 45, "beta": 12}).answer))
    session = SQLiteSession("user-1", tmp_path / "sessions.db")

    assert await app.run(session, "[alpha] Fix the nested parentheses bug.") == "alpha done"
    assert await app.run(session, "[beta] Now the lexer.") == "beta done"

    calls = app.model.calls
    assert len(calls) == 46 + 13
    threshold = app.threshold("user-1")
    assert threshold == window - 4_096  # the engine's default reserve
    requests = [request_tokens(call) for call in calls]
    assert max(requests) <= threshold
    assert max(requests) > threshold * 0.8  # the loop pressed against the threshold
    assert all(orphans(view(call)) == set() for call in calls)
    assert app.summarizers["user-1"].calls >= 1  # the history really outgrew the window
    session.close()


@pytest.mark.parametrize("window", [8_000, 16_000], ids=["8k", "16k"])
async def test_the_checkpoint_is_in_the_session_when_each_run_ends(
    window: int, tmp_path: Path
) -> None:
    """A worker that serves one run and exits leaves the run's checkpoint in the session."""
    app = App(window, scripted(Loop({"alpha": 45, "beta": 12}).answer), max_llm_rewrites=3)
    db = tmp_path / "sessions.db"
    session = SQLiteSession("user-1", db)

    for task in ("[alpha] Fix the nested parentheses bug.", "[beta] Now the lexer."):
        await app.run(session, task)
        persisted = await asyncio.to_thread(stored_in, db, "user-1")
        assert persisted[0].is_summary
        # The newest checkpoint the model wrote (committed); past the per-request cap the
        # calls may be sent an extracted digest instead, which is never committed.
        written = app.summarizers["user-1"].calls
        assert f"Checkpoint {written} (" in persisted[0].text
        assert any(view(call)[0] == persisted[0] for call in app.model.calls)
        assert orphans(persisted) == set()
        assert "alpha-0" not in {m.tool_call_id for m in persisted}  # only in the checkpoint
    session.close()


@pytest.mark.parametrize("restart", ["new_process", "session_dropped_from_the_pool"])
async def test_a_fresh_engine_resumes_the_session_from_its_stored_checkpoint(
    restart: str, tmp_path: Path
) -> None:
    """The next run, in a new process or after the pool dropped the engine, starts from it."""
    db = tmp_path / "sessions.db"
    loop = Loop({"alpha": 45, "beta": 3, "other": 1})
    first = App(16_000, scripted(loop.answer), max_conversations=1)
    session = SQLiteSession("user-1", db)
    await first.run(session, "[alpha] Fix the nested parentheses bug.")
    checkpoint = (await stored(session))[0]
    assert checkpoint.is_summary
    session.close()

    if restart == "new_process":
        app = App(16_000, scripted(Loop({"beta": 3}).answer))
    else:
        app = first
        other = SQLiteSession("user-2", db)
        await app.run(other, "[other] Say hello.")  # the pool keeps one engine: user-1's goes
        other.close()
        assert "user-1" not in app.provider.pool
    before = len(app.model.calls)
    resumed = SQLiteSession("user-1", db)
    assert await app.run(resumed, "[beta] Now the lexer.") == "beta done"

    calls = app.model.calls[before:]
    assert app.built.count("user-1") == (1 if restart == "new_process" else 2)
    assert [view(call)[0] for call in calls] == [checkpoint] * 4
    assert app.summarizers["user-1"].calls == 0  # nothing summarized again
    assert all(request_tokens(call) <= app.threshold("user-1") for call in calls)
    resumed.close()


async def test_two_sessions_interleaved_through_one_provider_see_what_each_sees_alone() -> None:
    """Engines are per session: interleaving changes no view of either conversation."""
    tasks = {"user-a": "[alpha] Fix the parser.", "user-b": "[beta] Fix the lexer."}

    async def calls_of(app: App, session_ids: Sequence[str]) -> dict[str, list[Any]]:
        sessions = [SQLiteSession(session_id) for session_id in session_ids]
        await asyncio.gather(*(app.run(s, tasks[s.session_id]) for s in sessions))
        for session in sessions:
            session.close()
        by_task: dict[str, list[Any]] = {}
        for call in app.model.calls:
            tag = task_tag(view(call))
            by_task.setdefault(tag, []).append((call.system_instructions, call.input))
        return by_task

    def app() -> App:
        return App(8_000, scripted(Loop({"alpha": 45, "beta": 45}).answer))

    together = app()
    interleaved = await calls_of(together, ["user-a", "user-b"])
    alone = {**await calls_of(app(), ["user-a"]), **await calls_of(app(), ["user-b"])}

    order = [task_tag(view(call)) for call in together.model.calls]
    assert sum(a != b for a, b in itertools.pairwise(order)) >= 40  # the runs really interleaved
    assert interleaved.keys() == alone.keys() == {"alpha", "beta"}
    assert interleaved["alpha"] == alone["alpha"]
    assert interleaved["beta"] == alone["beta"]
    assert len(interleaved["alpha"]) == len(interleaved["beta"]) == 46
    assert together.summarizers["user-a"].calls >= 1
    assert together.built == ["user-a", "user-b"]


# ------------------------------------------------------------------- handoffs and sub-agents


@attrs.define
class Triage:
    """The first agent's model: reads files until its view holds a checkpoint, then hands off."""

    loop: Loop
    summaries: Callable[[], int]  # what the session's summarizer has been paid for so far
    handed_off_at: int | None = None  # summaries paid when it handed off
    calls: int = 0

    async def answer(self, call: ModelCall) -> ModelStep:
        self.calls += 1
        if self.handed_off_at is None and view(call)[0].is_summary:
            self.handed_off_at = self.summaries()
            step = function_call("transfer_to_specialist", {}, call_id="handoff")
            return ModelStep(output=[step], usage=usage(call))
        return await self.loop.answer(call)


@attrs.define
class Specialist:
    """The agent handed off to: reads on under call ids of its own, then answers."""

    loop: Loop
    summaries: Callable[[], int]
    paid: list[int] = attrs.field(factory=list)  # summaries paid when each call was sent

    async def answer(self, call: ModelCall) -> ModelStep:
        self.paid.append(self.summaries())
        return await self.loop.answer(call)


async def test_a_handoff_goes_on_from_the_sessions_checkpoint_without_dropping_or_repeating_it(
    tmp_path: Path,
) -> None:
    """The agent handed off to sees the same checkpoint; the session stores one, once."""
    app = App(8_000, ScriptedModel())

    def summaries() -> int:
        return app.summarizers["user-1"].calls

    triage = Triage(Loop({"alpha": 200}), summaries)
    specialist = Specialist(Loop({"alpha": 10}, prefix="spec"), summaries)
    triage_model, specialist_model = scripted(triage.answer), scripted(specialist.answer)
    app.provider.model_provider = Models({"gpt-test": triage_model, "gpt-pro": specialist_model})
    specialist_agent = Agent(
        name="specialist",
        instructions="You finish what triage started.",
        model="gpt-pro",
        tools=[read_file],
    )
    session = SQLiteSession("user-1", tmp_path / "sessions.db")

    result = await app.run(session, "[alpha] Fix the parser.", coder(handoffs=[specialist_agent]))

    assert result == "alpha done"
    assert triage.handed_off_at is not None
    assert triage.handed_off_at >= 1
    assert len(specialist_model.calls) == 11
    before, after = view(triage_model.calls[-1]), view(specialist_model.calls[0])
    assert specialist_model.calls[0].system_instructions == "You finish what triage started."
    assert after[0] == before[0]  # the same checkpoint: not dropped
    assert specialist.paid[0] == triage.handed_off_at  # and not paid for again
    handoff = [m for m in after if "handoff" in {m.tool_call_id, *(c.id for c in m.tool_calls)}]
    assert [m.role for m in handoff] == ["assistant", "tool"]  # the transfer, paired
    threshold = app.threshold("user-1")
    assert all(request_tokens(call) <= threshold for call in specialist_model.calls)

    persisted = await stored(session)
    assert [m.is_summary for m in persisted].count(True) == 1
    assert persisted[0] == view(specialist_model.calls[-1])[0]
    assert orphans(persisted) == set()
    ids = [call.id for m in persisted for call in m.tool_calls]
    assert len(ids) == len(set(ids))  # no step stored twice
    session.close()


@attrs.define
class Delegating:
    """A parent's model: reads until its view holds a checkpoint, asks a sub-agent, reads on."""

    loop: Loop
    summaries: Callable[[], int]
    reads_after: int = 20  # reads after the sub-agent answered, before the final answer
    delegated_at: int | None = None  # the index of the call that asked
    paid: list[int] = attrs.field(factory=list)  # summaries paid when each call was sent

    async def answer(self, call: ModelCall) -> ModelStep:
        index = len(self.paid)
        self.paid.append(self.summaries())
        if self.delegated_at is None:
            if not view(call)[0].is_summary:
                return await self.loop.answer(call)
            self.delegated_at = index
            ask = function_call("reviewer", {"input": "[review] Check the lexer."}, call_id="ask")
            return ModelStep(output=[ask], usage=usage(call))
        n = index - self.delegated_at - 1
        if n == self.reads_after:
            return ModelStep(output=[assistant_message("alpha done")], usage=usage(call))
        read = function_call("read_file", {"path": f"src/after/m{n}.py"}, call_id=f"after-{n}")
        return ModelStep(output=[read], usage=usage(call))


async def test_a_sub_agent_run_as_a_tool_keeps_its_own_conversation(tmp_path: Path) -> None:
    """Its run ends mid-parent: the parent's checkpoints stay, the session stores the last, once."""
    app = App(8_000, ScriptedModel())
    parent = Delegating(Loop({"alpha": 200}), lambda: app.summarizers["user-1"].calls)
    parent_model, reviewer_model = scripted(parent.answer), scripted(Loop({"review": 2}).answer)
    app.provider.model_provider = Models({"gpt-test": parent_model, "gpt-review": reviewer_model})
    reviewer = Agent(
        name="reviewer", instructions="You review.", model="gpt-review", tools=[read_file]
    )
    agent = coder(tools=[read_file, reviewer.as_tool("reviewer", "Reviews a module.")])
    session = SQLiteSession("user-1", tmp_path / "sessions.db")

    assert await app.run(session, "[alpha] Fix the parser.", agent) == "alpha done"

    assert parent.delegated_at is not None
    assert len(reviewer_model.calls) == 3
    assert view(reviewer_model.calls[0])[0].text == "[review] Check the lexer."
    asked = parent.delegated_at
    calls = parent_model.calls
    assert view(calls[asked + 1])[0] == view(calls[asked])[0]  # goes on from its checkpoint
    assert parent.paid[asked + 1] == parent.paid[asked]  # not paid for again
    assert view(calls[-1])[0] != view(calls[asked])[0]  # and made newer ones after
    assert all(request_tokens(call) <= app.threshold("user-1") for call in calls)
    persisted = await stored(session)
    assert [m.is_summary for m in persisted].count(True) == 1
    assert persisted[0] == view(calls[-1])[0]  # the newest, though the sub-run stored one
    assert orphans(persisted) == set()
    ids = [call.id for m in persisted for call in m.tool_calls]
    assert len(ids) == len(set(ids))
    assert "[review] Check the lexer." not in {m.text for m in persisted if m.role == "user"}
    session.close()


# ------------------------------------------------------------------- overflow, streaming, compact


def overflow() -> Exception:
    return openai_status_error(
        400,
        "This model's maximum context length is 8000 tokens. However, your messages resulted "
        "in 9100 tokens. Please reduce the length of the messages.",
        code="context_length_exceeded",
    )


@pytest.mark.parametrize("given_as", ["agent_model_name", "run_config_model_instance"])
async def test_a_context_length_error_is_recovered_and_the_call_retried_once(
    given_as: str,
) -> None:
    """Models the provider resolves or is given are wrapped: recover, commit, retry once."""
    loop = Loop({"alpha": 8})
    script: list[Any] = [ModelStep.respond(loop.answer) for _ in range(6)]
    script += [overflow(), *(ModelStep.respond(loop.answer) for _ in range(3))]
    model = ScriptedModel(script)
    recoveries: list[Any] = []
    provider = ContextEngineProvider(
        lambda _: ContextEngine.default(
            16_000,
            summarizer=RecordingSummarizer(),
            token_counter=COUNTER,
            on_recover=recoveries.append,
        ),
        model_provider=Models({"gpt-test": model}),
    )
    session = SQLiteSession("user-1")
    options: dict[str, Any] = {"tracing_disabled": True}
    if given_as == "run_config_model_instance":
        options["model"] = model
    config = provider.run_config(session, **options)

    result = await Runner.run(coder(), "[alpha] Fix it.", session=session, run_config=config)

    assert result.final_output == "alpha done"
    assert len(recoveries) == 1
    assert len(model.calls) == 10
    assert len(model.calls[7].input) < len(model.calls[6].input)  # the retry was shorter
    persisted = await stored(session)
    assert persisted[0].is_summary  # the recovery's commit, stored when the run ended
    session.close()


async def test_a_streamed_run_stores_its_checkpoint_when_it_ends() -> None:
    app = App(8_000, scripted(Loop({"alpha": 45}).answer))
    session = SQLiteSession("user-1")
    config = app.provider.run_config(session, tracing_disabled=True)

    result = Runner.run_streamed(
        coder(), "[alpha] Fix it.", session=session, run_config=config, max_turns=100
    )
    async for _ in result.stream_events():
        pass

    assert result.final_output == "alpha done"
    assert max(request_tokens(c) for c in app.model.calls) <= app.threshold("user-1")
    persisted = await stored(session)
    assert persisted[0] == view(app.model.calls[-1])[0]
    assert persisted[0].is_summary
    session.close()


async def test_compact_command_and_clear_session_go_through_the_sessions_filter() -> None:
    app = App(16_000, scripted(Loop({"alpha": 10, "beta": 1}).answer))
    session = SQLiteSession("user-1")
    await app.run(session, "[alpha] Fix it.")
    wrapped = app.provider.session(session)

    result = await wrapped.compact("keep the module names")

    assert result.changed
    assert app.summarizers["user-1"].requests[-1].instructions == "keep the module names"
    compacted = await stored(session)
    assert compacted[0].is_summary
    before = len(app.model.calls)
    await app.run(session, "[beta] And the lexer.")
    assert view(app.model.calls[before])[0] == compacted[0]
    await wrapped.clear_session()
    assert await session.get_items() == []
    assert app.provider.input_filter("user-1").commit is None
    session.close()


class BrokenStore(SQLiteSession):
    """A session whose history cannot be rewritten."""

    async def clear_session(self) -> None:
        raise OSError("the store is read-only")


async def test_a_session_that_cannot_store_the_commit_is_logged_and_the_run_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App(8_000, scripted(Loop({"alpha": 45}).answer))
    session = BrokenStore("user-1")

    with caplog.at_level(logging.WARNING, logger="context_engine.integrations.openai_agents"):
        assert await app.run(session, "[alpha] Fix it.") == "alpha done"

    warnings = [r for r in caplog.records if r.name == "context_engine.integrations.openai_agents"]
    assert len(warnings) == 1
    assert "session=<user-1>" in warnings[0].getMessage()
    assert not (await stored(session))[0].is_summary  # the history stayed as it was
    assert app.provider.input_filter("user-1").commit is not None  # kept for the next run
    session.close()


# ------------------------------------------------------------------- engines per conversation


def test_engines_are_kept_per_session_and_the_least_recently_used_is_dropped() -> None:
    built: list[str] = []

    def factory(session_id: str) -> ContextEngine:
        built.append(session_id)
        return ContextEngine.default(16_000)

    provider = ContextEngineProvider(factory, model_provider=Models({}), max_conversations=2)
    first = provider.input_filter("a")
    assert provider.input_filter("a") is first
    provider.input_filter("b")
    provider.input_filter("a")  # "b" is now the least recently used
    provider.input_filter("c")

    assert list(provider.pool) == ["a", "c"]
    assert provider.input_filter("a") is first
    renewed = provider.input_filter("b")
    assert renewed.engine is not first.engine
    assert built == ["a", "b", "c", "b"]


def test_a_pool_given_to_the_provider_is_used_as_it_is() -> None:
    pool = EnginePool(lambda _: ContextEngine.default(16_000), max_conversations=3)
    provider = ContextEngineProvider(pool, model_provider=Models({}), context_window=8_000)
    input_filter = provider.input_filter("a")

    assert provider.pool is pool
    assert input_filter.engine is pool.engine("a")
    assert isinstance(input_filter, ContextEngineInputFilter)
    assert input_filter.sizing.context_window == 8_000


async def test_run_config_sets_the_filter_and_a_provider_of_wrapped_models() -> None:
    model = scripted(Loop({"alpha": 0}).answer)
    app = App(16_000, model)
    session = SQLiteSession("user-1")

    config = app.provider.run_config(session, workflow_name="support", model="gpt-test")

    assert isinstance(config, RunConfig)
    assert config.workflow_name == "support"
    assert config.call_model_input_filter is app.provider.input_filter("user-1")
    resolved = config.model_provider.get_model("gpt-test")
    assert isinstance(resolved, ContextEngineModel)
    assert resolved.model is model
    assert config.model_provider.get_model("gpt-test") is resolved  # one wrapper per name
    keyed = app.provider.run_config(conversation_id="thread-9")
    assert keyed.call_model_input_filter is app.provider.input_filter("thread-9")
    await app.provider.aclose()
    assert isinstance(app.provider.model_provider, Models)
    assert app.provider.model_provider.closed
    session.close()


class NotASession:
    session_id = "x"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ContextEngineProvider(ContextEngine.default(8_000)), "an engine per session"),
        (lambda: ContextEngineProvider("engine"), "EnginePool or a factory"),  # type: ignore[arg-type]
        (
            lambda: ContextEngineProvider(lambda _: ContextEngine.default(8_000), trigger=(1, 2)),  # type: ignore[arg-type]
            "trigger",
        ),
        (
            lambda: ContextEngineProvider(lambda _: ContextEngine.default(8_000), model_provider=1),  # type: ignore[arg-type]
            "ModelProvider",
        ),
        (
            lambda: ContextEngineProvider(
                lambda _: ContextEngine.default(8_000),
                cap_tool_results="yes",  # type: ignore[arg-type]
            ),
            "cap_tool_results",
        ),
        (
            lambda: ContextEngineProvider(
                EnginePool(lambda _: ContextEngine.default(8_000)), max_conversations=3
            ),
            "on the EnginePool",
        ),
    ],
    ids=[
        "single_engine",
        "not_callable",
        "bad_trigger",
        "bad_model_provider",
        "bad_cap",
        "pool_and_limit",
    ],
)
def test_provider_configuration_errors_say_what_to_pass(
    build: Callable[[], object], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        build()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({}, "session, or conversation_id="),
        ({"session": NotASession()}, "Agents SDK Session"),
        ({"conversation_id": ""}, "non-empty str"),
        (
            {"conversation_id": "c", "call_model_input_filter": print},
            "sets call_model_input_filter",
        ),
        ({"conversation_id": "c", "model_provider": Models({})}, "sets model_provider"),
    ],
    ids=["no_conversation", "not_a_session", "empty_id", "own_filter", "own_model_provider"],
)
def test_run_config_errors_say_what_to_pass(arguments: dict[str, Any], message: str) -> None:
    provider = ContextEngineProvider(
        lambda _: ContextEngine.default(8_000), model_provider=Models({})
    )
    with pytest.raises(ConfigurationError, match=message):
        provider.run_config(**arguments)
