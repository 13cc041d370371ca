"""What is derived from a message lives on that message, and goes when it goes."""

from __future__ import annotations

import gc
import weakref

import attrs

from context_engine import ContextEngine, Message
from context_engine._memo import memoized
from context_engine.archive.reference import message_digest
from context_engine.testing import FixedTokenCounter, synthetic_session


def test_a_value_is_made_once_per_message_and_key() -> None:
    """The same message and key give the very same value; another key makes a new one."""
    made: list[str] = []

    def make(message: Message, suffix: str) -> str:
        made.append(suffix)
        return message.text + suffix

    message = Message.user("hello")
    first = memoized(message, ("test", "!"), make, "!")
    assert memoized(message, ("test", "!"), make, "!") is first
    assert memoized(message, ("test", "?"), make, "?") == "hello?"
    assert memoized(Message.user("hello"), ("test", "!"), make, "!") == first
    assert made == ["!", "?", "!"]


def test_an_evolved_copy_derives_its_own_values() -> None:
    """A copy with new content gets its own count, digest and tool calls, not the original's."""
    counter = FixedTokenCounter(1)
    original = Message.user("short")
    counter.count_message(original)
    digest = message_digest(original)
    longer = attrs.evolve(original, content="a much longer text than before")
    assert counter.count_message(longer) > counter.count_message(original)
    assert message_digest(longer) != digest
    assert longer.tool_calls == ()


def test_a_dropped_session_releases_its_messages_and_their_copies() -> None:
    """After the engine and the transcript are dropped, no message nor derived copy stays alive."""
    session = synthetic_session(60, result_lines=120)
    engine = ContextEngine.default(8_192)  # the default counter is shared by the process
    messages = [weakref.ref(m) for m in session]
    views: list[weakref.ref[Message]] = []
    rewrites = 0
    for end in [i + 1 for i, m in enumerate(session) if m.role == "tool"]:
        projection = engine.project_sync(session[:end])
        rewrites += projection.changed
        views += [weakref.ref(m) for m in projection.messages]
    assert rewrites > 30  # strategies cleared and trimmed on most calls
    del engine, session, projection
    gc.collect()
    assert [ref for ref in messages if ref() is not None] == []
    assert [ref for ref in views if ref() is not None] == []
