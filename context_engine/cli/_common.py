"""What every subcommand shares: exit codes, reading input, summarizers and strategies by name."""

from __future__ import annotations

import importlib.util
import inspect
import os
from collections.abc import Awaitable, Mapping, Sequence

from context_engine.errors import ContextEngineError, TranscriptFormatError
from context_engine.formats.readers import Transcript, read_transcript
from context_engine.redact import Redactor
from context_engine.strategies import (
    FullSummary,
    HardTruncate,
    LightTrim,
    MicroSummary,
    Strategy,
    ToolResultMicrocompact,
)
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import Summarizer, SummaryRequest

__all__ = [
    "DEFAULT_STRATEGIES",
    "EXIT_OK",
    "EXIT_PROBLEM",
    "EXIT_USAGE",
    "STRATEGY_NAMES",
    "CliError",
    "CountingSummarizer",
    "build_strategies",
    "build_summarizer",
    "load_transcript",
    "parse_strategies",
]

EXIT_OK = 0
"""Everything went well."""
EXIT_PROBLEM = 1
"""The transcript does not fit, or a replay found problems."""
EXIT_USAGE = 2
"""Bad usage or unreadable input."""

STRATEGY_NAMES: Mapping[str, str] = {
    "microcompact": "tool_result_microcompact",
    "tool_result_microcompact": "tool_result_microcompact",
    "light_trim": "light_trim",
    "micro": "micro_summary",
    "micro_summary": "micro_summary",
    "summary": "full_summary",
    "full_summary": "full_summary",
    "hard_truncate": "hard_truncate",
}
"""Names accepted by ``--strategies``: the short ones and the strategies' own names."""

DEFAULT_STRATEGIES = "microcompact,light_trim,summary,hard_truncate"
"""The pipeline a replay uses unless told otherwise."""


class CliError(Exception):
    """A problem the user has to fix: bad usage or unreadable input (exit code 2)."""


def load_transcript(path: str) -> Transcript:
    """Read ``path`` with `read_transcript`, turning every failure into a `CliError`."""
    try:
        return read_transcript(path)
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except TranscriptFormatError as exc:  # its text starts with the path already
        raise CliError(f"cannot read {exc}") from None
    except (OSError, ValueError, ContextEngineError) as exc:
        raise CliError(f"cannot read {path}: {exc}") from None


def build_summarizer(spec: str, environ: Mapping[str, str] | None = None) -> Summarizer:
    """The summarizer named by ``--summarizer``: ``extractive``, ``openai:M``, ``anthropic:M``.

    The provider clients are built from the environment (``OPENAI_API_KEY`` and
    ``OPENAI_BASE_URL``; ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_BASE_URL``).

    Raises:
        CliError: the spec is unknown, the provider's extra is not installed, or
            its API key is not set.
    """
    env = os.environ if environ is None else environ
    kind, _, model = spec.partition(":")
    if spec == "extractive":
        return ExtractiveSummarizer()
    if kind == "openai" and model:
        return _openai_summarizer(model, env)
    if kind == "anthropic" and model:
        return _anthropic_summarizer(model, env)
    raise CliError(
        f"--summarizer must be 'extractive', 'openai:MODEL' or 'anthropic:MODEL', got {spec!r}"
    )


def _require_key(variable: str, spec: str, env: Mapping[str, str]) -> str:
    key = env.get(variable, "").strip()
    if not key:
        raise CliError(
            f"--summarizer {spec} reads its API key from {variable}, which is not set; "
            f"export {variable}=... (a server that needs no key accepts any non-empty value)"
        )
    return key


def _require_extra(module: str, spec: str) -> None:
    """Fail fast, before the slow import, when the provider's package is not installed."""
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module blocked with sys.modules[name] = None
        found = False
    if not found:
        raise CliError(
            f"--summarizer {spec} needs the {module} package; "
            f"install it with: pip install 'context-engine[{module}]'"
        )


def _openai_summarizer(model: str, env: Mapping[str, str]) -> Summarizer:
    spec = f"openai:{model}"
    _require_extra("openai", spec)
    key = _require_key("OPENAI_API_KEY", spec, env)
    import openai

    from context_engine.summarize.openai import OpenAISummarizer

    client = openai.AsyncOpenAI(api_key=key, base_url=env.get("OPENAI_BASE_URL") or None)
    return OpenAISummarizer(client, model)


def _anthropic_summarizer(model: str, env: Mapping[str, str]) -> Summarizer:
    spec = f"anthropic:{model}"
    _require_extra("anthropic", spec)
    key = _require_key("ANTHROPIC_API_KEY", spec, env)
    import anthropic

    from context_engine.summarize.anthropic import AnthropicSummarizer

    client = anthropic.AsyncAnthropic(api_key=key, base_url=env.get("ANTHROPIC_BASE_URL") or None)
    return AnthropicSummarizer(client, model)


class CountingSummarizer:
    """Wraps a summarizer and counts its calls and failures; sync stays sync, async stays async.

    Args:
        inner: The summarizer to call.
    """

    def __init__(self, inner: Summarizer) -> None:
        self.inner = inner
        self.calls = 0
        self.failures = 0

    def __call__(self, request: SummaryRequest) -> str | Awaitable[str]:
        """Count the call and hand ``request`` to the wrapped summarizer."""
        self.calls += 1
        try:
            answer = self.inner(request)
        except Exception:
            self.failures += 1
            raise
        if inspect.isawaitable(answer):
            return self._watched(answer)
        return answer

    async def _watched(self, answer: Awaitable[str]) -> str:
        try:
            return await answer
        except Exception:
            self.failures += 1
            raise


def parse_strategies(spec: str) -> tuple[str, ...]:
    """The strategies' own names, in order, from a comma-separated ``--strategies`` value.

    Raises:
        CliError: a name is unknown, repeated, or the list is empty.
    """
    names = [part.strip() for part in spec.split(",") if part.strip()]
    if not names:
        raise CliError(f"--strategies needs at least one of: {DEFAULT_STRATEGIES}")
    resolved: list[str] = []
    for name in names:
        canonical = STRATEGY_NAMES.get(name)
        if canonical is None:
            raise CliError(
                f"--strategies: unknown strategy {name!r}; choose from {DEFAULT_STRATEGIES}"
            )
        if canonical in resolved:
            raise CliError(f"--strategies: {name!r} is listed twice")
        resolved.append(canonical)
    return tuple(resolved)


def build_strategies(
    names: Sequence[str], summarizer: Summarizer | None, *, keep_recent_tokens: int | None = None
) -> list[Strategy]:
    """Strategy objects with their default settings for the names `parse_strategies` returned.

    ``keep_recent_tokens`` (``--keep-tail``) goes to `FullSummary`; None keeps its default.

    Raises:
        CliError: ``full_summary`` or ``micro_summary`` is asked for without a summarizer.
    """
    strategies: list[Strategy] = []
    for name in names:
        if name == "tool_result_microcompact":
            strategies.append(ToolResultMicrocompact())
        elif name == "light_trim":
            strategies.append(LightTrim())
        elif name in ("full_summary", "micro_summary"):
            if summarizer is None:
                raise CliError("the summary strategies need a summarizer (--summarizer)")
            if name == "full_summary":
                strategies.append(
                    FullSummary(
                        summarizer=summarizer,
                        redactor=Redactor(),
                        keep_recent_tokens=keep_recent_tokens,
                    )
                )
            else:
                strategies.append(MicroSummary(summarizer=summarizer, redactor=Redactor()))
        elif name == "hard_truncate":
            strategies.append(HardTruncate())
    return strategies
