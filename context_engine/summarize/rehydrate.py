"""Re-hydration: the files the agent was working on, re-attached after a checkpoint.

Right after a checkpoint the model knows which files it read, not what they
say, and its first move is to read them again. `Rehydration` saves that round
trip the way the agent CLIs do: the most recently read (or edited) files of
the replaced range are re-attached after the checkpoint, each as one user
message, with their current text when the caller gives a ``reader`` and
otherwise the text of their last read in the replaced originals (marked as
possibly outdated). It is bounded three ways: ``max_files``,
``max_tokens_per_file`` (longer texts are shortened with a marker), and the
room the checkpoint left under the threshold (at most ``max_share`` of it),
so the view still fits. The checkpoint names the files re-attached.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

import attrs
import regex

from context_engine._aio import maybe_await
from context_engine._validate import positive_int, share
from context_engine.errors import ConfigurationError
from context_engine.messages import ContextSummary, Message
from context_engine.summarize.files import DEFAULT_FILE_TOOLS, FileToolRule, files_in_call
from context_engine.summarize.pinned import INJECTED_KEY
from context_engine.tokens import TokenCounter

__all__ = ["FileReader", "Rehydration", "name_files", "without_names"]

logger = logging.getLogger(__name__)

FileReader: TypeAlias = Callable[[str], "str | Awaitable[str | None] | None"]
"""``reader(path) -> text``, plain or async; None (or an error) when the file is gone."""

_NAMES = "Re-attached after this checkpoint: "
_NAMES_LINE = regex.compile(rf"\n*^{regex.escape(_NAMES)}.*\Z", regex.MULTILINE)


def _reader(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise ConfigurationError(
            f"reader must be a function taking a path and returning its text, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class Rehydration:
    """Re-attaches the most recently used files after a checkpoint.

    Attributes:
        reader: Returns a file's current text (plain or async); None re-attaches
            the text of its last read in the replaced history instead.
        max_files: Files re-attached at most.
        max_tokens_per_file: Tokens one file may take; longer texts keep their head.
        max_share: Largest share of the threshold all re-attached files take together.
    """

    reader: FileReader | None = attrs.field(default=None, validator=_reader)
    max_files: int = attrs.field(default=5, validator=positive_int())
    max_tokens_per_file: int = attrs.field(default=5000, validator=positive_int())
    max_share: float = attrs.field(
        default=0.25, validator=share(exclusive_minimum=True, fix="0.25 is a quarter")
    )

    async def attachments(
        self,
        originals: Sequence[Message],
        room: int,
        threshold: int,
        counter: TokenCounter,
        file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS,
        kept: Sequence[Message] = (),
    ) -> tuple[Message, ...]:
        """One message per re-attached file, newest use first, within the bounds.

        Files the ``kept`` messages (those after the checkpoint) use are left
        out: the model still sees them there.
        """
        left = min(room, int(self.max_share * threshold))
        attached: list[Message] = []
        visible = {path for path, _ in recent_files(kept, file_tools)}
        candidates = [
            item for item in recent_files(originals, file_tools) if item[0] not in visible
        ]
        for path, last_read in candidates[: self.max_files]:
            text, how = await self._text(path, last_read)
            if text is None:
                continue
            message = _attachment(path, how, text, min(left, self.max_tokens_per_file), counter)
            cost = counter.count_message(message)
            if cost > left:
                break
            attached.append(message)
            left -= cost
        return tuple(attached)

    async def _text(self, path: str, last_read: str | None) -> tuple[str | None, str]:
        if self.reader is not None:
            try:
                text = await maybe_await(self.reader(path))
            except Exception:
                logger.warning(
                    "path=<%s> | reader failed; the last read is used", path, exc_info=True
                )
                text = None
            if isinstance(text, str):
                return text, "current text"
        return last_read, "text as last read (it may have changed since)"


def recent_files(
    messages: Sequence[Message], file_tools: Mapping[str, FileToolRule] = DEFAULT_FILE_TOOLS
) -> list[tuple[str, str | None]]:
    """``(path, text of its last read or None)`` of the files used in ``messages``, newest first."""
    results = {m.tool_call_id: m.text for m in messages if m.role == "tool" and m.tool_call_id}
    last_use: dict[str, int] = {}
    last_read: dict[str, str] = {}
    for index, message in enumerate(messages):
        if INJECTED_KEY in message.metadata or isinstance(message, ContextSummary):
            continue
        for call in message.tool_calls:
            found = files_in_call(call, file_tools)
            if found is None:
                continue
            action, paths = found
            for path in paths:
                last_use[path] = index
            result = results.get(call.id)
            if action == "read" and len(paths) == 1 and result is not None:
                last_read[paths[0]] = result
    newest = sorted(last_use, key=lambda path: -last_use[path])
    return [(path, last_read.get(path)) for path in newest]


def _attachment(path: str, how: str, text: str, room: int, counter: TokenCounter) -> Message:
    header = f"[Re-attached after the checkpoint: the {how} of `{path}`]\n"
    message = _tagged(header + text)
    tokens = counter.count_message(message)
    chars = len(text) * max(room - 30, 0) // max(tokens, 1)
    while tokens > room and chars > 0:
        marker = f"\n[… {len(text) - chars} more characters not re-attached]"
        message = _tagged(header + text[:chars] + marker)
        tokens = counter.count_message(message)
        chars = chars * 9 // 10
    return message


def _tagged(text: str) -> Message:
    return attrs.evolve(Message.user(text), metadata={INJECTED_KEY: "file"})


def name_files(checkpoint: ContextSummary, attached: Sequence[Message]) -> ContextSummary:
    """``checkpoint`` with a last line naming the files ``attached`` re-attaches."""
    paths = [_path_of(message) for message in attached]
    if not paths:
        return checkpoint
    line = _NAMES + ", ".join(f"`{path}`" for path in paths if path)
    return attrs.evolve(checkpoint, summary=f"{without_names(checkpoint.summary)}\n\n{line}")


def without_names(text: str) -> str:
    """A checkpoint text without its line naming re-attached files (they were for one view)."""
    return _NAMES_LINE.sub("", text)


_PATH = regex.compile(r"of `(.*)`\]")


def _path_of(message: Message) -> str:
    found = _PATH.search(message.text.split("\n", 1)[0])
    return found[1] if found else ""
