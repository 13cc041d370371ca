"""Ages on the command line: ``3600``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w``."""

from __future__ import annotations

import regex

from context_engine.cli._common import CliError

__all__ = ["parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
_AGE = regex.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")


def parse_age(text: str) -> float:
    """Seconds in ``text``: a number with an optional unit s, m, h, d or w (``7d``, ``90s``).

    Raises:
        CliError: ``text`` is not such an age.
    """
    match = _AGE.fullmatch(text.strip().lower())
    if match is None:
        raise CliError(
            f"--older-than {text!r}: give an age like 3600, 90s, 15m, 12h, 7d or 2w "
            "(seconds without a unit)"
        )
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]
