"""What every group type offers the rest of the coordinator (Kafka's ``Group`` interface).

The offset manager and the admin APIs only talk to groups through this interface; the
classic, consumer and streams group modules implement it. The ``validate_*`` methods are the hooks
where a group type checks generations / member epochs: they raise
:class:`shards.core.errors.ApiError` and never change state.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Callable

from shards.runtime.contract import Record

#: an OffsetCommit's check of one partition (topic id -- None: the catalog has no such topic
#: --, topic name, partition): raises ApiError to refuse the whole request
PartitionCheck = Callable[[str | None, str, int], None]


class GroupType(enum.Enum):
    CLASSIC = "classic"
    CONSUMER = "consumer"
    STREAMS = "streams"


class Group(abc.ABC):
    group_id: str

    @property
    @abc.abstractmethod
    def type(self) -> GroupType: ...

    @abc.abstractmethod
    def state_name(self) -> str:
        """The state as Kafka's ListGroups/Describe show it (e.g. "Empty", "Stable")."""

    @abc.abstractmethod
    def protocol_type(self) -> str:
        """Kafka's protocol type ("consumer", "" for a simple group)."""

    @abc.abstractmethod
    def is_empty(self) -> bool: ...

    @abc.abstractmethod
    def validate_offset_commit(
        self,
        member_id: str,
        group_instance_id: str | None,
        generation_id_or_member_epoch: int,
        is_transactional: bool,
        api_version: int | None,
    ) -> PartitionCheck | None:
        """Whether the member may commit (ApiError if not). A check returned: each partition
        the commit writes must pass it too (None: no check per partition)."""

    @abc.abstractmethod
    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None: ...

    @abc.abstractmethod
    def validate_offset_delete(self) -> None: ...

    @abc.abstractmethod
    def validate_delete_group(self) -> None: ...

    @abc.abstractmethod
    def is_subscribed_to_topic(self, topic: str) -> bool: ...

    @abc.abstractmethod
    def offset_expiration_base(self) -> Callable[[int], int] | None:
        """How to expire this group's offsets now: a function from an offset's commit
        timestamp to the timestamp its retention counts from, or None to keep them all."""

    @abc.abstractmethod
    def tombstone_records(self) -> list[Record]:
        """Records that delete the group (not its offsets)."""

    @abc.abstractmethod
    def snapshot_records(self) -> list[Record]:
        """Records that rebuild this group when replayed into an empty shard."""

    @abc.abstractmethod
    def fingerprint(self) -> object:
        """The persistent state as comparable plain data (no timers, no pending replies):
        replaying the log must rebuild a group with an equal fingerprint."""
