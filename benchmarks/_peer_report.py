"""The Markdown page of `benchmarks/peers.py` and the verdict on each target of the issue."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from steady_state import fmt

RESULTS = Path(__file__).resolve().parent / "results"
SIBLINGS = {"counting": "counting_accuracy.json", "economics": "economics.json"}


def with_siblings(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` plus the results of `make bench-counting` and `make bench-economics`.

    Their verdicts belong on this page too; a missing file leaves its target unmeasured.
    """
    found = dict(data)
    for key, name in SIBLINGS.items():
        path = RESULTS / name
        if path.is_file():
            found[key] = json.loads(path.read_text(encoding="utf-8"))
    return found


def _hybrid_figure(data: dict[str, Any] | None) -> tuple[bool | None, str]:
    """The calibrated hybrid's error where usage anchors exist (benchmarks/counting_accuracy.py)."""
    if data is None or not data.get("sessions"):
        return None, "hybrid: not measured (run `make bench-counting`)"
    whole = max(abs(s["calibrated"]["whole"]) for s in data["sessions"])
    points = data["corpus"]["calibrated"]
    figure = (
        f"calibrated hybrid (anchors built from exact counts): worst {whole:.1%} on whole "
        f"transcripts; {points['over']} of {points['points']} points along the sessions "
        f"over 2 % (worst {points['worst']:+.1%}), see benchmarks_counting.md"
    )
    return whole < 0.02, figure


def _economics_verdict(data: dict[str, Any] | None) -> tuple[bool | None, str]:
    """Summarizer calls and cache-reusable share against each peer (benchmarks/economics.py)."""
    if data is None:
        return None, "not measured (run `make bench-economics`)"
    from _economics_report import verdicts

    found = verdicts(data["outcomes"])
    parts = [
        f"{v['window'] // 1000}k vs {v['peer']}: {v['target']} "
        f"{'met' if v['met'] else 'not met'} ({v['figure']})"
        for v in found
    ]
    return all(v["met"] for v in found), "; ".join(parts) + " (benchmarks.md, economics)"


PRE_CALL_PEERS = (
    "lc_trim_approx",
    "lc_trim_tiktoken",
    "lc_summarization",
    "strands_precall",
    "autogen",
)
LABELS = {
    "project": "context-engine `project` (exact cl100k)",
    "project_replace_last": "context-engine `project`, last message replaced",
    "floor": "floor: tokenize the appended step",
    "full_tokenize": "tokenize the whole transcript",
    "lc_trim_approx": "LangChain `trim_messages`, approximate counter",
    "lc_trim_approx_recipe": "LangChain `trim_messages`, approximate, documented recipe",
    "lc_trim_tiktoken": "LangChain `trim_messages`, tiktoken counter (`ChatOpenAI`)",
    "lc_summarization": "LangChain v1 `SummarizationMiddleware.before_model`",
    "strands_apply": "Strands `apply_management` (a message count, no tokens)",
    "strands_precall": "Strands pre-call: usage-anchored estimate + manager hooks",
    "autogen": "AutoGen `TokenLimitedChatCompletionContext` (`add_message` + `get_messages`)",
    "strands_sliding_window": "Strands `SlidingWindowConversationManager` (window by tokens)",
    "autogen_token_limited": "AutoGen `TokenLimitedChatCompletionContext.get_messages`",
    "microcompact": "ours: `ToolResultMicrocompact` alone",
    "light_trim": "ours: `LightTrim` alone (100-line file reads)",
    "hard_truncate": "ours: `HardTruncate` alone",
    "full_summary_extractive": "ours: `FullSummary(ExtractiveSummarizer())` alone",
    "default": "ours: `ContextEngine.default` pipeline",
    "default_append": "ours: `ContextEngine.default`, agent loop (last view + the new step)",
    "default_extractive": "ours: `ContextEngine.default(summarizer=ExtractiveSummarizer())`",
    "ours_default": "ours: `ContextEngine.default`",
    "ours_default_extractive": "ours: `ContextEngine.default(summarizer=ExtractiveSummarizer())`",
}


def _timing(data: dict[str, Any], section: str, scenario: str, steps: int) -> dict[str, Any] | None:
    for row in data["timings"]:
        if (row["section"], row["scenario"], row["steps"]) == (section, scenario, steps):
            return row if "median_us" in row else None
    return None


def _steps(data: dict[str, Any]) -> list[int]:
    return sorted({row["steps"] for row in data["timings"]})


def _verdict(key: str, name: str, met: bool | None, figure: str) -> dict[str, Any]:
    return {"key": key, "target": name, "met": met, "figure": figure}


def _steady_targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    steps = _steps(data)
    largest = steps[-1]
    med = {s: (_timing(data, "steady", "project", s) or {}).get("median_us") for s in steps}
    floor = (_timing(data, "steady", "floor", 1000) or {}).get("median_us")
    ratio = med.get(1000, 0) / floor if floor else float("nan")
    out = [
        _verdict(
            "steady_floor",
            "steady state at 1,000 steps: `project` within 3.5x the floor",
            ratio <= 3.5,
            f"{fmt(med.get(1000) or 0)} µs vs floor {fmt(floor or 0)} µs: {ratio:.2f}x",
        )
    ]
    peers = {
        p: (_timing(data, "steady", p, largest) or {}).get("median_us") for p in PRE_CALL_PEERS
    }
    fastest = min((v, p) for p, v in peers.items() if v is not None)
    ours = med[largest] or 0
    out.append(
        _verdict(
            "steady_peers",
            f"faster than every peer's pre-call path at {largest:,} steps",
            ours < fastest[0],
            f"ours {fmt(ours)} µs; fastest token-aware peer: {LABELS[fastest[1]]}, "
            f"{fmt(fastest[0])} µs ({fastest[0] / ours:.2f}x ours)",
        )
    )
    flat = ours / (med[steps[0]] or 1)
    out.append(
        _verdict(
            "steady_flat",
            f"cost flat within 1.5x from {steps[0]} to {largest:,} steps",
            flat <= 1.5,
            f"{fmt(med[steps[0]] or 0)} µs → {fmt(ours)} µs: {flat:.2f}x",
        )
    )
    return out


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = _steady_targets(data)
    rewrites = [(n, _timing(data, "over", n, 1000)) for n in ("microcompact", "light_trim")]
    figures = [f"{n} {fmt(row['median_us'] / 1e3)} ms" for n, row in rewrites if row]
    out.append(
        _verdict(
            "rewrite_10ms",
            "a non-LLM rewrite (microcompact, light trim) of a 1,000-step session over the "
            "threshold under 10 ms",
            all(row and row["median_us"] < 10_000 for _, row in rewrites),
            "; ".join(figures) + " (whole `project` call, median)",
        )
    )
    ours = [
        (steps, name, result)
        for steps, sweep in data["sweep"].items()
        for name, result in sweep.items()
        if name.startswith("ours")
    ]
    broken = sum(r["broken_pair_budgets"] for _, _, r in ours)
    budgets = sum(r["budgets"] for _, _, r in ours)
    out.append(
        _verdict(
            "pairs",
            "zero broken tool pairs in every budget from 20 % to 80 %",
            broken == 0,
            f"{broken} of {budgets} budgets broken ({len(ours)} sweeps: "
            f"{', '.join(sorted({s for s, _, _ in ours}))} steps, two pipelines)",
        )
    )
    rows = data["heuristic_error"]["rows"]
    worst = max(rows, key=lambda r: abs(r["error"])) if rows else None
    anchored = [r for r in rows if r["usage_anchors"]]
    figure = (
        f"worst {worst['error']:+.1%} ({worst['transcript']}), {len(rows)} transcripts"
        if worst
        else "no corpus found"
    )
    hybrid_met, hybrid = _hybrid_figure(data.get("counting"))
    figure += "; " + hybrid if not anchored else ""
    heuristic_met = None if not worst else abs(worst["error"]) < 0.10
    out.append(
        _verdict(
            "heuristic",
            "heuristic error under 10 % on every corpus transcript; hybrid under 2 %",
            heuristic_met if hybrid_met is None else bool(heuristic_met and hybrid_met),
            figure,
        )
    )
    economics_met, economics = _economics_verdict(data.get("economics"))
    out.append(
        _verdict(
            "economics",
            "never more summarizer calls than a peer on the same replay; higher "
            "cache-reusable share",
            economics_met,
            economics,
        )
    )
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _cell(row: dict[str, Any] | None, scale: float = 1.0, key: str = "median_us") -> str:
    if row is None:
        return "-"
    return fmt(row[key] / scale)


def _steady_section(data: dict[str, Any]) -> list[str]:
    steps = _steps(data)
    names = [
        "project",
        "project_replace_last",
        "floor",
        "full_tokenize",
        "lc_trim_approx",
        "lc_trim_tiktoken",
        "lc_summarization",
        "strands_apply",
        "strands_precall",
        "autogen",
    ]
    header = [
        "scenario (median µs; p90 below)",
        *[f"{s:,} steps" for s in steps],
        "x ours at the largest",
    ]
    rows = []
    for name in names:
        cells = [_timing(data, "steady", name, s) for s in steps]
        ours = _timing(data, "steady", "project", steps[-1])
        ratio = fmt(cells[-1]["median_us"] / ours["median_us"]) if cells[-1] and ours else "-"
        rows.append([LABELS[name], *[_cell(c) for c in cells], ratio])
        rows.append(["  p90", *[_cell(c, key="p90_us") for c in cells], ""])
    sizes = ["messages / cl100k tokens"]
    sizes += [
        f"{r['messages']:,} / {r['tokens']:,}"
        for s in steps
        if (r := _timing(data, "steady", "project", s))
    ]
    return _table(header, [[*sizes, ""], *rows])


def _over_section(data: dict[str, Any]) -> list[str]:
    steps = _steps(data)
    names = sorted(
        {r["scenario"] for r in data["timings"] if r["section"] == "over"},
        key=lambda n: (n not in LABELS or not LABELS[n].startswith("ours"), n),
    )
    header = [
        "rewrite (median ms)",
        *[f"{s:,} steps" for s in steps],
        "tool pairs intact",
        "other problems (largest size)",
    ]
    rows = []
    for name in names:
        cells = [_over_row(data, name, s) for s in steps]
        done = [c for c in cells if c and "pairs_intact" in c]
        intact = (
            "-"
            if not done
            else (
                "yes"
                if all(c["pairs_intact"] for c in done)
                else "no: "
                + ", ".join(
                    f"{c['steps']:,}: {c['orphans']} orphans" for c in done if not c["pairs_intact"]
                )
            )
        )
        problems = sorted(
            {
                p
                for p in (done[-1]["problems"] if done else [])
                if not p.startswith(("tool call", "tool result"))
            }
        )
        rows.append(
            [
                LABELS.get(name, name),
                *[_over_cell(c) for c in cells],
                intact,
                "; ".join(problems) or "none",
            ]
        )
    return _table(header, rows)


def _over_row(data: dict[str, Any], name: str, steps: int) -> dict[str, Any] | None:
    for row in data["timings"]:
        if (row["section"], row["scenario"], row["steps"]) == ("over", name, steps):
            return row
    return None


def _over_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    if "skipped" in row:
        return "skipped"
    text = fmt(row["median_us"] / 1e3)
    if row.get("fits") is False:
        text += " (does not fit)"
    return text


def _sweep_section(data: dict[str, Any]) -> list[str]:
    rows = []
    for steps, sweep in data["sweep"].items():
        for name, result in sweep.items():
            other = {k: v for k, v in result["problem_budgets"].items() if k != "tool pair broken"}
            rows.append(
                [
                    f"{int(steps):,}",
                    LABELS.get(name, name),
                    f"{result['broken_pair_budgets']} / {result['budgets']}",
                    str(result["orphans"]),
                    "; ".join(f"{k}: {v}" for k, v in sorted(other.items())) or "none",
                ]
            )
    return _table(
        [
            "steps",
            "contender",
            "budgets with broken pairs",
            "orphaned tool messages",
            "other `check_view` problems (budgets)",
        ],
        rows,
    )


def _memory_section(data: dict[str, Any]) -> list[str]:
    rows = [
        [
            r["framework"],
            f"{r['steps']:,}",
            f"{r['transcript_bytes'] / 1e6:,.2f}",
            f"{r['manager_bytes'] / 1e6:,.3f}",
            f"{r['manager_bytes'] / r['messages']:,.0f}",
        ]
        for r in data["memory"]["per_session"]
    ]
    lines = _table(
        [
            "framework",
            "steps",
            "transcript in its types (MB)",
            "held by the manager (MB)",
            "manager bytes per message",
        ],
        rows,
    )
    c = data["memory"]["concurrent"]
    lines += [
        "",
        f"{c['sessions']:,} concurrent sessions of {c['steps']} steps "
        f"({c['messages_each']} messages each), one engine each, one shared counter: the "
        f"transcripts hold {c['transcripts_bytes'] / 1e6:,.1f} MB, the engines "
        f"{c['engines_bytes'] / 1e6:,.1f} MB, "
        f"{c['engine_bytes_per_session'] / 1e3:,.1f} kB per session.",
    ]
    return lines


def _error_section(data: dict[str, Any]) -> list[str]:
    rows = [
        [r["transcript"], f"{r['tokens']:,}", f"{r['heuristic']:,}", f"{r['error']:+.1%}"]
        for r in data["heuristic_error"]["rows"]
    ]
    return _table(["corpus transcript", "cl100k tokens", "heuristic", "error"], rows)


def _targets_section(data: dict[str, Any]) -> list[str]:
    marks = {True: "met", False: "**not met**", None: "n/a"}
    return _table(
        ["target", "verdict", "figure"],
        [[t["target"], marks[t["met"]], t["figure"]] for t in data["targets"]],
    )


def render(data: dict[str, Any]) -> str:
    from _peer_text import INTRO, METHOD, NOTES, READING

    missed = [
        f"- {t['target']}: {NOTES[t['key']]}"
        for t in data["targets"]
        if t["met"] is False and t["key"] in NOTES
    ]
    notes = "What a missed target would take:\n\n" + "\n".join(missed) if missed else ""
    meta = data["meta"]
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    parts = [
        INTRO.format(**meta, versions_line=versions, over_percent=int(meta["over_fraction"] * 100)),
        "## Targets\n",
        *_targets_section(data),
        "",
        notes,
        "",
        "## Steady state: one step appended, below every threshold\n",
        *_steady_section(data),
        "",
        f"## Over the threshold: a budget of {int(meta['over_fraction'] * 100)} % of the history\n",
        *_over_section(data),
        "",
        "## Tool pairs across budgets (20 % to 80 % of the history, 25 budgets)\n",
        *_sweep_section(data),
        "",
        "## Memory held per session (tracemalloc)\n",
        *_memory_section(data),
        "",
        "## Heuristic counter against cl100k on the corpus\n",
        *_error_section(data),
        "",
        READING,
        METHOD,
    ]
    return "\n".join(parts) + "\n"
