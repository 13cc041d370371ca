"""Native backends: the provider manages the context on its server.

See `context_engine.native.strategies` for the strategies and
`context_engine.native.options` for how their request options reach the SDK call.
The explicit compaction calls are `AnthropicCompactCall` (here) and
`context_engine.native.openai_compact.OpenAICompactCall` (its own module: it
needs the ``openai-agents`` extra for the Responses item converter).
"""

from context_engine.native.anthropic_compact import AnthropicCompactCall
from context_engine.native.checkpoint import carries_native_checkpoint, newest_native_checkpoint
from context_engine.native.options import (
    COMPACT_CALL_BETA,
    NativeProvider,
    RequestOptions,
    apply_request_options,
    merge_request_options,
)
from context_engine.native.strategies import (
    COMPACTION_BETA,
    CONTEXT_MANAGEMENT_BETA,
    AnthropicClearThinking,
    AnthropicClearToolUses,
    AnthropicCompaction,
    NativeStrategy,
    OpenAICompaction,
)

__all__ = [
    "COMPACTION_BETA",
    "COMPACT_CALL_BETA",
    "CONTEXT_MANAGEMENT_BETA",
    "AnthropicClearThinking",
    "AnthropicClearToolUses",
    "AnthropicCompactCall",
    "AnthropicCompaction",
    "NativeProvider",
    "NativeStrategy",
    "OpenAICompaction",
    "RequestOptions",
    "apply_request_options",
    "carries_native_checkpoint",
    "merge_request_options",
    "newest_native_checkpoint",
]
