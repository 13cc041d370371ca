"""The provider chain: runs the providers of one call and places their blocks in its view.

`Assembler.assemble` asks every provider in priority order (lower first,
registration order among equals), applies the rules and caps to their items,
and returns an `Assembly`: the blocks, their tokens (which the engine counts
as overhead of the call, so the strategies fit the transcript into the room
the providers leave) and the decisions so far. After the strategies ran,
`Assembly.finish` places the blocks into the view, adds the strategies'
rewrites to the trace and reports how the prompt relates to the last one.

A provider that raises is recorded (``fail``) and skipped; the others run.
Cancellation is not caught: it stops the chain and reaches the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from context_engine.assembly.budget import Allocation, BudgetProfile
from context_engine.assembly.caps import select
from context_engine.assembly.placement import (
    Block,
    Prompt,
    delta_of,
    mark,
    newest_user,
    place,
    render_items,
    stable_hash,
)
from context_engine.assembly.provider import (
    ContextProvider,
    FetchingProvider,
    Item,
    ProviderRequest,
)
from context_engine.assembly.rules import Rule, fired
from context_engine.assembly.trace import Action, AssemblyTrace, Decision, DeltaKind
from context_engine.assembly.transform import Transform, apply_transforms, checked_transforms
from context_engine.errors import ConfigurationError
from context_engine.messages import Message
from context_engine.structure import is_user_message
from context_engine.tokens import TokenCounter

if TYPE_CHECKING:
    from context_engine.strategies.base import Removal

__all__ = ["Assembler", "Assembly", "assembler_of", "removal_decisions"]

logger = logging.getLogger(__name__)

_PLACEMENTS = ("stable", "volatile", "tail")


def checked_provider(provider: object) -> ContextProvider:
    """``provider`` if it keeps the `ContextProvider` contract; else a clear error."""
    if not isinstance(provider, ContextProvider):
        raise ConfigurationError(
            f"{provider!r} is not a ContextProvider: it needs name, priority, max_tokens, "
            "placement, share, role and an async provide(request)"
        )
    problems = []
    if not isinstance(provider.name, str) or not provider.name:
        problems.append(f"name must be a non-empty string, got {provider.name!r}")
    if isinstance(provider.priority, bool) or not isinstance(provider.priority, int):
        problems.append(f"priority must be an int, got {provider.priority!r}")
    cap = provider.max_tokens
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 0):
        problems.append(f"max_tokens must be None or an int >= 0, got {cap!r}")
    if provider.placement not in _PLACEMENTS:
        problems.append(
            f"placement must be 'stable', 'volatile' or 'tail', got {provider.placement!r}"
        )
    if problems:
        raise ConfigurationError(f"context provider {provider!r}: " + "; ".join(problems))
    return provider


class Assembler:
    """Providers, rules and a budget profile, and the last prompt (for delta reporting).

    Args:
        providers: Run in priority order on every call.
        rules: Evaluated every call against the providers' items.
        profile: Splits the room among the providers' shares; None caps each
            provider by its ``max_tokens`` only.
        transforms: Rewrite the transcript before the providers run (`Transform`).
    """

    def __init__(
        self,
        providers: Iterable[ContextProvider] = (),
        *,
        rules: Iterable[Rule] = (),
        profile: BudgetProfile | None = None,
        transforms: Iterable[Transform] = (),
    ) -> None:
        self._registered: list[ContextProvider] = []
        self.providers: tuple[ContextProvider, ...] = ()
        """The providers in the order they run."""
        for provider in providers:
            self.add(provider)
        self.rules: tuple[Rule, ...] = tuple(rules)
        self.transforms: tuple[Transform, ...] = checked_transforms(transforms)
        """Run in order over the transcript before the providers (`apply_transforms`)."""
        self.profile = profile
        self._last: Prompt | None = None
        # Last call's rendered blocks and text counts: an unchanged source keeps the
        # same message objects, so counting, comparing and caching cost nothing.
        self._rendered: dict[str, tuple[object, tuple[Message, ...]]] = {}
        self._counts: dict[tuple[str, str], int] = {}

    @property
    def active(self) -> bool:
        """Whether a call has anything to assemble (a transform or a provider)."""
        return bool(self.providers or self.transforms)

    def add(self, provider: ContextProvider) -> None:
        """Register ``provider``; it runs by its priority, after equals registered before it.

        Raises:
            ConfigurationError: ``provider`` breaks the contract, or another
                provider has its name (names key the trace and the rules).
        """
        checked = checked_provider(provider)
        if any(p.name == checked.name for p in self._registered):
            raise ConfigurationError(
                f"a context provider called {checked.name!r} is already registered; "
                "give each provider its own name"
            )
        self._registered.append(checked)
        self.providers = tuple(sorted(self._registered, key=lambda p: p.priority))

    def forget(self) -> None:
        """Forget the last prompt (the next one reports ``first``)."""
        self._last = None

    def allocation(self, transcript: Sequence[Message], room: int) -> Allocation | None:
        """The profile's split of ``room`` for ``transcript``, or None without a profile."""
        if self.profile is None:
            return None
        turns = sum(1 for message in transcript if is_user_message(message))
        has_retrieval = any(p.share == "retrieval" for p in self.providers)
        return self.profile.allocate(room, has_retrieval=has_retrieval, turns=turns)

    async def assemble(
        self,
        transcript: tuple[Message, ...],
        counter: TokenCounter,
        room: int,
        operation: str = "project",
    ) -> Assembly:
        """Run the transforms, then every provider, for one call whose threshold is ``room``.

        The transforms' output is `Assembly.transcript`: what the call works on.
        """
        transcript, transformed = await apply_transforms(self.transforms, transcript, counter)
        newest = newest_user(transcript)
        task = transcript[newest].text if newest >= 0 else ""
        allocation = self.allocation(transcript, room)
        rules = fired(self.rules, task)
        if len(self._counts) > 4_096:
            self._counts.clear()
        run = _Run(counter, rules, self._rendered, self._counts)
        for provider in self.providers:
            request = ProviderRequest(
                transcript=transcript,
                task=task,
                operation=operation,
                max_tokens=_cap(provider, allocation),
                provided=run.provided,
            )
            await run.ask(provider, request)
        return Assembly(
            assembler=self,
            transcript=transcript,
            blocks=tuple(run.blocks),
            tokens=sum(counter.count_message(m) for m in run.provided),
            decisions=transformed + tuple(run.decisions),
            outputs=dict(run.outputs),
            counter=counter,
        )

    def remember(
        self, view: tuple[Message, ...], blocks: Sequence[Block], counter: TokenCounter
    ) -> tuple[DeltaKind, int]:
        """Compare ``view`` with the last prompt, then make it the last prompt."""
        current = stable_hash(view, blocks)
        delta, self._last = delta_of(view, current, self._last, counter.count_message)
        return delta.kind, delta.reused_tokens


def _cap(provider: ContextProvider, allocation: Allocation | None) -> int | None:
    caps = [provider.max_tokens] if provider.max_tokens is not None else []
    if allocation is not None and provider.share is not None:
        caps.append(allocation.share(provider.share))
    return min(caps) if caps else None


@attrs.define
class _Run:
    """One call's pass over the providers."""

    counter: TokenCounter
    rules: tuple[Rule, ...]
    rendered: dict[str, tuple[object, tuple[Message, ...]]]
    counts: dict[tuple[str, str], int]
    blocks: list[Block] = attrs.field(factory=list)
    decisions: list[Decision] = attrs.field(factory=list)
    outputs: dict[str, tuple[Item | Message, ...]] = attrs.field(factory=dict)
    provided: tuple[Message, ...] = ()
    pinned: set[str] = attrs.field(factory=set)

    def fail(self, source: str, action: Action, reason: str) -> None:
        self.decisions.append(
            Decision(source=source, item="", tokens=0, action=action, reason=reason)
        )

    async def ask(self, provider: ContextProvider, request: ProviderRequest) -> None:
        name = provider.name
        try:
            output = await provider.provide(request)
        except Exception as exc:  # a broken source must not take the call down
            logger.warning("provider=<%s> | provider failed; skipped: %r", name, exc)
            self.fail(name, "fail", f"{type(exc).__name__}: {exc}")
            output = None
        items = list(output) if output is not None else []
        if all(isinstance(i, Item) for i in items):
            pins = await self._pins(provider, [i for i in items if isinstance(i, Item)])
            self._items(provider, [i for i in items if isinstance(i, Item)], pins, request)
        elif all(isinstance(m, Message) for m in items):
            self._messages(provider, [m for m in items if isinstance(m, Message)], request)
        else:
            kinds = sorted({type(i).__name__ for i in items})
            self.fail(name, "fail", f"returned {', '.join(kinds)}: expected Messages or Items")

    async def _pins(self, provider: ContextProvider, items: list[Item]) -> list[tuple[Item, str]]:
        """The items fired rules always include that this provider has or can fetch."""
        pins: list[tuple[Item, str]] = []
        by_id = {item.id: item for item in items}
        for rule in self.rules:
            if not rule.applies_to(provider.name):
                continue
            for item_id in rule.always_include:
                if item_id in self.pinned:
                    continue
                item = by_id.get(item_id)
                if item is None and isinstance(provider, FetchingProvider):
                    try:
                        item = await provider.fetch(item_id)
                    except Exception as exc:  # recorded like a failed provider
                        self.fail(provider.name, "fail", f"fetch {item_id}: {exc!r}")
                if item is not None:
                    self.pinned.add(item_id)
                    pins.append((item, rule.name))
        return pins

    def _items(
        self,
        provider: ContextProvider,
        items: list[Item],
        pins: list[tuple[Item, str]],
        request: ProviderRequest,
    ) -> None:
        selection = select(
            provider.name, items, pins, self.rules, request.max_tokens, self.count_text
        )
        self.decisions.extend(selection.decisions)
        self.outputs[provider.name] = (*(item for item, _ in pins), *items)
        key = (provider.role, tuple(item.text for item in selection.kept))
        self._add(provider, key, lambda: render_items(provider.name, provider.role, selection.kept))

    def count_text(self, text: str) -> int:
        """Tokens of ``text``, remembered across calls (a static source is counted once)."""
        key = (self.counter.key, text)
        tokens = self.counts.get(key)
        if tokens is None:
            tokens = self.counts[key] = self.counter.count_text(text)
        return tokens

    def _messages(
        self, provider: ContextProvider, messages: list[Message], request: ProviderRequest
    ) -> None:
        name, cap, used = provider.name, request.max_tokens, 0
        kept = []
        self.outputs[name] = tuple(messages)
        for index, message in enumerate(messages):
            tokens = self.counter.count_message(message)
            item = f"{name}[{index}]"
            if cap is not None and used + tokens > cap:
                reason = f"over the source's cap of {cap} tokens"
                self.decisions.append(
                    Decision(source=name, item=item, tokens=tokens, action="cap", reason=reason)
                )
                continue
            used += tokens
            kept.append(message)
            self.decisions.append(Decision(source=name, item=item, tokens=tokens, action="include"))
        self._add(provider, tuple(kept), lambda: tuple(mark(m, name) for m in kept))

    def _add(
        self, provider: ContextProvider, key: object, render: Callable[[], tuple[Message, ...]]
    ) -> None:
        """Add the provider's block: last call's messages when they are the same."""
        cached = self.rendered.get(provider.name)
        if cached is not None and cached[0] == key:
            messages = cached[1]
        else:
            messages = render()
            self.rendered[provider.name] = (key, messages)
        if messages:
            self.blocks.append(Block(provider.name, provider.placement, provider.role, messages))
            self.provided += messages


@attrs.frozen(kw_only=True)
class Assembly:
    """One call's provider blocks, before and after they are placed.

    Attributes:
        transcript: The transcript after the transforms (the caller's when there are none).
        blocks: Each provider's messages and placement, in run order.
        tokens: Tokens of all blocks: the engine counts them as overhead.
        decisions: The providers' decisions (the strategies' come in `finish`).
        outputs: What each provider returned (for `replay`).
    """

    assembler: Assembler = attrs.field(repr=False, eq=False)
    transcript: tuple[Message, ...] = attrs.field(repr=False)
    blocks: tuple[Block, ...]
    tokens: int
    decisions: tuple[Decision, ...]
    outputs: Mapping[str, tuple[Item | Message, ...]] = attrs.field(repr=False)
    counter: TokenCounter = attrs.field(repr=False, eq=False)

    def finish(
        self, view: tuple[Message, ...], strategy_decisions: tuple[Decision, ...] = ()
    ) -> tuple[tuple[Message, ...], AssemblyTrace]:
        """Place the blocks into ``view`` (what the strategies made); the view and its trace."""
        placed = place(view, self.blocks)
        kind, reused = self.assembler.remember(placed, self.blocks, self.counter)
        trace = AssemblyTrace(
            decisions=self.decisions + strategy_decisions,
            placements=tuple((b.source, b.placement, b.role) for b in self.blocks),
            provided_tokens=self.tokens,
            delta=kind,
            reused_tokens=reused,
        )
        return placed, trace


_REASONS: dict[str, str] = {
    "clear": "tool result replaced by a placeholder to fit the window",
    "trim": "text shortened, with a marker, to fit the window",
    "summary": "messages replaced by a checkpoint to fit the window",
    "truncate": "messages dropped by the last resort to fit the window",
}


def removal_decisions(
    removed: Sequence[Removal], counter: TokenCounter, checkpoint: bool, archiving: bool
) -> tuple[Decision, ...]:
    """The strategies' rewrites of the transcript as decisions (one per removal).

    A removed range is a ``summary`` when the call wrote a checkpoint, else a
    ``truncate``; ``reference`` is set when the engine archives originals.
    """
    decisions = []
    for removal in removed:
        kind, originals = removal.kind, removal.originals
        action: Action = "summary" if checkpoint else "truncate"
        if kind == "tool_result":
            action = "clear"
        elif kind == "text":
            action = "trim"
        first = originals[0] if originals else None
        if first is not None and first.tool_call_id:
            item = first.tool_call_id
        else:
            item = f"{len(originals)} message{'s' if len(originals) != 1 else ''}"
        decisions.append(
            Decision(
                source="transcript",
                item=item,
                tokens=sum(map(counter.count_message, originals)),
                action=action,
                reason=_REASONS[action],
                reference=removal.reference if archiving else None,
            )
        )
    return tuple(decisions)


def assembler_of(
    providers: Iterable[ContextProvider] | Assembler, transforms: Iterable[Transform]
) -> Assembler:
    """The engine's assembler from its ``providers=`` and ``transforms=`` settings."""
    if not isinstance(providers, Assembler):
        return Assembler(providers, transforms=transforms)
    if checked_transforms(transforms):
        raise ConfigurationError(
            "providers= is an Assembler: give it the transforms (Assembler(..., transforms=...)) "
            "instead of passing transforms= to the engine"
        )
    return providers
