"""The HTML report: self-contained, readable at a glance, and really rendered by a browser."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from context_engine.cli._chart import STRATEGY_COLOURS, nice_ticks
from context_engine.cli._html import render_html
from context_engine.cli.replay import ReplayReport, replay
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.testing import synthetic_session
from tests.cli._png import distinct_colours, read_png

PIPELINE = ("tool_result_microcompact", "light_trim", "full_summary", "hard_truncate")


@pytest.fixture(scope="module")
def report() -> ReplayReport:
    return replay(
        synthetic_session(120),
        window=8_192,
        strategies=PIPELINE,
        summarizer=ExtractiveSummarizer(),
        summarizer_label="extractive",
        source="demo.jsonl",
    )


def test_report_fetches_nothing(report: ReplayReport) -> None:
    page = render_html(report)
    assert page.startswith("<!DOCTYPE html>")
    assert "<style>" in page
    assert "<svg" in page
    for outside in ("http://", "https://", "<script", "<link", "src=", "@import", "url(http"):
        assert outside not in page


def test_chart_has_title_axes_limits_and_a_legend_entry_per_strategy(
    report: ReplayReport,
) -> None:
    page = render_html(report)
    assert "Prompt tokens per LLM call" in page
    assert "LLM call (one per assistant message of the transcript)" in page
    assert ">prompt tokens</text>" in page
    assert "window 8,192</text>" in page
    assert "threshold 4,096</text>" in page
    used = {r.strategy for r in report.rewrites if r.changed}
    # One request: past the per-request cap the checkpoint is extracted (summary_digest).
    assert used == {"tool_result_microcompact", "full_summary", "summary_digest"}
    for name in used:
        assert f'class="legend">{name}</text>' in page
        assert STRATEGY_COLOURS[name] in page
    assert page.count(" tokens (committed)\ncheckpoint: ") == report.totals.commits >= 3


def test_summary_numbers_come_first(report: ReplayReport) -> None:
    page = render_html(report)
    cards = page.index('class="cards"')
    assert cards < page.index("<svg") < page.index("<h2>Session</h2>")
    assert f"{report.totals.tokens:,}" in page[cards : page.index("<svg")]


def test_a_report_without_rewrites_says_so() -> None:
    quiet = replay(synthetic_session(5), window=128_000)
    page = render_html(quiet)
    assert "No rewrites: every call fit under the threshold." in page
    assert "No problems" in page


@pytest.mark.parametrize(
    ("top", "expected"),
    [(9_830.4, [0, 2000, 4000, 6000, 8000, 10000]), (120, [0, 20, 40, 60, 80, 100, 120])],
    ids=["tokens", "calls"],
)
def test_axis_ticks_are_round_numbers(top: float, expected: list[float]) -> None:
    assert nice_ticks(top) == expected


CHROMIUM = shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(report: ReplayReport, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(report), encoding="utf-8")
    shot = tmp_path / "shot.png"
    assert CHROMIUM is not None
    subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,1600",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=90,
        check=False,
    )
    assert shot.exists(), "chromium wrote no screenshot"
    width, height, rows = read_png(shot, max_rows=720)  # title, summary cards and the chart
    assert (width, height) == (1280, 1600)
    bpp = len(rows[0]) // width
    assert distinct_colours(rows, bpp) > 200, "the page looks blank"
    pixels = {bytes(row[x : x + 3]) for row in rows for x in range(0, len(row), bpp)}
    for name, colour in [("with-engine line", "#0072B2"), ("checkpoint marker", "#E69F00")]:
        target = bytes.fromhex(colour[1:])
        assert any(_close(p, target) for p in pixels), f"no {name} ({colour}) on the page"


def _close(pixel: bytes, target: bytes, tolerance: int = 6) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, target, strict=True))


def test_no_external_fonts_or_images(report: ReplayReport) -> None:
    assert not re.search(r"<img|font-face", render_html(report))
