"""Which strategies are native, and the request options they ask for one view."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from context_engine.messages import Message
from context_engine.native.options import RequestOptions, merge_request_options

__all__ = ["is_native", "request_options_for"]


def is_native(strategy: object) -> bool:
    """Whether ``strategy`` is a `NativeStrategy` (a ``provider`` and ``request_options``)."""
    return getattr(strategy, "provider", None) is not None and callable(
        getattr(strategy, "request_options", None)
    )


def request_options_for(
    strategies: Iterable[object], view: Sequence[Message]
) -> tuple[RequestOptions, ...]:
    """The merged options of the native strategies in ``strategies`` for ``view``, one per provider.

    A native strategy is one with a ``provider`` and a ``request_options``
    method (`NativeStrategy`); a plain attribute check keeps this cheap on
    every call.
    """
    found = [strategy.request_options(view) for strategy in strategies if is_native(strategy)]  # type: ignore[attr-defined]
    if not found:
        return ()
    for index, options in enumerate(found):
        if not isinstance(options, RequestOptions):
            raise TypeError(
                f"native strategy {index} returned {type(options).__name__} from "
                "request_options(), expected RequestOptions"
            )
    return merge_request_options(found)
