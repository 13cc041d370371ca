"""The user's instructions in a checkpoint: the task statement and every constraint sentence.

A summarizer, a model above all, paraphrases; "you don't have to modify the
testing logic" becomes "fix the bug", and after a few checkpoints the
constraint is gone. So the checkpoint strategies add, by code, a section of
their own at the top of every checkpoint: the first request (the task
statement, verbatim while it fits its share) and each sentence of every user
message that states a constraint (must, don't, never, only, always, ...),
whole. The section is merged from one checkpoint into the next (its full list
travels in the checkpoint's metadata under `INSTRUCTIONS_KEY`, and is read
back from the text when the metadata was lost in a format round trip), and
it is bounded: what does not fit is shortened with a marker that says where
the rest is, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

import attrs
import regex

from context_engine.messages import ContextSummary, Message
from context_engine.structure import TRUNCATION_KEY, is_user_message
from context_engine.summarize.pinned import INJECTED_KEY
from context_engine.tokens import TokenCounter

__all__ = [
    "INSTRUCTIONS_KEY",
    "UserInstructions",
    "add_instructions",
    "constraint_sentences",
    "is_request",
    "keep_instructions",
    "split_instructions",
]

INSTRUCTIONS_KEY = "context_engine.instructions"
"""Metadata key on a checkpoint: ``{"task": str | None, "constraints": [str, ...]}``, in full."""

_OPEN, _CLOSE = "<user-instructions>", "</user-instructions>"
_TASK_LABEL = "Task statement (the first request):"
_RULES_LABEL = "Constraints the user stated (verbatim):"
_SECTION = regex.compile(
    rf"^\s*{regex.escape(_OPEN)}\n(?P<body>.*?)\n{regex.escape(_CLOSE)}\n*", regex.DOTALL
)
_RULE_LINE = regex.compile(r"^- (?!\(\+\d+ earlier)(.+)$", regex.MULTILINE)
_CUE = regex.compile(
    r"(?i:\b(?:must(?:n't| not)?|never|don't|do not|doesn't|does not|only|always|"
    r"should(?:n't| not)?|shall(?: not)?|avoid|make sure|ensure|required?|cannot|can't|"
    r"no need|not allowed|forbidden|important|keep)\b)"
    r"|必须|不要|不能|禁止|务必|一定要|始终|只|必ず|ないでください|てはいけない|常に|だけ"
    r"|반드시|하지 마|절대"
)
_BREAK = regex.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n+")
_FENCE = regex.compile(r"```.*?(?:```|\Z)", regex.DOTALL)
_MARKUP = regex.compile(r"^[\s>*#\-•\d.)]+")
_SENTENCE_CHARS = 600
_TASK_TOKENS = 400  # a task statement beyond this is shortened whatever the room: the
# constraints it states are listed apart, and the checkpoint's body needs the room
_TASK_TAIL_SHARE = 0.25  # of a shortened task statement's room, kept from its end


def constraint_sentences(text: str) -> list[str]:
    """The sentences of ``text`` that state a constraint, whole, in order, each once.

    Sentences end at ``.``, ``!``, ``?`` and line breaks; code blocks are not
    read; list markers are dropped; fragments of fewer than three words are
    left out; a sentence longer than 600 characters is clipped with "…".
    """
    found: list[str] = []
    for piece in _BREAK.split(_FENCE.sub("\n", text)):
        sentence = _MARKUP.sub("", piece or "").strip()
        if len(sentence.split()) < 3 and not regex.search(
            r"[\p{Han}\p{Hiragana}\p{Hangul}]", sentence
        ):
            continue
        if _CUE.search(sentence):
            clipped = (
                sentence
                if len(sentence) <= _SENTENCE_CHARS
                else sentence[: _SENTENCE_CHARS - 1] + "…"
            )
            found.append(clipped)
    return list(dict.fromkeys(found))


def is_request(message: Message) -> bool:
    """A message the user wrote, not one the engine wrote for it (checkpoint, marker, pinned)."""
    return (
        is_user_message(message)
        and TRUNCATION_KEY not in message.metadata
        and INJECTED_KEY not in message.metadata
    )


def split_instructions(text: str) -> tuple[str | None, str]:
    """``(section body, rest)`` of a checkpoint text; the body is None when it has no section."""
    found = _SECTION.match(text)
    if found is None:
        return None, text
    return found["body"], text[found.end() :]


@attrs.frozen
class UserInstructions:
    """The task statement and the constraint sentences a checkpoint must carry.

    Attributes:
        task: The first request, verbatim, or None when none was seen.
        constraints: Constraint sentences of every request, oldest first, each once.
    """

    task: str | None = None
    constraints: tuple[str, ...] = ()

    @classmethod
    def of(cls, checkpoint: Message | None) -> UserInstructions:
        """What ``checkpoint`` carries: its metadata, else its text's section; empty otherwise."""
        if not isinstance(checkpoint, ContextSummary):
            return cls()
        recorded = checkpoint.metadata.get(INSTRUCTIONS_KEY)
        if isinstance(recorded, Mapping):
            task, rules = recorded.get("task"), recorded.get("constraints")
            listed = rules if isinstance(rules, (list, tuple)) else ()
            return cls(
                task if isinstance(task, str) else None,
                tuple(rule for rule in listed if isinstance(rule, str)),
            )
        body, _ = split_instructions(checkpoint.summary)
        if body is None:
            return cls()
        task_part, _, rules = body.partition(_RULES_LABEL)
        task = task_part.removeprefix(_TASK_LABEL).strip() or None
        return cls(task, tuple(_RULE_LINE.findall(rules)))

    def redacted(self, redact: Callable[[str], str] | None) -> UserInstructions:
        """These instructions with ``redact`` applied to every text (themselves without one)."""
        if redact is None:
            return self
        task = redact(self.task) if self.task is not None else None
        return UserInstructions(task, tuple(dict.fromkeys(map(redact, self.constraints))))

    def extended(self, messages: Iterable[Message]) -> UserInstructions:
        """These instructions followed by those of the requests among ``messages``."""
        requests = [m.text for m in messages if is_request(m) and m.text.strip()]
        task = self.task if self.task is not None else (requests[0] if requests else None)
        found = [sentence for text in requests for sentence in constraint_sentences(text)]
        return UserInstructions(task, tuple(dict.fromkeys((*self.constraints, *found))))

    @property
    def record(self) -> dict[str, object]:
        """The metadata value under `INSTRUCTIONS_KEY`."""
        return {"task": self.task, "constraints": list(self.constraints)}

    def render(self, max_tokens: int, counter: TokenCounter) -> str:
        """The section, at most ``max_tokens`` tokens ("" when there is nothing to say).

        Constraints come first in the room (the newest kept when not all fit,
        with a line counting the others); the task statement takes what is
        left, shortened around a marker when it is longer. A budget too small
        for the frame and a marker gives "" (the checkpoint's record still
        holds everything).
        """
        if self.task is None and not self.constraints:
            return ""
        frame = counter.count_text(f"{_OPEN}\n{_TASK_LABEL}\n\n{_RULES_LABEL}\n{_CLOSE}") + 8
        room = max(0, max_tokens - frame)
        task_room = min(room // 4, _TASK_TOKENS) if self.task is not None else 0
        rules = _fit_rules(self.constraints, room - task_room, counter)
        left = min(room - counter.count_text("\n".join(rules)), _TASK_TOKENS)
        lines = [_OPEN]
        if self.task is not None:
            lines += [_TASK_LABEL, _shorten(self.task, left, counter)]
        if rules:
            lines += [_RULES_LABEL, *rules]
        section = "\n".join([*lines, _CLOSE])
        return section if counter.count_text(section) <= max_tokens else ""


def _fit_rules(rules: Sequence[str], room: int, counter: TokenCounter) -> list[str]:
    """The newest rules that fit in ``room`` tokens, oldest first, and a line counting the rest."""
    kept: list[str] = []
    used = 0
    for rule in reversed(rules):
        cost = counter.count_text(rule) + 2
        if used + cost > room:
            break
        kept.append(f"- {rule}")
        used += cost
    kept.reverse()
    left_out = len(rules) - len(kept)
    if left_out:
        note = f"- (+{left_out} earlier constraints: in this checkpoint's record and the originals)"
        kept.insert(0, note)
    return kept


def _shorten(text: str, room: int, counter: TokenCounter) -> str:
    """``text`` when it fits in ``room`` tokens, else its head and tail around a marker."""
    tokens = counter.count_text(text)
    if tokens <= room:
        return text
    chars = max(0, len(text) * max(room - 20, 0) // max(tokens, 1))
    while True:
        tail = int(chars * _TASK_TAIL_SHARE)
        head = chars - tail
        left_out = len(text) - head - tail
        marker = (
            f"\n[… {left_out} characters of the first request left out; "
            "the full text is in the originals]\n"
        )
        shortened = text[:head] + marker + (text[len(text) - tail :] if tail else "")
        if chars == 0 or counter.count_text(shortened) <= room:
            return shortened
        chars = chars * 9 // 10


WriteBody = Callable[
    [tuple[Message, ...], tuple[Message, ...], "Message | None", int], Awaitable[ContextSummary]
]
"""``write(history, prefix, previous, limit)``: the checkpoint body, at most ``limit`` tokens."""


async def keep_instructions(
    write: WriteBody,
    history: Sequence[Message],
    prefix: Sequence[Message],
    previous: Message | None,
    *,
    limit: int,
    counter: TokenCounter,
    share: float = 0.4,
    redact: Callable[[str], str] | None = None,
) -> ContextSummary:
    """A checkpoint of at most ``limit`` tokens that opens with the user's instructions.

    The instructions of ``previous`` and of the requests in ``history`` and
    ``prefix`` are rendered in at most ``share`` of ``limit``; ``write`` gets
    the room left, ``previous`` without its section (the summarizer must not
    rewrite it) and the messages without re-injected pinned ones (they come
    back after the checkpoint on their own). ``redact`` removes secrets from
    what the section quotes.
    """
    found = UserInstructions.of(previous).extended((*history, *prefix)).redacted(redact)
    section = found.render(int(limit * share), counter)
    # The blank line joining it to the body, and a token of rounding, come out of the body.
    used = counter.count_text(f"{section}\n\n") + 1 if section else 0
    if isinstance(previous, ContextSummary):
        _, rest = split_instructions(previous.summary)
        previous = attrs.evolve(previous, summary=rest)
    body = await write(_unpinned(history), _unpinned(prefix), previous, max(1, limit - used))
    return _opened(body, section, found)


def add_instructions(
    checkpoint: ContextSummary,
    previous: Message | None,
    replaced: Sequence[Message],
    *,
    max_tokens: int,
    counter: TokenCounter,
) -> ContextSummary:
    """``checkpoint`` opened by the instructions of ``previous`` and the requests ``replaced``.

    For checkpoints whose body no summarizer writes (a session memory).
    """
    found = UserInstructions.of(previous).extended(replaced)
    return _opened(checkpoint, found.render(max_tokens, counter), found)


def _opened(body: ContextSummary, section: str, found: UserInstructions) -> ContextSummary:
    text = f"{section}\n\n{body.summary}" if section else body.summary
    return attrs.evolve(
        body, summary=text, metadata={**body.metadata, INSTRUCTIONS_KEY: found.record}
    )


def _unpinned(messages: Sequence[Message]) -> tuple[Message, ...]:
    return tuple(m for m in messages if INJECTED_KEY not in m.metadata)
