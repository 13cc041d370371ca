"""Which files a shell command shows the agent, read from its text.

Agents that work through a shell read files with it too: ``cat f``,
``head -50 f``, ``sed -n '10,40p' f``, ``grep -n name f``. `shell_reads`
names those files so that a checkpoint's "files read" list covers them as it
covers an editor's ``view`` (`context_engine.summarize.files.track_files`).

Decisions:

* A reader's file operands count: ``cat``, ``nl``, ``head``, ``tail``,
  ``less``, ``more``, ``bat``, and ``sed`` when it does not edit in place
  (its script is the first operand unless ``-e``/``-f`` gives it).
* A search counts only for the files it names: ``grep PATTERN f.py`` shows
  lines of ``f.py``; ``grep -r PATTERN src/`` shows lines of files nobody
  named and reads none. An operand counts as a file when its last component
  has an extension (``f.py``, ``setup.cfg``); ``awk`` is read the same way.
* As for writes (`context_engine.summarize.shell`), ``cd DIR`` applies to the
  paths after it, paths are normalised, and a word holding an expansion or a
  glob, ``-`` and ``/dev/...`` name no file.
* Running a script is not reading it (``python fix.py``), nor is listing a
  directory (``ls``, ``find``).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

import regex

from context_engine.summarize._shell_words import simple_commands
from context_engine.summarize.shell import split_options

__all__ = ["shell_reads"]

_READERS = frozenset({"cat", "nl", "head", "tail", "less", "more", "bat", "batcat", "tac"})
_SEARCHES = frozenset({"grep", "egrep", "fgrep", "rg", "ag", "ack", "awk", "gawk"})
_PREFIXES = frozenset({"sudo", "env", "nohup", "command", "exec", "nice", "stdbuf", "time"})
# Options whose value is the next word, per program (the value is no file).
_VALUED = {
    "head": frozenset({"-n", "-c", "--lines", "--bytes"}),
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval"}),
    "sed": frozenset({"-e", "-f", "-l", "--expression", "--file", "--line-length"}),
    "grep": frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "--max-count", "--regexp", "--file"}),
    "rg": frozenset({"-e", "-f", "-m", "-A", "-B", "-C", "-g", "-t", "--glob", "--type"}),
    "awk": frozenset({"-f", "-v", "-F"}),
}
_SCRIPT_OPTIONS = frozenset({"-e", "-f", "--expression", "--file", "--regexp"})
_FILE_LIKE = regex.compile(r"[^/]\.[A-Za-z0-9_]{1,10}$")


def _operands(words: Sequence[str | None], valued: frozenset[str]) -> tuple[list[str | None], bool]:
    """(the non-option words after the program, whether an option gave the script or pattern)."""
    found, options = split_options(words, valued)
    return found, any(option.split("=", 1)[0] in _SCRIPT_OPTIONS for option in options)


def _in_place(words: Sequence[str | None]) -> bool:
    return any(
        word is not None
        and (word.startswith("--in-place") or regex.match(r"^-[a-zA-Z]*i", word) is not None)
        and not word.startswith("--expression")
        for word in words[1:]
    )


def _shown(name: str, words: Sequence[str | None]) -> list[str | None]:
    """The file operands of one simple command that reads or searches files."""
    family = "grep" if name in ("egrep", "fgrep", "ag", "ack") else name
    family = "awk" if name == "gawk" else family
    if name in _READERS:
        return _operands(words, _VALUED.get(name, frozenset()))[0]
    if name == "sed":
        if _in_place(words):
            return []
        operands, scripted = _operands(words, _VALUED["sed"])
        return operands if scripted else operands[1:]
    if name in _SEARCHES:
        operands, scripted = _operands(words, _VALUED.get(family, frozenset()))
        files = operands if scripted else operands[1:]
        return [word for word in files if word is not None and _FILE_LIKE.search(word)]
    return []


def shell_reads(command: str) -> tuple[str, ...]:
    """The files a shell command text shows, in first-seen order, without repeats.

    Never raises on odd input; see the module docstring for what counts.
    """
    cwd = ""
    read: dict[str, None] = {}
    for simple in simple_commands(command):
        words = list(simple.words)
        while (
            words
            and words[0] is not None
            and (words[0] in _PREFIXES or regex.match(r"^[A-Za-z_]\w*=", words[0]))
        ):
            words.pop(0)
        if not words or words[0] is None:
            continue
        name = posixpath.basename(words[0])
        if name == "cd":
            target = words[1] if len(words) > 1 else None
            cwd = "" if target is None else posixpath.normpath(posixpath.join(cwd, target))
            continue
        for word in _shown(name, words):
            if word is None or word == "-" or word.startswith("/dev/") or not word.strip():
                continue
            read[posixpath.normpath(posixpath.join(cwd, word) if cwd else word)] = None
    return tuple(read)
