"""Test doubles for users testing their own agents with context-engine.

Nothing here touches the network or needs a tokenizer download.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from context_engine.messages import Message, ToolCall
from context_engine.summarize.request import SummaryRequest
from context_engine.tokens import _CachingCounter

__all__ = ["FixedTokenCounter", "RecordingSummarizer", "synthetic_session"]


class FixedTokenCounter(_CachingCounter):
    """Predictable counts: one token per ``chars_per_token`` characters, rounded up.

    Message framing and tool-call overhead follow the real counters, so a
    budget computed with it behaves like one computed with tiktoken, only with
    round numbers you can reason about in a test.

    Args:
        chars_per_token: Characters per token.
        image_tokens: Tokens for each image block.
    """

    def __init__(self, chars_per_token: int = 4, *, image_tokens: int = 100) -> None:
        super().__init__(image_tokens=image_tokens)
        if chars_per_token < 1:
            raise ValueError("chars_per_token must be >= 1")
        self.chars_per_token = chars_per_token
        self.key = f"fixed:{chars_per_token}:{image_tokens}"

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / chars_per_token)``."""
        return math.ceil(len(text) / self.chars_per_token)

    def __repr__(self) -> str:
        return f"FixedTokenCounter({self.chars_per_token})"


_FILES = (
    "src/app/parser.py",
    "src/app/lexer.py",
    "src/app/config.py",
    "src/app/cli.py",
    "tests/test_parser.py",
    "docs/usage.md",
)
_CJK_NOTES = (
    "用户说明: 解析器在处理嵌套括号时返回了错误的结果。",
    "テスト結果: ファイルを読み込みましたが、期待値と一致しません。",
    "참고: 설정 파일의 기본값이 변경되었습니다.",
)


def _file_body(path: str, version: int, lines: int) -> str:
    rows = [f"# {path} (revision {version})"]
    for number in range(1, lines + 1):
        rows.append(f"{number:4d}    def handler_{number}(value):  # returns value + {number}")
    return "\n".join(rows)


def _pytest_output(passing: bool, step: int) -> str:
    if passing:
        return f"============ 48 passed in {1.5 + step % 7 / 10:.2f}s ============"
    failures = "\n".join(
        f"FAILED tests/test_parser.py::test_nested_{n} - AssertionError: "
        f"assert parse('(({n}))') == {n}"
        for n in range(1, 13)
    )
    trace = "\n".join(
        f"  File 'src/app/parser.py', line {40 + n}, in parse_group" for n in range(30)
    )
    return f"{trace}\n{failures}\n============ 12 failed, 36 passed in 2.31s ============"


def synthetic_session(steps: int, *, result_lines: int = 30) -> list[Message]:
    """A deterministic coding-agent session of ``steps`` tool steps, for demos and tests.

    One system prompt, a user request (with some CJK text), then an agent that
    reads files (some repeatedly), greps, runs a failing test suite, edits and
    finally sees the tests pass; every few dozen steps the user adds a note.
    Assistant messages carry no provider usage, so counts are the tokenizer's.
    """
    messages = [
        Message.system(
            "You are a careful coding agent. Use the tools to inspect and change the "
            "repository; run the tests before you claim a fix."
        ),
        Message.user("The parser mishandles nested parentheses; please fix it. " + _CJK_NOTES[0]),
    ]
    fix_at = max(4, steps * 3 // 4)
    for step in range(steps):
        path = _FILES[(step * 7) % len(_FILES)] if step % 5 else _FILES[0]
        call_id = f"call_{step:05d}"
        if step % 9 == 4:
            call = ToolCall(call_id, "run_tests", '{"args": ["-q", "tests/test_parser.py"]}')
            result = _pytest_output(step >= fix_at, step)
            thought = "Running the parser tests."
        elif step % 9 == 7:
            call = ToolCall(
                call_id, "edit_file", f'{{"path": "{path}", "patch": "@@ -{step} +{step} @@"}}'
            )
            result = f"Applied patch to {path} (1 hunk)."
            thought = f"Editing {path}."
        elif step % 13 == 6:
            call = ToolCall(call_id, "grep", '{"pattern": "parse_group", "path": "src"}')
            result = "\n".join(
                f"src/app/parser.py:{40 + n}: parse_group(tokens)" for n in range(40)
            )
            thought = "Searching for the callers of parse_group."
        else:
            call = ToolCall(call_id, "read_file", f'{{"path": "{path}"}}')
            result = _file_body(path, step // 9, result_lines)
            thought = f"Reading {path}."
        messages.append(Message.assistant(thought, tool_calls=[call]))
        messages.append(Message.tool(call_id, result, name=call.name))
        if step and step % 40 == 0:
            note = _CJK_NOTES[(step // 40) % len(_CJK_NOTES)]
            messages.append(Message.assistant("Progress: still narrowing down the failure."))
            messages.append(Message.user(f"Any progress? Keep the public API stable. {note}"))
    messages.append(Message.assistant("The nested-parentheses bug is fixed and all tests pass."))
    return messages


class RecordingSummarizer:
    """A summarizer that records every `SummaryRequest` and answers from a script.

    Args:
        answers: Texts returned in order; the last one repeats. By default each
            answer names the call number and how many messages it was given.
        fail: An exception raised on every call instead of answering.
    """

    def __init__(self, answers: Sequence[str] = (), *, fail: BaseException | None = None) -> None:
        self.answers = list(answers)
        self.fail = fail
        self.requests: list[SummaryRequest] = []

    def __call__(self, request: SummaryRequest) -> str:
        """Record ``request`` and answer."""
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        if self.answers:
            return self.answers[min(len(self.requests), len(self.answers)) - 1]
        return (
            f"<summary>Checkpoint {len(self.requests)} ({request.kind}) of "
            f"{len(request.messages)} messages.</summary>"
        )

    @property
    def calls(self) -> int:
        """How many requests were made."""
        return len(self.requests)
