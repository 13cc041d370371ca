"""The work log's text: as many calls as the budget holds, short first, detailed where room is left.

A long session runs hundreds of distinct commands; a checkpoint has room for
a fraction of them. Listing a few in full and hiding the rest tells the
model less than listing most of them briefly, so each section is filled in
two passes, newest call first:

1. every call gets its dense form (its label cut to `DENSE_LABEL_CHARS`, a
   failure's key line to `DENSE_KEY_CHARS`) while the budget holds, but the
   newest few (`_NEWEST_WHOLE`) are listed whole where they fit: an agent
   runs its latest commands again with other arguments, and a cut form
   (``cmd --force 2>&1…``) would read as naming that next variant too;
2. the room left widens the newest of them back to their full form, and
   what is left then the next ones to their short form (the label clipped
   after the word that reaches `SHORT_LABEL_CHARS`, a key line to
   `SHORT_KEY_CHARS`).

A cut label never ends on a prefix another call of the view shares
(`_widths`), so its opening names one command only.

When even the dense forms do not all fit, the older calls alike in their
first 40 characters (greps of one pattern in several files, one test file
run with other ``-k`` filters) share one line (`_merges`): their common
opening and "…", how many calls it stands for and how each last ended
(``(3 commands: 1 failed, exit 1; 2 ✓)``, never a bare check mark when one
failed), a failure's key line below. One line names them all for the room of
one, and none of them is hidden behind the ``(+N more)``.

The calls the text has no room for are counted (``(+N more)``) and stay in
the checkpoint's metadata (`context_engine.summarize.ledger.LEDGER_KEY`).

Every line is spent on calls: an item is its label on a line of its own with
no bullet (unless the label opens like markup, ``# note…``), and a call that
ended ok carries no mark, which `OK_LEGEND` says once under each heading; a
failure's status (``(failed, exit 1)``) and an inline script's ``(ran)``
follow their label. Bullet and check mark were two of the 17 to 20 tokens a
dense line takes.

Variants of one command (a label that another extends with more arguments
or a pipe: ``pytest tests/x.py`` and ``pytest tests/x.py -x``,
``tool lint - 2>&1`` and ``tool lint - 2>&1 | head``) share one item, each
with its own last status, in the order they last ran: the model sees that
the retry with ``-x`` failed where the first run passed, and a status is
never read as belonging to the wrong variant.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import regex

from context_engine.summarize.outcome import one_line

if TYPE_CHECKING:
    from context_engine.summarize.ledger import Ledger, Run

__all__ = [
    "DENSE_KEY_CHARS",
    "DENSE_LABEL_CHARS",
    "HIDDEN_NOTE",
    "OK_LEGEND",
    "SHORT_KEY_CHARS",
    "SHORT_LABEL_CHARS",
    "render_ledger",
]

OK_LEGEND = "(ended ok unless a status follows)"
"""The line under each of the log's call headings: an item that ended ok has no mark.

A check mark on each of hundreds of items costs a token each; said once, the
room goes to more items."""
HIDDEN_NOTE = regex.compile(r"^\s*(?:[-*]\s*)?\(\+(\d+) more\)\s*$")
"""A line counting the calls (or items) a section has no room for, bullet or not; the count."""
SHORT_LABEL_CHARS = 48
"""A call's label in its short form, "…" included: the command's own opening words."""
SHORT_KEY_CHARS = 120
"""A failure's key line in its short form, "…" included."""
DENSE_LABEL_CHARS = 41
"""A call's label in its dense form, "…" included: the command's first 40 characters."""
DENSE_KEY_CHARS = 80
"""A failure's key line in its dense form, "…" included."""

_CLIPPED_FROM = 56  # a shorter label loses too little to be worth its ambiguity
_DENSE_FROM = 45  # the same for the dense form
_NEWEST_WHOLE = 8  # the newest calls of a section, never cut
_LEAST_SAVED = 12  # a cut that saves fewer characters than this is not worth its ambiguity
_NOTE_ROOM = 16  # "(+NNNN more)" and its line break
# What may follow a command for another to count as its variant: more words, a pipe.
# A list operator starts another command ("cd /testbed && x" is no variant of "cd /testbed").
_NOT_A_VARIANT = ("&&", "||", ";", "& ", "&\n")
# What opens a line that reads as markup: a heading, a list item, a quote.
_MARKUP = ("#", "-", "*", "+", ">")
# What starts a command's pipe or redirection ("2>&1", "|&" and "&>" included).
_PIPES = ("|", ">", "2>", "<", "&>", ">&", "|&")


@attrs.frozen
class _Item:
    """One item of a section: a call, or the variants of one command; both of its forms."""

    runs: int  # calls it stands for
    dense: str
    short: str
    full: str
    members: tuple[Run, ...] = ()


def _unmistaken(line: str) -> str:
    """``line``, with a bullet when it would otherwise read as markup (``# note…``, ``- x``).

    A command may open with a comment or a dash; without a bullet its line
    would start a heading or a list of its own, for the model and for the
    parsers that read a checkpoint back.
    """
    return f"- {line}" if line.startswith(_MARKUP) else line


def _is_variant(rest: str) -> bool:
    """Whether ``rest``, what a label adds to a shorter one after a blank, keeps the command."""
    return bool(rest.strip()) and not rest.lstrip().startswith(_NOT_A_VARIANT)


def _groups(runs: Sequence[Run]) -> list[list[Run]]:
    """``runs`` grouped by the shortest label each one extends, groups by their newest run.

    Members keep the order of their own latest run; a group stands where its
    newest member does.
    """
    labels = {run.label for run in runs}
    root: dict[str, str] = {}
    for label in sorted(labels, key=len):
        base = next(
            (
                label[:i]
                for i, char in enumerate(label)
                if char == " " and label[:i] in labels and _is_variant(label[i:])
            ),
            None,
        )
        root[label] = root.get(base, base) if base is not None else label
    grouped: dict[str, list[Run]] = {}
    for run in runs:
        grouped.setdefault(root[run.label], []).append(run)
    position = {run.label: at for at, run in enumerate(runs)}
    return sorted(grouped.values(), key=lambda members: position[members[-1].label])


def _shared(labels: Sequence[str], others: Sequence[str]) -> dict[str, int]:
    """The longest prefix each label shares with another one (of the log, or ``others``)."""
    ordered = sorted({*labels, *others})
    shared = dict.fromkeys(ordered, 0)
    for a, b in itertools.pairwise(ordered):  # the longest shared prefix is with a neighbour
        common = len(posixpath.commonprefix([a, b]))
        shared[a], shared[b] = max(shared[a], common), max(shared[b], common)
    return shared


def _widths(shared: dict[str, int], chars: int, clipped_from: int) -> dict[str, int]:
    """How long each label's cut form is: ``chars``, or enough to tell it apart.

    A label clipped to a prefix it shares with another call (of the log, or
    shown elsewhere in the view) could be read as naming that one, status and
    all: a cut form keeps two characters past the longest prefix it shares
    with any other label. Labels up to ``clipped_from`` characters stay whole,
    and so do labels the cut would shorten by less than `_LEAST_SAVED`: a cut
    form also reads as naming any later command that extends it, and one
    that ends where a pipe or a redirection starts (``cmd 2>&1…`` of ``cmd
    2>&1 | head -30``) names the bare command: every later run of it with
    another pipe, the retry an agent is most likely to make. Such a label
    stays whole.
    """
    widths = {}
    for label, common in shared.items():
        width = max(chars, common + 3)
        cut = len(label) > clipped_from and len(label) - width >= _LEAST_SAVED
        widths[label] = width if cut and not _bare(label, width) else len(label)
    return widths


def _bare(label: str, width: int) -> bool:
    """Whether ``label`` cut to ``width`` characters ends where a pipe or a redirection starts."""
    flat = " ".join(label.split())
    kept = flat[: width - 1]
    kept = flat[:width] if kept.endswith(" ") else kept
    return _ends_at_pipe(kept, flat)


def _ends_at_pipe(opening: str, label: str) -> bool:
    """Whether ``opening`` of ``label`` ends where a pipe or a redirection starts, or in one.

    ``opening…`` then reads as the bare command with any pipe: also the next
    run of it the agent makes with another one.
    """
    return label[len(opening) :].lstrip().startswith(_PIPES) or opening.rstrip().endswith(_PIPES)


def _item(
    members: Sequence[Run], quoted: str | None, short: dict[str, int], dense: dict[str, int]
) -> _Item:
    """The item for one group: each member with its status, key lines indented below.

    ``short`` and ``dense`` are the widths of the labels' cut forms.
    """

    def text(heads: Sequence[str], key_chars: int | None) -> str:
        keys = dict.fromkeys(
            one_line(member.key_line, key_chars) if key_chars else member.key_line
            for member in members
            # The most recent failure's key line is quoted in its own section already.
            if member.key_line and member.label != quoted
        )  # variants failing alike say so once
        return "\n".join([_unmistaken(" → ".join(heads)), *(f"  - {key}" for key in keys)])

    # Variants are told apart by their ends: only a call of its own is clipped after
    # a word; the dense form cuts each one, past the prefix it shares with another.
    alone = len(members) == 1
    return _Item(
        len(members),
        text(
            [m.head(dense[m.label], whole_words=False, ok_mark=False) for m in members],
            DENSE_KEY_CHARS,
        ),
        text(
            [m.head(short[m.label] if alone else None, ok_mark=False) for m in members],
            SHORT_KEY_CHARS,
        ),
        text([m.head(ok_mark=False) for m in members], None),
        tuple(members),
    )


def _fitted(title: str, items: list[_Item], left: int) -> tuple[str, int, int]:
    """One section in ``left`` characters: dense forms newest first, then widened; rest counted.

    Returns the text, the characters left and the number of calls hidden.
    """
    used = len(title) + 4 + len(OK_LEGEND) + 1
    shown: list[str] = []
    for age, item in enumerate(reversed(items)):
        # The newest calls are the ones an agent runs again with other arguments:
        # a cut form of theirs would read as naming the next variant too.
        whole = age < _NEWEST_WHOLE and used + len(item.full) + 1 + _NOTE_ROOM <= left
        text = item.full if whole else item.dense
        if shown and used + len(text) + 1 + _NOTE_ROOM > left:
            break
        shown.append(text)
        used += len(text) + 1
    listed = list(reversed(items[len(items) - len(shown) :]))
    for form in ("full", "short"):  # the newest in full first, then the next less cut
        for at, item in enumerate(listed):
            wide: str = getattr(item, form)
            wider = len(wide) - len(shown[at])
            if wider > 0 and used + wider + _NOTE_ROOM <= left:
                shown[at] = wide
                used += wider
    hidden = sum(item.runs for item in items[: len(items) - len(shown)])
    lines = [f"## {title}", OK_LEGEND, *reversed(shown)]
    if hidden:
        lines.insert(2, f"(+{hidden} more)")
    return "\n".join(lines), left - used, hidden


def _longest_shared(labels: Sequence[str], others: Sequence[str]) -> dict[str, int]:
    """The longest prefix each of ``labels`` shares with one of ``others`` (not with each other)."""
    ordered = sorted(set(others))
    shared = {}
    for label in labels:
        at = bisect.bisect_left(ordered, label)
        near = ordered[max(at - 1, 0) : at + 1]  # the longest shared prefix is with a neighbour
        shared[label] = max((len(posixpath.commonprefix([label, o])) for o in near), default=0)
    return shared


def _tally(members: Sequence[Run], noun: str) -> str:
    """How the calls of one line last ended: ``(3 commands: 1 failed, exit 1; 2 ✓)``."""
    from context_engine.summarize.ledger import OK_MARK, RAN_MARK

    counts = collections.Counter(run.mark for run in members)
    runs = sum(run.runs for run in members)
    said = f"{len(members)} {noun}" + (f", {runs} runs" if runs > len(members) else "")
    if len(counts) == 1:
        (status,) = counts
        return f"({said}, all {status})"
    ended = sorted(
        counts.items(), key=lambda pair: pair[0] in (OK_MARK, RAN_MARK)
    )  # failures first
    return f"({said}: {'; '.join(f'{count} {status}' for status, count in ended)})"


@attrs.frozen
class _Merge:
    """One line standing for older calls alike: the items it replaces and the merged item."""

    bucket: tuple[_Item, ...]
    item: _Item


def _merges(
    items: list[_Item], quoted: str | None, elsewhere: Sequence[str], noun: str
) -> list[_Merge]:
    """The lines the older calls sharing their dense opening could share, oldest first.

    The newest `_NEWEST_WHOLE` items stay as they are. Among the older ones,
    long labels alike in their first ``DENSE_LABEL_CHARS - 1`` characters
    (more where a call outside the merge shares them: the opening must name
    merged calls only) become one item: their longest shared opening and
    "…", how many calls it stands for and how each last ended, failures'
    key lines below. It stands where its newest call does.
    """
    older = items[: max(len(items) - _NEWEST_WHOLE, 0)]
    candidates = [
        item
        for item in older
        if item.members and all(len(run.label) > _DENSE_FROM for run in item.members)
    ]
    inside = {run.label for item in candidates for run in item.members}
    outside = [
        *(run.label for item in items for run in item.members if run.label not in inside),
        *elsewhere,
    ]
    shared = _longest_shared(sorted(inside), outside)
    opening = DENSE_LABEL_CHARS - 1
    width: dict[str, int] = {}  # per dense opening: enough to tell every merged call apart
    for label in inside:
        head = label[:opening]
        width[head] = max(width.get(head, opening), shared[label] + 3)
    buckets: dict[str, list[_Item]] = {}
    for item in candidates:
        first = item.members[0].label
        keys = {run.label[: width[first[:opening]]] for run in item.members}
        if len(keys) == 1 and all(len(run.label) > width[first[:opening]] for run in item.members):
            buckets.setdefault(keys.pop(), []).append(item)
    merges: list[_Merge] = []
    labels = {*(run.label for item in items for run in item.members), *elsewhere}
    for bucket in buckets.values():
        members = [run for item in bucket for run in item.members]
        head = posixpath.commonprefix([run.label for run in members])
        own = {run.label for run in members}
        if len(bucket) < 2 or any(x.startswith(head) for x in labels - own):
            continue  # the line would name a call it does not stand for
        if any(_ends_at_pipe(head, run.label) for run in members):
            continue  # the line would name the bare command: its next run with another pipe too
        failures = dict.fromkeys(  # failing alike, said once
            one_line(run.key_line, DENSE_KEY_CHARS)
            for run in members
            if run.key_line and run.label != quoted
        )
        # Cut right after the shared characters, a blank included: ``head …``
        line = _unmistaken(f"{head}… {_tally(members, noun)}")
        text = "\n".join([line, *(f"  - {key}" for key in failures)])
        merges.append(_Merge(tuple(bucket), _Item(len(members), text, text, text, tuple(members))))
    return merges


def _merged(items: list[_Item], merges: Sequence[_Merge]) -> list[_Item]:
    """``items`` with each of ``merges`` applied: one line where its newest call stands."""
    merged = {id(merge.bucket[-1]): merge.item for merge in merges}
    gone = {id(item) for merge in merges for item in merge.bucket[:-1]}
    return [merged.get(id(item), item) for item in items if id(item) not in gone]


def _fitted_merging(
    title: str, items: list[_Item], merges: Sequence[_Merge], left: int
) -> tuple[str, int, int]:
    """`_fitted` with as few of ``merges`` (the oldest first) as hide the fewest calls.

    A shared line says less of each call than their own lines do (one
    opening, a tally of how they ended), so the older calls alike share one
    only as far as the room needs: the fewest merges that hide no more calls
    than all of them do. The hidden count falls as merges are added, so the
    fewest are found by bisection.
    """
    best = _fitted(title, _merged(items, merges), left)
    low, high = 1, len(merges)  # `high` merges show as many calls as all of them
    while low < high:
        middle = (low + high) // 2
        tried = _fitted(title, _merged(items, merges[:middle]), left)
        if tried[2] <= best[2]:
            high, best = middle, tried
        else:
            low = middle + 1
    return best


def render_ledger(ledger: Ledger, max_chars: int, *, others: Sequence[str] = ()) -> str:
    """``ledger``'s sections in about ``max_chars`` characters ("" when empty).

    The most recent failure is placed first in the budget (and shown last),
    then the commands, then the other calls, each newest first. ``others``
    are the labels of calls shown elsewhere in the view (`_short_widths`).
    """
    from context_engine.summarize.ledger import COMMANDS, FAILURE, TOOLS

    sections: list[str] = []
    left = max_chars
    failure = ""
    if ledger.failure is not None:
        failure = f"## {FAILURE}\n- {ledger.failure.item()}"
        left -= len(failure) + 2
    quoted = ledger.failure.label if ledger.failure is not None else None
    for title, command in ((COMMANDS, True), (TOOLS, False)):
        runs = [run for run in ledger.runs if run.command is command]
        if not runs:
            continue
        groups = _groups(runs) if command else [[run] for run in runs]
        shared = _shared([run.label for run in runs], others)
        short = _widths(shared, SHORT_LABEL_CHARS, _CLIPPED_FROM)
        dense = _widths(shared, DENSE_LABEL_CHARS, _DENSE_FROM)
        items = [_item(group, quoted, short, dense) for group in groups]
        section, rest, hidden = _fitted(title, items, left)
        if hidden:  # not every call fits: the older ones alike share a line
            elsewhere = [*others, *(run.label for run in ledger.runs if run.command is not command)]
            noun = "commands" if command else "calls"
            merges = _merges(items, quoted, elsewhere, noun)
            tighter = _fitted_merging(title, items, merges, left)
            if tighter[2] < hidden:
                section, rest, _ = tighter
        left = rest
        sections.append(section)
    return "\n\n".join([*sections, failure] if failure else sections)
