"""Above the threshold: ours and the peers' rewrites, timed, and the budget sweep of tool pairs.

Every contender gets the same share of the history as its budget, measured
with its own counter (ours and the tiktoken peers: cl100k; LangChain's
approximate counter; Strands' heuristic, turned into a message window since
its sliding window counts messages). A peer's output is turned back into our
messages by object identity and judged with `context_engine.invariants.check_view`
plus a direct count of orphaned tool calls and results.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import _peer_adapters as peers
from _peer_scenarios import RESERVE, Job, Session, _clock, _clock_async, _engine, our_job
from steady_state import appended, fresh_result

from context_engine import ContextEngine, ExtractiveSummarizer, Message
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, ToolResultMicrocompact

PeerCall = Callable[[list[Any]], list[Any]]


def _window(fraction: float, tokens: int) -> int:
    return int(fraction * tokens) + RESERVE


def our_engines(window: int) -> dict[str, ContextEngine]:
    """The pipelines timed above the threshold (LightTrim gets its own long-result session)."""
    counter = peers.our_counter()
    return {
        "microcompact": _engine(window, [ToolResultMicrocompact()]),
        "hard_truncate": _engine(window, [HardTruncate()]),
        "full_summary_extractive": _engine(
            window, [FullSummary(summarizer=ExtractiveSummarizer())]
        ),
        "default": ContextEngine.default(window, reserve_tokens=RESERVE, token_counter=counter),
        "default_extractive": ContextEngine.default(
            window, summarizer=ExtractiveSummarizer(), reserve_tokens=RESERVE, token_counter=counter
        ),
    }


def over_jobs(
    session: Session, long_session: Session, fraction: float, loop: asyncio.AbstractEventLoop
) -> list[Job]:
    window = _window(fraction, session.tokens)
    jobs = [
        our_job("over", session, name, engine, loop) for name, engine in our_engines(window).items()
    ]
    # The agent loop above the threshold: the step is appended to the input the
    # engine last rewrote, so it sends its last view plus the step while that fits.
    loop_engine = our_engines(window)["default"]
    jobs.append(our_job("over", session, "default_append", loop_engine, loop, resync=True))
    light = _engine(_window(fraction, long_session.tokens), [LightTrim()])
    jobs.append(our_job("over", long_session, "light_trim", light, loop))
    jobs[-1].steps = session.steps
    jobs[-1].info["tokens"] = long_session.tokens
    return jobs


# -- the peers' rewrites ------------------------------------------------------------------------


def _strands_window(items: Sequence[dict[str, Any]], system: str | None, budget: float) -> int:
    """How many newest messages fit ``budget`` by Strands' own heuristic count."""
    from strands.models.model import _estimate_tokens_with_heuristic

    used = _estimate_tokens_with_heuristic([], system_prompt=system)
    kept = 0
    for item in reversed(items):
        used += _estimate_tokens_with_heuristic([item])
        if used > budget:
            break
        kept += 1
    return max(kept, 1)


def peer_calls(transcript: Sequence[Message], fraction: float, *, sweep: bool) -> dict[str, Any]:
    """Per peer: (bridge, call on a list of its messages returning its view, system apart)."""
    from autogen_core.model_context import TokenLimitedChatCompletionContext
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages
    from strands.agent.conversation_manager import SlidingWindowConversationManager
    from strands.models.model import _estimate_tokens_with_heuristic

    calls: dict[str, Any] = {}
    lc = peers.to_langchain(transcript)
    approx = fraction * count_tokens_approximately(lc.items)
    limit = int(approx)
    calls["lc_trim_approx"] = (
        lc,
        lambda m: trim_messages(m, max_tokens=limit, token_counter="approximate"),
        False,
    )
    calls["lc_trim_approx_recipe"] = (
        lc,
        lambda m: trim_messages(
            m,
            max_tokens=limit,
            token_counter=count_tokens_approximately,
            strategy="last",
            start_on="human",
            include_system=True,
        ),
        False,
    )
    if not sweep:
        chat = peers.tiktoken_chat_model()
        exact = int(fraction * chat.get_num_tokens_from_messages(lc.items))
        calls["lc_trim_tiktoken"] = (
            lc,
            lambda m: trim_messages(m, max_tokens=exact, token_counter=chat),
            False,
        )
    state = peers.to_langchain(transcript, keep_system=False)
    middleware = SummarizationMiddleware(peers.stub_chat_model(), trigger=("tokens", limit))

    def summarize(messages: list[Any]) -> list[Any]:
        update = middleware.before_model({"messages": messages}, None)  # type: ignore[arg-type]
        return list(messages) if update is None else list(update["messages"])

    calls["lc_summarization"] = (state, summarize, True)
    strands = peers.to_strands(transcript, anchors=False)
    system = strands.system.text if strands.system is not None else None
    total = _estimate_tokens_with_heuristic(strands.items, system_prompt=system)
    manager = SlidingWindowConversationManager(
        window_size=_strands_window(strands.items, system, fraction * total)
    )
    agent = peers.strands_agent(peers.Bridge(strands.system, []), manager, 1 << 30)

    def slide(messages: list[Any]) -> list[Any]:
        agent.messages = list(messages)
        manager.apply_management(agent)
        return list(agent.messages)

    calls["strands_sliding_window"] = (strands, slide, True)
    autogen = peers.to_autogen(transcript)
    client = peers.autogen_client()
    counter = peers.MemoCountingClient(client) if sweep else client
    token_limit = int(fraction * client.count_tokens(autogen.items))

    def token_limited(messages: list[Any]) -> list[Any]:
        context = TokenLimitedChatCompletionContext(
            counter, token_limit=token_limit, initial_messages=messages
        )
        return asyncio.run(context.get_messages())

    calls["autogen_token_limited"] = (autogen, token_limited, True)
    return calls


def peer_verdict(
    transcript: Sequence[Message], bridge: peers.Bridge, view: list[Any], with_system: bool
) -> dict[str, Any]:
    ours = bridge.back(view, with_system=with_system)
    return {**peers.judge(transcript, ours).as_dict(), "kept_messages": len(ours)}


# Growth of one call with the history: the token-limited context recounts after every pop.
GROWTH = {"autogen_token_limited": 2.0, "lc_trim_tiktoken": 1.2}


def peer_over_jobs(
    session: Session,
    fraction: float,
    loop: asyncio.AbstractEventLoop,
    skip: Callable[[str, int], str | None],
) -> list[Job]:
    transcript = session.with_step()
    jobs = []
    for name, (bridge, call, with_system) in peer_calls(transcript, fraction, sweep=False).items():
        reason = skip(name, session.steps)
        job = Job(
            "over", session.steps, name, lambda items=bridge.items: list(items), _timed(call, loop)
        )
        if reason is not None:
            job.info["skipped"] = reason
        else:
            elapsed, view = _clock(lambda call=call, items=bridge.items: call(list(items)))
            job.info.update(peer_verdict(transcript, bridge, view, with_system))
            job.info["probe_s"] = elapsed / 1e9
        jobs.append(job)
    return jobs


def _timed(call: PeerCall, loop: asyncio.AbstractEventLoop) -> Callable[[list[Any]], int]:
    del loop  # every peer call here is synchronous (AutoGen's coroutine runs in asyncio.run)

    def run(items: list[Any]) -> int:
        return _clock(lambda: call(items))[0]

    return run


# -- the budget sweep ---------------------------------------------------------------------------


def sweep_fractions(count: int = 25) -> list[float]:
    return [round(0.2 + 0.6 * i / (count - 1), 4) for i in range(count)]


def our_sweep_view(
    transcript: Sequence[Message], fraction: float, tokens: int, extractive: bool
) -> tuple[Any, bool]:
    window = _window(fraction, tokens)
    options: dict[str, Any] = {"reserve_tokens": RESERVE, "token_counter": peers.our_counter()}
    if extractive:
        options["summarizer"] = ExtractiveSummarizer()
    engine = ContextEngine.default(window, **options)
    projection = engine.project_sync(transcript)
    return projection.messages, projection.fits


def sweep(transcript: list[Message], fractions: Sequence[float]) -> dict[str, Any]:
    """Per contender: for each budget, its view's orphaned tool messages and other problems."""
    tokens = ContextEngine(1 << 40, token_counter=peers.our_counter()).estimate(transcript).tokens
    rows: dict[str, list[dict[str, Any]]] = {"ours_default": [], "ours_default_extractive": []}
    for fraction in fractions:
        for name, extractive in (("ours_default", False), ("ours_default_extractive", True)):
            view, fits = our_sweep_view(transcript, fraction, tokens, extractive)
            rows[name].append(
                {"fraction": fraction, "fits": fits, **peers.judge(transcript, view).as_dict()}
            )
        for name, (bridge, call, with_system) in peer_calls(
            transcript, fraction, sweep=True
        ).items():
            view = call(list(bridge.items))
            verdict = peer_verdict(transcript, bridge, view, with_system)
            rows.setdefault(name, []).append({"fraction": fraction, **verdict})
    return {name: summarize_sweep(results) for name, results in rows.items()}


def summarize_sweep(results: list[dict[str, Any]]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for row in results:
        for problem in {_kind(p) for p in row["problems"]}:
            kinds[problem] = kinds.get(problem, 0) + 1
    return {
        "budgets": len(results),
        "broken_pair_budgets": sum(not row["pairs_intact"] for row in results),
        "orphans": sum(row["orphans"] for row in results),
        "problem_budgets": kinds,
        "rows": results,
    }


def _kind(problem: str) -> str:
    if problem.startswith(("tool call", "tool result")):
        return "tool pair broken"
    return problem


def timed_engine_call(
    engine: ContextEngine, history: list[Message], loop: asyncio.AbstractEventLoop
) -> int:
    """One warm ``project`` with a new step (used by the memory section to settle the engine)."""
    with appended(history, fresh_result()):
        return int(loop.run_until_complete(_clock_async(lambda: engine.project(history)))[0])
