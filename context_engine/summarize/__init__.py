"""Everything the checkpoint strategies need to talk to a summarizer.

Provider summarizers live in `context_engine.summarize.openai` and
`context_engine.summarize.anthropic`, the agent runtimes' own models in
`context_engine.summarize.langchain`, `.pydantic_ai`, `.strands` and
`.openai_agents` (optional extras); they are not imported here so that this
package works without their clients installed.
"""

from context_engine.summarize.extractive import ExtractiveSummarizer
from context_engine.summarize.pinned import Pinned
from context_engine.summarize.prompts import DEFAULT_PROMPTS, SummaryPrompts, build_request
from context_engine.summarize.rehydrate import Rehydration
from context_engine.summarize.request import (
    Summarizer,
    SummaryKind,
    SummaryReason,
    SummaryRequest,
    parse_summary_text,
)

__all__ = [
    "DEFAULT_PROMPTS",
    "ExtractiveSummarizer",
    "Pinned",
    "Rehydration",
    "Summarizer",
    "SummaryKind",
    "SummaryPrompts",
    "SummaryReason",
    "SummaryRequest",
    "build_request",
    "parse_summary_text",
]
