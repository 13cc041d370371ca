"""The probes of `fidelity.py`: what of the ground truth a view still shows the model.

A view is read as the model gets it: every message's text plus the name and
the decoded arguments of every visible tool call. Each probe returns a recall
in [0, 1] for one view against the `Truth` of the transcript up to that call,
or None when the truth holds nothing to recall (no edit yet, no failure yet).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from _fidelity_truth import Truth, call_arguments

from context_engine import Message

__all__ = ["PROBES", "View", "marked_ok", "mentions", "path_in", "read_view", "score"]

PROBES = ("edited", "last_failure", "constraints", "steps_done", "newest_user")
"""Files edited shown as modified; the most recent failure's key line; the user's constraint
sentences; files read and commands run; the newest user message verbatim."""

_HEADING = re.compile(r"^\s*(?:#{1,6}\s+(?P<h>.+?)\s*#*\s*$|\*\*(?P<b>[^*]+)\*\*:?\s*$)")
_MODIFIED_TITLE = re.compile(r"(?i)modif|edit|chang|creat|writ|touched|patch")
_MODIFIED_BLOCK = re.compile(r"<modified-files>(.*?)</modified-files>", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+")
_NEAR = 0.8  # share of a sentence's word trigrams a near-verbatim copy keeps
_PREFIX = 40  # characters of a command a shortened mention ("cmd…") must keep
_OK = re.compile(r"(?i)\b(?:ok|succeeded|successful(?:ly)?|success|passed|exit 0)\b|✓|✔")
_NOT_OK = re.compile(r"(?i)fail|error|exit [1-9]|nonzero|✗|✘")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def _trigrams(words: Sequence[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + 3]) for i in range(max(len(words) - 2, 0))}


def _strings(value: object) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif value is not None:
        yield str(value)


def _modified_text(text: str) -> str:
    """The parts of a message under a heading about modified, edited or created files."""
    parts = [m[1] for m in _MODIFIED_BLOCK.finditer(text)]
    inside = False
    for line in text.split("\n"):
        heading = _HEADING.match(line)
        if heading:
            inside = bool(_MODIFIED_TITLE.search(heading["h"] or heading["b"] or ""))
        elif inside:
            parts.append(line)
    return "\n".join(parts)


@dataclass(frozen=True)
class View:
    """One view, read once for every probe."""

    flat: str  # all text and tool-call arguments, blanks collapsed
    notes: list[str]  # lines of non-tool messages (where a checkpoint states outcomes)
    normal: str  # lowercase words only, for near-verbatim comparisons
    grams: set[tuple[str, ...]]
    modified: str
    call_ids: frozenset[str]


def read_view(view: Sequence[Message]) -> View:
    """Read ``view`` as the model would."""
    pieces: list[str] = []
    notes: list[str] = []
    modified: list[str] = []
    ids: set[str] = set()
    for message in view:
        text = message.text
        pieces.append(text)
        if message.role != "tool":
            notes += [_flat(line) for line in text.split("\n") if line.strip()]
            modified.append(_modified_text(text))
        for call in message.tool_calls:
            ids.add(call.id)
            pieces.append(call.name)
            pieces += list(_strings(call_arguments(call)))
    joined = "\n".join(pieces)
    normal = _normal(joined)
    return View(
        flat=_flat(joined),
        notes=notes,
        normal=normal,
        grams=_trigrams(normal.split()),
        modified=_flat("\n".join(modified)),
        call_ids=frozenset(ids),
    )


def _path_forms(path: str) -> list[str]:
    """``path`` and its tails down to the last two components (the file name alone if bare)."""
    parts = [p for p in path.strip().strip("'\"").split("/") if p and p != "."]
    if not parts:
        return []
    keep = min(2, len(parts))
    return ["/".join(parts[i:]) for i in range(len(parts) - keep + 1)]


def path_in(path: str, text: str) -> bool:
    """Whether ``text`` names ``path`` (or a tail of it of at least two components)."""
    for form in _path_forms(path):
        if re.search(rf"(?<![\w.-]){re.escape(form)}(?![\w/-]|\.\w)", text):
            return True
    return False


def mentions(text: str, key: str) -> bool:
    """Whether ``text`` holds ``key`` whole, or shortened with an ellipsis after its first part."""
    key = _flat(key)
    if not key:
        return False
    if key in text:
        return True
    if len(key) <= _PREFIX:
        return False
    head = key[:_PREFIX]
    start = text.find(head)
    while start >= 0:
        i, j = start + _PREFIX, _PREFIX
        while i < len(text) and j < len(key) and text[i] == key[j]:
            i, j = i + 1, j + 1
        if text.startswith(("…", "..."), i):
            return True
        start = text.find(head, start + 1)
    return False


def _near(sentence: str, view: View) -> bool:
    normal = _normal(sentence)
    if normal and normal in view.normal:
        return True
    grams = _trigrams(normal.split())
    return bool(grams) and len(grams & view.grams) / len(grams) >= _NEAR


def _share(hits: Sequence[bool]) -> float | None:
    return sum(hits) / len(hits) if hits else None


def score(view: View, truth: Truth) -> dict[str, float | None]:
    """Recall of each of `PROBES` in ``view`` (None: nothing to recall)."""
    edit_calls: dict[str, set[str]] = {}
    for _, call_id, path in truth.edits:
        edit_calls.setdefault(path, set()).add(call_id)
    edited = [
        bool(edit_calls[p] & view.call_ids) or path_in(p, view.modified)
        for p in truth.edited_paths()
    ]
    failure = truth.failures[-1].key_line if truth.failures else None
    steps = [
        mentions(view.flat, key) and all(v in view.flat for v in values)
        for key, values in truth.last_status()
    ] + [path_in(p, view.flat) for p in truth.read_paths()]
    newest = truth.users[-1][1] if truth.users else None
    return {
        "edited": _share(edited),
        "last_failure": None if failure is None else float(_flat(failure) in view.flat),
        "constraints": _share([_near(s, view) for _, s in truth.constraints]),
        "steps_done": _share(steps),
        "newest_user": None if newest is None else float(_flat(newest) in view.flat),
    }


def marked_ok(view: View, truth: Truth) -> tuple[int, int]:
    """(failed commands the view's notes call ok, failed commands its notes name at all).

    A failed command is one whose latest run failed; a note names it when a line
    of a non-tool message holds its command string, and calls it ok when that
    line also says ok / succeeded / passed and nothing of a failure.
    """
    named = wrong = 0
    for (key, _), step in truth.last_status().items():
        if not step.failed or len(key) < 4:
            continue
        lines = [line for line in view.notes if _names(line, key)]
        if not lines:
            continue
        named += 1
        rest = [_without(line, key) for line in lines]
        wrong += any(_OK.search(r) and not _NOT_OK.search(r) for r in rest)
    return wrong, named


def _names(line: str, key: str) -> bool:
    """Whether a note line names the command ``key`` itself, not a longer one.

    Longer: one that ends with it (``pip install x && key``), or one that
    runs on past its last character without a break (``python -c "print(1)"``
    is not ``python -c "``, the opening of a script written below it).
    """
    if not mentions(line, key):
        return False
    flat = _flat(key)
    head = flat[:_PREFIX]
    start = line.find(head)
    while start >= 0:
        after = line[start + len(flat) : start + len(flat) + 1]
        runs_on = (
            line.startswith(flat, start) and after not in ("", "…", "`") and not after.isspace()
        )
        if not runs_on and (
            start == 0
            or line[start - 1] in "`'\""
            or line[max(start - 2, 0) : start] in (": ", "- ")
        ):
            return True
        start = line.find(head, start + 1)
    return False


def _without(line: str, key: str) -> str:
    """``line`` without the command itself (a command may well print "ok")."""
    key = _flat(key)
    if key in line:
        return line.replace(key, " ")
    start = line.find(key[:_PREFIX])
    if start < 0:
        return line
    end = min((i for i in (line.find("…", start), line.find("...", start)) if i >= 0), default=-1)
    return line[:start] + " " + (line[end:] if end >= 0 else "")
