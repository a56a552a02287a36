"""The Lua scripts of the Redis log store (``shards.storage.redis``): each one atomic on the
keys of one partition (one hash tag, so one Redis Cluster slot), named, and sent by its SHA
once loaded. What each takes and answers is written above it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    source: str

    @property
    def sha(self) -> str:
        return hashlib.sha1(self.source.encode()).hexdigest()


# KEYS: epoch, seq, log   ARGV: epoch, data   -> {1, offset} | {0, current epoch}
APPEND = Script(
    "append",
    """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < 1 or current ~= tonumber(ARGV[1]) then
  return {0, current}
end
local offset = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
-- XADD before advancing seq: scripts are not rolled back, and a failing XADD must leave
-- nothing behind.
redis.call('XADD', KEYS[3], string.format('%d-0', offset), 'e', ARGV[1], 'd', ARGV[2])
redis.call('SET', KEYS[2], string.format('%d', offset))
return {1, offset}
""",
)

# KEYS: epoch, lease   ARGV: owner, lease_ms, only_if_free ('1'/'0')  -> new epoch | 0
ACQUIRE = Script(
    "acquire",
    """
if ARGV[3] == '1' then
  local holder = redis.call('HGET', KEYS[2], 'owner')
  if holder and holder ~= ARGV[1] then
    return 0
  end
end
local epoch = redis.call('INCR', KEYS[1])
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'owner', ARGV[1], 'epoch', epoch)
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return epoch
""",
)

# KEYS: epoch, lease   ARGV: owner, epoch, lease_ms  -> 1 | 0
RENEW = Script(
    "renew",
    """
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return 0
end
local lease = redis.call('HMGET', KEYS[2], 'owner', 'epoch')
if lease[1] ~= ARGV[1] or lease[2] ~= ARGV[2] then
  return 0
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
""",
)

# KEYS: lease   ARGV: owner, epoch
RELEASE = Script(
    "release",
    """
local lease = redis.call('HMGET', KEYS[1], 'owner', 'epoch')
if lease[1] == ARGV[1] and lease[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
end
return 0
""",
)

# KEYS: lease  -> false | {owner, epoch, pttl, seconds, microseconds}
LEASE = Script(
    "lease",
    """
local lease = redis.call('HMGET', KEYS[1], 'owner', 'epoch')
if not lease[1] then
  return false
end
local pttl = redis.call('PTTL', KEYS[1])
local now = redis.call('TIME')
return {lease[1], lease[2], pttl, now[1], now[2]}
""",
)

# KEYS: epoch, seq, snap, log, staged chunk 0..n-1
# ARGV: epoch, offset, gen, n
# -> {'ok', 0} | {'fenced', current epoch} | {'beyond', last offset}
#    | {'older', snapshot offset} | {'missing', chunk index}
# Old chunks are named from `snap` inside the script: they share its hash tag, hence its slot.
COMMIT_SNAPSHOT = Script(
    "commit_snapshot",
    """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < 1 or current ~= tonumber(ARGV[1]) then
  return {'fenced', current}
end
local offset = tonumber(ARGV[2])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if offset > last then
  return {'beyond', last}
end
local old = redis.call('HMGET', KEYS[3], 'offset', 'gen', 'chunks')
if old[1] and tonumber(old[1]) > offset then
  return {'older', tonumber(old[1])}
end
for i = 5, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    return {'missing', i - 5}
  end
end
for i = 5, #KEYS do
  redis.call('PERSIST', KEYS[i])
end
redis.call('HSET', KEYS[3], 'offset', ARGV[2], 'epoch', ARGV[1], 'gen', ARGV[3],
           'chunks', ARGV[4])
if old[2] and old[2] ~= ARGV[3] then
  for i = 0, tonumber(old[3]) - 1 do
    redis.call('DEL', KEYS[3] .. ':' .. old[2] .. ':' .. i)
  end
end
redis.call('XTRIM', KEYS[4], 'MINID', string.format('%d-0', offset + 1))
return {'ok', 0}
""",
)

# KEYS: epoch, log   ARGV: epoch, from id, count  -> {'ok', deleted} | {'fenced', current epoch}
# Deletes the last `count` entries at or after `from id`, newest first: a truncation that
# stops half-way (fenced, connection lost) leaves a shorter log that still holds its first
# corrupt entry, never a log with a hole. XDEL keeps the stream's last ID (and `seq` stays),
# so offsets are never reused.
TRUNCATE = Script(
    "truncate",
    """
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current < 1 or current ~= tonumber(ARGV[1]) then
  return {'fenced', current}
end
local page = redis.call('XREVRANGE', KEYS[2], '+', ARGV[2], 'COUNT', ARGV[3])
if #page == 0 then
  return {'ok', 0}
end
local ids = {}
for i, entry in ipairs(page) do
  ids[i] = entry[1]
end
return {'ok', redis.call('XDEL', KEYS[2], unpack(ids))}
""",
)

# KEYS: catalog   ARGV: expected version, data  -> new version | -1
CATALOG_CAS = Script(
    "catalog_cas",
    """
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then
  return -1
end
redis.call('HSET', KEYS[1], 'version', string.format('%d', version + 1), 'data', ARGV[2])
return version + 1
""",
)

ALL = (
    APPEND,
    ACQUIRE,
    RENEW,
    RELEASE,
    LEASE,
    COMMIT_SNAPSHOT,
    TRUNCATE,
    CATALOG_CAS,
)
