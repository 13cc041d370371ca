"""What every archive store promises, checked against memory, a SQLite file and Redis alike."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import attrs
import pytest

from context_engine.archive import ArchiveRecord, encode_messages, reference_for
from context_engine.errors import ArchiveCodecError, ArchiveError, ConfigurationError
from context_engine.messages import ContextSummary, Message, ToolCall
from tests.archive.conftest import StoreFactory, record, rich_messages, tool_record


def same_bytes(got: ArchiveRecord | None, put: ArchiveRecord) -> None:
    assert got is not None
    assert got == put
    assert [type(m) for m in got.messages] == [type(m) for m in put.messages]
    assert encode_messages(got.messages) == encode_messages(put.messages)
    assert got.created_at > 0


async def test_records_come_back_byte_for_byte(make_store: StoreFactory) -> None:
    """Checkpoints with references, images, thinking, calls, usage, times and metadata survive."""
    store = await make_store()
    rich = rich_messages()
    put = [
        record("messages", *rich),
        record("tool_result", rich[-1]),
        record("text", rich[2]),
    ]
    await store.put("s1", put)
    again = await make_store()
    for archive in (store, again):
        for original in put:
            same_bytes(await archive.get("s1", original.reference), original)
    checkpoint = (await again.get("s1", put[0].reference)).messages[0]  # type: ignore[union-attr]
    assert isinstance(checkpoint, ContextSummary)
    assert checkpoint.references == ("arc-0123456789abcdef0123", "arc-fedcba9876543210fedc")


async def test_a_reference_of_one_session_is_unknown_in_another(make_store: StoreFactory) -> None:
    store = await make_store()
    shared = tool_record("c1", "ls output")
    await store.put("session-a", [shared, record("text", Message.user("only in a"))])
    assert await store.get("session-b", shared.reference) is None
    assert await store.find_tool_result("session-b", "c1") is None
    assert await store.records("session-b") == []
    assert await store.sessions() == ["session-a"]
    await store.put("session-b", [shared])
    assert len(await store.records("session-a")) == 2
    assert len(await store.records("session-b")) == 1
    assert await store.sessions() == ["session-a", "session-b"]


async def test_putting_a_record_twice_stores_it_once_and_keeps_its_time(
    make_store: StoreFactory,
) -> None:
    store = await make_store()
    first = tool_record("c1", "output")
    await store.put("s", [first])
    stored = await store.get("s", first.reference)
    assert stored is not None
    await asyncio.sleep(0.01)
    second = tool_record("c2", "other output")
    await store.put("s", [first, second, second])
    kept = await store.records("s")
    assert [r.reference for r in kept] == [first.reference, second.reference]
    assert kept[0].created_at == stored.created_at
    assert kept[1].created_at > stored.created_at


async def test_a_record_put_again_with_other_content_keeps_the_first(
    make_store: StoreFactory,
) -> None:
    """References are content hashes, so a second body under one is a caller bug: first wins."""
    store = await make_store()
    first = tool_record("c1", "first")
    await store.put("s", [first])
    await store.put("s", [attrs.evolve(first, messages=(Message.tool("c1", "second"),))])
    got = await store.get("s", first.reference)
    assert got is not None
    assert got.messages[0].text == "first"


async def test_concurrent_puts_of_the_same_record_store_it_once(make_store: StoreFactory) -> None:
    store = await make_store()
    same = record("messages", *rich_messages())
    await asyncio.gather(*(store.put("s", [same]) for _ in range(20)))
    assert len(await store.records("s")) == 1


async def test_a_put_with_one_unarchivable_message_stores_nothing(
    make_store: StoreFactory,
) -> None:
    store = await make_store()
    good = tool_record("c1", "fine")
    bad = ArchiveRecord(
        reference="arc-00000000000000000bad",
        kind="text",
        messages=(Message("user", "x", metadata={"handle": object()}),),
    )
    with pytest.raises(ArchiveError, match="metadata is not JSON"):
        await store.put("s", [good, bad])
    assert await store.records("s") == []
    assert await store.get("s", good.reference) is None
    assert await store.find_tool_result("s", "c1") is None
    assert await store.sessions() == []


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({1: "a"}, "int key 1"),
        ({"outer": {2.5: "x"}}, "float key 2.5 at metadata['outer']"),
        ({"span": (1, 2)}, "tuple at metadata['span']"),
        ({"deep": [{"ok": [(3,)]}]}, "tuple at metadata['deep'][0]['ok'][0]"),
        ({"tags": {"a", "b"}}, "set at metadata['tags']"),
    ],
    ids=["int-key", "nested-float-key", "tuple", "nested-tuple", "set"],
)
async def test_metadata_json_would_change_is_refused_by_every_store(
    make_store: StoreFactory, metadata: dict[Any, Any], problem: str
) -> None:
    """Memory once kept int keys and tuples that SQLite and Redis returned as str and list.

    Every store raises the codec's typed refusal, still an `ArchiveError` for old callers.
    """
    store = await make_store()
    message = Message("user", "x", metadata=metadata)
    bad = ArchiveRecord(reference="arc-00000000000000000bad", kind="text", messages=(message,))
    with pytest.raises(ArchiveCodecError, match="metadata is not JSON") as caught:
        await store.put("s", [bad])
    assert isinstance(caught.value, ArchiveError)
    assert problem in str(caught.value)
    assert await store.records("s") == []


def test_an_int_key_and_its_str_twin_never_share_a_reference() -> None:
    """``{1: 'a'}`` has no reference at all rather than the one of ``{'1': 'a'}``."""
    text_key = reference_for([Message("user", "x", metadata={"1": "a"})])
    assert text_key.startswith("arc-")
    with pytest.raises(ArchiveError, match="int key 1"):
        reference_for([Message("user", "x", metadata={1: "a"})])


@pytest.mark.parametrize(
    "session_id",
    ["", " padded", "two\nlines", 7],
    ids=["empty", "surrounding-space", "newline", "not-a-str"],
)
async def test_a_bad_session_id_is_refused_before_anything_is_written(
    make_store: StoreFactory, session_id: Any
) -> None:
    store = await make_store()
    with pytest.raises(ConfigurationError, match="session_id"):
        await store.put(session_id, [tool_record("c1", "x")])
    assert await store.sessions() == []


async def test_an_empty_put_creates_no_session(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.put("s", [])
    assert await store.sessions() == []


async def test_find_tool_result_returns_the_newest_record_of_a_call(
    make_store: StoreFactory,
) -> None:
    store = await make_store()
    old, new = tool_record("c1", "v1"), tool_record("c1", "v2")
    pair = record(
        "tool_result", Message.tool("c7", "seven", name="bash"), Message.tool("c8", "eight")
    )
    dropped = record(
        "messages",
        Message.assistant(None, [ToolCall("c9", "bash")]),
        Message.tool("c9", "nine"),
    )
    await store.put("s", [old])
    await store.put("s", [new, pair, dropped])
    await store.put("s", [old])  # already stored: not newer for it
    assert (await store.find_tool_result("s", "c1")) == new
    assert (await store.find_tool_result("s", "c8")) == pair
    assert await store.find_tool_result("s", "c9") is None  # only tool_result records are indexed
    assert await store.find_tool_result("s", "missing") is None


async def test_records_come_back_oldest_first(make_store: StoreFactory) -> None:
    store = await make_store()
    made = [tool_record(f"c{n}", f"result {n}") for n in range(30)]
    for start in range(0, 30, 7):
        await store.put("s", made[start : start + 7])
    assert [r.reference for r in await store.records("s")] == [r.reference for r in made]


async def test_state_is_shared_text_with_an_atomic_counter(make_store: StoreFactory) -> None:
    store = await make_store()
    assert await store.get_state("breaker") is None
    await store.set_state("seed", "remember the failing test")
    assert await store.get_state("seed") == "remember the failing test"
    await store.set_state("seed", "replaced")
    assert await store.get_state("seed") == "replaced"
    counts = await asyncio.gather(*(store.increment_state("failures") for _ in range(25)))
    assert sorted(counts) == list(range(1, 26))
    assert await store.get_state("failures") == "25"
    with pytest.raises(ArchiveError, match="not an integer"):
        await store.increment_state("seed")
    assert await store.get_state("seed") == "replaced"
    await store.delete_state("seed")
    await store.delete_state("never-set")
    assert await store.get_state("seed") is None
    assert await (await make_store()).get_state("failures") == "25"


# -- housekeeping (issue 20) ------------------------------------------------------------------


async def test_deleting_a_session_removes_its_records_and_index_only(
    make_store: StoreFactory,
) -> None:
    store = await make_store()
    await store.put("gone", [tool_record("c1", "one"), tool_record("c2", "two")])
    kept = tool_record("c1", "other session")
    await store.put("kept", [kept])
    assert await store.delete_session("gone") == 2
    assert await store.records("gone") == []
    assert await store.find_tool_result("gone", "c1") is None
    assert await store.sessions() == ["kept"]
    assert await store.find_tool_result("kept", "c1") == kept
    assert await store.delete_session("gone") == 0  # nothing left: not an error


async def test_expire_deletes_records_older_than_the_age_in_every_session(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await make_store()
    clock = [1_700_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    old, new = tool_record("c1", "a day old"), tool_record("c2", "fresh")
    await store.put("s", [old])
    await store.put("only-old", [tool_record("c3", "also a day old")])
    clock[0] += 86_400
    await store.put("s", [new])
    assert await store.expire(3_600) == 2
    assert [r.reference for r in await store.records("s")] == [new.reference]
    assert await store.find_tool_result("s", "c1") is None
    assert await store.find_tool_result("s", "c2") == new
    assert await store.sessions() == ["s"]
    assert await store.expire(3_600) == 0


@pytest.mark.parametrize("age", [float("nan"), -1, "7d"], ids=["nan", "negative", "str"])
async def test_expire_refuses_an_age_that_is_not_seconds(
    make_store: StoreFactory, age: Any
) -> None:
    store = await make_store()
    await store.put("s", [tool_record("c1", "x")])
    with pytest.raises(ConfigurationError, match="max_age_seconds"):
        await store.expire(age)
    assert len(await store.records("s")) == 1


async def test_refresh_keeps_every_record(make_store: StoreFactory) -> None:
    store = await make_store()
    await store.put("s", [tool_record("c1", "x")])
    await store.refresh("s")
    await store.refresh("never-written")
    assert len(await store.records("s")) == 1
    assert await store.sessions() == ["s"]
