"""Every timer key of the core (and the key of the asynchronous assignment task), built here
in one scheme.

Timers are keyed, and scheduling a key that is already scheduled replaces that timer: two
different timers must therefore never share a key. The scheme:

* ``(kind, group_id)`` -- a timer of a group;
* ``(kind, group_id, member_id)`` -- a timer of one member of a group;
* ``(name,)`` -- a timer of the whole shard.

Tuples need no delimiter: group ``a:b`` with member ``c`` and group ``a`` with member
``b:c`` give different keys, and keys of different lengths never meet. Kinds and names are a
closed set of distinct strings. Keys are tuples of strings only (``TimerKey``): the runtime's
timer heap may compare two keys (when their entries tie on deadline and scheduling order).

Tuples for memory: a tuple of the group and member id strings the state already holds costs
64 B where a new ``{kind}:{len}:{group}:{member}`` string cost ~110 B, and the runtime's timer
keeps a member's session in its group's bucket under the key's member id string alone
(``shards.runtime.timers.PartitionTimer``) -- so build member keys from the state's
strings (``group.group_id``, ``member.member_id``) where a handler has them: then the timer
keeps no copy.

Keys live in memory only (the runtime's timer table): no record and no snapshot holds one,
so the scheme may change freely.
"""

from __future__ import annotations

import enum

from shards.runtime.contract import TimerKey


class TimerKind(enum.Enum):
    # classic groups (shards.core.classic.manager)
    CLASSIC_JOIN = "classic-join"  # the join phase of a rebalance (group)
    CLASSIC_SYNC = "classic-sync"  # members that must sync (group)
    CLASSIC_HEARTBEAT = "classic-heartbeat"  # a member's session (member)
    # consumer groups (shards.core.consumer: sessions, assignment_tasks, client_side)
    CONSUMER_SESSION_TIMEOUT = "consumer-session-timeout"  # member
    CONSUMER_REBALANCE_TIMEOUT = "consumer-rebalance-timeout"  # revocation deadline (member)
    CONSUMER_ASSIGNMENT_RETRY = "consumer-assignment-retry"  # after a failed target (group)
    #: the end of a group's assignment interval (KIP-1263): its target is computed then
    CONSUMER_ASSIGNMENT_INTERVAL = "consumer-assignment-interval"
    #: not a timer: the AsyncTask computing a group's target assignment (a newer task with
    #: the same key supersedes an older one)
    CONSUMER_ASSIGNMENT = "consumer-assignment"
    #: the deadline of the member chosen to compute a client-side target (group)
    CONSUMER_CLIENT_ASSIGNMENT = "consumer-client-assignment"
    # streams groups (shards.core.streams.heartbeat)
    STREAMS_SESSION_TIMEOUT = "streams-session-timeout"  # member
    STREAMS_REBALANCE_TIMEOUT = "streams-rebalance-timeout"  # revocation deadline (member)
    #: the end of a new streams group's initial rebalance delay (group): its first target
    STREAMS_INITIAL_REBALANCE = "streams-initial-rebalance"
    # online migration (shards.core.migration)
    CLASSIC_IN_CONSUMER_JOIN = "classic-in-consumer-join"  # rejoin deadline (member)
    CLASSIC_IN_CONSUMER_SYNC = "classic-in-consumer-sync"  # sync deadline (member)
    #: replies parked in an upgraded classic group; the "member" part is the id of the first
    #: parked reply, so that a later upgrade does not replace an earlier batch
    CLASSIC_UPGRADE_REPLIES = "classic-upgrade-replies"


#: the periodic expiration of offsets and empty groups (shards.core.state_machine)
GROUP_EXPIRATION: TimerKey = ("expire-group-metadata",)
#: the catch-up with the catalog after a load (shards.core.consumer.catalog)
CONSUMER_CATALOG_SYNC: TimerKey = ("consumer-catalog-sync",)


def group_key(kind: TimerKind, group_id: str) -> TimerKey:
    """The key of a group's timer of this kind."""
    return (kind._value_, group_id)  # (``value`` is a property: 3x slower on a hot path)


def member_key(kind: TimerKind, group_id: str, member_id: str) -> TimerKey:
    """The key of a member's timer of this kind (holds the very strings given: no copy)."""
    return (kind._value_, group_id, member_id)


def member_of_key(key: TimerKey) -> tuple[str, str]:
    """(group id, member id) of a member timer's key (the inverse of :func:`member_key`)."""
    _, group_id, member_id = key
    return group_id, member_id


def kind_of_key(key: TimerKey) -> str:
    """The kind (a ``TimerKind`` value) of a group or member timer's key; the name of a shard
    timer's."""
    return key[0]
