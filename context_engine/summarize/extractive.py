"""`ExtractiveSummarizer`: a checkpoint assembled from the transcript itself, with no model.

The checkpoint is Markdown: one ``## `` heading per section, one ``- `` item
per fact, details of an item on indented lines below it. Reading an earlier
checkpoint back (`_parse`) and fitting the sections under the size bound
(`_fit`) work on that layout; the rest of the module extracts the items.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import attrs
import regex

from context_engine._validate import int_at_least
from context_engine.errors import ConfigurationError
from context_engine.messages import ContextSummary, Message
from context_engine.structure import TRUNCATION_KEY, is_user_message
from context_engine.summarize.files import (
    DEFAULT_FILE_TOOLS,
    FileToolRule,
    check_file_tools,
    merge,
    track_files,
)
from context_engine.summarize.ledger import COMMANDS, FAILURE, OK_LEGEND, TOOLS, Ledger
from context_engine.summarize.ledger_text import HIDDEN_NOTE
from context_engine.summarize.request import SummaryRequest
from context_engine.summarize.shell import DEFAULT_SHELL_TOOLS

__all__ = ["DEFAULT_SHELL_TOOLS", "SECTION_TITLES", "ExtractiveSummarizer"]

SECTION_TITLES: tuple[str, ...] = (
    "Focus requested by the user", "Lines matching the focus", "Goal", "Constraints",
    "Files modified", "Files read", COMMANDS, TOOLS, FAILURE, "Decisions",
    "Latest progress", "Next steps",
)  # fmt: skip
"""The section headings `ExtractiveSummarizer` writes, in the order it writes them."""
FOCUS, MATCHING, GOAL, CONSTRAINTS, MODIFIED, READ, *_, DECISIONS, PROGRESS, NEXT = SECTION_TITLES

_ALL = 1 << 30
_EMPTY = "Nothing to summarize: the summarized part holds no requests, tool calls or text."


@attrs.frozen
class _Spec:
    title: str
    cap: int  # new items shown at most in a history checkpoint
    turn_cap: int  # the same in a turn-prefix summary; 0 leaves new items out
    floor: int  # items kept until every other section is down to its floor
    pin_first: bool = False


_SPECS = {
    spec.title: spec
    for spec in (
        _Spec(FOCUS, 3, 3, 1), _Spec(MATCHING, 10, 5, 2), _Spec(GOAL, 8, 0, 2, pin_first=True),
        _Spec(CONSTRAINTS, 10, 0, 3), _Spec(MODIFIED, _ALL, _ALL, _ALL), _Spec(READ, 60, 20, 10),
        _Spec(COMMANDS, 25, 8, 5), _Spec(TOOLS, 15, 5, 3), _Spec(FAILURE, 1, 1, 1),
        _Spec(DECISIONS, 8, 3, 2), _Spec(PROGRESS, 3, 2, 1), _Spec(NEXT, 6, 3, 2),
    )
}  # fmt: skip
_OTHER = _Spec("", 0, 0, 0)
# When hiding down to the floors is not enough, whole sections give way in this
# order ("" stands for the sections only an earlier checkpoint had); files modified last.
_GIVE_WAY = (
    TOOLS, MATCHING, PROGRESS, DECISIONS, READ, "", COMMANDS, NEXT, FAILURE, CONSTRAINTS, GOAL,
    FOCUS,
)  # fmt: skip

_HEADING = regex.compile(r"^#{1,6}\s+(.*\S)\s*$")
# A call item's label: what comes before its status (`Run.head`), the whole line when
# the work log left an ok call unmarked; an older checkpoint quoted it in backticks.
_LABEL = regex.compile(
    r"^(?:``? (?P<quoted>.*?) ``?|`(?P<code>[^`]*)`|(?P<bare>.*?))"
    r"(?: (?:✓(?: \(\d+ runs\))?|\((?:ok|failed|exit|no result|ran|\d+ runs)[^()\n]*\)))?$"
)
_BULLET = regex.compile(r"^\s*(?:[-*•]|\d+[.)])\s+")
_FENCE = regex.compile(r"```.*?(?:```|\Z)", regex.DOTALL)
# Sentences end at . ! ? and a space, right after the ideographic full stop and the
# fullwidth ! and ?, and at line breaks.
_SENTENCE_BREAK = regex.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])|\n+")
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}"
_CONSTRAINT = regex.compile(
    r"(?i:\b(?:must(?:n't| not)?|never|don't|do not|always|keep|should(?:n't| not)?|avoid|"
    r"make sure|ensure|required?|no longer)\b)"
    r"|必须|不要|不能|不可以|禁止|务必|一定要|始终|总是|保持|应该|切勿|別|必ず|ないでください|てはいけない|常に|絶対"
    r"|반드시|하지 마|절대"
)
_DECISION = regex.compile(
    r"(?i:\b(?:decided|decide to|chose|choose to|opted|instead of|going to use|"
    r"I(?:'ll| will) (?:use|go with|keep|switch|change)|(?:root )?cause (?:is|was)|"
    r"the (?:fix|issue|problem|bug) (?:is|was)|the plan is|approach)\b)"
)
_TODO = regex.compile(
    r"\b(?:TODO|FIXME)\b.*\S"
    r"|^\s*(?:[-*]\s*)?(?:\[ \]\s*\S|(?i:next(?: steps?)?|remaining|still to do)\s*:\s*\S).*"
)
_WORD = regex.compile(rf"[^\W\d_{_CJK}][\w-]{{3,}}|[{_CJK}]+")
_STOPWORDS = frozenset(
    regex.split(
        r"\s+",
        "keep the that this with from about please focus make sure only what which also into more "
        "less them they their there summary summarize should would could those these have been "
        "were when where while must need want like just some than then very each every other "
        "after before details detail information anything everything things",
    )
)


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: max(limit - 1, 0)].rstrip() + "…"


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def _sentences(text: str) -> list[str]:
    pieces = _SENTENCE_BREAK.split(_FENCE.sub("\n", text))
    return [_BULLET.sub("", piece).strip() for piece in pieces if piece and piece.strip()]


def _keywords(focus: Sequence[str]) -> frozenset[str]:
    stems: set[str] = set()
    for word in _WORD.findall(" ".join(focus).lower()):
        if regex.match(rf"[{_CJK}]", word):
            stems.update(word[i : i + 2] for i in range(max(len(word) - 1, 1)))
        elif word not in _STOPWORDS:
            stems.add(word[: max(4, len(word) - 3)])
    return frozenset(stems)


def _score(text: str, keywords: frozenset[str]) -> int:
    lowered = text.lower()
    return sum(1 for stem in keywords if stem in lowered)


def _parse(text: str) -> list[tuple[str, list[str]]]:
    """An earlier checkpoint as ``(heading, items)``; text before a heading: 'Earlier notes'."""
    sections: list[tuple[str, list[str]]] = [("Earlier notes", [])]
    for line in text.splitlines():
        items = sections[-1][1]
        heading = _HEADING.match(line)
        if heading is not None:
            sections.append((heading[1], []))
        elif not line.strip() or HIDDEN_NOTE.match(line) or line.strip() == OK_LEGEND:
            continue
        elif line[:1].isspace() and items:
            items[-1] += "\n" + line.rstrip()
        else:
            items.append(regex.sub(r"^[-*]\s+", "", line.strip()))
    return [(title, items) for title, items in sections if items]


@attrs.frozen
class _Section:
    title: str
    items: tuple[str, ...]
    order: tuple[int, ...]  # indices in the order they are hidden
    hidden: int  # how many of ``order`` start hidden
    floor: int
    rank: int  # sections with a lower rank give way first once floors are reached

    def render(self, hidden: int) -> str:
        gone = frozenset(self.order[:hidden])
        lines = [f"## {self.title}"]
        lines += [f"- {item}" for index, item in enumerate(self.items) if index not in gone]
        if gone:
            lines.append(f"- (+{len(gone)} more)")
        return "\n".join(lines)


def _section(
    spec: _Spec, old: Sequence[str], new: Sequence[str], turn: bool, keywords: frozenset[str]
) -> _Section:
    cap = spec.turn_cap if turn else spec.cap
    items = _dedupe((*old, *(new if cap else ())))
    fresh = frozenset(range(len(_dedupe(old)), len(items)))
    count = len(items)

    def importance(index: int) -> tuple[bool, int, bool, int]:
        text = items[index]
        pinned = spec.pin_first and index == 0
        return pinned, _score(text, keywords), "(failed" in text, index

    ranked = sorted(range(count), key=importance)
    first_out = [index for index in ranked if index in fresh][: max(len(fresh) - cap, 0)]
    order = (*first_out, *(index for index in ranked if index not in first_out))
    rank = _GIVE_WAY.index(spec.title) if spec.title in _GIVE_WAY else len(_GIVE_WAY)
    floor = min(spec.floor, count)
    return _Section(spec.title, tuple(items), order, len(first_out), floor, rank)


def _fit(sections: Sequence[_Section], max_chars: int) -> str:
    """Render the sections under ``max_chars``.

    First items are hidden from the longest section still above its floor;
    then sections give way whole, lowest rank first; at last the text is cut.
    """
    hidden = [section.hidden for section in sections]
    texts = [section.render(count) for section, count in zip(sections, hidden, strict=True)]
    for respect_floor in (True, False):
        while sum(map(len, texts)) + 2 * (len(texts) - 1) > max_chars:
            open_ = [
                i
                for i, s in enumerate(sections)
                if len(s.items) - hidden[i] > (s.floor if respect_floor else 0)
            ]
            if not open_:
                break
            if respect_floor:
                i = max(open_, key=lambda i: (len(texts[i]), -i))
            else:
                i = min(open_, key=lambda i: (sections[i].rank, i))
            hidden[i] += 1
            texts[i] = sections[i].render(hidden[i])
    text = "\n\n".join(texts)
    return text if len(text) <= max_chars else text[: max(max_chars - 1, 0)] + "…"


def _picked(texts: Iterable[str], cue: regex.Pattern[str], chars: int) -> list[str]:
    return _dedupe(
        _one_line(sentence, chars)
        for text in texts
        for sentence in _sentences(text)
        if cue.search(sentence)
    )


def _goal(users: Sequence[str], chars: int) -> list[str]:
    """Every request, in order (the first is pinned, the task; the newest are kept longest)."""
    return _dedupe(_one_line(user, chars) for user in users)


def _label(item: str) -> str | None:
    """The call an item of a call section names (its leading code span)."""
    found = _LABEL.match(item.split("\n", 1)[0])
    if found is None:
        return None
    return found["quoted"] or found["code"] or found["bare"]


def _superseded(old: Sequence[str], new: Sequence[str]) -> list[str]:
    """``old`` call items without those a ``new`` item names again: a call shows its last run."""
    again = {_label(item) for item in new} - {None}
    return [item for item in old if _label(item) not in again]


def _matching(messages: Sequence[Message], keywords: frozenset[str]) -> list[str]:
    if not keywords:
        return []
    need = min(2, len(keywords))
    return _dedupe(
        _one_line(line, 200)
        for message in messages
        for line in message.text.splitlines()
        if _score(line, keywords) >= need
    )


def _next_steps(messages: Sequence[Message], chars: int) -> list[str]:
    items = [
        _one_line(found[0], chars)
        for message in messages
        if message.role in ("user", "assistant")
        for line in message.text.splitlines()
        if (found := _TODO.search(line)) is not None
    ]
    users = [i for i, message in enumerate(messages) if is_user_message(message)]
    last = next((i for i in reversed(users) if messages[i].text.strip()), -1)
    final = messages[-1] if messages else None
    answered = (
        final is not None
        and len(messages) - 1 > last
        and final.role == "assistant"
        and bool(final.text.strip())
        and not final.tool_calls
    )
    if last >= 0 and not answered:
        items.append("Still open: " + _one_line(messages[last].text, chars))
    return _dedupe(items)


def _conversation(messages: Sequence[Message]) -> list[Message]:
    """What was said: no checkpoint (read back apart) and no truncation marker.

    A marker is a user-role message the engine wrote; taken for a request it
    would become the checkpoint's goal.
    """
    return [m for m in messages if not m.is_summary and TRUNCATION_KEY not in m.metadata]


def _previous(request: SummaryRequest) -> dict[str, list[str]]:
    texts = [request.previous_summary] if request.previous_summary else []
    texts += [m.summary for m in request.messages if isinstance(m, ContextSummary)]
    merged: dict[str, list[str]] = {}
    for text in texts:
        for title, items in _parse(text):
            merged.setdefault(title, []).extend(items)
    return merged


def _to_file_tools(value: Mapping[str, FileToolRule]) -> Mapping[str, FileToolRule]:
    check_file_tools(value)
    return MappingProxyType(dict(value))


def _to_names(value: Iterable[str]) -> frozenset[str]:
    if isinstance(value, str):
        raise ConfigurationError(
            f"shell_tools must be a collection of tool names, got the string {value!r}; "
            f"write shell_tools={{{value!r}}}"
        )
    return frozenset(value)


@attrs.frozen(kw_only=True)
class ExtractiveSummarizer:
    """A summarizer that needs no model and no network: it extracts, it does not write.

    Pass an instance wherever a `Summarizer` is accepted. Calling it with a
    `SummaryRequest` returns a Markdown checkpoint whose sections are named in
    `SECTION_TITLES` (empty sections are left out):

    * **Focus requested by the user**: ``request.instructions``; lines of the
      messages that match it are listed under **Lines matching the focus**, and
      matching items are the last to be hidden when the text must shrink.
    * **Goal**: the first and the latest user request.
    * **Constraints**: the user's sentences with must, never, don't, always,
      keep, should, avoid, make sure, ... (and their usual Chinese, Japanese and
      Korean forms), each sentence whole.
    * **Files modified** / **Files read**: from `track_files`.
    * **Commands run**: calls of the ``shell_tools``, each with ``ok``,
      ``failed`` (and the exit code when the result states one) or ``no result
      yet``, and up to three error lines of a failure.
    * **Other tool calls**: calls of tools that are neither shell nor file tools.
    * **Decisions**: the assistant's sentences that state a choice or a cause.
    * **Latest progress**: the last assistant texts (an update replaces the
      earlier checkpoint's).
    * **Next steps**: TODO-like lines and the latest user request when no
      final assistant answer follows it.

    A ``turn_prefix`` request gives a shorter form: no goal or constraints (the
    turn's user message stays verbatim after the checkpoint) and fewer items per
    section. Thinking blocks and images are not read.

    Updating: the earlier checkpoint (``previous_summary``, and any
    `ContextSummary` among the messages) is read back section by section; its
    items stay, ahead of the new ones, duplicates dropped, and its sections
    this summarizer does not write are kept under their own headings.

    Size: at most ``4 * max_tokens`` characters. Each section shows a bounded
    number of new items; when the whole is still too long, items are hidden
    from the longest section, least important first (the first request is
    pinned, then lines matching the focus, failed calls, newer before older),
    and a ``- (+N more)`` line counts what a section hides. Files modified are
    hidden last.

    Attributes:
        file_tools: File tools and what they do, as for `track_files`.
        shell_tools: Tool names whose calls are commands.
        item_chars: Longest item, in characters, before it is clipped with "…".
    """

    file_tools: Mapping[str, FileToolRule] = attrs.field(
        default=DEFAULT_FILE_TOOLS, converter=_to_file_tools
    )
    shell_tools: frozenset[str] = attrs.field(default=DEFAULT_SHELL_TOOLS, converter=_to_names)
    item_chars: int = attrs.field(default=400, validator=int_at_least(40, fix="the default is 400"))

    def __call__(self, request: SummaryRequest) -> str:
        """The checkpoint text for ``request``: deterministic, at most ``4 * max_tokens`` chars."""
        turn = request.kind == "turn_prefix"
        previous = _previous(request)
        fresh = self._extract(request.messages, turn)
        fresh[FOCUS] = [_one_line(request.instructions or "", 500)]
        keywords = _keywords([*previous.get(FOCUS, []), *fresh[FOCUS]])
        fresh[MATCHING] = _matching(_conversation(request.messages), keywords)
        earlier_read, earlier_modified = previous.get(READ, []), previous.get(MODIFIED, [])
        activity = merge(
            earlier_read, earlier_modified, track_files(request.messages, self.file_tools)
        )
        previous[READ] = [path for path in earlier_read if path in activity.read]
        for title in (COMMANDS, TOOLS):
            previous[title] = _superseded(previous.get(title, []), fresh[title])
        for latest in (FAILURE, PROGRESS):  # only the most recent failure and progress
            if fresh[latest]:
                previous.pop(latest, None)
        fresh[READ], fresh[MODIFIED] = list(activity.read), list(activity.modified)
        sections = [
            _section(_SPECS[title], previous.pop(title, []), fresh.get(title, []), turn, keywords)
            for title in SECTION_TITLES
        ]
        sections += [
            _section(attrs.evolve(_OTHER, title=title), items, [], turn, keywords)
            for title, items in previous.items()
        ]
        sections = [section for section in sections if section.items]
        max_chars = max(request.max_tokens, 1) * 4
        return _fit(sections, max_chars) if sections else _EMPTY[:max_chars]

    def _extract(self, messages: Sequence[Message], turn: bool) -> dict[str, list[str]]:
        chars = self.item_chars
        plain = _conversation(messages)
        users = [m.text for m in plain if is_user_message(m) and m.text.strip()]
        texts = [m.text for m in plain if m.role == "assistant" and m.text.strip()]
        ledger = self._ledger(plain)
        recent = _SPECS[PROGRESS].turn_cap if turn else _SPECS[PROGRESS].cap
        return {
            GOAL: _goal(users, chars),
            CONSTRAINTS: _picked(users, _CONSTRAINT, chars),
            COMMANDS: [run.item() for run in ledger.runs if run.command],
            TOOLS: [run.item() for run in ledger.runs if not run.command],
            FAILURE: [ledger.failure.item()] if ledger.failure is not None else [],
            DECISIONS: _picked(texts, _DECISION, chars),
            PROGRESS: [_one_line(text, chars) for text in texts[-recent:]],
            NEXT: _next_steps(plain, chars),
        }

    def _ledger(self, messages: Sequence[Message]) -> Ledger:
        return Ledger().update(messages, shell_tools=self.shell_tools, file_tools=self.file_tools)
