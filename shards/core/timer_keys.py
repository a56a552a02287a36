"""Every timer key of the core (and the key of the asynchronous assignment task), built here
in one scheme.

Timers are keyed, and scheduling a key that is already scheduled replaces that timer: two
different timers must therefore never share a key. The scheme:

* ``{kind}:{len(group_id)}:{group_id}`` -- a timer of a group;
* ``{kind}:{len(group_id)}:{group_id}:{member_id}`` -- a timer of one member of a group;
* a bare constant without ``:`` -- a timer of the whole shard.

The length prefix delimits the group id, so the rest of the key cannot be read another way
(group ``a:b`` with member ``c`` and group ``a`` with member ``b:c`` give different keys,
which an unprefixed ``{group}:{member}`` would not); kinds are a closed set without ``:``.
Keys live in memory only (the runtime's timer table): no record and no snapshot holds one,
so the scheme may change freely.
"""

from __future__ import annotations

import enum


class TimerKind(enum.Enum):
    # classic groups (shards.core.classic.manager)
    CLASSIC_JOIN = "classic-join"  # the join phase of a rebalance (group)
    CLASSIC_SYNC = "classic-sync"  # members that must sync (group)
    CLASSIC_HEARTBEAT = "classic-heartbeat"  # a member's session (member)
    # consumer groups (shards.core.consumer.manager)
    CONSUMER_SESSION_TIMEOUT = "consumer-session-timeout"  # member
    CONSUMER_REBALANCE_TIMEOUT = "consumer-rebalance-timeout"  # revocation deadline (member)
    CONSUMER_ASSIGNMENT_RETRY = "consumer-assignment-retry"  # after a failed target (group)
    #: not a timer: the AsyncTask computing a group's target assignment (a newer task with
    #: the same key supersedes an older one)
    CONSUMER_ASSIGNMENT = "consumer-assignment"
    #: the deadline of the member chosen to compute a client-side target (group)
    CONSUMER_CLIENT_ASSIGNMENT = "consumer-client-assignment"
    # online migration (shards.core.migration)
    CLASSIC_IN_CONSUMER_JOIN = "classic-in-consumer-join"  # rejoin deadline (member)
    CLASSIC_IN_CONSUMER_SYNC = "classic-in-consumer-sync"  # sync deadline (member)
    #: replies parked in an upgraded classic group; the "member" part is the id of the first
    #: parked reply, so that a later upgrade does not replace an earlier batch
    CLASSIC_UPGRADE_REPLIES = "classic-upgrade-replies"


#: the periodic expiration of offsets and empty groups (shards.core.state_machine)
GROUP_EXPIRATION = "expire-group-metadata"
#: the catch-up with the catalog after a load (shards.core.consumer.manager)
CONSUMER_CATALOG_SYNC = "consumer-catalog-sync"


def group_key(kind: TimerKind, group_id: str) -> str:
    """The key of a group's timer of this kind."""
    return f"{kind.value}:{len(group_id)}:{group_id}"


def member_key(kind: TimerKind, group_id: str, member_id: str) -> str:
    """The key of a member's timer of this kind."""
    return f"{kind.value}:{len(group_id)}:{group_id}:{member_id}"


def member_of_key(key: str) -> tuple[str, str]:
    """(group id, member id) of a member timer's key (the inverse of :func:`member_key`)."""
    _, rest = key.split(":", 1)
    length, rest = rest.split(":", 1)
    n = int(length)
    return rest[:n], rest[n + 1 :]
