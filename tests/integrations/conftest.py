"""Fixtures of the runtime agent-loop tests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from context_engine.archive import SQLiteArchive


@pytest.fixture
def archive_file(tmp_path: Path) -> Iterator[Callable[[], SQLiteArchive]]:
    """Opens the archive file a test's "processes" share: a new store object on every call.

    A second process has nothing of the first but the file; every store is closed at the end.
    """
    stores: list[SQLiteArchive] = []

    def open_store() -> SQLiteArchive:
        stores.append(SQLiteArchive(tmp_path / "context.db"))
        return stores[-1]

    yield open_store
    for store in stores:
        asyncio.run(store.close())
