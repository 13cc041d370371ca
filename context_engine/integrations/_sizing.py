"""Sizing an engine to the runtime's model and request, shared by every adapter.

A runtime knows things about each model call that the engine cannot see in the
messages: the model's context window (a LangChain model profile's
``max_input_tokens``, a pydantic-ai profile's ``context_window``, a Strands
model's ``context_window_limit``) and the parts of the request sent beside the
messages (tool schemas, pydantic-ai's ``instructions``). `Sizing` writes both
into the engine before each call:

* the window: the adapter's explicit ``context_window`` first, else the
  runtime's model window, else the window the engine was built with;
* the threshold: a ``trigger`` like the runtime's own manager,
  ``("fraction", 0.8)`` of the window or ``("tokens", 12_000)``; without one
  the engine keeps its own reserve;
* the overhead: the tokens of the request's tool schemas and instructions,
  added to the overhead the engine was built with (which is then only for what
  the runtime cannot see).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypeAlias

from context_engine.engine import ContextEngine
from context_engine.errors import ConfigurationError

__all__ = ["Sizing", "Trigger", "mapping_int", "schema_text"]

Trigger: TypeAlias = tuple[Literal["fraction", "tokens"], float]


def _checked_trigger(trigger: object) -> Trigger | None:
    if trigger is None:
        return None
    if isinstance(trigger, tuple) and len(trigger) == 2:
        kind, value = trigger
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "fraction" and numeric and 0 < value < 1:
            return ("fraction", float(value))
        if kind == "tokens" and numeric and isinstance(value, int) and value > 0:
            return ("tokens", value)
    raise ConfigurationError(
        f"trigger must be ('fraction', f) with 0 < f < 1 or ('tokens', n) with n > 0, "
        f"got {trigger!r}"
    )


def _checked_window(context_window: object) -> int | None:
    if context_window is None:
        return None
    if isinstance(context_window, bool) or not isinstance(context_window, int):
        raise ConfigurationError(
            f"context_window must be a positive int of tokens or None, got {context_window!r}"
        )
    if context_window <= 0:
        raise ConfigurationError(f"context_window must be positive, got {context_window!r}")
    return context_window


def schema_text(schemas: Iterable[Any]) -> str:
    """Tool schemas as the JSON text a provider is sent (keys sorted, so it is stable)."""
    return json.dumps(list(schemas), sort_keys=True, default=str, ensure_ascii=False)


class _Base:
    """What the engine was built with: restored under every runtime reading."""

    def __init__(self, engine: ContextEngine) -> None:
        self.window = engine.context_window
        self.overhead = engine.overhead_tokens


class Sizing:
    """Writes the runtime's window, trigger and request overhead into an engine per call.

    Args:
        context_window: The window in tokens; None reads the runtime's model
            (falling back to the engine's own window when the runtime does not
            know it). An explicit value always wins.
        trigger: ``("fraction", f)``: compact above ``f`` of the window;
            ``("tokens", n)``: above ``n`` tokens. None keeps the engine's reserve.
        count_request: Count the request's tool schemas and instructions into
            the engine's overhead on every call.

    Raises:
        ConfigurationError: a setting is of the wrong type or out of range.
    """

    def __init__(
        self,
        context_window: int | None = None,
        trigger: Trigger | None = None,
        *,
        count_request: bool = True,
    ) -> None:
        if not isinstance(count_request, bool):
            raise ConfigurationError(f"count_request must be True or False, got {count_request!r}")
        self.context_window = _checked_window(context_window)
        self.trigger = _checked_trigger(trigger)
        self.count_request = count_request
        self._bases: weakref.WeakKeyDictionary[ContextEngine, _Base] = weakref.WeakKeyDictionary()
        self._counted: dict[tuple[str, str], int] = {}

    def window_for(self, engine: ContextEngine, model_window: object) -> int:
        """The window this call is sized to: explicit, else the model's, else the engine's."""
        if self.context_window is not None:
            return self.context_window
        if (
            isinstance(model_window, int)
            and not isinstance(model_window, bool)
            and model_window > 0
        ):
            return model_window
        return self._base(engine).window

    def apply(
        self,
        engine: ContextEngine,
        *,
        model_window: object = None,
        request_text: Iterable[str] = (),
    ) -> None:
        """Size ``engine`` for one call.

        Args:
            engine: The conversation's engine.
            model_window: The runtime's window for the model serving this call,
                or None when it does not know it.
            request_text: What the request carries beside the messages (tool
                schemas as `schema_text`, instructions), counted into the overhead.

        Raises:
            ConfigurationError: a ``("tokens", n)`` trigger at or above the window.
        """
        base = self._base(engine)
        window = self.window_for(engine, model_window)
        if engine.context_window != window:
            engine.context_window = window
        if self.trigger is not None:
            engine.reserve_tokens = self._reserve(window)
        overhead = base.overhead
        if self.count_request:
            overhead += sum(self._count(engine, text) for text in request_text if text)
        if engine.overhead_tokens != overhead:
            engine.overhead_tokens = overhead

    def _base(self, engine: ContextEngine) -> _Base:
        base = self._bases.get(engine)
        if base is None:
            base = self._bases[engine] = _Base(engine)
        return base

    def _reserve(self, window: int) -> int:
        assert self.trigger is not None
        kind, value = self.trigger
        threshold = int(window * value) if kind == "fraction" else int(value)
        if threshold >= window:
            raise ConfigurationError(
                f"trigger {self.trigger!r} is at or above the {window}-token window; "
                "use a lower token count or a fraction"
            )
        return max(1, window - threshold)

    def _count(self, engine: ContextEngine, text: str) -> int:
        key = (engine.counter.key, text)
        tokens = self._counted.get(key)
        if tokens is None:
            if len(self._counted) >= 64:  # a few tool sets per app; never grows with the calls
                self._counted.clear()
            tokens = self._counted[key] = engine.counter.count_text(text)
        return tokens


def mapping_int(source: object, key: str) -> int | None:
    """``source[key]`` when ``source`` is a mapping holding a positive int there, else None."""
    if not isinstance(source, Mapping):
        return None
    value = source.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
