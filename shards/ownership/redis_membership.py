"""The shard registry in Redis (the same server and key prefix as the log store).

Two keys under one hash tag, so Redis Cluster keeps them in one slot and one script can
update both::

    {prefix}:{members}:info     hash   member id -> JSON (owner, address, partition states)
    {prefix}:{members}:expiry   zset   member id -> expiry (ms, the server's clock)

Every operation is one Lua script that reads the server's ``TIME``, so expiry never depends
on shard clocks. Scripts are idempotent, so redis-py may resend them after ``NOSCRIPT``.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from shards.ownership.membership import Member, Membership, RegistrationConflict
from shards.storage.redis import CONNECT_TIMEOUT_S, parse_redis_url

__all__ = ["RedisMembership"]

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: info, expiry   ARGV: member id, owner, payload, ttl ms
# -> {1, '', 0} | {0, holder, ms until the holder's entry expires}
_HEARTBEAT = (
    _NOW
    + """
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if expiry and tonumber(expiry) > now then
  local current = redis.call('HGET', KEYS[1], ARGV[1])
  if current then
    local holder = cjson.decode(current)['owner']
    if holder ~= ARGV[2] then
      return {0, holder, tonumber(expiry) - now}
    end
  end
end
-- housekeeping: drop the entries of members that are gone
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, id in ipairs(gone) do
  if id ~= ARGV[1] then
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[1], id)
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('ZADD', KEYS[2], string.format('%d', now + tonumber(ARGV[4])), ARGV[1])
return {1, '', 0}
"""
)

# KEYS: info, expiry   ARGV: member id, owner
_DEREGISTER = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and cjson.decode(current)['owner'] == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 0
"""

# KEYS: info, expiry  -> {now, id1, expiry1, payload1, id2, ...} (live members only)
_MEMBERS = (
    _NOW
    + """
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. string.format('%d', now), '+inf',
                        'WITHSCORES')
local out = {now}
for i = 1, #live, 2 do
  local data = redis.call('HGET', KEYS[1], live[i])
  if data then
    table.insert(out, live[i])
    table.insert(out, live[i + 1])
    table.insert(out, data)
  end
end
return out
"""
)


class RedisMembership(Membership):
    def __init__(
        self,
        url: str,
        *,
        socket_timeout_s: float = 5.0,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self._cluster_url = (
            url if url.lower().startswith(("redis+cluster:", "rediss+cluster:")) else None
        )
        if self._cluster_url is not None:
            from shards.storage.redis_cluster import parse_cluster_url

            url = parse_cluster_url(url).single_url  # for the key prefix
        parsed = parse_redis_url(url)
        self._url = parsed.url
        prefix = parsed.key_prefix
        self._keys = [f"{prefix}:{{members}}:info", f"{prefix}:{{members}}:expiry"]
        self.description = f"redis registry (key prefix {prefix!r})"
        self._socket_timeout_s = socket_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._client: Any = None

    async def start(self) -> None:
        if self._client is not None:
            return
        client: Any
        if self._cluster_url is not None:
            from shards.storage.redis_cluster import cluster_client

            # both keys carry the hash tag {members}: one slot, one script
            client = cluster_client(
                self._cluster_url,
                socket_timeout_s=self._socket_timeout_s,
                connect_timeout_s=self._connect_timeout_s,
            )
        else:
            client = aioredis.Redis.from_url(
                self._url,
                socket_timeout=self._socket_timeout_s,
                socket_connect_timeout=self._connect_timeout_s,
                retry=Retry(NoBackoff(), 0),  # the caller's loop retries, on its own schedule
                decode_responses=False,
            )
        self._client = client
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._deregister = client.register_script(_DEREGISTER)
        self._members = client.register_script(_MEMBERS)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _check(self) -> None:
        if self._client is None:
            raise RuntimeError("the registry is not started")

    async def heartbeat(self, member: Member, ttl_ms: int) -> None:
        self._check()
        ok, holder, remaining = await self._heartbeat(
            keys=self._keys, args=[member.member_id, member.owner, member.payload(), ttl_ms]
        )
        if int(ok) != 1:
            raise RegistrationConflict(member.member_id, _text(holder), int(remaining))

    async def deregister(self, member_id: str, owner: str) -> None:
        self._check()
        await self._deregister(keys=self._keys, args=[member_id, owner])

    async def members(self) -> tuple[list[Member], int]:
        self._check()
        reply = await self._members(keys=self._keys, args=[])
        now = int(reply[0])
        out = []
        for i in range(1, len(reply), 3):
            member_id = _text(reply[i])
            expires = int(float(_text(reply[i + 1])))
            out.append(Member.from_payload(member_id, reply[i + 2], expires))
        out.sort(key=lambda m: m.member_id)
        return out, now


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
