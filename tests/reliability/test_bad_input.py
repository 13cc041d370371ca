"""Bad input: every malformed value gets a clear `ContextEngineError` or a documented result.

Nothing may escape as a ``KeyError``, ``TypeError``, ``AttributeError`` or
``UnicodeError`` from deep inside: each error is a `ContextEngineError`
subclass whose message names the problem.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

import pytest

from context_engine import (
    ConfigurationError,
    ContextEngine,
    ContextEngineError,
    ContextSummary,
    ImageBlock,
    InvalidMessageError,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from context_engine.archive.reference import REFERENCE_PATTERN, reference_for
from context_engine.formats.anthropic import from_anthropic, to_anthropic
from context_engine.formats.openai import from_openai, to_openai
from context_engine.formats.readers import read_transcript, write_transcript
from context_engine.redact import Redactor
from context_engine.strategies import FullSummary, HardTruncate, LightTrim, SessionMemory
from context_engine.structure import TRIMMED_KEY
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import HeuristicCounter, TiktokenCounter, resolve_counter
from tests.reliability.support import COUNTER, echo_summarizer, turns, valid

OBSCURE = (KeyError, TypeError, AttributeError, UnicodeError, IndexError, AssertionError)


def engine(window: int = 8_000, **options: Any) -> ContextEngine:
    return ContextEngine.default(window, token_counter=COUNTER, **options)


def call(case: Callable[[], object]) -> object:
    return case()


# (id, callable, expected error class, words the message must contain)
ERRORS: list[tuple[str, Callable[[], object], type[ContextEngineError], str]] = [
    # -- messages and blocks
    ("unknown-role", lambda: Message("robot", "hi"), InvalidMessageError, "unknown role 'robot'"),
    ("role-none", lambda: Message(None, "hi"), InvalidMessageError, "unknown role None"),  # type: ignore[arg-type]
    ("role-int", lambda: Message(5, "hi"), InvalidMessageError, "unknown role 5"),  # type: ignore[arg-type]
    ("content-int", lambda: Message("user", 5), InvalidMessageError, "content must be a str"),  # type: ignore[arg-type]
    (
        "content-dict",
        lambda: Message("user", {"type": "text"}),
        InvalidMessageError,
        "content item",
    ),  # type: ignore[arg-type]
    (
        "content-bytes",
        lambda: Message("user", b"hi"),
        InvalidMessageError,
        "content item of type int",
    ),  # type: ignore[arg-type]
    (
        "block-dict",
        lambda: Message("user", [{"type": "text", "text": "x"}]),
        InvalidMessageError,
        "type dict",
    ),  # type: ignore[list-item]
    ("block-none", lambda: Message("user", [None]), InvalidMessageError, "type NoneType"),  # type: ignore[list-item]
    (
        "block-unknown-class",
        lambda: Message("user", [object()]),
        InvalidMessageError,
        "type object",
    ),  # type: ignore[list-item]
    ("text-int", lambda: TextBlock(5), InvalidMessageError, "TextBlock.text must be a str"),  # type: ignore[arg-type]
    ("text-bytes", lambda: TextBlock(b"x"), InvalidMessageError, "got bytes"),  # type: ignore[arg-type]
    ("thinking-none", lambda: ThinkingBlock(None), InvalidMessageError, "ThinkingBlock.thinking"),  # type: ignore[arg-type]
    ("call-no-id", lambda: ToolCall("", "bash"), InvalidMessageError, "ToolCall.id"),
    ("call-no-name", lambda: ToolCall("c1", ""), InvalidMessageError, "non-empty name"),
    (
        "call-dict-arguments",
        lambda: ToolCall("c1", "bash", {"cmd": "ls"}),
        InvalidMessageError,
        "json.dumps",
    ),  # type: ignore[arg-type]
    ("image-neither", lambda: ImageBlock(), InvalidMessageError, "exactly one of url= or data="),
    ("image-both", lambda: ImageBlock(url="u", data="d"), InvalidMessageError, "exactly one"),
    (
        "tool-without-id",
        lambda: Message("tool", "out"),
        InvalidMessageError,
        "without tool_call_id",
    ),
    (
        "tool-id-int",
        lambda: Message("tool", "out", tool_call_id=5),
        InvalidMessageError,
        "tool_call_id",
    ),  # type: ignore[arg-type]
    (
        "user-with-call",
        lambda: Message("user", [ToolCall("c1", "x")]),
        InvalidMessageError,
        "only assistant",
    ),
    ("name-int", lambda: Message("user", "x", name=5), InvalidMessageError, "name must be a str"),  # type: ignore[arg-type]
    (
        "stop-reason-int",
        lambda: Message("assistant", "x", stop_reason=1),
        InvalidMessageError,
        "stop_reason",
    ),  # type: ignore[arg-type]
    (
        "metadata-int",
        lambda: Message("user", "x", metadata=5),
        InvalidMessageError,
        "metadata must be a mapping",
    ),  # type: ignore[arg-type]
    (
        "metadata-list",
        lambda: Message("user", "x", metadata=[1, 2]),
        InvalidMessageError,
        "metadata",
    ),  # type: ignore[arg-type]
    (
        "usage-dict",
        lambda: Message("assistant", "x", usage={"input_tokens": 1}),
        InvalidMessageError,
        "usage must be a Usage",
    ),  # type: ignore[arg-type]
    ("usage-negative", lambda: Usage(-1), InvalidMessageError, "non-negative int"),
    ("usage-str", lambda: Usage("5"), InvalidMessageError, "non-negative int"),  # type: ignore[arg-type]
    (
        "timestamp-str",
        lambda: Message("user", "x", timestamp="2024-01-01"),
        InvalidMessageError,
        "timestamp",
    ),  # type: ignore[arg-type]
    (
        "summary-int",
        lambda: ContextSummary(summary=5),
        InvalidMessageError,
        "ContextSummary.summary",
    ),  # type: ignore[arg-type]
    (
        "summary-files-str",
        lambda: ContextSummary(summary="s", read_files="a.py"),
        InvalidMessageError,
        "not one str",
    ),  # type: ignore[arg-type]
    (
        "summary-file-newline",
        lambda: ContextSummary(summary="s", read_files=["a\nb"]),
        InvalidMessageError,
        "without newlines",
    ),
    (
        "summary-tokens-negative",
        lambda: ContextSummary(summary="s", tokens_before=-1),
        InvalidMessageError,
        "tokens_before",
    ),
    # -- what the engine is given
    ("project-none", lambda: engine().project_sync(None), InvalidMessageError, "got NoneType"),  # type: ignore[arg-type]
    ("project-int", lambda: engine().project_sync(5), InvalidMessageError, "got int"),  # type: ignore[arg-type]
    ("project-str", lambda: engine().project_sync("hello"), InvalidMessageError, "got str"),  # type: ignore[arg-type]
    (
        "project-one-message",
        lambda: engine().project_sync(Message.user("x")),
        InvalidMessageError,
        "got Message",
    ),  # type: ignore[arg-type]
    (
        "project-one-dict",
        lambda: engine().project_sync({"role": "user", "content": "x"}),
        InvalidMessageError,
        "from_openai",
    ),  # type: ignore[arg-type]
    (
        "project-dicts",
        lambda: engine().project_sync([{"role": "user", "content": "x"}]),
        InvalidMessageError,
        "message 0: expected a Message, got dict; convert",
    ),  # type: ignore[list-item]
    (
        "project-none-item",
        lambda: engine().project_sync([Message.user("x"), None]),
        InvalidMessageError,
        "message 1",
    ),  # type: ignore[list-item]
    ("compact-ints", lambda: engine().compact_sync([1, 2]), InvalidMessageError, "message 0"),  # type: ignore[list-item]
    (
        "recover-none",
        lambda: engine().recover_overflow_sync(None),
        InvalidMessageError,
        "got NoneType",
    ),  # type: ignore[arg-type]
    # -- configuration
    ("window-zero", lambda: engine(0), ConfigurationError, "context_window must be a positive int"),
    ("window-negative", lambda: engine(-128_000), ConfigurationError, "positive int"),
    ("window-float", lambda: engine(1.5), ConfigurationError, "positive int"),  # type: ignore[arg-type]
    ("window-str", lambda: engine("128k"), ConfigurationError, "positive int"),  # type: ignore[arg-type]
    ("window-bool", lambda: engine(True), ConfigurationError, "positive int"),  # type: ignore[arg-type]
    ("reserve-negative", lambda: engine(reserve_tokens=-1), ConfigurationError, "reserve_tokens"),
    ("reserve-str", lambda: engine(reserve_tokens="4k"), ConfigurationError, "reserve_tokens"),
    (
        "overhead-negative",
        lambda: engine(overhead_tokens=-5),
        ConfigurationError,
        "overhead_tokens",
    ),
    (
        "breaker-zero",
        lambda: engine(max_consecutive_failures=0),
        ConfigurationError,
        "max_consecutive_failures",
    ),
    (
        "strategies-single",
        lambda: ContextEngine(8_000, HardTruncate()),
        ConfigurationError,
        "wrap a single strategy in a list",
    ),  # type: ignore[arg-type]
    (
        "strategies-object",
        lambda: ContextEngine(8_000, [object()]),
        ConfigurationError,
        "is not a strategy",
    ),  # type: ignore[list-item]
    (
        "commit-str",
        lambda: ContextEngine(8_000, [], commit_strategies="full_summary"),
        ConfigurationError,
        "collection of strategy names",
    ),
    (
        "counter-object",
        lambda: ContextEngine(8_000, [], token_counter=object()),
        ConfigurationError,
        "TokenCounter",
    ),  # type: ignore[arg-type]
    (
        "hook-not-callable",
        lambda: ContextEngine(8_000, [], on_project=5),
        ConfigurationError,
        "on_project must be callable",
    ),  # type: ignore[arg-type]
    (
        "setter-window",
        lambda: setattr(engine(), "context_window", 0),
        ConfigurationError,
        "context_window",
    ),
    (
        "setter-reserve",
        lambda: setattr(engine(), "reserve_tokens", -5),
        ConfigurationError,
        "reserve_tokens",
    ),
    (
        "summarizer-not-callable",
        lambda: FullSummary(summarizer="gpt-4o"),
        ConfigurationError,
        "callable",
    ),  # type: ignore[arg-type]
    (
        "summary-keep-zero",
        lambda: FullSummary(summarizer=echo_summarizer, keep_recent_tokens=0),
        ConfigurationError,
        "keep_recent_tokens",
    ),
    ("seed-not-callable", lambda: SessionMemory(seed="MEMORY.md"), ConfigurationError, "seed"),  # type: ignore[arg-type]
    (
        "seed-max-zero",
        lambda: SessionMemory(max_seed_chars=0),
        ConfigurationError,
        "max_seed_chars",
    ),
    ("trim-impossible", lambda: LightTrim(text_threshold=10), ConfigurationError, "text_threshold"),
    (
        "redactor-bad-regex",
        lambda: Redactor(extra_patterns={"x": "("}),
        ConfigurationError,
        "not a valid regular expression",
    ),
    (
        "redactor-bad-kind",
        lambda: Redactor(extra_patterns={"Bad Kind": "x"}),
        ConfigurationError,
        "short lowercase name",
    ),
    (
        "redactor-str",
        lambda: Redactor(extra_patterns="sk-.*"),
        ConfigurationError,
        "must map kinds",
    ),  # type: ignore[arg-type]
    ("redactor-replacement", lambda: Redactor(replacement="***"), ConfigurationError, "{kind}"),
    # -- provider dicts
    ("openai-int", lambda: from_openai(5), InvalidMessageError, "list of message dicts, got int"),  # type: ignore[arg-type]
    ("openai-none", lambda: from_openai(None), InvalidMessageError, "got NoneType"),  # type: ignore[arg-type]
    (
        "openai-one-dict",
        lambda: from_openai({"role": "user"}),
        InvalidMessageError,
        "message_from_openai",
    ),
    (
        "openai-item-int",
        lambda: from_openai([5]),
        InvalidMessageError,
        "message 0: expected a message dict",
    ),  # type: ignore[list-item]
    (
        "openai-role",
        lambda: from_openai([{"role": "robot"}]),
        InvalidMessageError,
        "unknown role 'robot'",
    ),
    ("openai-no-role", lambda: from_openai([{"content": "x"}]), InvalidMessageError, "no 'role'"),
    (
        "openai-content-int",
        lambda: from_openai([{"role": "user", "content": 5}]),
        InvalidMessageError,
        "content must be",
    ),
    (
        "openai-part-type",
        lambda: from_openai([{"role": "user", "content": [{"type": "video"}]}]),
        InvalidMessageError,
        "unknown type 'video'",
    ),
    (
        "openai-arguments-dict",
        lambda: from_openai(
            [
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": {"a": 1}},
                        }
                    ],
                }
            ]
        ),
        InvalidMessageError,
        "raw JSON text",
    ),
    (
        "openai-tool-calls-str",
        lambda: from_openai([{"role": "assistant", "tool_calls": "x"}]),
        InvalidMessageError,
        "tool_calls must be a list",
    ),
    (
        "openai-usage-negative",
        lambda: from_openai(
            [{"role": "assistant", "content": "x", "usage": {"prompt_tokens": -1}}]
        ),
        InvalidMessageError,
        "usage.prompt_tokens",
    ),
    ("anthropic-int", lambda: from_anthropic(5), InvalidMessageError, "got int"),  # type: ignore[arg-type]
    (
        "anthropic-system-role",
        lambda: from_anthropic([{"role": "system", "content": "x"}]),
        InvalidMessageError,
        "pass system text as system=",
    ),
    (
        "anthropic-no-content",
        lambda: from_anthropic([{"role": "user"}]),
        InvalidMessageError,
        "no 'content'",
    ),
    (
        "anthropic-block-int",
        lambda: from_anthropic([{"role": "user", "content": [5]}]),
        InvalidMessageError,
        "must be a dict",
    ),
    (
        "anthropic-tool-input-not-json",
        lambda: to_anthropic(
            [
                Message.user("x"),
                Message.assistant(tool_calls=[ToolCall("c1", "f", "{not json")]),
                Message.tool("c1", "r"),
            ]
        ),
        InvalidMessageError,
        "c1",
    ),
]


@pytest.mark.parametrize(
    ("case", "error", "words"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS]
)
def test_bad_input_gets_a_clear_context_engine_error(
    case: Callable[[], object], error: type[ContextEngineError], words: str
) -> None:
    with pytest.raises(ContextEngineError) as info:
        call(case)
    assert isinstance(info.value, error)
    assert not isinstance(info.value, OBSCURE)
    assert words in str(info.value)


# -- graceful results ----------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["project", "compact", "recover_overflow"])
async def test_an_empty_transcript_comes_back_empty_and_unchanged(operation: str) -> None:
    result = await getattr(engine(), operation)([])
    assert result.messages == ()
    assert not result.changed
    if operation == "recover_overflow":
        # Nothing can be removed: reported as futile (the floor is the request framing).
        assert result.event is not None
        assert result.event.futile
        assert result.commit is None
    else:
        assert result.event is None


async def test_a_reserve_larger_than_the_window_warns_and_flags_every_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Threshold 0: a warning at construction; each view is the best one, flagged futile."""
    with caplog.at_level(logging.WARNING, logger="context_engine"):
        big = engine(4_000, reserve_tokens=10_000)
    assert big.threshold == 0
    assert any("leaves no room" in r.getMessage() for r in caplog.records)
    transcript = turns(10)
    result = await big.project(transcript)
    valid(transcript, result.messages)
    assert not result.fits
    assert result.event is not None
    assert result.event.futile
    assert result.event.floor_tokens > 0


async def test_a_single_user_message_larger_than_the_window_is_trimmed_with_a_marker() -> None:
    transcript = [Message.system("Be brief."), Message.user("please read: " + "x" * 200_000)]
    result = await engine(8_000).project(transcript)
    valid(transcript, result.messages)
    newest = result.messages[-1]
    assert TRIMMED_KEY in newest.metadata
    assert "characters trimmed" in newest.text
    assert result.fits


@pytest.mark.parametrize(
    "transcript",
    [
        pytest.param([Message.system("s" * 200_000), Message.user("hi")], id="huge-system"),
        pytest.param(
            [
                Message.user("go"),
                Message.assistant(tool_calls=[ToolCall("c1", "bash", "x" * 200_000)]),
            ],
            id="huge-pending-call",
        ),
    ],
)
async def test_an_untouchable_message_larger_than_the_window_is_reported_futile(
    transcript: list[Message],
) -> None:
    """No summary is paid for; the view is the input; the event names the floor."""
    summarizer_calls: list[Any] = []
    futile_engine = engine(8_000, summarizer=lambda r: summarizer_calls.append(r) or "s")
    result = await futile_engine.project(transcript)
    valid(transcript, result.messages)
    assert result.event is not None
    assert result.event.futile
    assert result.event.floor_tokens > futile_engine.threshold
    assert summarizer_calls == []


async def test_a_newest_tool_result_larger_than_the_window_is_capped_not_futile() -> None:
    """The default pipeline caps the result (it is not untouchable): the view fits and no
    summary is paid for."""
    summarizer_calls: list[Any] = []
    capped_engine = engine(8_000, summarizer=lambda r: summarizer_calls.append(r) or "s")
    transcript = [
        Message.user("run it"),
        Message.assistant(tool_calls=[ToolCall("c1", "bash", "{}")]),
        Message.tool("c1", "o" * 200_000),
    ]
    result = await capped_engine.project(transcript)
    valid(transcript, result.messages)
    assert result.fits
    assert result.event is not None
    assert not result.event.futile
    assert summarizer_calls == []


def odd_session() -> list[Message]:
    """Tool-call arguments that are not JSON, duplicate ids, orphans, empty messages."""
    messages = [Message.system("s"), Message.user("start")]
    for index in range(30):
        call_id = "dup" if index % 5 == 0 else f"c{index}"
        arguments = ["{not json", "", "null", "[1, 2]", '"a string"', '{"path": 5}'][index % 6]
        messages.append(Message.assistant(tool_calls=[ToolCall(call_id, "read_file", arguments)]))
        messages.append(Message.tool(call_id, f"result {index} " + "r" * 800))
        if index % 7 == 3:
            messages.append(Message.tool(f"orphan{index}", "an answer without a call " * 10))
        if index % 11 == 5:
            messages.append(Message("assistant"))  # an empty message
    messages.append(Message.user("and now?"))
    return messages


@pytest.mark.parametrize("operation", ["project", "compact", "recover_overflow"])
async def test_odd_but_well_typed_transcripts_keep_the_invariants(operation: str) -> None:
    """Arguments that are not JSON, duplicate call ids, orphan results, empty messages."""
    transcript = odd_session()
    subject = engine(6_000, summarizer=echo_summarizer)
    arguments: tuple[Any, ...] = (transcript,)
    if operation == "recover_overflow":
        arguments += ("prompt is too long",)
    result = await getattr(subject, operation)(*arguments)
    assert result.changed
    valid(transcript, result.messages)
    assert len(to_openai(result.messages)) == len(result.messages)


# -- lone surrogates and invalid UTF-8 ---------------------------------------------------

SURROGATE_TEXTS = [
    pytest.param("\ud800", id="lone-high"),
    pytest.param("\udfff tail", id="lone-low"),
    pytest.param("ok \udcff\udcfe bytes", id="surrogateescape"),
    pytest.param(b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape"), id="invalid-utf8"),
    pytest.param("\ud83d\ude00 split emoji", id="surrogate-pair-as-two"),
]


@pytest.mark.parametrize("text", SURROGATE_TEXTS)
@pytest.mark.parametrize(
    "make_counter",
    [
        pytest.param(resolve_counter, id="default"),
        pytest.param(HeuristicCounter, id="heuristic"),
        pytest.param(FixedTokenCounter, id="fixed"),
    ],
)
def test_counters_count_lone_surrogates(text: str, make_counter: Callable[[], Any]) -> None:
    """tiktoken's encode_ordinary replaces them itself; no counter raises UnicodeError."""
    counter = make_counter()
    assert counter.count_text(text) >= 1
    message = Message("assistant", [TextBlock(text), ToolCall("c\udcff", "f\ud800", text)])
    assert counter.count_message(message) > counter.count_text(text)


@pytest.mark.parametrize("text", SURROGATE_TEXTS)
def test_references_name_messages_with_surrogates_apart(text: str) -> None:
    """A lone surrogate in a tool call id once made every truncation marker fail to hash."""
    with_text = Message("assistant", [ToolCall(text, "bash", "{}")])
    plain = Message("assistant", [ToolCall("call_0", "bash", "{}")])
    assert REFERENCE_PATTERN.fullmatch(reference_for([with_text]))
    assert reference_for([with_text]) != reference_for([plain])
    again = Message("assistant", [ToolCall(text, "bash", "{}")])
    assert reference_for([with_text]) == reference_for([again])


def test_the_tiktoken_counter_handles_surrogates_in_encode_ordinary() -> None:
    counter = resolve_counter()
    if not isinstance(counter, TiktokenCounter):
        pytest.skip("no tiktoken encoding available offline")
    assert counter.encoding.encode_ordinary("\ud800") == counter.encoding.encode_ordinary("\ufffd")


@pytest.mark.parametrize("text", SURROGATE_TEXTS)
async def test_surrogates_flow_through_dicts_engine_summarizer_and_redactor(text: str) -> None:
    """from_openai, project with a summary, the summarizer prompt and the redactor all cope."""
    dicts = [{"role": "system", "content": "sys " + text}]
    for index in range(20):
        dicts.append({"role": "user", "content": f"{text} question {index} " + "q" * 1_500})
        dicts.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{index}{text}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd": "' + text + '"}'},
                    }
                ],
            }
        )
        dicts.append({"role": "tool", "tool_call_id": f"c{index}{text}", "content": text * 50})
    transcript = from_openai(dicts)
    assert to_openai(transcript) == dicts
    prompts: list[str] = []

    def summarizer(request: Any) -> str:
        prompts.append(request.prompt_messages[1].text)
        return f"<summary>saw {text}</summary>"

    subject = ContextEngine(
        8_000,
        [FullSummary(summarizer=summarizer, redactor=Redactor(), summarizer_window=1_000_000)],
        token_counter=resolve_counter(),
        reserve_tokens=1_000,
    )
    result = await subject.project(transcript)
    assert result.changed
    assert prompts
    assert any(text in prompt for prompt in prompts)
    valid(transcript, result.messages)
    assert to_openai(result.messages)  # still convertible


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
def test_surrogates_survive_a_transcript_file_round_trip(fmt: str, tmp_path: Any) -> None:
    """write_transcript escapes what UTF-8 cannot hold; read_transcript gets it back exactly."""
    messages = [
        Message.user("a\ud800b 混合 and a literal \\ud800"),
        Message.assistant(tool_calls=[ToolCall("c\udcff", "f", '{"x": "\ud800"}')]),
        Message.tool("c\udcff", "r\udfff"),
    ]
    path = tmp_path / "t.json"
    write_transcript(path, messages, fmt)  # type: ignore[arg-type]
    path.read_bytes().decode("utf-8")  # the file itself is valid UTF-8
    back = read_transcript(path).messages
    assert [m.content for m in back] == [m.content for m in messages]


def test_a_timestamp_of_the_wrong_kind_is_named() -> None:
    with pytest.raises(InvalidMessageError, match="timestamp"):
        Message("user", "x", timestamp=dt.date(2024, 1, 1))  # type: ignore[arg-type]
