"""context-engine: keeps an agent's prompt under the model's context window."""

from importlib.metadata import PackageNotFoundError, version

from context_engine.archive.base import Archive
from context_engine.assembly import (
    AssemblyTrace,
    BudgetProfile,
    ContextProvider,
    Decision,
    Item,
    ProviderRequest,
    Rule,
)
from context_engine.cache_cost import CacheEstimate, RewriteCost
from context_engine.commands import CompactCommand, parse_compact_command
from context_engine.compact_tool import CompactTool, CompactToolResult
from context_engine.engine import CompactResult, ContextEngine, Projection, RecoveryResult
from context_engine.errors import (
    ArchiveCodecError,
    ArchiveError,
    BlockingCallInEventLoopError,
    CompactionError,
    CompactionRefusedError,
    ConfigurationError,
    ContextEngineError,
    InvalidMessageError,
    RecallError,
    RuleFileError,
    SummarizerError,
    SummaryTimeoutError,
    TranscriptFormatError,
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
from context_engine.overflow import is_context_overflow
from context_engine.pricing import CachePricing
from context_engine.redact import Redactor
from context_engine.strategies.base import Budget, Removal, StrategyResult
from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.request import Summarizer, SummaryRequest
from context_engine.tokens import (
    HeuristicCounter,
    TiktokenCounter,
    TokenCounter,
    UsageEstimate,
    resolve_counter,
)
from context_engine.turn import (
    CompactStep,
    ModelCallStep,
    ProjectStep,
    RecoverStep,
    TurnResult,
    TurnStep,
    advance_turn,
    run_turn,
    run_turn_sync,
    turn_flow,
)

try:
    __version__ = version("context-engine")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "Archive",
    "ArchiveCodecError",
    "ArchiveError",
    "AssemblyTrace",
    "BlockingCallInEventLoopError",
    "Budget",
    "BudgetProfile",
    "CacheEstimate",
    "CachePricing",
    "CompactCommand",
    "CompactResult",
    "CompactStep",
    "CompactTool",
    "CompactToolResult",
    "CompactionError",
    "CompactionRefusedError",
    "ConfigurationError",
    "ContextEngine",
    "ContextEngineError",
    "ContextProvider",
    "ContextSummary",
    "ContextUsage",
    "Decision",
    "ExtractiveSummarizer",
    "HeuristicCounter",
    "ImageBlock",
    "InvalidMessageError",
    "Item",
    "Message",
    "ModelCallStep",
    "ProjectStep",
    "Projection",
    "ProviderRequest",
    "RecallError",
    "RecoverStep",
    "RecoveryResult",
    "Redactor",
    "Removal",
    "RewriteCost",
    "RewriteEvent",
    "RewriteStep",
    "Rule",
    "RuleFileError",
    "Snapshot",
    "StrategyResult",
    "Summarizer",
    "SummarizerError",
    "SummaryInfo",
    "SummaryRequest",
    "SummaryTimeoutError",
    "TextBlock",
    "ThinkingBlock",
    "TiktokenCounter",
    "TokenCounter",
    "ToolCall",
    "TranscriptFormatError",
    "TurnResult",
    "TurnStep",
    "Usage",
    "UsageEstimate",
    "__version__",
    "advance_turn",
    "is_context_overflow",
    "parse_compact_command",
    "resolve_counter",
    "run_turn",
    "run_turn_sync",
    "turn_flow",
]
