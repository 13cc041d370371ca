"""Context assembly: sources besides the transcript, budgeted, ruled and traced.

`Transform`s rewrite the transcript first (redaction, normalisation);
`ContextProvider`s contribute messages or `Item`s to every call; a
`BudgetProfile` splits the room among them; `Rule`s include, boost or
exclude items; every decision lands in the call's `AssemblyTrace`. See
docs/assembly.md.
"""

from context_engine.assembly.assembler import Assembler, Assembly
from context_engine.assembly.budget import (
    Allocation,
    BudgetProfile,
    ProfileRegistry,
)
from context_engine.assembly.placement import is_provided, strip_provided
from context_engine.assembly.provider import (
    ContextProvider,
    FetchingProvider,
    Item,
    Placement,
    ProviderOutput,
    ProviderRequest,
    Share,
)
from context_engine.assembly.providers import (
    CallableProvider,
    FileProvider,
    HeaderProvider,
    InMemoryRetriever,
    RetrievalProvider,
    Retriever,
    SessionMemoryProvider,
    StaticProvider,
)
from context_engine.assembly.replay import replay
from context_engine.assembly.rules import Boost, Rule, load_rules
from context_engine.assembly.trace import Action, AssemblyTrace, Decision, DeltaKind
from context_engine.assembly.transform import Transform

__all__ = [
    "Action",
    "Allocation",
    "Assembler",
    "Assembly",
    "AssemblyTrace",
    "Boost",
    "BudgetProfile",
    "CallableProvider",
    "ContextProvider",
    "Decision",
    "DeltaKind",
    "FetchingProvider",
    "FileProvider",
    "HeaderProvider",
    "InMemoryRetriever",
    "Item",
    "Placement",
    "ProfileRegistry",
    "ProviderOutput",
    "ProviderRequest",
    "RetrievalProvider",
    "Retriever",
    "Rule",
    "SessionMemoryProvider",
    "Share",
    "StaticProvider",
    "Transform",
    "is_provided",
    "load_rules",
    "replay",
    "strip_provided",
]
