"""The recall tool: schemas for OpenAI and Anthropic, and the handler the agent's calls reach."""

from __future__ import annotations

import json
import logging

import pytest

from context_engine import ConfigurationError, ContextEngine, Message
from context_engine.archive import ArchiveRecord, MemoryArchive
from context_engine.archive.tool import MAX_REFERENCE_CHARS, RECALL_TOOL_NAME, RecallTool
from context_engine.errors import ArchiveError
from context_engine.strategies import ToolResultMicrocompact
from context_engine.testing import FixedTokenCounter
from tests.archive.recall_walk import references_in
from tests.fakes import agent_session

ARC = "arc-" + "0" * 20


def archived_engine(archive: MemoryArchive | None = None, session: str = "s1") -> ContextEngine:
    return ContextEngine(
        6_000,
        [ToolResultMicrocompact()],
        reserve_tokens=500,
        token_counter=FixedTokenCounter(),
        archive=archive or MemoryArchive(),
        session_id=session,
    )


async def cleared_reference(engine: ContextEngine) -> tuple[str, Message]:
    session = agent_session(40)
    result = await engine.project(session)
    reference = references_in(result.messages)[0]
    (original,) = await engine.recall(reference)
    return reference, original


def test_openai_schema_is_a_chat_completions_function_tool() -> None:
    schema = RecallTool(engine=archived_engine()).openai_schema
    assert schema["type"] == "function"
    function = schema["function"]
    assert function["name"] == RECALL_TOOL_NAME
    assert function["parameters"]["required"] == ["reference"]
    assert set(function["parameters"]["properties"]) == {"reference", "offset"}
    json.dumps(schema)  # what goes over the wire is plain JSON


def test_anthropic_schema_is_a_messages_api_tool() -> None:
    schema = RecallTool(engine=archived_engine()).anthropic_schema
    assert set(schema) == {"name", "description", "input_schema"}
    assert schema["name"] == RECALL_TOOL_NAME
    assert schema["input_schema"]["type"] == "object"


@pytest.mark.parametrize("as_json", [True, False], ids=["json-text", "mapping"])
async def test_the_handler_returns_a_cleared_tool_result_as_it_was(as_json: bool) -> None:
    engine = archived_engine()
    reference, original = await cleared_reference(engine)
    tool = RecallTool(engine=engine)
    arguments = json.dumps({"reference": reference}) if as_json else {"reference": reference}
    assert await tool(arguments) == original.text


async def test_placeholders_tell_the_agent_to_call_the_tool_by_its_name() -> None:
    engine = archived_engine()
    result = await engine.project(agent_session(40))
    cleared = [m for m in result.messages if references_in([m])]
    assert cleared
    assert all(RECALL_TOOL_NAME in m.text for m in cleared)


async def test_long_originals_come_back_in_pages_that_join_to_the_original() -> None:
    engine = archived_engine()
    reference, original = await cleared_reference(engine)
    tool = RecallTool(engine=engine, page_chars=300)
    pages, offset = [], 0
    while True:
        answer = await tool({"reference": reference, "offset": offset})
        page, _, note = answer.partition("\n[")
        pages.append(page)
        if not note:
            break
        offset = int(note.split("offset=")[1].split(" ")[0])
    assert "".join(pages) == original.text
    assert len(pages) == -(-len(original.text) // 300)


async def test_a_range_comes_back_as_labelled_messages() -> None:
    archive = MemoryArchive()
    engine = archived_engine(archive)
    messages = (Message.user("please fix the parser"), Message.assistant("Looking at parser.py"))
    record = ArchiveRecord(reference="arc-" + "1" * 20, kind="messages", messages=messages)
    await archive.put("s1", [record])
    answer = await RecallTool(engine=engine)({"reference": record.reference})
    assert answer == "[user]: please fix the parser\n\n[assistant]: Looking at parser.py"


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ("not json", "must be JSON"),
        ("[1, 2]", "must be an object"),
        ({}, "Pass the reference"),
        ({"reference": "  "}, "Pass the reference"),
        ({"reference": "arc-" + "0" * 20, "offset": -1}, "offset must be"),
        ({"reference": "arc-" + "0" * 20, "offset": True}, "offset must be"),
        ({"reference": "arc-" + "0" * 20}, "No archived content"),
    ],
    ids=[
        "not-json",
        "json-array",
        "no-reference",
        "blank-reference",
        "negative-offset",
        "bool-offset",
        "unknown-reference",
    ],
)
async def test_bad_calls_get_a_sentence_for_the_model_not_an_exception(
    arguments: object, says: str
) -> None:
    answer = await RecallTool(engine=archived_engine())(arguments)  # type: ignore[arg-type]
    assert says in answer


async def test_a_reference_of_another_session_is_refused_by_the_tool() -> None:
    archive = MemoryArchive()
    reference, _ = await cleared_reference(archived_engine(archive, "worker-a"))
    other = RecallTool(engine=archived_engine(archive, "worker-b"))
    assert "No archived content" in await other({"reference": reference})


class DownArchive(MemoryArchive):
    """A store whose reads fail with an error naming its host, as the real stores' do."""

    async def get(self, session_id: str, reference: str) -> ArchiveRecord | None:
        raise ArchiveError("redis archive redis://:***@secret-host.internal:6390/0: down")

    async def find_tool_result(self, session_id: str, tool_call_id: str) -> ArchiveRecord | None:
        raise ConnectionError("sqlite archive /srv/private/archive.db: disk gone")


@pytest.mark.parametrize("reference", [ARC, "call_7"], ids=["reference", "tool-call-id"])
async def test_an_unavailable_store_is_reported_without_its_path_or_host(reference: str) -> None:
    answer = await RecallTool(engine=archived_engine(DownArchive()))({"reference": reference})
    assert "archive is unavailable" in answer
    assert "secret-host" not in answer
    assert "/srv/private" not in answer


async def test_the_reference_is_logged_escaped_so_it_cannot_forge_log_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    forged = "call_1\nCRITICAL context_engine: all archives wiped"
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        await RecallTool(engine=archived_engine(DownArchive()))({"reference": forged})
    (record,) = caplog.records
    assert "\n" not in record.getMessage()
    assert "all archives wiped" in record.getMessage()  # still there, escaped on one line


@pytest.mark.parametrize(
    "arguments",
    ["[" * 100_000, '{"reference": ' * 50_000, b'{"reference": "\xff"}'],
    ids=["nested-arrays", "nested-objects", "bytes"],
)
async def test_arguments_that_break_the_json_parser_get_a_sentence(arguments: object) -> None:
    """Deep nesting raises RecursionError, not ValueError; it once escaped the handler."""
    answer = await RecallTool(engine=archived_engine())(arguments)  # type: ignore[arg-type]
    assert "JSON" in answer or "No archived content" in answer


async def test_a_huge_reference_is_refused_without_being_echoed() -> None:
    huge = "arc-" + "a" * 10_000_000
    answer = await RecallTool(engine=archived_engine())({"reference": huge})
    assert "10,000,004 characters long" in answer
    assert len(answer) < 300


def test_the_schema_bounds_the_reference_length() -> None:
    tool = RecallTool(engine=archived_engine())
    for parameters in (
        tool.openai_schema["function"]["parameters"],
        tool.anthropic_schema["input_schema"],
    ):
        assert parameters["properties"]["reference"]["maxLength"] == MAX_REFERENCE_CHARS
    assert len(ARC) <= MAX_REFERENCE_CHARS


async def test_a_tool_call_id_brings_back_its_cleared_result() -> None:
    """As an agent reads tool-results/{id}.txt, the model can name the call it remembers."""
    engine = archived_engine()
    _, original = await cleared_reference(engine)
    assert original.tool_call_id
    tool = RecallTool(engine=engine)
    assert await tool({"reference": original.tool_call_id}) == original.text
    assert "No archived content" in await tool({"reference": "call_never_made"})


def test_call_sync_answers_outside_an_event_loop() -> None:
    engine = archived_engine()
    result = engine.project_sync(agent_session(40))
    reference = references_in(result.messages)[0]
    (original,) = engine.recall_sync(reference)
    assert RecallTool(engine=engine).call_sync({"reference": reference}) == original.text


def test_a_tool_for_an_engine_without_archive_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="archive= and session_id="):
        RecallTool(engine=ContextEngine(6_000))


@pytest.mark.parametrize("page_chars", [0, 199, True, 2.5], ids=["zero", "tiny", "bool", "float"])
def test_page_size_must_be_a_useful_int(page_chars: object) -> None:
    with pytest.raises(ConfigurationError, match="page_chars"):
        RecallTool(engine=archived_engine(), page_chars=page_chars)  # type: ignore[arg-type]
