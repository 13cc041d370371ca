"""The character-class arithmetic behind `context_engine.tokens.HeuristicCounter`.

A text is read as a string of character classes, one letter per character:
lowercase, uppercase, digit, space, line break and ASCII punctuation, and for
other characters a letter per script family that their UTF-8 lead byte tells
apart (`_class_table`). cl100k_base starts a new token at most changes of class,
so counting class pairs with ``bytes.count`` (C speed, no regular expression)
and weighting each pair by what it costs on real transcripts gives a close,
fast estimate.
"""

from __future__ import annotations

import math

__all__ = ["estimate_tokens"]


def _class_table() -> bytes:
    """Maps each UTF-8 byte to the letter of its character class (see `_ASCII_COSTS`)."""
    table = bytearray(b"p" * 256)  # ASCII punctuation and control characters
    for start, stop, letter in (
        (0x61, 0x7A, "a"),  # lowercase letter
        (0x41, 0x5A, "A"),  # uppercase letter
        (0x30, 0x39, "d"),  # digit
        (0xC0, 0xDF, "x"),  # two-byte character: accented Latin, Greek, Arabic, Hebrew
        (0xD0, 0xD3, "c"),  # two-byte Cyrillic
        (0xE0, 0xE1, "i"),  # three-byte Indic, Thai, Vietnamese and other alphabets
        (0xE2, 0xE2, "y"),  # three-byte punctuation and symbols: quotes, dashes, arrows
        (0xE3, 0xE3, "j"),  # three-byte kana and CJK punctuation
        (0xE4, 0xE9, "h"),  # three-byte Han
        (0xEA, 0xED, "g"),  # three-byte Hangul (and lone surrogates)
        (0xEE, 0xEF, "k"),  # three-byte private use and full-width forms
        (0xF0, 0xFF, "z"),  # four-byte character: emoji and other astral symbols
    ):
        table[start : stop + 1] = letter.encode() * (stop - start + 1)
    for byte in b" \t\x0b\x0c":
        table[byte] = ord("s")
    for byte in b"\r\n":
        table[byte] = ord("n")
    return bytes(table)


_CLASSES = _class_table()
_CONTINUATION_BYTES = bytes(range(0x80, 0xC0))  # deleted: one class letter per character
# Tokens per occurrence of a class pair (non-overlapping counts; a text is read
# with a space in front of it). Fitted by non-negative least squares against
# cl100k_base on every text of the dev corpus, plus a few dozen written and
# synthetic strings at a small weight (base64, hex, numbers, paths, tables,
# indented code, other scripts), with floors where the pair marks a whole
# token (a word, a digit group, an indented line).
_ASCII_COSTS = (
    (b"sa", 0.90),  # a lowercase word after a space: " the"
    (b"sA", 0.90),  # a capitalised word after a space: " The"
    (b"pa", 1.50),  # a lowercase piece after punctuation: ".py", "_id", "(self"
    (b"pA", 2.08),  # an uppercase piece after punctuation: '"ATL', ".HTTP"
    (b"na", 1.82),  # a lowercase word starting a line
    (b"nA", 1.75),  # a capitalised word starting a line
    (b"da", 0.35),  # letters after digits: "3rd", "9de1"
    (b"dA", 3.30),  # capitals after digits: "05KNL", "T06"
    (b"aA", 1.10),  # a camelCase hump
    (b"aaaa", 0.25),  # every four more lowercase letters of a long word
    (b"ad", 1.75),  # digits after letters: "HAT110", "v2"
    (b"pd", 0.97),  # digits after punctuation: "-24", "(3"
    (b"sd", 2.49),  # a number after a space
    (b"nd", 1.36),  # a number starting a line
    (b"ddd", 1.00),  # every full group of three digits
    (b"Ap", 1.22),  # punctuation after a capital: "ID:", "A."
    (b"dp", 0.73),  # punctuation after a digit: "1,", "0)"
    (b"sp", 0.53),  # punctuation after a space: " (", ' "'
    (b"ppp", 0.13),  # every three more punctuation characters of a run
    (b"ps", 0.51),  # a space after punctuation: ", "
    (b"ss", 0.02),  # every two more spaces of an indentation
    (b"n", 0.03),  # a line break
    (b"ns", 1.50),  # an indented line: the break, then its indentation
)
_NON_ASCII_COSTS = (
    (b"x", 1.0),
    (b"c", 0.5),
    (b"i", 1.2),
    (b"y", 1.0),
    (b"j", 1.0),
    (b"h", 1.1),
    (b"g", 1.1),
    (b"k", 1.0),
    (b"z", 2.5),
    (b"xa", 0.5),  # an accented letter inside a word splits it: "über", "Größe"
    (b"ax", 0.5),
)
# Above the fit so that no dev-corpus transcript is under-counted.
_SAFETY_MARGIN = 1.05


def estimate_tokens(text: str) -> int:
    """Estimated cl100k_base token count of ``text``, rounded up."""
    if not text:
        return 0
    classes = (" " + text).encode("utf-8", "surrogatepass").translate(_CLASSES, _CONTINUATION_BYTES)
    total = 0.0
    for pair, cost in _ASCII_COSTS:
        total += classes.count(pair) * cost
    if not text.isascii():
        for pair, cost in _NON_ASCII_COSTS:
            total += classes.count(pair) * cost
    return math.ceil(total * _SAFETY_MARGIN)
