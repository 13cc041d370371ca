"""Head + tail previews of long tool output: lines kept whole, error lines kept, counts honest."""

from __future__ import annotations

import string

import pytest
import regex
from hypothesis import given
from hypothesis import strategies as st

from context_engine.strategies._preview import ERROR_LINE, preview

MARKER = regex.compile(r"\[… (?:([\d,]+) lines \()?([\d,]+) characters\)? omitted")


def numbered(count: int) -> str:
    return "".join(f"line {n:05}\n" for n in range(count))


def omitted_chars(text: str) -> int:
    found = MARKER.findall(text)
    assert len(found) == 1, text
    return int(found[0][1].replace(",", ""))


def test_short_text_comes_back_unchanged() -> None:
    """Text within the budget is not touched, marker and all."""
    assert preview("one\ntwo\n", max_chars=8, size="2 lines") == "one\ntwo\n"


def test_keeps_whole_first_and_last_lines_around_the_marker() -> None:
    """The preview starts with the first lines and ends with the last, none cut."""
    text = numbered(1000)
    shown = preview(text, max_chars=400, size="1,000 lines")
    head, _, tail = shown.partition("[…")
    tail = tail.split("\n", 1)[1]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert head.endswith("\n")
    assert len(head.splitlines()) >= 10
    assert len(tail.splitlines()) >= 10
    assert "in full it is 1,000 lines" in shown


def test_the_marker_counts_what_went_exactly() -> None:
    """Lines and characters named in the marker are the ones not shown."""
    text = numbered(1000)
    shown = preview(text, max_chars=400, size="s")
    head, _, rest = shown.partition("[…")
    tail = rest.split("\n", 1)[1]
    lines, chars = MARKER.findall(shown)[0]
    assert int(chars.replace(",", "")) == len(text) - len(head) - len(tail)
    assert int(lines.replace(",", "")) == 1000 - len(head.splitlines()) - len(tail.splitlines())


@pytest.mark.parametrize(
    "line",
    [
        "Traceback (most recent call last):",
        "ValueError: invalid literal for int()",
        "src/main.c:12:5: error: expected ';' before '}' token",
        "error[E0308]: mismatched types",
        "FAILED tests/test_app.py::test_login - AssertionError",
        "2024-05-01 12:00:00 ERROR worker crashed",
        "fatal: not a git repository",
        "Process exited with exit code 2",
        "java.lang.NullPointerException at Foo.bar",
        "thread 'main' panicked at src/main.rs:4:5",
        "Segmentation fault (core dumped)",
        "raised an unexpected exception while parsing",
    ],
    ids=[
        "python-traceback",
        "python-error",
        "gcc",
        "rustc",
        "pytest",
        "log-level",
        "git",
        "exit-code",
        "java",
        "rust-panic",
        "segfault",
        "exception-word",
    ],
)
def test_error_lines_from_the_middle_are_kept_with_their_line_number(line: str) -> None:
    """A line that reads like an error survives the cut, numbered as in the original."""
    lines = numbered(2000).splitlines(keepends=True)
    lines[1234] = line + "\n"
    shown = preview("".join(lines), max_chars=600, size="s")
    assert f"[line 1235] {line}\n" in shown
    assert "1 error line from the omitted part:]" in shown


@pytest.mark.parametrize(
    "line",
    ["all 300 tests passed", "errors = []", "no failures", "terror", "line 00042"],
    ids=["passed", "errors-list", "no-failures", "terror", "plain"],
)
def test_ordinary_lines_are_not_taken_for_errors(line: str) -> None:
    """Words that merely contain or mention error-ish text do not match."""
    assert ERROR_LINE.search(line) is None


def test_error_lines_take_at_most_a_quarter_of_the_budget() -> None:
    """A log where every line is an error still keeps its head and tail."""
    text = "".join(f"ERROR step {n} failed\n" for n in range(5000))
    shown = preview(text, max_chars=2000, size="s")
    kept = [line for line in shown.splitlines() if line.startswith("[line ")]
    assert 0 < sum(len(line) for line in kept) <= 2000 // 4 + 12 * len(kept)
    assert shown.startswith("ERROR step 0 failed\n")
    assert shown.endswith("ERROR step 4999 failed\n")


def test_a_single_huge_line_is_cut_inside_the_line() -> None:
    """Minified JSON has one line: head and tail are its first and last characters."""
    text = '{"items": [' + ",".join(str(n) for n in range(20_000)) + "]}"
    shown = preview(text, max_chars=1000, size="s")
    head, _, rest = shown.partition("\n[…")
    tail = rest.split("\n", 1)[1]
    assert text.startswith(head)
    assert len(head) >= 400
    assert text.endswith(tail)
    assert len(tail) >= 400
    assert omitted_chars(shown) == len(text) - len(head) - len(tail)


def test_a_short_first_line_does_not_waste_the_head() -> None:
    """A title line followed by one enormous line: the head goes on into the long line."""
    text = "RESULTS\n" + "x" * 50_000 + "\nend\n"
    shown = preview(text, max_chars=1000, size="s")
    assert shown.startswith("RESULTS\nxxxx")
    assert len(shown.partition("\n[…")[0]) >= 300


def test_a_cut_never_splits_a_crlf_line_break() -> None:
    """Windows line endings stay whole at both cuts."""
    text = ("x" * 998 + "\r\n") * 50  # lines longer than half the budget: cuts inside lines
    for budget in range(1990, 2010):
        shown = preview(text, max_chars=budget, size="s")
        tail = shown.partition("[…")[2].split("\n", 1)[1]
        assert text.endswith(tail)
        head_end = len(text) - len(tail) - omitted_chars(shown)
        tail_start = len(text) - len(tail)
        for cut in (head_end, tail_start):
            assert text[cut - 1 : cut + 1] != "\r\n", (budget, cut)


@given(
    st.lists(st.text(string.ascii_letters + " :._-()", max_size=80), min_size=1, max_size=200),
    st.sampled_from(["\n", "\r\n"]),
    st.integers(0, 3000),
)
def test_any_text_gives_a_deterministic_preview_with_honest_counts(
    lines: list[str], newline: str, budget: int
) -> None:
    """Head and tail are the original's own start and end; the characters cut are counted."""
    text = newline.join(lines)
    shown = preview(text, max_chars=budget, size="s")
    assert shown == preview(text, max_chars=budget, size="s")
    if len(text) <= budget:
        assert shown == text
        return
    head, _, rest = shown.partition("[… ")
    tail = rest.split("\n", 1)[1] if "omitted part:]" not in rest else rest.rsplit("…]\n", 1)[1]
    head = head[:-1] if head and not text.startswith(head) else head
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + len(tail) <= max(budget, 0) + 1
