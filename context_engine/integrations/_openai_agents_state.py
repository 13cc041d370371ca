"""Pure state of the OpenAI Agents SDK adapter: conversion caches, usage memory, commits.

Synchronous and free of I/O, so `context_engine.integrations.openai_agents`
stays a thin layer and these decisions are testable without an event loop.

One filter serves every conversation that runs under its ``RunConfig``: the
parent agent's, and a fresh one for each sub-agent run through ``Agent.as_tool``
(which inherits the parent's run config). So conversion caches and commits are
kept per conversation, and a conversation is recognised by its history: items
that start like a cache's last items reuse that cache, and a commit applies to
the histories that start with the history it stands for.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import attrs

from context_engine.formats.openai_agents import group_items, message_from_openai_agents
from context_engine.messages import Message, Usage

__all__ = ["Commit", "Commits", "MessageCache", "MessageCaches", "UsageMemory", "shared_items"]

_USAGE_MEMORY = 32  # responses whose usage is kept; only the newest anchors the estimate
_CONVERSATIONS = 16  # conversations (parent, sub-agent runs) whose cache and commit are kept


def shared_items(previous: Sequence[Any], items: Sequence[Any]) -> int:
    """How many leading items both lists share (equal dicts)."""
    length = min(len(previous), len(items))
    if previous[:length] == items[:length]:
        return length
    return next(i for i in range(length) if previous[i] != items[i])


def _digest(item: Any) -> str:
    """A key for an item that survives the SDK copying it between turns."""
    return json.dumps(item, sort_keys=True, default=str)


class MessageCache:
    """Converts item lists incrementally: unchanged items keep their message objects.

    An agent loop resends the whole history on every call. Reusing the message
    objects costs work only for the new items: the engine's per-message token
    caches hit and its prefix checks succeed on identity, without comparing content.
    """

    def __init__(self, usage: UsageMemory | None = None) -> None:
        self._items: list[Any] = []
        self._runs: list[tuple[int, Message]] = []  # (end item index, message)
        self._spans: dict[int, tuple[Message, int, int]] = {}
        self._usage = usage if usage is not None else UsageMemory()

    @property
    def items(self) -> list[Any]:
        """The items of the last conversion."""
        return self._items

    def convert(self, items: list[Any]) -> tuple[Message, ...]:
        """The messages of ``items``, converting only what the last list did not hold."""
        shared = shared_items(self._items, items)
        runs = list(self._runs)
        while runs and runs[-1][0] > shared:
            runs.pop()
        if runs and runs[-1][0] == len(self._items) and runs[-1][1].role == "assistant":
            runs.pop()  # the model items that ended the last list may go on
        end = runs[-1][0] if runs else 0
        for group in group_items(items[end:]):
            end += len(group)
            message = self._with_usage(message_from_openai_agents(group), group[-1])
            runs.append((end, message))
        self._items, self._runs = items, runs
        self._spans = {}
        start = 0
        for end, message in runs:
            self._spans[id(message)] = (message, start, end)
            start = end
        return tuple(message for _, message in runs)

    def items_of(self, message: Message) -> list[Any] | None:
        """The items ``message`` was converted from, if it is one of the last conversion."""
        span = self._spans.get(id(message))
        if span is None or span[0] is not message:
            return None
        return self._items[span[1] : span[2]]

    def item_count(self, messages: int) -> int:
        """How many items the first ``messages`` messages of the last conversion came from."""
        return self._runs[messages - 1][0] if messages else 0

    def remember_usage(self, items: Sequence[Any], usage: Usage) -> None:
        """Attach ``usage`` to the message that will end with the last of ``items``."""
        self._usage.remember(items, usage)

    def _with_usage(self, message: Message, last_item: Any) -> Message:
        if message.role != "assistant" or message.usage is not None:
            return message
        usage = self._usage.of(last_item)
        return message if usage is None else attrs.evolve(message, usage=usage)


class UsageMemory:
    """The usage of the latest responses, keyed by each response's last output item."""

    def __init__(self) -> None:
        self._usage: OrderedDict[str, Usage] = OrderedDict()

    def __len__(self) -> int:
        return len(self._usage)

    def remember(self, items: Sequence[Any], usage: Usage) -> None:
        """Attach ``usage`` to the message that will end with the last of ``items``."""
        if not items or usage.input_tokens <= 0:
            return
        self._usage[_digest(items[-1])] = usage
        while len(self._usage) > _USAGE_MEMORY:
            self._usage.popitem(last=False)

    def of(self, last_item: Any) -> Usage | None:
        """The usage of the response whose output ended with ``last_item``, if remembered."""
        return self._usage.get(_digest(last_item)) if self._usage else None


class MessageCaches:
    """One `MessageCache` per conversation, sharing one `UsageMemory`.

    Items that share a leading item with a cache's last items go to that cache
    (the longest shared start wins); others start a cache of their own, so a
    sub-agent's run does not throw away the conversion of its parent's history.
    """

    def __init__(self, size: int = _CONVERSATIONS) -> None:
        self.usage = UsageMemory()
        self._size = size
        self._caches: list[MessageCache] = []  # most recently used last

    def for_items(self, items: Sequence[Any]) -> MessageCache:
        """The cache to convert ``items`` with."""
        best: MessageCache | None = None
        best_shared = 0
        for cache in self._caches:
            shared = shared_items(cache.items, items)
            if shared > best_shared:
                best, best_shared = cache, shared
        if best is None:
            best = MessageCache(self.usage)
        else:
            self._caches.remove(best)
        self._caches.append(best)
        del self._caches[: -self._size]
        return best


@attrs.frozen
class Commit:
    """A committed view (without the instructions) and the history it stands for."""

    source: tuple[Message, ...]
    messages: tuple[Message, ...]

    def covers(self, transcript: tuple[Message, ...]) -> bool:
        """Whether ``transcript`` starts with the history the commit stands for."""
        known = len(self.source)
        return len(transcript) >= known and transcript[:known] == self.source

    def apply(self, transcript: tuple[Message, ...]) -> tuple[Message, ...] | None:
        """``transcript`` with the commit in place of its source; None if it does not start so."""
        if not self.covers(transcript):
            return None
        return self.messages + transcript[len(self.source) :]


class Commits:
    """The commits of the conversations a filter serves, one per conversation.

    A commit belongs to the conversation whose histories start with its
    source. A newer commit of the same conversation (its source starts with an
    older one's) replaces that one; a history no commit stands for (a
    sub-agent's fresh input, another conversation) leaves every commit as it is.
    """

    def __init__(self, size: int = _CONVERSATIONS) -> None:
        self._size = size
        self._commits: list[Commit] = []  # most recently made or applied last
        # Commits written into histories to be stored, as those read back; newest last.
        self._handed_out: list[tuple[Commit, tuple[Message, ...]]] = []

    @property
    def latest(self) -> Commit | None:
        """The commit made or applied last, or None."""
        return self._commits[-1] if self._commits else None

    def find(self, transcript: tuple[Message, ...]) -> Commit | None:
        """The commit ``transcript`` starts with the source of (the longest), or None."""
        found = [c for c in self._commits if c.covers(transcript)]
        if not found:
            return None
        commit = max(found, key=lambda c: len(c.source))
        self._commits.remove(commit)
        self._commits.append(commit)
        return commit

    def add(self, commit: Commit) -> None:
        """Keep ``commit``, in place of the older commits of its conversation."""
        self._commits = [c for c in self._commits if not c.covers(commit.source)]
        self._commits.append(commit)
        del self._commits[: -self._size]

    def handed_out(self, commit: Commit, read_back: tuple[Message, ...]) -> None:
        """Remember that a history to be stored starts with ``commit``, read back as given."""
        self._handed_out = [h for h in self._handed_out if h[0] is not commit]
        self._handed_out.append((commit, read_back))
        del self._handed_out[: -self._size]

    def find_after_stored(self, transcript: tuple[Message, ...]) -> tuple[Commit, int] | None:
        """A commit newer than the one a stored ``transcript`` starts with, and what it covers.

        A run goes on from its own items after its history was stored with a
        commit (a sub-agent's run ended first and stored the parent's), so the
        run's later commits stand for those items, not for the stored ones.
        Read as the history the stored commit stands for, the transcript
        starts with such a later commit's source; the answer is that commit
        and how many leading messages of ``transcript`` it replaces.
        """
        for stored, read_back in reversed(self._handed_out):
            kept = len(read_back)
            if transcript[:kept] != read_back:
                continue
            newer = self.find(stored.source + transcript[kept:])
            if newer is not None and len(newer.source) > len(stored.source):
                return newer, kept + len(newer.source) - len(stored.source)
        return None

    def clear(self) -> None:
        """Forget every commit."""
        self._commits = []
        self._handed_out = []
