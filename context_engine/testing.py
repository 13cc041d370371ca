"""Test doubles for users testing their own agents with context-engine.

Nothing here touches the network or needs a tokenizer download.
"""

from __future__ import annotations

import math

from context_engine.tokens import _CachingCounter

__all__ = ["FixedTokenCounter"]


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
