"""The timed calls of `benchmarks/peers.py`: ours and the peers', below and above the threshold.

Each scenario is a `Job`: ``make`` builds one input outside the timer (a new
tool result, converted to the peer's type), ``run`` appends it to the warm
history, times one pre-call pass with ``perf_counter_ns`` and takes it off
again. Peers that rewrite in place get a fresh copy of the list, made outside
the timer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import _peer_adapters as peers
from steady_state import PENDING, appended, fresh_result, texts_of

from context_engine import ContextEngine, Message
from context_engine.strategies import (
    Strategy,
)
from context_engine.testing import synthetic_session

RESERVE = 4096
LIGHT_TRIM_RESULT_LINES = 100  # file reads long enough for LightTrim's 4,000-character blocks


@dataclass
class Job:
    """One scenario at one session size."""

    section: str
    steps: int
    name: str
    make: Callable[[], Any]
    run: Callable[[Any], int]
    samples: list[int] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Session:
    """A generated session and the step every timed call appends to it."""

    steps: int
    prefix: list[Message]
    tokens: int

    @classmethod
    def build(cls, steps: int, result_lines: int = 30) -> Session:
        prefix = [*synthetic_session(steps, result_lines=result_lines), PENDING]
        counter = peers.our_counter()
        tokens = ContextEngine(1 << 40, token_counter=counter).estimate([*prefix, fresh_result()])
        return cls(steps, prefix, tokens.tokens)

    def with_step(self) -> list[Message]:
        return [*self.prefix, fresh_result()]


def _clock(call: Callable[[], Any]) -> tuple[int, Any]:
    start = time.perf_counter_ns()
    value = call()
    return time.perf_counter_ns() - start, value


async def _clock_async(call: Callable[[], Any]) -> tuple[int, Any]:
    start = time.perf_counter_ns()
    value = await call()
    return time.perf_counter_ns() - start, value


def _engine(window: int, strategies: Sequence[Strategy]) -> ContextEngine:
    return ContextEngine(
        window, strategies, reserve_tokens=RESERVE, token_counter=peers.our_counter()
    )


def our_job(
    section: str,
    session: Session,
    name: str,
    engine: ContextEngine,
    loop: asyncio.AbstractEventLoop,
    *,
    resync: bool = False,
) -> Job:
    """``await engine.project(history)`` on a warm engine, one new step each call.

    With ``resync`` the engine first sees the history without the step
    (untimed), so the timed call is exactly an agent loop's append. Without it
    the step takes the place of the previous call's: the engine sees its last
    input with the last message replaced (what `steady_state.py` times).
    """
    history = list(session.prefix)
    loop.run_until_complete(engine.project(history))
    below = section == "steady"

    def run(message: Message) -> int:
        if resync:
            loop.run_until_complete(engine.project(history))
        with appended(history, message):
            elapsed, projection = loop.run_until_complete(
                _clock_async(lambda: engine.project(history))
            )
        if below and projection.changed:
            raise SystemExit(f"benchmark invalid: {name} rewrote a view below the threshold")
        return int(elapsed)

    job = Job(section, session.steps, name, fresh_result, run)
    if not below:
        job.info.update(_our_verdict(engine, history, loop, resync))
    return job


def _our_verdict(
    engine: ContextEngine, history: list[Message], loop: asyncio.AbstractEventLoop, resync: bool
) -> dict[str, Any]:
    if resync:
        loop.run_until_complete(engine.project(history))
    with appended(history, fresh_result()):
        transcript = list(history)
        projection = loop.run_until_complete(engine.project(transcript))
    steps = projection.event.steps if projection.event is not None else ()
    return {
        **peers.judge(transcript, projection.messages).as_dict(),
        "fits": projection.fits,
        "applied": [s.name for s in steps if s.applied],
        "strategy_ms": {s.name: round(s.duration * 1e3, 3) for s in steps},
        "tokens_after": projection.usage.tokens,
        "threshold": engine.threshold,
    }


# -- steady state: one step appended, below every threshold --------------------------------------


def steady_jobs(session: Session, loop: asyncio.AbstractEventLoop) -> list[Job]:
    window = max(65_536, 2 * session.tokens)
    jobs = [
        our_job(
            "steady",
            session,
            name,
            ContextEngine.default(window, token_counter=peers.our_counter()),
            loop,
            resync=resync,
        )
        for name, resync in (("project", True), ("project_replace_last", False))
    ]
    jobs += _tokenize_jobs(session)
    jobs += _langchain_steady(session)
    jobs += _strands_steady(session, loop)
    jobs.append(_autogen_steady(session, loop))
    return jobs


def _text() -> str:
    return fresh_result().text


def _tokenize_jobs(session: Session) -> list[Job]:
    encode = peers.cl100k().encode_ordinary
    texts = texts_of(session.prefix)

    def floor(text: str) -> int:
        return _clock(lambda: len(encode(text)))[0]

    def whole(text: str) -> int:
        return _clock(lambda: sum(len(encode(t)) for t in texts) + len(encode(text)))[0]

    return [
        Job("steady", session.steps, "floor", _text, floor),
        Job("steady", session.steps, "full_tokenize", _text, whole),
    ]


def _langchain_steady(session: Session) -> list[Job]:
    from langchain.agents.middleware import SummarizationMiddleware
    from langchain_core.messages.utils import count_tokens_approximately, trim_messages

    bridge = peers.to_langchain(session.prefix)
    history = bridge.items
    chat = peers.tiktoken_chat_model()
    approx_limit = 2 * count_tokens_approximately(history)
    exact_limit = 2 * chat.get_num_tokens_from_messages(history)
    state = {"messages": peers.to_langchain(session.prefix, keep_system=False).items}
    middleware = SummarizationMiddleware(peers.stub_chat_model(), trigger=("tokens", approx_limit))

    def make() -> Any:
        return peers.langchain_message(fresh_result())

    def trim(counter: Any, limit: int) -> Callable[[Any], int]:
        def run(message: Any) -> int:
            with appended(history, message):
                elapsed, view = _clock(
                    lambda: trim_messages(history, max_tokens=limit, token_counter=counter)
                )
            assert len(view) == len(history) + 1
            return elapsed

        return run

    def summarize(message: Any) -> int:
        with appended(state["messages"], message):
            elapsed, update = _clock(lambda: middleware.before_model(state, None))  # type: ignore[arg-type]
        assert update is None
        return elapsed

    return [
        Job(
            "steady",
            session.steps,
            "lc_trim_approx",
            make,
            trim(count_tokens_approximately, approx_limit),
        ),
        Job("steady", session.steps, "lc_trim_tiktoken", make, trim(chat, exact_limit)),
        Job("steady", session.steps, "lc_summarization", make, summarize),
    ]


def _strands_steady(session: Session, loop: asyncio.AbstractEventLoop) -> list[Job]:
    from strands.agent.conversation_manager import SlidingWindowConversationManager
    from strands.event_loop.event_loop import _estimate_input_tokens
    from strands.hooks import BeforeModelCallEvent

    window = 2 * session.tokens
    bridge = peers.to_strands(session.prefix, anchors=True)
    manager = SlidingWindowConversationManager(
        window_size=4 * len(bridge.items), per_turn=True, proactive_compression=True
    )
    agent = peers.strands_agent(bridge, manager, window)

    def make() -> Any:
        return peers.strands_message(fresh_result())

    def apply(message: Any) -> int:
        with appended(agent.messages, message):
            return _clock(lambda: manager.apply_management(agent))[0]

    async def pre_call() -> None:
        # The loop's estimate (usage anchor + the new messages), then the manager's two hooks.
        projected = await _estimate_input_tokens(agent)
        event = BeforeModelCallEvent(
            agent=agent, invocation_state={}, projected_input_tokens=projected
        )
        manager._on_before_model_call_threshold(event)
        manager._on_before_model_call(event)

    def precall(message: Any) -> int:
        with appended(agent.messages, message):
            elapsed, _ = loop.run_until_complete(_clock_async(pre_call))
        assert len(agent.messages) == len(bridge.items)
        return int(elapsed)

    return [
        Job("steady", session.steps, "strands_apply", make, apply),
        Job("steady", session.steps, "strands_precall", make, precall),
    ]


def _autogen_steady(session: Session, loop: asyncio.AbstractEventLoop) -> Job:
    from autogen_core.model_context import TokenLimitedChatCompletionContext

    client = peers.autogen_client()
    bridge = peers.to_autogen(session.prefix)
    limit = 2 * client.count_tokens(bridge.items)
    context = TokenLimitedChatCompletionContext(
        client, token_limit=limit, initial_messages=bridge.items
    )

    async def step(message: Any) -> list[Any]:
        await context.add_message(message)
        return await context.get_messages()

    def run(message: Any) -> int:
        elapsed, view = loop.run_until_complete(_clock_async(lambda: step(message)))
        context._messages.pop()
        assert len(view) == len(bridge.items) + 1
        return int(elapsed)

    return Job(
        "steady", session.steps, "autogen", lambda: peers.autogen_message(fresh_result()), run
    )
