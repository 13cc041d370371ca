"""Terminal output: tables and a progress bar with ``rich`` when installed, plain text otherwise.

Also where JSON reports and files go (``-`` is stdout), for every command.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any, Literal, TextIO

import attrs

from context_engine.cli._common import CliError
from context_engine.errors import ContextEngineError
from context_engine.formats.readers import write_transcript
from context_engine.messages import Message

__all__ = [
    "Output",
    "Progress",
    "Table",
    "WriteFormat",
    "emit_json",
    "rich_available",
    "write_messages",
    "write_text",
]

WriteFormat = Literal["openai", "anthropic"]


@attrs.frozen
class Table:
    """A table to show: a title, column headers and rows of already formatted cells.

    Attributes:
        title: Shown above the table.
        headers: Column headers.
        rows: One tuple of cells per row.
        numeric: Indexes of the columns aligned to the right.
    """

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: frozenset[int] = frozenset()


def rich_available() -> bool:
    """Whether ``rich`` (the ``cli`` extra) can be imported."""
    return _rich() is not None


def _rich() -> ModuleType | None:
    try:
        import rich.console
        import rich.progress
        import rich.table
        import rich.text
    except ImportError:
        return None
    return rich


class Output:
    """Where a command writes what a person reads.

    Args:
        quiet: Print nothing but errors.
        stdout: Stream for results (default ``sys.stdout``).
        stderr: Stream for errors and progress (default ``sys.stderr``).
    """

    def __init__(
        self, *, quiet: bool = False, stdout: TextIO | None = None, stderr: TextIO | None = None
    ) -> None:
        self.quiet = quiet
        self.stdout = _tolerant(stdout or sys.stdout)
        self.stderr = _tolerant(stderr or sys.stderr)
        self._console: Any = None
        if _rich() is not None:
            width = None if _isatty(self.stdout) else 140
            self._console = _console(self.stdout, width)

    def line(self, text: str = "") -> None:
        """Print one line of text (nothing when quiet)."""
        if self.quiet:
            return
        if self._console is not None:
            self._console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            print(text, file=self.stdout)

    def table(self, table: Table) -> None:
        """Print ``table`` (nothing when quiet)."""
        if self.quiet:
            return
        if self._console is not None:
            self._console.print(_rich_table(table))
            self._console.print()
        else:
            print(plain_table(table), file=self.stdout)

    def warning(self, text: str) -> None:
        """Print a warning on stderr (nothing when quiet)."""
        if not self.quiet:
            print(f"context-engine: WARNING: {text}", file=self.stderr)

    def error(self, text: str) -> None:
        """Print an error on stderr, also when quiet."""
        print(f"context-engine: error: {text}", file=self.stderr)

    def progress(self, total: int, label: str) -> Progress:
        """A progress bar for ``total`` units, shown on a terminal once a second has passed."""
        return Progress(
            total, label, stream=self.stderr, enabled=not self.quiet and _isatty(self.stderr)
        )


def _tolerant(stream: TextIO) -> TextIO:
    """``stream``, set to escape what its encoding cannot write instead of raising.

    A transcript may hold lone surrogates (valid JSON escapes, no valid UTF-8) or
    text the terminal's encoding lacks; a preview of it must not end the command.
    """
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(errors="backslashreplace")
    return stream


def _console(stream: TextIO, width: int | None) -> Any:
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich exits with 1 here; `main` owns that decision (a closed pipe exits 0).
            self.quiet = True
            raise BrokenPipeError

    return _Console(file=stream, width=width, highlight=False)


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _rich_table(table: Table) -> Any:
    from rich.table import Table as RichTable
    from rich.text import Text

    result = RichTable(title=table.title, title_justify="left", title_style="bold")
    for index, header in enumerate(table.headers):
        result.add_column(header, justify="right" if index in table.numeric else "left")
    for row in table.rows:
        result.add_row(*(Text(cell) for cell in row))
    return result


def plain_table(table: Table) -> str:
    """``table`` as aligned plain text, numbers on the right."""
    widths = [len(header) for header in table.headers]
    for row in table.rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]

    def render(cells: tuple[str, ...]) -> str:
        parts = [
            cell.rjust(width) if index in table.numeric else cell.ljust(width)
            for index, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    lines = [table.title, render(table.headers), render(tuple("-" * w for w in widths))]
    lines.extend(render(row) for row in table.rows)
    if not table.rows:
        lines.append("(none)")
    return "\n".join(lines) + "\n"


class Progress:
    """A progress bar that appears only when the work takes longer than ``delay`` seconds.

    With ``rich`` it is a transient bar; without, a line rewritten in place.
    Nothing is shown when ``enabled`` is false (quiet, or not a terminal).

    Args:
        total: Units of work.
        label: What is being done.
        stream: Where to draw.
        enabled: Whether to draw at all.
        delay: Seconds of work before the bar appears.
        clock: Monotonic clock (for tests).
    """

    def __init__(
        self,
        total: int,
        label: str,
        *,
        stream: TextIO,
        enabled: bool,
        delay: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total, self.label, self.stream = total, label, stream
        self.enabled, self.delay, self.clock = enabled, delay, clock
        self.started = clock()
        self.shown = False
        self._bar: Any = None
        self._task: Any = None
        self._last_draw = 0.0

    def update(self, done: int) -> None:
        """Record that ``done`` units are finished."""
        if not self.enabled:
            return
        now = self.clock()
        if not self.shown:
            if now - self.started < self.delay:
                return
            self._show()
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
        elif now - self._last_draw >= 0.1 or done >= self.total:
            self._last_draw = now
            self.stream.write(f"\r{self.label}: {done}/{self.total}")
            self.stream.flush()

    def _show(self) -> None:
        self.shown = True
        if _rich() is None:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress

        self._bar = RichProgress(
            TextColumn(self.label),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(file=self.stream),
            transient=True,
        )
        self._bar.start()
        self._task = self._bar.add_task(self.label, total=self.total)

    def close(self) -> None:
        """Take the bar down."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self.shown:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def emit_json(data: Any, target: str, out: Output) -> None:
    """Write ``data`` as JSON to ``target`` (``-`` is stdout).

    Raises:
        CliError: the file cannot be written.
    """
    text = json.dumps(data, indent=2, ensure_ascii=False)
    if target == "-":
        print(text, file=out.stdout)
        return
    write_text(target, text + "\n")
    out.line(f"wrote {target}")


def write_text(target: str | Path, text: str) -> None:
    """Write ``text`` to the file ``target`` as UTF-8 (``-`` is stdout).

    Raises:
        CliError: the file cannot be written.
    """
    if str(target) == "-":
        sys.stdout.write(text)
        return
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None


def write_messages(target: str | Path, messages: tuple[Message, ...], fmt: WriteFormat) -> None:
    """Write ``messages`` to ``target`` (``-`` is stdout) with `write_transcript`.

    Raises:
        CliError: the file cannot be written, or a message cannot be written as ``fmt``.
    """
    if str(target) == "-":
        _print_messages(messages, fmt)
        return
    try:
        write_transcript(target, messages, format=fmt)
    except OSError as exc:
        raise CliError(f"cannot write {target}: {exc.strerror or exc}") from None
    except ContextEngineError as exc:
        raise CliError(f"cannot write the messages as {fmt}: {exc}") from None


def _print_messages(messages: tuple[Message, ...], fmt: WriteFormat) -> None:
    """Write the transcript on stdout, exactly as `write_transcript` writes a file."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "transcript"
        write_messages(path, messages, fmt)
        sys.stdout.write(path.read_text(encoding="utf-8"))
