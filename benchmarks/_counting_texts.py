"""Kinds of text for `counting_accuracy.py`: the corpus by kind, written and synthetic samples."""

# The written CJK samples use their own punctuation on purpose.
# ruff: noqa: RUF001

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterable
from typing import Any

from context_engine.messages import Message, TextBlock, ThinkingBlock, ToolCall
from context_engine.tokens import HeuristicCounter, TiktokenCounter

CJK_RANGES = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xAC00, 0xD7AF))
PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def has_cjk(text: str) -> bool:
    return any(lo <= ord(c) <= hi for c in text for lo, hi in CJK_RANGES)


def kind_of(text: str) -> str:
    """``json``, ``code`` or ``latin`` (prose), by what the text is made of."""
    if text[:1] in "{[" and _parses_as_json(text):
        return "json"
    visible = [c for c in text if not c.isspace()]
    punctuation = sum(c in PUNCTUATION for c in visible)
    return "code" if visible and punctuation / len(visible) >= 0.1 else "latin"


def _parses_as_json(text: str) -> bool:
    try:
        return isinstance(json.loads(text), (dict, list))
    except ValueError:
        return False


def split_kinds(text: str, kind: str) -> Iterable[tuple[str, str]]:
    """Lines holding CJK as ``cjk`` (the corpus mixes it into English), the rest as is."""
    if kind == "json" or not has_cjk(text):
        yield kind, text
        return
    lines = text.splitlines(keepends=True)
    yield "cjk", "".join(line for line in lines if has_cjk(line))
    rest = "".join(line for line in lines if not has_cjk(line))
    if rest:
        yield kind, rest


def texts_of(messages: Iterable[Message]) -> Iterable[tuple[str, str]]:
    """``(kind, text)`` of every text block, thought, tool name and argument string."""
    for message in messages:
        for block in message.content:
            if isinstance(block, TextBlock):
                yield from split_kinds(block.text, kind_of(block.text))
            elif isinstance(block, ThinkingBlock):
                yield from split_kinds(block.thinking, kind_of(block.thinking))
            elif isinstance(block, ToolCall):
                yield "code", block.name
                yield "json", block.arguments


def kind_errors(
    texts: Iterable[tuple[str, str]], exact: TiktokenCounter, heuristic: HeuristicCounter
) -> list[dict[str, Any]]:
    """Per kind of text: how many texts, their cl100k and heuristic totals, the error."""
    totals: dict[str, list[int]] = {}
    for kind, text in texts:
        row = totals.setdefault(kind, [0, 0, 0, 0])
        row[0] += 1
        row[1] += len(text)
        row[2] += exact.count_text(text)
        row[3] += heuristic.count_text(text)
    return [
        {
            "kind": kind,
            "texts": n,
            "chars": chars,
            "tokens": tokens,
            "heuristic": guess,
            "error": round(guess / tokens - 1, 4),
        }
        for kind, (n, chars, tokens, guess) in sorted(totals.items())
        if tokens
    ]


# Written for this benchmark; the synthetic strings are generated from a fixed seed.
WRITTEN = {
    "chinese": "我们的代理在运行很长的会话时需要压缩上下文。请检查计数器在中文文本上的误差，"
    "并确认估计值不会低于真实的令牌数量，否则请求可能超出模型的上下文窗口。",
    "japanese": "長いセッションでは、エージェントは古いツールの結果を要約してから次の呼び出しを"
    "行います。カウンターが日本語を少なく数えると、要求がコンテキストの上限を超えてしまいます。",
    "korean": "긴 세션에서는 에이전트가 오래된 도구 결과를 정리한 다음 모델을 호출합니다. "
    "토큰 수를 적게 세면 요청이 컨텍스트 한도를 넘을 수 있습니다.",
    "english": "The engine keeps the whole transcript and sends the model a view that fits the "
    "window. When the estimate is too low, the provider rejects the request; when it is too "
    "high, the engine compacts a little earlier than it needed to.",
}


def synthetic_samples(seed: int = 7) -> dict[str, str]:
    """Strings that defeat word-based estimates: random bytes, ids, numbers, paths, markup."""
    rng = random.Random(seed)
    hexdigits = "0123456789abcdef"
    return {
        "base64": base64.b64encode(rng.randbytes(3000)).decode(),
        "hex": "".join(rng.choice(hexdigits) for _ in range(4000)),
        "numbers": " ".join(f"{rng.uniform(-1e3, 1e3):.6f}" for _ in range(500)),
        "paths": "\n".join(
            f"/usr/lib/python3.11/site-packages/pkg_{rng.randrange(99)}/mod_{rng.randrange(99)}.py"
            for _ in range(100)
        ),
        "indented-code": "\n".join(
            " " * rng.choice((4, 8, 12)) + rng.choice(("pass", "return x", "x += 1"))
            for _ in range(300)
        ),
        "markdown-table": "\n".join(
            "| " + " | ".join(f"cell{rng.randrange(99)}" for _ in range(6)) + " |"
            for _ in range(100)
        ),
        "emoji": "".join(rng.choice("😀🎉🚀✅👍🔥💡") for _ in range(500)),
    }


def sample_errors(exact: TiktokenCounter, heuristic: HeuristicCounter) -> list[dict[str, Any]]:
    samples = {**WRITTEN, **synthetic_samples()}
    return [
        {
            "sample": name,
            "tokens": exact.count_text(text),
            "heuristic": heuristic.count_text(text),
            "error": round(heuristic.count_text(text) / exact.count_text(text) - 1, 4),
        }
        for name, text in samples.items()
    ]
