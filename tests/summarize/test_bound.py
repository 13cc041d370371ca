"""The deterministic parts of keeping a checkpoint bounded: the oldest-first cut, the layout."""

from __future__ import annotations

import pytest

from context_engine.summarize.bound import drop_oldest_items
from context_engine.summarize.ledger_text import OK_LEGEND
from context_engine.summarize.sections import PREFIX_HEADING, join_prefix, split_prefix
from context_engine.testing import FixedTokenCounter

count = FixedTokenCounter(1).count_text  # one token per character: exact arithmetic

TEXT = """## Goal
- fix the parser

## Commands run
- `pytest` one (failed)
  - AssertionError: one
- `pytest` two (ok)
- `pytest` three (ok)
- `pytest` four (ok)
- (+2 more)"""


def test_a_text_that_fits_is_returned_as_is() -> None:
    assert drop_oldest_items(TEXT, len(TEXT), count) == (TEXT, [])


def test_the_oldest_items_of_the_longest_section_go_first_and_the_section_counts_them() -> None:
    shorter, dropped = drop_oldest_items(TEXT, len(TEXT) - 50, count)
    assert len(shorter) <= len(TEXT) - 50
    assert dropped == ["- `pytest` one (failed)\n  - AssertionError: one", "- `pytest` two (ok)"]
    assert shorter.endswith("- `pytest` three (ok)\n- `pytest` four (ok)\n- (+4 more)")
    assert "- fix the parser" in shorter
    assert drop_oldest_items(TEXT, len(TEXT) - 50, count) == (shorter, dropped)


def test_the_last_item_left_is_cut_not_dropped_and_the_cut_off_part_is_kept() -> None:
    shorter, dropped = drop_oldest_items(TEXT, 60, count)
    assert len(shorter) <= 60
    assert shorter.endswith("…")
    whole, tail = dropped[:-1], dropped[-1]
    assert whole == [
        "- `pytest` one (failed)\n  - AssertionError: one",
        "- `pytest` two (ok)",
        "- `pytest` three (ok)",
        "- fix the parser",
    ]
    assert shorter[:-1] + tail == (
        "## Goal\n- (+1 more)\n\n## Commands run\n- `pytest` four (ok)\n- (+5 more)"
    )


@pytest.mark.parametrize(
    ("text", "body", "prefix"),
    [
        ("## Goal\n- a", "## Goal\n- a", None),
        (f"## Goal\n- a\n\n{PREFIX_HEADING}\n### Tried\n- b", "## Goal\n- a", "## Tried\n- b"),
        (f"{PREFIX_HEADING}\n### Tried\n- b", None, "## Tried\n- b"),
    ],
    ids=["body-only", "both", "prefix-only"],
)
def test_a_checkpoint_text_splits_into_body_and_current_request_section(
    text: str, body: str | None, prefix: str | None
) -> None:
    assert split_prefix(text) == (body, prefix)
    if prefix is not None:
        assert join_prefix(body, prefix) == text


def test_no_text_has_no_parts() -> None:
    assert split_prefix(None) == (None, None)


def test_the_cut_keeps_the_work_log_s_legend_and_adds_to_its_unbulleted_note() -> None:
    """The log's lines have no bullet: its legend is no item to drop, its note a count."""
    log = f"## Commands run\n{OK_LEGEND}\n(+40 more)\nmake a\nmake b\nmake c\nmake d"
    shorter, dropped = drop_oldest_items(log, len(log) - 10, count)
    assert dropped == ["make a", "make b"]  # the oldest calls, not the legend or the note
    assert shorter.startswith(f"## Commands run\n{OK_LEGEND}\n")
    assert shorter.endswith("make c\nmake d\n- (+42 more)")
