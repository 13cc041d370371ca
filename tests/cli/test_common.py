"""Summarizers and strategies named on the command line."""

from __future__ import annotations

import inspect

import pytest

from tests.extras import needs

pytest.importorskip("openai", reason=needs("openai"))
pytest.importorskip("anthropic", reason=needs("anthropic"))


from context_engine import Message
from context_engine.cli._common import (
    CliError,
    CountingSummarizer,
    build_strategies,
    build_summarizer,
    parse_strategies,
)
from context_engine.summarize.anthropic import AnthropicSummarizer
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.openai import OpenAISummarizer
from context_engine.summarize.request import SummaryRequest

pytestmark = pytest.mark.extra("openai", "anthropic")


def test_extractive_needs_no_environment() -> None:
    assert isinstance(build_summarizer("extractive", {}), ExtractiveSummarizer)


def test_openai_summarizer_is_built_from_the_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    summarizer = build_summarizer("openai:qwen2.5-coder", env)
    assert isinstance(summarizer, OpenAISummarizer)
    assert summarizer.model == "qwen2.5-coder"
    assert "http://127.0.0.1:9/v1" in summarizer.provider


def test_anthropic_summarizer_is_built_from_the_environment() -> None:
    summarizer = build_summarizer("anthropic:claude-haiku", {"ANTHROPIC_API_KEY": "k"})
    assert isinstance(summarizer, AnthropicSummarizer)
    assert summarizer.model == "claude-haiku"


@pytest.mark.parametrize(
    ("spec", "env", "message"),
    [
        ("openai:m", {}, "OPENAI_API_KEY, which is not set"),
        ("openai:m", {"OPENAI_API_KEY": "  "}, "OPENAI_API_KEY, which is not set"),
        ("anthropic:m", {"OPENAI_API_KEY": "k"}, "ANTHROPIC_API_KEY, which is not set"),
        ("llama:m", {}, "'extractive', 'openai:MODEL' or 'anthropic:MODEL'"),
        ("anthropic", {}, "'extractive', 'openai:MODEL' or 'anthropic:MODEL'"),
    ],
    ids=["no-openai-key", "blank-openai-key", "no-anthropic-key", "unknown", "no-model"],
)
def test_bad_summarizer_specs_say_how_to_fix_them(
    spec: str, env: dict[str, str], message: str
) -> None:
    with pytest.raises(CliError) as caught:
        build_summarizer(spec, env)
    assert message in str(caught.value)


def test_a_missing_extra_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(__import__("sys").modules, "openai", None)
    with pytest.raises(CliError, match=r"pip install 'context-engine\[openai\]'"):
        build_summarizer("openai:m", {"OPENAI_API_KEY": "k"})


@pytest.mark.parametrize(
    ("spec", "names"),
    [
        (
            "microcompact,light_trim,summary,hard_truncate",
            ("tool_result_microcompact", "light_trim", "full_summary", "hard_truncate"),
        ),
        ("full_summary, tool_result_microcompact", ("full_summary", "tool_result_microcompact")),
        ("hard_truncate", ("hard_truncate",)),
        ("micro,summary", ("micro_summary", "full_summary")),
    ],
    ids=["short-names", "own-names-any-order", "one", "micro-tier"],
)
def test_strategy_lists_resolve_to_the_strategies_own_names(
    spec: str, names: tuple[str, ...]
) -> None:
    assert parse_strategies(spec) == names
    assert [s.name for s in build_strategies(names, ExtractiveSummarizer())] == list(names)


def test_a_summary_without_a_summarizer_is_refused() -> None:
    for name in ("full_summary", "micro_summary"):
        with pytest.raises(CliError, match="need a summarizer"):
            build_strategies((name,), None)


async def test_counting_keeps_a_summarizer_sync_or_async() -> None:
    request = SummaryRequest(messages=(Message.user("hi"),), prompt_messages=())

    async def remote(request: SummaryRequest) -> str:
        return "async"

    sync, asynchronous = CountingSummarizer(lambda r: "sync"), CountingSummarizer(remote)
    assert sync(request) == "sync"
    answer = asynchronous(request)
    assert inspect.isawaitable(answer)
    assert await answer == "async"
    assert (sync.calls, asynchronous.calls) == (1, 1)
