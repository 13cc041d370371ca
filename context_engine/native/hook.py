"""The engine's hook: the request options of a pipeline's native strategies for one result."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

import attrs

from context_engine.messages import Message
from context_engine.native.options import RequestOptions, merge_request_options
from context_engine.results import CompactResult, Projection

__all__ = ["request_options_for", "with_request_options"]

_Result = TypeVar("_Result", bound=Projection | CompactResult)


def request_options_for(
    strategies: Iterable[object], view: Sequence[Message]
) -> tuple[RequestOptions, ...]:
    """The merged options of the native strategies in ``strategies`` for ``view``, one per provider.

    A native strategy is one with a ``provider`` and a ``request_options``
    method (`NativeStrategy`); a plain attribute check keeps this cheap on
    every call.
    """
    found = [
        ask(view)
        for strategy in strategies
        if getattr(strategy, "provider", None) is not None
        and callable(ask := getattr(strategy, "request_options", None))
    ]
    if not found:
        return ()
    for index, options in enumerate(found):
        if not isinstance(options, RequestOptions):
            raise TypeError(
                f"native strategy {index} returned {type(options).__name__} from "
                "request_options(), expected RequestOptions"
            )
    return merge_request_options(found)


def with_request_options(result: _Result, strategies: Iterable[object]) -> _Result:
    """``result`` carrying the options of ``strategies``' native ones for its view."""
    options = request_options_for(strategies, result.messages)
    return attrs.evolve(result, request_options=options) if options else result
