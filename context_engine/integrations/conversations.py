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
only the reuse of its last view and its breaker count are lost. A pool backed
by an archive (`EnginePool.archived`, or ``archive=`` with a factory that
gives each engine that archive and ``session_id=conversation_id``) keeps what a
conversation needs beside the runtime's own history in the archive: the
originals its placeholders and checkpoints name, and optionally its
summarizer's breaker and its session-memory seed. A pool in another process,
or after a restart, on the same store and the runtime's persisted history
(a LangGraph checkpointer, a pydantic-ai message history, a Strands session)
picks the conversation up where it was.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from context_engine.archive.base import Archive
from context_engine.archive.shared import SharedSummarizerBreaker, stored_seed
from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError
from context_engine.summarize.request import Summarizer

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
        archive: The store the pool's engines keep their conversations in.
            Every engine the factory builds must use it with
            ``session_id=conversation_id``: that is where a pool in another
            process finds the conversation again. `EnginePool.archived`
            builds such a factory.

    Raises:
        ConfigurationError: ``factory`` is not callable, ``max_conversations``
            is not a positive int, or ``archive`` is not an `Archive`.
    """

    def __init__(
        self,
        factory: Callable[[str], ContextEngine],
        *,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        archive: Archive | None = None,
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
        if archive is not None and not isinstance(archive, Archive):
            raise ConfigurationError(
                f"archive must be an Archive (MemoryArchive, SQLiteArchive, RedisArchive), "
                f"got {archive!r}"
            )
        self.factory = factory
        self.max_conversations = max_conversations
        self.archive = archive
        self._engines: _LRU[ContextEngine] = _LRU(max_conversations)

    @classmethod
    def archived(
        cls,
        archive: Archive,
        context_window: int,
        *,
        summarizer: Summarizer | None = None,
        endpoint: str | None = None,
        seed_from_archive: bool = False,
        max_conversations: int = DEFAULT_MAX_CONVERSATIONS,
        **options: Any,
    ) -> EnginePool:
        """A pool whose engines keep each conversation's state in ``archive``.

        Each conversation gets ``ContextEngine.default(context_window,
        archive=archive, session_id=conversation_id, **options)``. A pool
        built the same way in another process, or after a restart, on the
        same store resumes every conversation from the runtime's persisted
        history: the references its placeholders and checkpoints name are
        recalled from the store, and the shared state below is read back.

        Args:
            archive: The store (a `SQLiteArchive` file for the processes of one
                machine, `RedisArchive` for many machines).
            context_window: The window engines are built with (an adapter sizes
                it to the runtime's model on each call).
            summarizer: Writes the checkpoints (`FullSummary`).
            endpoint: Names the summarizer's endpoint: its failures are then
                counted in the store (`SharedSummarizerBreaker`), so an open
                breaker holds for every conversation and worker on the store
                and after a restart (its defaults: 3 failures, 60 s cool-down;
                pass a configured `SharedSummarizerBreaker` as ``summarizer``
                instead for others).
            seed_from_archive: Seed `SessionMemory` from the conversation's
                memory text in the store (written with `save_seed`).
            max_conversations: Engines kept at once.
            **options: Further `ContextEngine` options (``token_counter``,
                hooks, ``reserve_tokens`` ...).

        Raises:
            ConfigurationError: an option is invalid, ``endpoint`` is given
                without a summarizer, or ``options`` set what the pool sets
                (``session_id``; ``seed`` with ``seed_from_archive``).
        """
        if not isinstance(seed_from_archive, bool):
            raise ConfigurationError(
                f"seed_from_archive must be True or False, got {seed_from_archive!r}"
            )
        taken = {"session_id"} | ({"seed"} if seed_from_archive else set())
        if taken & options.keys():
            raise ConfigurationError(
                f"EnginePool.archived sets {', '.join(sorted(taken & options.keys()))} per "
                "conversation; leave it out of the options"
            )
        if endpoint is not None:
            if summarizer is None:
                raise ConfigurationError(
                    "endpoint names the summarizer whose breaker the store shares; "
                    "pass summarizer= too"
                )
            summarizer = SharedSummarizerBreaker(
                summarizer=summarizer, archive=archive, endpoint=endpoint
            )

        seed = options.pop("seed", None)

        def build(conversation_id: str) -> ContextEngine:
            return ContextEngine.default(
                context_window,
                summarizer=summarizer,
                seed=stored_seed(archive, conversation_id) if seed_from_archive else seed,
                archive=archive,
                session_id=conversation_id,
                **options,
            )

        build("probe")  # a bad option fails here, not at a conversation's first call
        return cls(build, max_conversations=max_conversations, archive=archive)

    def engine(self, conversation_id: str) -> ContextEngine:
        """The engine of ``conversation_id``, built by the factory on first use.

        Raises:
            ConfigurationError: the factory returned something else than a
                `ContextEngine`, or, in a pool with an archive, an engine that
                does not keep ``conversation_id`` in it.
        """
        return self._engines.get(conversation_id, lambda: self._build(conversation_id))

    def _build(self, conversation_id: str) -> ContextEngine:
        engine = self.factory(conversation_id)
        if not isinstance(engine, ContextEngine):
            raise ConfigurationError(
                f"the pool's factory must return a ContextEngine, got {engine!r} "
                f"for conversation {conversation_id!r}"
            )
        if self.archive is not None and (
            engine.archive is not self.archive or engine.session_id != conversation_id
        ):
            raise ConfigurationError(
                f"the pool keeps its conversations in {self.archive!r}: build the engine of "
                f"{conversation_id!r} with archive=<that archive> and "
                f"session_id={conversation_id!r} (got {engine.archive!r}, "
                f"session_id={engine.session_id!r})"
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
