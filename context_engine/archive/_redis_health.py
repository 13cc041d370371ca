"""Whether a Redis server keeps what `RedisArchive` writes: persistence and eviction.

Redis is an in-memory store. Without persistence (no RDB snapshots, no
append-only file) a restart loses every record; with a ``maxmemory`` limit and
any eviction policy but ``noeviction``, a full server deletes keys, archive
records included, before their time to live. Neither raises an error anywhere,
so the archive checks the server's settings when it is first used and logs a
warning for each problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["durability_problems", "read_durability_config"]

_SETTINGS = ("save", "appendonly", "maxmemory", "maxmemory-policy")


def durability_problems(config: Mapping[str, str]) -> list[str]:
    """What in the server's ``config`` (``CONFIG GET`` values) can lose records silently."""
    problems = []
    if config.get("appendonly", "no") == "no" and not config.get("save", "").strip():
        problems.append(
            "the server persists nothing (appendonly no, save ''): a restart loses every "
            "archived record; enable appendonly yes or RDB snapshots"
        )
    policy = config.get("maxmemory-policy", "noeviction")
    if config.get("maxmemory", "0") not in ("0", "") and policy != "noeviction":
        problems.append(
            f"maxmemory-policy is {policy} with a maxmemory limit: a full server evicts "
            "archived records before their TTL; use noeviction (writes then fail loudly "
            "and the engine rewrites without archiving)"
        )
    return problems


async def read_durability_config(client: Any) -> dict[str, str] | None:
    """The settings `durability_problems` reads, or None where ``CONFIG`` is refused.

    Managed services (ElastiCache, Memorystore, Upstash) often disable
    ``CONFIG GET``; their persistence is then the provider's to document.
    """
    config: dict[str, str] = {}
    for name in _SETTINGS:
        answer = await client.config_get(name)
        for key, value in answer.items():
            config[_text(key)] = _text(value)
    return config


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
