"""The provider chain on its own: order, failures, cancellation, rules, caps, trace, replay."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import attrs
import pytest

from context_engine import Message
from context_engine.assembly import (
    Assembler,
    AssemblyTrace,
    Boost,
    CallableProvider,
    FileProvider,
    InMemoryRetriever,
    Item,
    ProviderRequest,
    RetrievalProvider,
    Rule,
    StaticProvider,
    replay,
    strip_provided,
)
from context_engine.assembly.provider import ProviderOutput
from context_engine.errors import ConfigurationError
from context_engine.testing import FixedTokenCounter

COUNTER = FixedTokenCounter()
TRANSCRIPT = (Message.system("You are helpful."), Message.user("fix the login page"))


def recorder(name: str, priority: int, ran: list[str]) -> CallableProvider:
    def provide(request: ProviderRequest) -> str:
        ran.append(name)
        return f"from {name}"

    return CallableProvider(function=provide, name=name, priority=priority)


async def assemble(assembler: Assembler, transcript: tuple[Message, ...] = TRANSCRIPT):
    return await assembler.assemble(transcript, COUNTER, room=8_000)


async def test_priorities_10_5_5_run_as_5_5_10_in_registration_order() -> None:
    ran: list[str] = []
    assembler = Assembler([recorder("ten", 10, ran), recorder("five_a", 5, ran)])
    assembler.add(recorder("five_b", 5, ran))
    await assemble(assembler)
    assert ran == ["five_a", "five_b", "ten"]


async def test_a_raising_provider_is_recorded_and_the_others_still_inject() -> None:
    seen: list[tuple[Message, ...]] = []

    def broken(request: ProviderRequest) -> str:
        raise RuntimeError("CRM down")

    def after(request: ProviderRequest) -> str:
        seen.append(request.provided)
        return "on-call: ada"

    assembler = Assembler(
        [
            CallableProvider(function=lambda r: "flags: beta", name="flags", priority=1),
            CallableProvider(function=broken, name="crm", priority=5),
            CallableProvider(function=after, name="oncall", priority=10),
        ]
    )
    assembly = await assemble(assembler)
    failures = [d for d in assembly.decisions if d.action == "fail"]
    assert [(d.source, d.reason) for d in failures] == [("crm", "RuntimeError: CRM down")]
    assert [b.source for b in assembly.blocks] == ["flags", "oncall"]
    assert [m.text for m in seen[0]] == ["flags: beta"]  # the previous output, not the failed one


async def test_cancellation_stops_the_chain() -> None:
    ran: list[str] = []

    async def cancelled(request: ProviderRequest) -> str:
        raise asyncio.CancelledError

    assembler = Assembler(
        [CallableProvider(function=cancelled, name="slow", priority=1), recorder("late", 2, ran)]
    )
    with pytest.raises(asyncio.CancelledError):
        await assemble(assembler)
    assert ran == []


async def test_none_adds_nothing_and_a_wrong_type_is_recorded() -> None:
    def wrong(request: ProviderRequest) -> ProviderOutput:
        return [42]  # type: ignore[list-item]

    assembler = Assembler(
        [
            CallableProvider(function=lambda r: None, name="quiet"),
            CallableProvider(function=wrong, name="odd"),
        ]
    )
    assembly = await assemble(assembler)
    assert assembly.blocks == ()
    assert [d.reason for d in assembly.decisions] == ["returned int: expected Messages or Items"]


def test_two_providers_with_one_name_are_refused() -> None:
    assembler = Assembler([StaticProvider(text="a", name="rules")])
    with pytest.raises(ConfigurationError, match="'rules' is already registered"):
        assembler.add(StaticProvider(text="b", name="rules"))
    assert [p.name for p in assembler.providers] == ["rules"]


def test_a_provider_missing_the_contract_is_refused_with_what_it_lacks() -> None:
    with pytest.raises(ConfigurationError, match="not a ContextProvider"):
        Assembler([object()])  # type: ignore[list-item]
    bad = CallableProvider(function=lambda r: None, name="x", placement="middle")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="placement must be 'stable', 'volatile' or"):
        Assembler([bad])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "generated").mkdir()
    (tmp_path / "docs" / "security-decisions.md").write_text("Sessions expire. " * 200)
    (tmp_path / "docs" / "style.md").write_text("Use tabs.")
    (tmp_path / "generated" / "api.py").write_text("# generated\n")
    return tmp_path


AUTH = Rule(
    name="auth",
    when=("auth", "login", "session"),
    always_include=("docs/security-decisions.md",),
    exclude=("generated/**",),
)


async def test_a_login_task_includes_the_security_doc_even_past_its_cap(project: Path) -> None:
    files = FileProvider(root=project, paths=["docs/style.md"], max_tokens=50)
    assembly = await assemble(Assembler([files], rules=[AUTH]))
    text = assembly.blocks[0].messages[0].text
    assert "# docs/security-decisions.md" in text
    pinned = [d for d in assembly.decisions if d.action == "always_include"]
    assert [d.item for d in pinned] == ["docs/security-decisions.md"]
    assert pinned[0].tokens > 50
    assert "past the source's cap of 50 tokens" in pinned[0].reason


async def test_the_rule_stays_quiet_when_the_task_does_not_mention_it(project: Path) -> None:
    files = FileProvider(root=project, paths=["docs/style.md"])
    transcript = (Message.user("rename a variable"),)
    assembly = await assemble(Assembler([files], rules=[AUTH]), transcript)
    assert "security" not in assembly.blocks[0].messages[0].text
    assert not [d for d in assembly.decisions if d.action == "always_include"]


async def test_generated_files_are_excluded_with_the_glob_recorded(project: Path) -> None:
    files = FileProvider(root=project, paths=["generated/api.py", "docs/style.md"])
    assembly = await assemble(Assembler([files], rules=[AUTH]))
    excluded = [d for d in assembly.decisions if d.action == "exclude"]
    assert [(d.item, d.reason) for d in excluded] == [
        ("generated/api.py", "rule 'auth' excludes generated/**")
    ]
    assert "# generated" not in assembly.blocks[0].messages[0].text


async def test_a_file_provider_refuses_paths_outside_its_root(project: Path) -> None:
    files = FileProvider(root=project / "docs")
    assert await files.fetch("../generated/api.py") is None
    assert await files.fetch("style.md") is not None


async def test_a_file_over_the_size_cap_is_cut_and_says_so(project: Path) -> None:
    item = await FileProvider(root=project, max_bytes=100).fetch("docs/security-decisions.md")
    assert item is not None
    assert item.text.endswith("[... docs/security-decisions.md cut at 100 bytes]")


HITS = [
    Item(id="a", text="alpha", relevance=0.9),
    Item(id="b", text="bravo", relevance=0.6),
    Item(id="c", text="charlie", relevance=0.35),
]


async def test_boost_2_0_reorders_hits() -> None:
    hits = CallableProvider(function=lambda r: HITS, name="kb")
    plain = await assemble(Assembler([hits]))
    boosted = await assemble(
        Assembler([hits], rules=[Rule(name="prefer-c", boost=[Boost(match="c", weight=2.0)])])
    )
    assert plain.blocks[0].messages[0].text.split("\n\n") == ["alpha", "bravo", "charlie"]
    assert boosted.blocks[0].messages[0].text.split("\n\n") == ["alpha", "charlie", "bravo"]
    assert [d.item for d in boosted.decisions if d.action == "boost"] == ["c"]


async def test_a_source_over_its_cap_drops_its_lowest_relevance_items_first() -> None:
    items = [Item(id=f"doc{i}", text="x" * 40, relevance=r) for i, r in enumerate([0.2, 0.9, 0.5])]
    capped = CallableProvider(function=lambda r: items, name="kb", max_tokens=20)
    assembly = await assemble(Assembler([capped]))
    assert [d.item for d in assembly.decisions if d.action == "drop"] == ["doc0"]
    assert [d.item for d in assembly.decisions if d.action == "include"] == ["doc1", "doc2"]


async def test_messages_over_a_providers_cap_are_cut_from_the_end() -> None:
    messages = [Message.user("a" * 40), Message.user("b" * 40)]
    capped = CallableProvider(function=lambda r: messages, name="notes", max_tokens=15)
    assembly = await assemble(Assembler([capped]))
    assert [(d.item, d.action) for d in assembly.decisions] == [
        ("notes[0]", "include"),
        ("notes[1]", "cap"),
    ]


async def test_retrieval_scores_hits_by_the_task() -> None:
    retriever = InMemoryRetriever({"auth": "login session tokens", "css": "colours"})
    assembly = await assemble(Assembler([RetrievalProvider(retriever=retriever)]))
    assert [d.item for d in assembly.decisions if d.action == "include"] == ["auth"]


async def test_stable_goes_after_the_system_prompt_and_volatile_before_the_task() -> None:
    assembler = Assembler(
        [
            CallableProvider(function=lambda r: "status: green", name="status"),
            CallableProvider(
                function=lambda r: "house rules", name="rules", placement="stable", role="system"
            ),
        ]
    )
    history = (
        Message.system("You are helpful."),
        Message.user("hi"),
        Message.assistant("hello"),
        Message.user("fix the login page"),
    )
    view, trace = (await assemble(assembler, history)).finish(history)
    assert [m.text for m in view] == [
        "You are helpful.",
        "house rules",
        "hi",
        "hello",
        "status: green",
        "fix the login page",
    ]
    assert strip_provided(view) == history
    assert trace.delta == "first"


async def test_a_tail_block_goes_after_the_last_message_of_an_agent_step() -> None:
    ticks = iter(range(10))
    assembler = Assembler(
        [CallableProvider(function=lambda r: f"tick {next(ticks)}", name="s", placement="tail")]
    )
    history = (Message.system("S"), Message.user("task"), Message.assistant("step 1"))
    view, _ = (await assemble(assembler, history)).finish(history)
    assert [m.text for m in view] == ["S", "task", "step 1", "tick 0"]
    longer = (*history, Message.assistant("step 2"))
    view, trace = (await assemble(assembler, longer)).finish(longer)
    assert trace.reused_tokens == sum(map(COUNTER.count_message, history))


async def test_a_volatile_change_keeps_the_prefix_and_a_stable_change_rebuilds() -> None:
    status = {"text": "status: green", "rules": "house rules v1"}
    assembler = Assembler(
        [
            CallableProvider(function=lambda r: status["text"], name="status"),
            CallableProvider(
                function=lambda r: status["rules"], name="rules", placement="stable", role="system"
            ),
        ]
    )
    history = (
        Message.system("S"),
        Message.user("one"),
        Message.assistant("ok"),
        Message.user("two"),
    )
    first_view, _ = (await assemble(assembler, history)).finish(history)
    status["text"] = "status: red"
    view, trace = (await assemble(assembler, history)).finish(history)
    assert trace.delta == "history_only"
    assert view[:4] == first_view[:4]
    assert trace.reused_tokens == sum(map(COUNTER.count_message, view[:4]))
    longer = (*history, Message.assistant("done"), Message.user("three"))
    _, appended = (await assemble(assembler, longer)).finish(longer)
    assert appended.delta == "history_only"  # the volatile block moved with the newest user message
    status["rules"] = "house rules v2"
    _, rebuilt = (await assemble(assembler, longer)).finish(longer)
    assert rebuilt.delta == "full_rebuild"


async def test_a_prompt_that_only_grew_is_append_only() -> None:
    assembler = Assembler(
        [
            CallableProvider(
                function=lambda r: "rules", name="rules", placement="stable", role="system"
            )
        ]
    )
    history = (Message.system("S"), Message.user("one"))
    (await assemble(assembler, history)).finish(history)
    grown = (*history, Message.assistant("ok"))
    _, trace = (await assemble(assembler, grown)).finish(grown)
    assert trace.delta == "append_only"


async def test_the_trace_round_trips_through_json_and_replays_the_view(project: Path) -> None:
    files = FileProvider(root=project, paths=["docs/style.md", "generated/api.py"])
    hits = CallableProvider(function=lambda r: HITS, name="kb", max_tokens=3)
    assembly = await assemble(Assembler([files, hits], rules=[AUTH]))
    view, trace = assembly.finish(TRANSCRIPT)
    again = AssemblyTrace.from_json(json.dumps(json.loads(trace.to_json())))
    assert again == trace
    assert replay(again, strip_provided(view), assembly.outputs) == view


async def test_replay_names_an_item_the_outputs_lack() -> None:
    hits = CallableProvider(function=lambda r: HITS, name="kb")
    assembly = await assemble(Assembler([hits]))
    _, trace = assembly.finish(TRANSCRIPT)
    with pytest.raises(ValueError, match="'a' from 'kb'"):
        replay(trace, TRANSCRIPT, {"kb": HITS[1:]})


async def test_the_transcript_given_to_providers_is_never_changed() -> None:
    def greedy(request: ProviderRequest) -> str:
        return "x"

    transcript = tuple(attrs.evolve(m) for m in TRANSCRIPT)
    await assemble(Assembler([CallableProvider(function=greedy, name="g")]), transcript)
    assert transcript == TRANSCRIPT


async def test_a_budget_profile_caps_each_source_by_its_share() -> None:
    from context_engine.assembly import BudgetProfile

    items = [Item(id=f"hit{i}", text="y" * 400, relevance=1 - i / 100) for i in range(40)]
    retrieval = CallableProvider(function=lambda r: items, name="kb", share="retrieval")
    assembler = Assembler([retrieval], profile=BudgetProfile(name="default"))
    assembly = await assembler.assemble(TRANSCRIPT, COUNTER, room=4_500)
    share = int((4_000 - 400) * 0.45)  # 500 for the system prompt, 10 % preferences
    kept = sum(d.tokens for d in assembly.decisions if d.action == "include")
    assert 0 < kept <= share
    assert next(d.item for d in assembly.decisions if d.action == "drop") == "hit39"


async def test_a_zero_budget_profile_leaves_only_what_rules_pin(project: Path) -> None:
    from context_engine.assembly import ProfileRegistry

    files = FileProvider(root=project, paths=["docs/style.md"])
    zero, _ = ProfileRegistry().get("external")
    assembly = await assemble(Assembler([files], rules=[AUTH], profile=zero))
    assert [d.item for d in assembly.decisions if d.action == "drop"] == ["docs/style.md"]
    assert [d.item for d in assembly.decisions if d.action == "always_include"] == [
        "docs/security-decisions.md"
    ]


async def test_the_header_names_the_identity_and_the_day() -> None:
    import datetime as dt

    from context_engine.assembly import HeaderProvider

    header = HeaderProvider(identity={"Tenant": "acme"}, today=lambda: dt.date(2026, 3, 1))
    assembly = await assemble(Assembler([header]))
    assert assembly.blocks[0].messages[0].text == "Tenant: acme\nDate: 2026-03-01"
    assert assembly.blocks[0].placement == "stable"


async def test_the_session_memory_provider_reads_the_seed_and_skips_an_empty_one() -> None:
    from context_engine.assembly import SessionMemoryProvider

    memory = {"text": "User prefers pytest."}

    async def seed() -> str:
        return memory["text"]

    assembler = Assembler([SessionMemoryProvider(seed=seed)])
    assert (await assemble(assembler)).blocks[0].messages[0].text == "User prefers pytest."
    memory["text"] = "  "
    assert (await assemble(assembler)).blocks == ()


async def test_an_unchanged_block_keeps_its_message_objects_between_calls() -> None:
    assembler = Assembler([StaticProvider(text="house rules", name="rules")])
    first = await assemble(assembler)
    second = await assemble(assembler)
    assert second.blocks[0].messages[0] is first.blocks[0].messages[0]
