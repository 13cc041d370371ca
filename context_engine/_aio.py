"""Async helpers: calling user callables that may be sync or async, and the blocking runner."""

from __future__ import annotations

import asyncio
import atexit
import inspect
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from context_engine.errors import BlockingCallInEventLoopError

logger = logging.getLogger("context_engine")

T = TypeVar("T")


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable, else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


async def call_hook(label: str, hook: Callable[..., Any] | None, *args: Any) -> Any:
    """Call a user hook (sync or async); log and swallow anything it raises.

    Hooks observe the engine; a broken hook must never break the LLM call it
    observes, so its exception is logged with its traceback and None returned.
    """
    if hook is None:
        return None
    try:
        return await maybe_await(hook(*args))
    except Exception:
        logger.exception("hook=<%s> | hook raised; ignored", label)
        return None


class _LoopHolder:
    """Owns one event loop per thread and closes it when the thread's data goes away."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def __del__(self) -> None:
        if not self.loop.is_closed():
            self.loop.close()


_local = threading.local()
_main_holder: list[_LoopHolder] = []


def _close_main_loop() -> None:
    for holder in _main_holder:
        holder.loop.close()


atexit.register(_close_main_loop)


def in_blocking_call() -> bool:
    """Whether the running event loop is the private one of a blocking twin (`run_blocking`).

    That loop runs only while a blocking call does: a task left on it would
    stand still between calls.
    """
    holder: _LoopHolder | None = getattr(_local, "holder", None)
    if holder is None:
        return False
    try:
        return asyncio.get_running_loop() is holder.loop
    except RuntimeError:
        return False


def run_blocking(coroutine_factory: Callable[[], Coroutine[Any, Any, T]], method: str) -> T:
    """Run an engine coroutine to completion from synchronous code.

    A private event loop per thread is reused across calls (creating one per
    call would cost more than the engine's whole hot path).

    Raises:
        BlockingCallInEventLoopError: when called from a thread whose event loop
            is running; the message names the coroutine to await instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise BlockingCallInEventLoopError(
            f"{method}_sync() was called inside a running event loop; "
            f"use `await engine.{method}(...)` instead"
        )
    holder: _LoopHolder | None = getattr(_local, "holder", None)
    if holder is None or holder.loop.is_closed():
        holder = _LoopHolder()
        _local.holder = holder
        if threading.current_thread() is threading.main_thread():
            _main_holder[:] = [holder]
    return holder.loop.run_until_complete(coroutine_factory())
