"""One engine per conversation, for an agent or app that serves many.

An engine holds one conversation's state: the last view it returned (reused
for cache-friendly extension, and the only view whose usage anchors it
trusts), its circuit breaker and its session id. A LangGraph app serves many
``thread_id``s, a pydantic-ai agent many conversations; sharing one engine
between them makes each conversation's views depend on the others'. An
`EnginePool` builds an engine per conversation id from one factory, on first
use, and keeps the most recently used ``max_conversations`` of them; each
adapter takes a pool where it takes an engine and keys it by the runtime's
own conversation id.

A conversation dropped from the pool gets a fresh engine when it comes back:
its views stay correct (every view is computed from the messages of the call),
only the reuse of its last view and its breaker count are lost. A factory that
gives each engine an archive and ``session_id=conversation_id`` keeps what the
archive holds across that, and across a process restart.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError

__all__ = ["DEFAULT_MAX_CONVERSATIONS", "EnginePool"]

DEFAULT_MAX_CONVERSATIONS = 256
"""Conversations a pool keeps an engine for, by default (the most recently used)."""

T = TypeVar("T")


class _LRU(Generic[T]):
    """A thread-safe map holding the ``limit`` most recently used values, built on demand."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._items: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], T]) -> T:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
                return value
        built = build()  # outside the lock: a factory may be slow (an archive, a client)
        with self._lock:
            value = self._items.setdefault(key, built)  # a racing build of the same key loses
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
            return value

    def put(self, key: str, value: T) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.limit:
                self._items.popitem(last=False)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._items)


class EnginePool:
    """Engines by conversation id, built by one factory, the least recently used dropped.

    Args:
        factory: Builds the engine of a new conversation from its id, e.g.
            ``lambda conversation: ContextEngine.default(128_000, summarizer=s)``;
            pass ``session_id=conversation`` with an archive so references
            are scoped by conversation.
        max_conversations: Engines kept at once (default
            `DEFAULT_MAX_CONVERSATIONS`); the least recently used is dropped
            past it.

    Raises:
        ConfigurationError: ``factory`` is not callable or ``max_conversations``
            is not a positive int.
    """

    def __init__(
        self,
        factory: Callable[[str], ContextEngine],
        *,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
    ) -> None:
        if not callable(factory):
            raise ConfigurationError(
                f"factory must be a callable taking a conversation id, got {factory!r}"
            )
        if (
            not isinstance(max_conversations, int)
            or isinstance(max_conversations, bool)
            or max_conversations < 1
        ):
            raise ConfigurationError(
                f"max_conversations must be a positive int, got {max_conversations!r}"
            )
        self.factory = factory
        self.max_conversations = max_conversations
        self._engines: _LRU[ContextEngine] = _LRU(max_conversations)

    def engine(self, conversation_id: str) -> ContextEngine:
        """The engine of ``conversation_id``, built by the factory on first use.

        Raises:
            ConfigurationError: the factory returned something else than a `ContextEngine`.
        """
        return self._engines.get(conversation_id, lambda: self._build(conversation_id))

    def _build(self, conversation_id: str) -> ContextEngine:
        engine = self.factory(conversation_id)
        if not isinstance(engine, ContextEngine):
            raise ConfigurationError(
                f"the pool's factory must return a ContextEngine, got {engine!r} "
                f"for conversation {conversation_id!r}"
            )
        return engine

    def __contains__(self, conversation_id: object) -> bool:
        return conversation_id in self._engines.ids()

    def __len__(self) -> int:
        return len(self._engines.ids())

    def __iter__(self) -> Iterator[str]:
        """The conversation ids held, least recently used first."""
        return iter(self._engines.ids())


class Conversations(Generic[T]):
    """An adapter's per-conversation state next to the engine the pool gives it.

    The adapter's own state (a message reader, a pending turn) belongs to one
    engine: when the pool hands out another engine for the id (the first was
    dropped), the state is built again.
    """

    def __init__(self, pool: EnginePool, state: Callable[[], T]) -> None:
        self.pool = pool
        self._state = state
        self._states: _LRU[tuple[ContextEngine, T]] = _LRU(pool.max_conversations)

    def get(self, conversation_id: str) -> tuple[ContextEngine, T]:
        """The conversation's engine and the adapter's state for it."""
        engine = self.pool.engine(conversation_id)
        held = self._states.get(conversation_id, lambda: (engine, self._state()))
        if held[0] is not engine:
            held = (engine, self._state())
            self._states.put(conversation_id, held)
        return held
