"""The Lua scripts of `RedisArchive`: each runs atomically on the server.

``KEYS`` are always ``P:S:records``, ``P:S:order``, ``P:S:tools`` and
``P:sessions`` (see `context_engine.archive.redis` for the layout); ``ARGV``
differs per script.
"""

from __future__ import annotations

__all__ = ["FORGET", "PUT", "REFRESH"]

_REFRESH = """
local function refresh(ttl, session, expires)
    if ttl <= 0 then
        return
    end
    for k = 1, 3 do
        if redis.call('EXISTS', KEYS[k]) == 1 then
            redis.call('EXPIRE', KEYS[k], ttl)
        end
    end
    if redis.call('EXISTS', KEYS[1]) == 1 then
        redis.call('ZADD', KEYS[4], expires, session)
    end
end
"""

PUT = (
    _REFRESH
    + """
-- ARGV: ttl (0: none), session, expiry score, record count, then per record:
-- reference, envelope, tool-call id count, tool-call ids.
local ttl = tonumber(ARGV[1])
local count = tonumber(ARGV[4])
local i = 5
for _ = 1, count do
    local reference, envelope, tools = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
    if redis.call('HSETNX', KEYS[1], reference, envelope) == 1 then
        redis.call('RPUSH', KEYS[2], reference)
        for t = 1, tools do
            redis.call('HSET', KEYS[3], ARGV[i + 2 + t], reference)
        end
    end
    i = i + 3 + tools
end
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[2])
refresh(ttl, ARGV[2], ARGV[3])
return count
"""
)

REFRESH = (
    _REFRESH
    + """
-- ARGV: ttl, session, expiry score. Keys of a session with no records are left alone.
refresh(tonumber(ARGV[1]), ARGV[2], ARGV[3])
return 1
"""
)

FORGET = """
-- ARGV: session, then the references to delete (none: the whole session).
-- Returns how many records were deleted.
if #ARGV == 1 then
    local count = redis.call('HLEN', KEYS[1])
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[1])
    return count
end
local gone = {}
local count = 0
for i = 2, #ARGV do
    gone[ARGV[i]] = true
    count = count + redis.call('HDEL', KEYS[1], ARGV[i])
    redis.call('LREM', KEYS[2], 0, ARGV[i])
end
local tools = redis.call('HGETALL', KEYS[3])
for i = 1, #tools, 2 do
    if gone[tools[i + 1]] then
        redis.call('HDEL', KEYS[3], tools[i])
    end
end
if redis.call('HLEN', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
    redis.call('ZREM', KEYS[4], ARGV[1])
end
return count
"""
