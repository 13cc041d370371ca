"""Tables and the progress bar, with rich and without."""

from __future__ import annotations

import io

import pytest

from context_engine.cli import _output
from context_engine.cli._output import Output, Progress, Table, plain_table


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


TABLE = Table(
    "Tokens by role", ("role", "tokens"), (("tool", "1,234"), ("user", "5")), frozenset({1})
)


def test_plain_table_aligns_numbers_right() -> None:
    assert plain_table(TABLE).splitlines() == [
        "Tokens by role",
        "role  tokens",
        "----  ------",
        "tool   1,234",
        "user       5",
    ]


def test_plain_table_says_when_it_is_empty() -> None:
    assert "(none)" in plain_table(Table("Anchors", ("index",), ()))


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "plain"])
def test_cells_are_printed_literally(monkeypatch: pytest.MonkeyPatch, rich: bool) -> None:
    if not rich:
        monkeypatch.setattr(_output, "_rich", lambda: None)
    stdout = io.StringIO()
    out = Output(stdout=stdout)
    out.table(Table("t", ("preview",), (("[12 characters trimmed] [bold]x[/bold]",),)))
    out.line("[red]not markup[/red]")
    text = stdout.getvalue()
    assert "[12 characters trimmed] [bold]x[/bold]" in text
    assert "[red]not markup[/red]" in text


def test_quiet_output_prints_only_errors() -> None:
    stdout, stderr = io.StringIO(), io.StringIO()
    out = Output(quiet=True, stdout=stdout, stderr=stderr)
    out.line("hello")
    out.table(TABLE)
    out.error("broken")
    assert stdout.getvalue() == ""
    assert stderr.getvalue() == "context-engine: error: broken\n"


@pytest.mark.parametrize("rich", [True, False], ids=["rich", "plain"])
def test_progress_appears_only_after_a_second(monkeypatch: pytest.MonkeyPatch, rich: bool) -> None:
    if not rich:
        monkeypatch.setattr(_output, "_rich", lambda: None)
    stream, clock = Terminal(), Clock()
    with Progress(100, "replaying", stream=stream, enabled=True, clock=clock) as bar:
        clock.now = 0.5
        bar.update(10)
        assert (bar.shown, stream.getvalue()) == (False, "")
        clock.now = 1.2
        bar.update(60)
        assert bar.shown
        clock.now = 1.5
        bar.update(100)
    if not rich:
        assert stream.getvalue().endswith("\rreplaying: 100/100\n")
        assert "replaying: 60/100" in stream.getvalue()


def test_progress_never_shows_when_disabled() -> None:
    stream, clock = Terminal(), Clock()
    with Progress(10, "replaying", stream=stream, enabled=False, clock=clock) as bar:
        clock.now = 5.0
        bar.update(5)
    assert (bar.shown, stream.getvalue()) == (False, "")


def test_progress_is_off_when_stderr_is_not_a_terminal() -> None:
    out = Output(stderr=io.StringIO())
    assert out.progress(10, "replaying").enabled is False
    assert Output(stderr=Terminal()).progress(10, "x").enabled is True
    assert Output(stderr=Terminal(), quiet=True).progress(10, "x").enabled is False
