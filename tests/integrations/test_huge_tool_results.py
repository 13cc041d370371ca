"""A 60k-token tool result in the middle of a real agent loop, at an 8k window, in every runtime.

One ``grep`` over a repository returns about 60,000 tokens, far more than the
whole window; the newest tool group is protected from every strategy but the
tool-result cap, so without it every view is futile and a provider that rejects
over-window prompts ends the run. Each test drives one runtime's own agent loop
(LangChain v1 middleware, Strands conversation manager, pydantic-ai capability,
OpenAI Agents SDK filter and model wrapper) with that runtime's scripted model
and real tools over a repository on disk: file reads, the grep, more reads, an
answer. The model bills each prompt with the engine's counter and raises the
runtime's own context-length error above the window.

Each run must finish with its answer, with every prompt under the threshold
(so none rejected) and every view keeping the invariants, and the grep output
must reach the model only as a capped preview naming its size (and, with an
archive, the reference `ContextEngine.recall` returns the original under).

Each runtime runs twice. With the adapter's ``cap_tool_results`` (the default)
the result is capped when it arrives: the runtime's own history keeps the
preview, the projection has nothing left to cap, and the archive gives the
original back byte for byte. With it off, the history keeps the whole output
and only the views are capped.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest

from context_engine import ContextEngine, Message, RewriteEvent, TextBlock
from context_engine.archive import MemoryArchive
from context_engine.archive.reference import REFERENCE_PATTERN
from context_engine.invariants import check_view
from context_engine.strategies import ToolResultCap
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import FixedTokenCounter

WINDOW = 8_000  # the provider rejects any prompt above it
GREP_STEP = 3  # the agent's fourth tool call is the grep
TOOL_STEPS = 10  # tool calls before the final answer: reads, the grep, more reads
COUNTER = FixedTokenCounter()
PACKAGES, MODULES, LINES = 6, 24, 20  # the grep finds every line: about 60k tokens
SIZE = re.compile(r"in full it is ([\d,]+) tokens, ([\d,]+) lines, ([\d,]+) characters")

Plan = tuple[str, dict[str, Any]] | None


# -- the repository and its tools -------------------------------------------------------


def module_path(number: int) -> str:
    return f"src/pkg_{number % PACKAGES}/mod_{number}.py"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """A source tree whose every line carries a TODO marker."""
    for package in range(PACKAGES):
        for module in range(MODULES):
            number = package * MODULES + module
            path = tmp_path / module_path(number)
            path.parent.mkdir(parents=True, exist_ok=True)
            body = "\n".join(
                f"def handler_{n}(value):  # TODO(parser): nested group {n} of mod_{number}"
                for n in range(LINES)
            )
            path.write_text(body + "\n", encoding="utf-8")
    return tmp_path


def repository_tools(root: Path) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """``read_file`` and ``grep`` over ``root``, as plain functions each runtime wraps."""

    def read_file(path: str) -> str:
        """Read one file of the repository.

        Args:
            path: The file's path from the repository root.
        """
        return (root / path).read_text(encoding="utf-8")

    def grep(pattern: str) -> str:
        """Search every file of the repository for a regular expression.

        Args:
            pattern: The regular expression to look for.
        """
        found = re.compile(pattern)
        return "\n".join(
            f"{file.relative_to(root).as_posix()}:{number}:{line}"
            for file in sorted(root.rglob("*.py"))
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1)
            if found.search(line)
        )

    return read_file, grep


def plan(step: int) -> Plan:
    """The agent's ``step``-th tool call (from 0): reads around one grep; None: the answer."""
    if step == GREP_STEP:
        return "grep", {"pattern": "TODO"}
    return ("read_file", {"path": module_path(step)}) if step < TOOL_STEPS else None


# -- the engine and what every run must show ------------------------------------------------


class Events:
    """The engine's hooks, collected."""

    def __init__(self) -> None:
        self.projected: list[RewriteEvent] = []
        self.recovered: list[RewriteEvent] = []

    def engine(self, *, archived: bool, **options: Any) -> ContextEngine:
        """``ContextEngine.default`` at the 8k window, with a MemoryArchive when ``archived``."""
        if archived:
            options.update(archive=MemoryArchive(), session_id="huge-tool-result")
        return ContextEngine.default(
            WINDOW,
            summarizer=ExtractiveSummarizer(),
            token_counter=COUNTER,
            on_project=self.projected.append,
            on_recover=self.recovered.append,
            **options,
        )


CAPPING = [
    pytest.param(True, id="capped-when-it-arrives"),
    pytest.param(False, id="capped-in-the-views-only"),
]


def assert_managed(
    engine: ContextEngine,
    events: Events,
    transcripts: Sequence[Sequence[Message]],
    views: Sequence[Sequence[Message]],
    billed: Sequence[int],
    original: str,
    *,
    held_whole: bool = True,
    capped_before: bool = False,
) -> str:
    """Every call fit and kept the invariants; the grep output went out as a preview only.

    ``held_whole``: the transcripts the runtime passed hold the whole output
    (else its preview); ``capped_before``: the output was capped before any
    projection, so the pipeline's cap never had to apply.

    Returns:
        The preview the model saw first.
    """
    assert len(transcripts) == len(views) == len(billed) == TOOL_STEPS + 1  # none rejected
    assert events.recovered == []
    for number, (transcript, view, tokens) in enumerate(
        zip(transcripts, views, billed, strict=True)
    ):
        assert tokens <= engine.threshold, f"call {number}: {tokens} tokens"
        assert check_view(transcript, view) == [], f"call {number}"
    after = transcripts[GREP_STEP + 1]  # the history the call after the grep was made from
    (grep_id,) = (c.id for m in after for c in m.tool_calls if c.name == "grep")
    (result,) = (m for m in after if m.role == "tool" and m.tool_call_id == grep_id)
    whole = attrs.evolve(result, content=(TextBlock(original),), metadata={})
    assert 55_000 < COUNTER.count_message(whole) < 70_000  # alone it would be rejected
    cap = ToolResultCap().limit(engine.threshold)
    if held_whole:
        assert result.text == original  # the runtime holds the whole output
    else:
        assert COUNTER.count_message(result) <= cap  # the runtime holds the preview
    shown = [m for view in views for m in view if m.role == "tool" and m.tool_call_id == grep_id]
    assert shown  # the model saw it ...
    assert all(COUNTER.count_message(m) <= cap for m in shown)  # ... never above the cap
    first = next(m for m in views[GREP_STEP + 1] if m.tool_call_id == grep_id).text
    size = SIZE.search(first)
    assert size is not None, first
    assert [int(n.replace(",", "")) for n in size.groups()] == [
        COUNTER.count_message(whole),
        len(original.splitlines()),
        len(original),
    ]
    lines = first.splitlines()
    assert original.splitlines()[0] == lines[0]  # the output's head and tail, whole lines
    assert original.splitlines()[-1] in lines[-2:]  # (an archive note may follow)
    steps = [s for e in events.projected for s in e.steps if s.name == "tool_result_cap"]
    assert any(s.applied for s in steps) is not capped_before
    return first


async def assert_recallable(engine: ContextEngine, preview: str, original: str) -> None:
    """The preview names one archive reference; recalling it gives the output back."""
    (reference,) = REFERENCE_PATTERN.findall(preview)
    (recalled,) = await engine.recall(reference)
    assert recalled.role == "tool"
    assert recalled.text.encode() == original.encode()


def grep_call(messages: Sequence[Message]) -> str | None:
    """The id of the grep call in ``messages``, or None."""
    return next((c.id for m in messages for c in m.tool_calls if c.name == "grep"), None)


def assert_not_archived(preview: str) -> None:
    assert REFERENCE_PATTERN.search(preview) is None


async def assert_kept(
    engine: ContextEngine, kept: str, preview: str, original: str, *, capped: bool
) -> None:
    """The runtime's own history after the run: the preview (recallable) when capped, else whole."""
    if capped:
        assert kept == preview
        assert len(kept) < len(original) // 50
        await assert_recallable(engine, kept, original)
    else:
        assert kept == original


# -- the runtimes --------------------------------------------------------------------------


@pytest.mark.extra("langchain")
@pytest.mark.parametrize("capped", CAPPING)
def test_langchain_middleware_finishes_with_a_huge_grep_in_the_middle(
    repository: Path, capped: bool
) -> None:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    from context_engine.formats.langchain import from_langchain, message_from_langchain
    from tests.integrations.test_langchain import ScriptedModel, build, prompt_tokens

    events = Events()
    engine = events.engine(archived=True)
    model = ScriptedModel(plan=plan, limit=WINDOW)
    read_file, grep = repository_tools(repository)
    agent, recorder = build(
        model, engine, tools=[tool(read_file), tool(grep)], cap_tool_results=capped
    )

    result = agent.invoke({"messages": [("user", "Find every TODO and read the modules.")]})

    assert result["messages"][-1].content == "done"
    assert model.rejected == 0
    original = grep("TODO")
    preview = assert_managed(
        engine,
        events,
        [from_langchain(t) for t in recorder.transcripts],
        [from_langchain(v) for v in model.received],
        [prompt_tokens(v) for v in model.received],
        original,
        held_whole=not capped,
        capped_before=capped,
    )
    (kept,) = (m for m in result["messages"] if isinstance(m, ToolMessage) and m.name == "grep")
    assert kept.status == "success"
    text = message_from_langchain(kept).text
    asyncio.run(assert_kept(engine, text, preview, original, capped=capped))
    asyncio.run(assert_recallable(engine, preview, original))


@pytest.mark.extra("strands")
@pytest.mark.parametrize("capped", CAPPING)
def test_strands_conversation_manager_finishes_with_a_huge_grep_in_the_middle(
    repository: Path, capped: bool
) -> None:
    from strands import tool

    from context_engine.formats.strands import from_strands
    from tests.integrations.test_strands import SYSTEM, ScriptedModel, bare, make_run

    events = Events()
    engine = events.engine(archived=capped)
    model = ScriptedModel(0, COUNTER, plan=plan, limit=WINDOW)
    read_file, grep = repository_tools(repository)
    run = make_run(
        COUNTER,
        model,
        engine=engine,
        tools=[tool(read_file), tool(grep)],
        cap_tool_results=capped,
    )

    result = run.agent("Find every TODO and read the modules.")

    assert str(result).strip() == "All modules reviewed."
    assert model.rejected == 0
    original = grep("TODO")
    preview = assert_managed(
        engine,
        events,
        [from_strands(bare(t), system_prompt=SYSTEM) for t in run.transcripts],
        [from_strands(r, system_prompt=SYSTEM) for r in model.received],
        model.billed,
        original,
        held_whole=not capped,
        capped_before=capped,
    )
    if not capped:  # a commit writes the view, a capped preview included, into the history
        assert_not_archived(preview)
        return
    # agent.messages when last sent with the grep (a later commit folds it into a checkpoint)
    *_, history = (h for h in map(from_strands, run.transcripts) if grep_call(h) is not None)
    (kept,) = (m for m in history if m.role == "tool" and m.tool_call_id == grep_call(history))
    assert kept.metadata.get("strands.status", "success") == "success"
    asyncio.run(assert_kept(engine, kept.text, preview, original, capped=True))


@pytest.mark.extra("pydantic-ai")
@pytest.mark.parametrize("capped", CAPPING)
async def test_pydantic_ai_capability_finishes_with_a_huge_grep_in_the_middle(
    repository: Path, capped: bool
) -> None:
    from pydantic_ai import messages as pm

    from context_engine.integrations.pydantic_ai import ContextEngineCapability
    from tests.integrations.test_pydantic_ai import Recorder, ScriptedModel, make_agent, plain

    events = Events()
    engine = events.engine(archived=True)
    model, recorder = ScriptedModel(COUNTER, limit=WINDOW, plan=plan), Recorder()
    read_file, grep = repository_tools(repository)
    # The scenario's window is sized by hand for the messages alone: counting the tool schemas
    # too would move a checkpoint after the grep, and the history would then hold its preview.
    capability = ContextEngineCapability(engine, cap_tool_results=capped, count_request=False)
    agent = make_agent(model, recorder, capability, tools=[read_file, grep])

    result = await agent.run("Find every TODO and read the modules.")

    assert result.output == "All modules read; done."
    original = grep("TODO")
    preview = assert_managed(
        engine,
        events,
        [plain(t) for t in recorder.transcripts],
        [plain(v) for v in model.views],
        model.tokens,
        original,
        held_whole=not capped,
        capped_before=capped,
    )
    (kept,) = (
        part
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, pm.ToolReturnPart) and part.tool_name == "grep"
    )
    assert kept.outcome == "success"
    await assert_kept(engine, kept.model_response_str(), preview, original, capped=capped)
    await assert_recallable(engine, preview, original)


@pytest.mark.extra("openai-agents")
@pytest.mark.parametrize("capped", CAPPING)
async def test_openai_agents_filter_and_model_finish_with_a_huge_grep_in_the_middle(
    repository: Path, capped: bool
) -> None:
    from agents import Agent, Runner, function_tool
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message
    from agents.testing import function_call as scripted_call
    from agents.usage import Usage as AgentsUsage

    from context_engine.formats.openai_agents import from_openai_agents
    from context_engine.integrations.openai_agents import ContextEngineModel
    from tests.integrations.test_openai_agents import (
        INSTRUCTIONS,
        TOOL_SCHEMA_TOKENS,
        make_harness,
    )
    from tests.provider_errors import openai_status_error

    archive = {"archive": MemoryArchive(), "session_id": "huge-tool-result"} if capped else {}
    harness = make_harness(
        WINDOW,
        reserve=None,
        tool_result_cap="default",
        overhead_tokens=TOOL_SCHEMA_TOKENS,
        cap_tool_results=capped,
        **archive,
    )
    events = Events()
    events.projected, events.recovered = harness.events, harness.recoveries
    billed: list[int] = []

    def provider(call: ModelCall) -> ModelStep | Exception:
        """Bills the prompt (tool schemas included), rejects it above the window, answers."""
        tokens = harness.tokens(harness.view(call)) + TOOL_SCHEMA_TOKENS
        if tokens > WINDOW:
            return openai_status_error(
                400,
                f"This model's maximum context length is {WINDOW} tokens. However, your "
                f"messages resulted in {tokens} tokens.",
                code="context_length_exceeded",
            )
        step = len(billed)
        billed.append(tokens)
        planned = plan(step)
        if planned is None:
            output = [assistant_message("All modules read; done.", item_id="msg_final")]
        else:
            output = [
                assistant_message(f"Step {step}: calling {planned[0]}.", item_id=f"msg_{step}"),
                scripted_call(*planned, call_id=f"call_{step}"),
            ]
        # About what the answer costs, as the harness bills it (an answer is under 40 tokens).
        usage = AgentsUsage(requests=1, input_tokens=tokens, output_tokens=40)
        usage.total_tokens = tokens + 40
        return ModelStep(output=output, usage=usage)

    model = ScriptedModel([ModelStep.respond(provider)] * (TOOL_STEPS + 5))
    read_file, grep = repository_tools(repository)
    agent = Agent(
        name="coder",
        instructions=INSTRUCTIONS,
        model=ContextEngineModel(model, harness.input_filter),
        tools=[function_tool(read_file), function_tool(grep)],
    )

    result = await Runner.run(
        agent,
        "Find every TODO and read the modules.",
        run_config=harness.run_config(),
        max_turns=TOOL_STEPS + 5,
    )

    assert result.final_output == "All modules read; done."
    assert len(model.calls) == len(billed)  # none rejected
    original = grep("TODO")
    preview = assert_managed(
        harness.engine,
        events,
        [harness.transcript(i) for i in range(len(harness.received))],
        [harness.view(call) for call in model.calls],
        billed,
        original,
        capped_before=capped,  # the SDK's own items stay whole; the filter's commit is capped
    )
    history = result.to_input_list()
    (whole,) = (m for m in from_openai_agents(history) if m.tool_call_id == "call_3")
    assert whole.text == original  # the run's items: what the SDK's hooks cannot change
    stored = from_openai_agents(harness.input_filter.apply_commit(history))
    (kept,) = (m for m in stored if m.role == "tool" and m.tool_call_id == grep_call(stored))
    await assert_kept(harness.engine, kept.text, preview, original, capped=capped)
    if not capped:
        assert_not_archived(preview)
