"""Pure state of the OpenAI Agents SDK adapter: conversion cache, usage memory, commits.

Synchronous and free of I/O, so `context_engine.integrations.openai_agents`
stays a thin layer and these decisions are testable without an event loop.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import attrs

from context_engine.formats.openai_agents import group_items, message_from_openai_agents
from context_engine.messages import Message, Usage

__all__ = ["Commit", "MessageCache", "shared_items"]

_USAGE_MEMORY = 32  # responses whose usage is kept; only the newest anchors the estimate


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

    def __init__(self) -> None:
        self._items: list[Any] = []
        self._runs: list[tuple[int, Message]] = []  # (end item index, message)
        self._spans: dict[int, tuple[Message, int, int]] = {}
        self._usage: OrderedDict[str, Usage] = OrderedDict()

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
        if not items or usage.input_tokens <= 0:
            return
        self._usage[_digest(items[-1])] = usage
        while len(self._usage) > _USAGE_MEMORY:
            self._usage.popitem(last=False)

    def _with_usage(self, message: Message, last_item: Any) -> Message:
        if message.role != "assistant" or message.usage is not None or not self._usage:
            return message
        usage = self._usage.get(_digest(last_item))
        return message if usage is None else attrs.evolve(message, usage=usage)


@attrs.frozen
class Commit:
    """A committed view (without the instructions) and the history it stands for."""

    source: tuple[Message, ...]
    messages: tuple[Message, ...]

    def apply(self, transcript: tuple[Message, ...]) -> tuple[Message, ...] | None:
        """``transcript`` with the commit in place of its source; None if it does not start so."""
        known = len(self.source)
        if len(transcript) < known or transcript[:known] != self.source:
            return None
        return self.messages + transcript[known:]
