"""`ByteLRU` keeps recent entries while their sizes fit its byte bound."""

from __future__ import annotations

import pytest

from context_engine._lru import ByteLRU


def test_held_bytes_never_exceed_the_bound() -> None:
    """Entries past the bound push out the least recently used ones."""
    lru: ByteLRU[str] = ByteLRU(1_000)
    for n in range(50):
        lru.put(f"key {n}", f"value {n}", 300)
        assert lru.held_bytes <= 1_000
    assert lru.held_bytes == 900
    assert lru.get("key 49") == "value 49"
    assert lru.get("key 46") is None


def test_a_recently_read_entry_outlives_older_ones() -> None:
    """Reading an entry makes it the last to be dropped."""
    lru: ByteLRU[int] = ByteLRU(300)
    for n in range(3):
        lru.put(n, n, 100)
    assert lru.get(0) == 0
    lru.put(3, 3, 100)
    assert lru.get(0) == 0
    assert lru.get(1) is None


def test_an_entry_larger_than_the_bound_is_not_kept() -> None:
    """One oversized value is computed by the caller but never held."""
    lru: ByteLRU[str] = ByteLRU(100)
    lru.put("small", "s", 50)
    lru.put("huge", "h" * 1_000, 1_001)
    assert lru.get("huge") is None
    assert lru.get("small") == "s"
    assert lru.held_bytes == 50


def test_putting_a_key_again_replaces_its_size() -> None:
    """A key counts once, with its latest size."""
    lru: ByteLRU[str] = ByteLRU(1_000)
    lru.put("k", "a", 400)
    lru.put("k", "b", 100)
    assert lru.held_bytes == 100
    assert lru.get("k") == "b"


@pytest.mark.parametrize("bound", [-1, True, 1.5], ids=["negative", "bool", "float"])
def test_a_bad_bound_is_refused(bound: object) -> None:
    """The bound must be a non-negative int."""
    with pytest.raises(ValueError, match="max_bytes must be an int >= 0"):
        ByteLRU(bound)  # type: ignore[arg-type]
