"""Bytes held per session (tracemalloc), ours and the peers', and the heuristic counter's error.

For each framework two figures at the same session size: the transcript in
its own message types (what any agent holds anyway), and what its context
manager holds on top after one pre-call pass (ours: the engine with its
counter and caches; LangChain: `SummarizationMiddleware` and the ids it
assigns; Strands: the agent with a sliding-window manager after its pre-call
estimate; AutoGen: a `TokenLimitedChatCompletionContext` after `get_messages`).
Every path runs once on a small session first, so one-time module caches
(compiled regexes, schemas) are not charged to a session.
"""

from __future__ import annotations

import asyncio
import gc
import json
import tracemalloc
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import _peer_adapters as peers
from steady_state import PENDING, fresh_result

from context_engine import ContextEngine, HeuristicCounter, Message, TiktokenCounter
from context_engine.formats.openai import from_openai
from context_engine.testing import synthetic_session

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "dev"
BIG = 1 << 40


def _held(build: Callable[[], Any]) -> tuple[int, Any]:
    """Bytes still allocated after ``build()`` returns (its result kept alive)."""
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    return tracemalloc.get_traced_memory()[0] - before, kept


def _transcript(steps: int) -> list[Message]:
    return [*synthetic_session(steps), PENDING, fresh_result()]


def _ours(messages: list[Message], counter: TiktokenCounter | None = None) -> ContextEngine:
    engine = ContextEngine.default(BIG, token_counter=counter or TiktokenCounter(peers.cl100k()))
    engine.project_sync(messages)
    return engine


def _langchain(items: list[Any]) -> Any:
    from langchain.agents.middleware import SummarizationMiddleware

    middleware = SummarizationMiddleware(peers.stub_chat_model(), trigger=("tokens", BIG))
    assert middleware.before_model({"messages": items}, None) is None  # type: ignore[arg-type]
    return middleware


def _strands(items: list[Any], system: str | None) -> Any:
    from strands.agent.conversation_manager import SlidingWindowConversationManager
    from strands.event_loop.event_loop import _estimate_input_tokens

    manager = SlidingWindowConversationManager(
        window_size=BIG, per_turn=True, proactive_compression=True
    )
    bridge = peers.Bridge(Message.system(system) if system else None, items)
    agent = peers.strands_agent(bridge, manager, BIG)
    asyncio.run(_estimate_input_tokens(agent))
    manager.apply_management(agent)
    return agent


def _autogen(items: list[Any], client: Any) -> Any:
    from autogen_core.model_context import TokenLimitedChatCompletionContext

    context = TokenLimitedChatCompletionContext(client, token_limit=BIG, initial_messages=items)
    asyncio.run(context.get_messages())
    return context


def _frameworks(
    messages: Sequence[Message],
) -> dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]]:
    """Per framework: (build its transcript, build its manager on that transcript)."""
    system = messages[0].text
    rest = list(messages[1:])
    client = peers.autogen_client()
    return {
        "context-engine": (lambda: list(messages), lambda items: _ours(items)),
        "LangChain SummarizationMiddleware": (
            lambda: [peers.langchain_message(m) for m in rest],
            _langchain,
        ),
        "Strands SlidingWindowConversationManager": (
            lambda: [peers.strands_message(m) for m in rest],
            lambda items: _strands(items, system),
        ),
        "AutoGen TokenLimitedChatCompletionContext": (
            lambda: [peers.autogen_message(m) for m in rest],
            lambda items: _autogen(items, client),
        ),
    }


def _per_session(steps: int, warm: bool) -> list[dict[str, Any]]:
    messages = _transcript(steps)
    rows = []
    for name, (build, manage) in _frameworks(messages).items():
        if warm:
            manage(build())
            continue
        if name == "context-engine":
            transcript_bytes, items = _held(lambda: _transcript(steps))
        else:
            transcript_bytes, items = _held(build)
        manager_bytes, manager = _held(lambda items=items, manage=manage: manage(items))
        rows.append(
            {
                "framework": name,
                "steps": steps,
                "messages": len(messages),
                "transcript_bytes": transcript_bytes,
                "manager_bytes": manager_bytes,
            }
        )
        del manager, items
    return rows


def _concurrent(sessions: int, steps: int) -> dict[str, Any]:
    transcript_bytes, transcripts = _held(lambda: [_transcript(steps) for _ in range(sessions)])
    counter = TiktokenCounter(
        peers.cl100k()
    )  # one counter for all, as ContextEngine.default shares it
    engine_bytes, engines = _held(lambda: [_ours(t, counter) for t in transcripts])
    assert len(engines) == sessions
    return {
        "sessions": sessions,
        "steps": steps,
        "messages_each": len(transcripts[0]),
        "transcripts_bytes": transcript_bytes,
        "engines_bytes": engine_bytes,
        "engine_bytes_per_session": engine_bytes // sessions,
    }


def measure(steps_list: Sequence[int], sessions: int, session_steps: int) -> dict[str, Any]:
    _per_session(50, warm=True)
    tracemalloc.start()
    try:
        single = [row for steps in steps_list for row in _per_session(steps, warm=False)]
        concurrent = _concurrent(sessions, session_steps)
    finally:
        tracemalloc.stop()
    return {"per_session": single, "concurrent": concurrent}


def heuristic_error() -> dict[str, Any]:
    """`HeuristicCounter` against exact cl100k counts, per corpus transcript (whole messages)."""
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    exact, rough = TiktokenCounter(peers.cl100k()), HeuristicCounter()
    rows = []
    for path in files:
        with path.open(encoding="utf-8") as handle:
            messages = from_openai([json.loads(line) for line in handle if line.strip()])
        tokens = sum(map(exact.count_message, messages))
        estimate = sum(map(rough.count_message, messages))
        anchors = sum(m.usage is not None for m in messages)
        rows.append(
            {
                "transcript": path.stem,
                "tokens": tokens,
                "heuristic": estimate,
                "error": round(estimate / tokens - 1, 4),
                "usage_anchors": anchors,
            }
        )
    return {"corpus": str(CORPUS), "rows": rows}
