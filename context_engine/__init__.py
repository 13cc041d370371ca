"""context-engine: keeps an agent's prompt under the model's context window."""

from importlib.metadata import PackageNotFoundError, version

from context_engine.engine import CommitResult, ContextEngine, Projection, RecoveryResult
from context_engine.errors import (
    BlockingCallInEventLoopError,
    CompactionError,
    ConfigurationError,
    ContextEngineError,
    InvalidMessageError,
    SummarizerError,
)
from context_engine.events import ContextUsage, RewriteEvent, RewriteStep, Snapshot, SummaryInfo
from context_engine.messages import (
    ContextSummary,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolCall,
    Usage,
)
from context_engine.strategies.base import Budget, StrategyResult
from context_engine.tokens import (
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    UsageEstimate,
    resolve_counter,
)

try:
    __version__ = version("context-engine")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "BlockingCallInEventLoopError",
    "Budget",
    "CommitResult",
    "CompactionError",
    "ConfigurationError",
    "ContextEngine",
    "ContextEngineError",
    "ContextSummary",
    "ContextUsage",
    "HeuristicCounter",
    "ImageBlock",
    "InvalidMessageError",
    "Message",
    "Projection",
    "RecoveryResult",
    "RewriteEvent",
    "RewriteStep",
    "Snapshot",
    "StrategyResult",
    "SummarizerError",
    "SummaryInfo",
    "TextBlock",
    "ThinkingBlock",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "Usage",
    "UsageEstimate",
    "__version__",
    "resolve_counter",
]
