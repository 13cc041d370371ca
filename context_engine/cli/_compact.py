"""``context-engine compact``: one forced compaction, then the pipeline until the result fits.

``/compact`` alone writes a checkpoint and keeps a recent tail verbatim; when
that tail (or the system prompt, or the newest request) is itself above the
threshold, the checkpoint cannot bring the transcript under it. The command
then runs the same pipeline ``replay`` runs (``--strategies``) on the committed
messages, as the agent's next call would, writes what that call would send,
and names what stayed above the threshold and why.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import attrs

from context_engine.cli._common import EXIT_OK, EXIT_PROBLEM
from context_engine.cli._output import Output, Table, WriteFormat, emit_json, write_messages
from context_engine.cli._pipeline import Pipeline, pipeline_from_args, step_reason
from context_engine.cli._present import num
from context_engine.cli._protected import ProtectedPart, protected_parts
from context_engine.cli._repair import read_checked
from context_engine.errors import CompactionError
from context_engine.events import RewriteEvent
from context_engine.messages import ContextSummary, Message

__all__ = ["event_json", "run_compact"]


def event_json(event: RewriteEvent | None) -> dict[str, Any] | None:
    """A `RewriteEvent` as JSON-ready data, without its view."""
    if event is None:
        return None
    return attrs.asdict(event, filter=lambda attribute, _: attribute.name != "view")


def _output_path(source: str, fmt: WriteFormat) -> Path:
    path = Path(source)
    return path.with_name(f"{path.stem}.compacted{'.jsonl' if fmt == 'openai' else '.json'}")


@attrs.frozen(kw_only=True)
class _Outcome:
    messages: tuple[Message, ...]
    tokens: int
    fits: bool
    forced: RewriteEvent | None  # the /compact step
    fitted: RewriteEvent | None  # the pipeline run after it, when the checkpoint was not enough
    declined: str | None  # why /compact wrote no checkpoint, when it declined


def _compact(
    pipeline: Pipeline, messages: tuple[Message, ...], instructions: str | None
) -> _Outcome:
    """Raises `CompactionError` only when the summarizer failed."""
    engine = pipeline.engine
    forced: RewriteEvent | None = None
    declined: str | None = None
    try:
        result = engine.compact_sync(messages, instructions)
        forced = result.event
        committed = result.commit if result.commit is not None else messages
        if not result.changed:
            declined = _why_unchanged(forced)
    except CompactionError as exc:
        if pipeline.summarizer is not None and pipeline.summarizer.failures:
            raise
        # The strategy declined (a checkpoint larger than what it replaces): not a failure.
        text = str(exc).split("; .view", 1)[0]
        committed = messages
        declined = (
            "a checkpoint would be larger than the history it replaces"
            if "would not shrink" in text
            else text
        )
    estimate = engine.estimate(committed).tokens
    if estimate <= engine.threshold:
        return _Outcome(
            messages=committed,
            tokens=estimate,
            fits=True,
            forced=forced,
            fitted=None,
            declined=declined,
        )
    projection = engine.project_sync(committed)
    final = projection.commit if projection.commit is not None else projection.messages
    return _Outcome(
        messages=tuple(final),
        tokens=projection.usage.tokens,
        fits=projection.fits,
        forced=forced,
        fitted=projection.event,
        declined=declined,
    )


def _why_unchanged(event: RewriteEvent | None) -> str:
    steps = event.steps if event is not None else ()
    reasons = [step_reason(step, event) for step in steps if not step.applied]
    return "; ".join(reasons) or "no history before the kept tail to summarize (see --keep-tail)"


def run_compact(args: argparse.Namespace, out: Output) -> int:
    """``compact FILE``: exit 0 when the compacted transcript fits, 1 when not or on failure."""
    transcript = read_checked(args, out)
    pipeline = pipeline_from_args(args, transcript)
    try:
        outcome = _compact(pipeline, transcript.messages, args.instructions)
    except CompactionError as exc:
        out.error(f"compaction failed: {exc}")
        return EXIT_PROBLEM
    fmt: WriteFormat = args.format or (
        "anthropic" if transcript.format == "anthropic" else "openai"
    )
    target = args.output or str(_output_path(transcript.source, fmt))
    write_messages(target, outcome.messages, fmt)
    engine = pipeline.engine
    protected = protected_parts(outcome.messages, engine.counter)
    info = outcome.forced.info if outcome.forced is not None else None
    data = {
        "source": transcript.source,
        "output": target,
        "format": fmt,
        "window": engine.context_window,
        "reserve": engine.reserve_tokens,
        "threshold": engine.threshold,
        "strategies": list(pipeline.strategies),
        "keep_tail": args.keep_tail,
        "overhead": attrs.asdict(pipeline.overhead),
        "changed": outcome.messages != transcript.messages,
        "strategy": _last_strategy(outcome),
        "messages_before": len(transcript.messages),
        "messages_after": len(outcome.messages),
        "tokens_before": engine.estimate(transcript.messages).tokens,
        "tokens_after": outcome.tokens,
        "fits": outcome.fits,
        "compacted_count": info.compacted_count if info else 0,
        "kept_count": info.kept_count if info else len(outcome.messages),
        "split_turn": info.is_split_turn if info else False,
        "summarizer": pipeline.summarizer_label,
        "summarizer_calls": pipeline.summarizer.calls if pipeline.summarizer else 0,
        "declined": outcome.declined,
        "protected": [attrs.asdict(part) for part in protected],
        "event": event_json(outcome.forced),
        "fit_event": event_json(outcome.fitted),
    }
    _show(outcome, data, protected, out)
    if args.json:
        emit_json(data, args.json, out)
    return EXIT_OK if outcome.fits else EXIT_PROBLEM


def _last_strategy(outcome: _Outcome) -> str | None:
    for event in (outcome.fitted, outcome.forced):
        if event is not None and event.changed:
            return event.strategy
    return None


def _show(
    outcome: _Outcome, data: dict[str, Any], protected: tuple[ProtectedPart, ...], out: Output
) -> None:
    forced = outcome.forced
    if forced is not None and forced.changed:
        out.line(
            f"Compacted {data['source']}: {num(data['tokens_before'])} -> "
            f"{num(data['tokens_after'])} tokens, {data['messages_before']} -> "
            f"{data['messages_after']} messages (threshold {num(data['threshold'])})"
        )
        out.line(
            f"  checkpoint replaced {data['compacted_count']} messages, kept "
            f"{data['kept_count']} verbatim; split turn: {'yes' if data['split_turn'] else 'no'}; "
            f"summarizer {data['summarizer']} called {data['summarizer_calls']} time(s)"
        )
        if forced.info is not None and (forced.info.read_files or forced.info.modified_files):
            out.line(
                f"  files read: {', '.join(forced.info.read_files) or '-'}; "
                f"modified: {', '.join(forced.info.modified_files) or '-'}"
            )
    else:
        out.line(f"No checkpoint for {data['source']}: {outcome.declined}.")
    if outcome.fitted is not None:
        out.line(
            f"  the checkpoint left {num(outcome.fitted.tokens_before)} tokens, above the "
            f"threshold; the pipeline ({', '.join(data['strategies'])}) ran as on the next call:"
        )
        for step in outcome.fitted.steps:
            mark = "applied" if step.applied else "no"
            out.line(f"    {step.name}: {mark} - {step_reason(step, outcome.fitted)}")
    where = "standard output" if data["output"] == "-" else data["output"]
    out.line(f"wrote {where} ({data['format']}, {data['messages_after']} messages)")
    _show_checkpoint(outcome.messages, forced, out)
    out.table(
        Table(
            title="Protected (no strategy removes these)",
            headers=("part", "messages", "tokens", "why"),
            rows=tuple((p.part, str(p.messages), num(p.tokens), p.why) for p in protected),
            numeric=frozenset({1, 2}),
        )
    )
    if not outcome.fits:
        out.line(
            f"The result ({num(data['tokens_after'])} tokens) is still above the threshold "
            f"({num(data['threshold'])}): the protected parts above are what could not shrink."
        )
        if any(p.part == "tail" for p in protected):
            out.line(
                "  A smaller --keep-tail keeps less of the recent work verbatim; a larger "
                "--window or a smaller --reserve raises the threshold."
            )


def _show_checkpoint(
    messages: tuple[Message, ...], forced: RewriteEvent | None, out: Output
) -> None:
    checkpoint = next((m for m in messages if isinstance(m, ContextSummary)), None)
    if checkpoint is None or forced is None or not forced.changed:
        return
    lines = checkpoint.summary.splitlines()
    out.line(f"Checkpoint ({len(lines)} lines, first 15):")
    for line in lines[:15]:
        out.line(f"  | {line if len(line) <= 116 else line[:115] + '…'}")
