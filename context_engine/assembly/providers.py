"""Ready-made context providers: a header, files, any async function, retrieval, session memory.

Priorities leave gaps (10, 20, 30, 40, 50) so your own providers can slot in
between. Each is an ordinary `ContextProvider`: construct it with keyword
arguments to change its name, priority, cap, placement, share or role (the
settings they share are documented on `_Source`).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import attrs

from context_engine._aio import maybe_await
from context_engine.assembly.provider import (
    Item,
    Placement,
    ProviderOutput,
    ProviderRequest,
    Share,
)
from context_engine.messages import Role

__all__ = [
    "CallableProvider",
    "FileProvider",
    "HeaderProvider",
    "InMemoryRetriever",
    "RetrievalProvider",
    "Retriever",
    "SessionMemoryProvider",
    "StaticProvider",
]


@attrs.define(kw_only=True)
class _Source:
    """The `ContextProvider` settings every ready-made provider has; subclasses change defaults.

    Attributes:
        name: Identifier in the trace, logs and rules.
        priority: Lower runs first.
        max_tokens: Cap on the output, or None.
        placement: ``stable`` (the default here), ``volatile`` or ``tail``.
        share: The `BudgetProfile` share the output counts against, or None.
        role: The role of the message the items are rendered into.
    """

    name: str
    priority: int = 50
    max_tokens: int | None = None
    placement: Placement = "stable"
    share: Share | None = None
    role: Role = "system"


@attrs.define(kw_only=True)
class StaticProvider(_Source):
    """The same text on every call (house rules, a glossary): stable by default."""

    text: str
    name: str = "static"
    priority: int = 10

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """The text as one item, or nothing when it is empty."""
        return [Item(id=self.name, text=self.text)] if self.text.strip() else None


def _today() -> _dt.date:
    return _dt.datetime.now(_dt.timezone.utc).date()


@attrs.define(kw_only=True)
class HeaderProvider(_Source):
    """Who the agent works for and today's date (seed 001's identity-and-date header).

    The date has day resolution so a stable header changes once a day, not on
    every call (the prompt cache keeps the prefix all day).
    """

    identity: Mapping[str, str] = attrs.field(factory=dict)
    today: Callable[[], _dt.date] = _today
    name: str = "header"
    priority: int = 10
    share: Share | None = "preferences"

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """``key: value`` lines of the identity, then the date."""
        lines = [f"{key}: {value}" for key, value in self.identity.items()]
        lines.append(f"Date: {self.today().isoformat()}")
        return [Item(id=self.name, text="\n".join(lines))]


@attrs.define(kw_only=True)
class FileProvider(_Source):
    """Files under ``root`` (a rules file, design notes), each read up to ``max_bytes``.

    Item ids are the paths relative to ``root`` (what rules' globs match); a
    file longer than the cap is cut and says so. `fetch` reads any file under
    ``root`` for a rule's ``always_include``; paths that leave ``root`` are refused.
    """

    root: Path = attrs.field(converter=Path)
    paths: Sequence[str] = ()
    max_bytes: int = 32_000
    name: str = "files"
    priority: int = 20
    share: Share | None = "long_term"

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """Every listed file that exists, in the order listed."""
        items = [await self.fetch(path) for path in self.paths]
        return [item for item in items if item is not None]

    async def fetch(self, item_id: str) -> Item | None:
        """The file ``item_id`` under ``root``, or None when it is missing or outside ``root``."""
        root = self.root.resolve()
        path = (root / item_id).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            return None
        with path.open("rb") as handle:
            data = handle.read(self.max_bytes + 1)
        text = data[: self.max_bytes].decode("utf-8", errors="replace")
        if len(data) > self.max_bytes:
            text += f"\n[... {item_id} cut at {self.max_bytes} bytes]"
        return Item(id=item_id, text=f"# {item_id}\n{text}")


@attrs.define(kw_only=True)
class CallableProvider(_Source):
    """Wraps any function or coroutine function of the request (a CRM snapshot, a status)."""

    function: Callable[[ProviderRequest], ProviderOutput | str | Awaitable[ProviderOutput | str]]
    placement: Placement = "volatile"
    role: Role = "user"

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """Whatever the function returns (a string becomes one item)."""
        result = await maybe_await(self.function(request))
        if isinstance(result, str):
            return [Item(id=self.name, text=result)] if result.strip() else None
        output: ProviderOutput = result
        return output


class Retriever(Protocol):
    """Finds items relevant to a query; each hit's ``relevance`` is its score."""

    async def search(self, query: str, limit: int) -> Sequence[Item]:
        """Up to ``limit`` hits for ``query``, most relevant first."""
        ...


_WORD = re.compile(r"\w+")


@attrs.define
class InMemoryRetriever:
    """A small `Retriever` over a dict of documents, scored by shared words (for tests, demos)."""

    documents: Mapping[str, str]

    async def search(self, query: str, limit: int) -> Sequence[Item]:
        """Documents sharing words with ``query``; relevance is the share of query words found."""
        wanted = {word.casefold() for word in _WORD.findall(query)}
        if not wanted:
            return []
        hits = []
        for doc_id, text in self.documents.items():
            words = {word.casefold() for word in _WORD.findall(text)}
            score = len(wanted & words) / len(wanted)
            if score > 0:
                hits.append(Item(id=doc_id, text=text, relevance=round(score, 4)))
        hits.sort(key=lambda item: -item.relevance)
        return hits[:limit]


@attrs.define(kw_only=True)
class RetrievalProvider(_Source):
    """Hits of a `Retriever` for the task (the newest user message)."""

    retriever: Retriever
    limit: int = 8
    name: str = "retrieval"
    priority: int = 40
    placement: Placement = "volatile"
    share: Share | None = "retrieval"
    role: Role = "user"

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """The retriever's hits for the task, or nothing when there is no task."""
        if not request.task.strip():
            return None
        return list(await self.retriever.search(request.task, self.limit))


@attrs.define(kw_only=True)
class SessionMemoryProvider(_Source):
    """The session-memory seed's text (the same function `SessionMemory` reads), as context."""

    seed: Callable[[], str | Awaitable[str]]
    name: str = "session_memory"
    priority: int = 30
    share: Share | None = "long_term"

    async def provide(self, request: ProviderRequest) -> ProviderOutput:
        """The memory text as one item; nothing when it is empty."""
        text = await maybe_await(self.seed())
        if not isinstance(text, str):
            raise TypeError(f"seed returned {type(text).__name__}, expected the memory text")
        return [Item(id=self.name, text=text)] if text.strip() else None
