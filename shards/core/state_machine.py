"""One offsets partition's state machine: groups + offsets (Kafka's GroupCoordinatorShard).

The runtime calls the handlers here inside the partition's loop, one at a time. Handlers
return a :class:`~shards.runtime.contract.CoordinatorResult` and never change state; reads return
the response directly. ``replay`` dispatches each record to the manager that owns its type.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.classic.group import ClassicGroup
from shards.core.consumer import api as consumer_api
from shards.core.consumer.client_assignment import ClientAssignmentStats
from shards.core.consumer.manager import ConsumerGroupManager
from shards.core.consumer.target_assignment import InlineAssignor
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.core.group_manager import GroupMetadataManager
from shards.core.ids import UuidSource, kafka_uuid_text
from shards.core.migration import Migration
from shards.core.offsets import OffsetMetadataManager, PreparedCommit
from shards.core.records import GroupMetadataKey, OffsetCommitKey, TxnOffsetCommitKey
from shards.core.steady import SteadyAnswer
from shards.core.streams.describe import DescribedStreamsGroup, streams_group_describe
from shards.core.streams.heartbeat import (
    StreamsGroupHeartbeatRequest,
    StreamsGroupHeartbeatResponse,
)
from shards.core.streams.manager import StreamsGroupManager
from shards.core.timer_keys import GROUP_EXPIRATION
from shards.core.topics import TopicsImage
from shards.core.txn_offsets import TxnMarker, TxnOffsetCommitRequest, TxnOffsetCommitResponse
from shards.runtime.contract import CoordinatorResult, Record, Timer


class CoordinatorStateMachine:
    def __init__(
        self,
        config: CoordinatorConfig,
        timer: Timer,
        topics: TopicsImage | None = None,
        partition: int = 0,
        assign: InlineAssignor | None = None,
        *,
        new_uuid: UuidSource,
        client_stats: ClientAssignmentStats | None = None,
    ) -> None:
        """``new_uuid``: 16 random bytes a call, for generated member ids (production:
        ``uuid.uuid4().bytes``; tests: a seeded source). ``client_stats``: the process's
        counts of client-side computations (None: this state machine's own)."""
        self.config = config
        self.timer = timer
        self.partition = partition
        self.topics = topics or TopicsImage()
        # Online migration between classic and consumer groups: both managers get it at
        # construction, and it gets them once they exist (the one place that wires them).
        self.migration = Migration(config, timer)
        self.group_manager = GroupMetadataManager(config, timer, self.migration, new_uuid=new_uuid)
        self.offset_manager = OffsetMetadataManager(config, self.group_manager, self._topic_id)
        self._replayers: dict[type, Callable[[Any, Any], None]] = {
            OffsetCommitKey: self.offset_manager.replay,
            GroupMetadataKey: self.group_manager.replay_group_metadata,
            TxnOffsetCommitKey: self.offset_manager.replay_pending,
        }
        # ``assign``: the in-process assignors, for targets small enough to compute inside
        # the operation that needs them (as Kafka does); the rest go off the loop
        self.consumer = ConsumerGroupManager(
            config,
            timer,
            self.group_manager,
            lambda: self.topics,
            new_member_id=lambda: kafka_uuid_text(new_uuid),
            assign=assign,
            migration=self.migration,
            client_stats=client_stats,
        )
        self.migration.bind(self.group_manager.classic, self.consumer)
        self._replayers.update(self.consumer.replayers())
        # streams groups (KIP-1071): StreamsGroupHeartbeat / StreamsGroupDescribe
        # (docs/streams-groups.md)
        self.streams = StreamsGroupManager(
            self.group_manager.groups, self._partition_count, timer, self.consumer.configs
        )
        self._replayers.update(self.streams.replayers())

    def _topic_id(self, name: str) -> str | None:
        topic = self.topics.by_name.get(name)
        return None if topic is None else topic.topic_id

    # ---- writes -------------------------------------------------------------------------------
    def commit_offset(
        self,
        request: api.OffsetCommitRequest,
        now_ms: int,
        prepared: PreparedCommit | None = None,
    ) -> CoordinatorResult[api.OffsetCommitResponse]:
        return self.offset_manager.commit_offset(request, now_ms, prepared)

    def commit_transactional_offset(
        self, request: TxnOffsetCommitRequest, now_ms: int
    ) -> CoordinatorResult[TxnOffsetCommitResponse]:
        """TxnOffsetCommit: pending offsets (docs/exactly-once.md)."""
        return self.offset_manager.commit_transactional_offset(request, now_ms)

    def complete_transaction(self, marker: TxnMarker, now_ms: int) -> CoordinatorResult[int]:
        """An upstream COMMIT/ABORT marker (the outcome follower's call)."""
        return self.offset_manager.complete_transaction(marker)

    def delete_offsets(
        self, request: api.OffsetDeleteRequest, now_ms: int
    ) -> CoordinatorResult[api.OffsetDeleteResponse]:
        return self.offset_manager.delete_offsets(request)

    def delete_groups(
        self, group_ids: list[str], now_ms: int
    ) -> CoordinatorResult[list[api.DeletableGroupResult]]:
        records: list[Record] = []
        results = []
        for group_id in group_ids:
            try:
                group = self.group_manager.group(group_id)
                group.validate_delete_group()
            except ApiError as ex:
                results.append(api.DeletableGroupResult(group_id, ex.code, ex.message or ""))
                continue
            records.extend(self.offset_manager.delete_all_offsets(group_id))
            records.extend(group.tombstone_records())
            results.append(api.DeletableGroupResult(group_id))
        return CoordinatorResult(records, results)

    def cleanup_group_metadata(self, now_ms: int) -> CoordinatorResult[None]:
        """The periodic expiration of offsets and of empty groups whose offsets are gone."""
        records: list[Record] = []
        for group_id, group in list(self.group_manager.groups.items()):
            group_records: list[Record] = []
            all_expired = self.offset_manager.cleanup_expired_offsets(
                group_id, now_ms, group_records
            )
            if all_expired and group.is_empty():
                group_records.extend(group.tombstone_records())
            records.extend(group_records)
        self._schedule_cleanup()
        return CoordinatorResult(records, None)

    # ---- classic groups ------------------------------------------------------------------------
    def join_group(
        self, request: classic_api.JoinGroupRequest, now_ms: int
    ) -> CoordinatorResult[classic_api.JoinGroupResponse]:
        return self.group_manager.classic.join_group(request, now_ms)

    def sync_group(
        self, request: classic_api.SyncGroupRequest, now_ms: int
    ) -> CoordinatorResult[classic_api.SyncGroupResponse]:
        return self.group_manager.classic.sync_group(request, now_ms)

    def heartbeat(
        self, request: classic_api.HeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[classic_api.HeartbeatResponse]:
        return self.group_manager.classic.heartbeat(request, now_ms)

    def classic_steady_heartbeat(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance_id: str | None,
        now_ms: int,
    ) -> Errors | None:
        """A classic group member's Heartbeat answered without an error: its code (NONE or
        REBALANCE_IN_PROGRESS); it writes nothing. None: ask :meth:`heartbeat`
        (``ClassicGroupManager.steady_heartbeat``)."""
        return self.group_manager.classic.steady_heartbeat(
            group_id, generation_id, member_id, instance_id
        )

    def leave_group(
        self, request: classic_api.LeaveGroupRequest, now_ms: int
    ) -> CoordinatorResult[classic_api.LeaveGroupResponse]:
        return self.group_manager.classic.leave_group(request, now_ms)

    def describe_groups(
        self, request: classic_api.DescribeGroupsRequest, now_ms: int
    ) -> list[classic_api.DescribedGroup]:
        return self.group_manager.classic.describe_groups(request, now_ms)

    # ---- streams groups (KIP-1071) ---------------------------------------------------------------
    def streams_group_heartbeat(
        self, request: StreamsGroupHeartbeatRequest, now_ms: int
    ) -> CoordinatorResult[StreamsGroupHeartbeatResponse]:
        return self.streams.heartbeat(request, now_ms)

    def streams_group_steady_heartbeat(
        self, request: StreamsGroupHeartbeatRequest, now_ms: int
    ) -> StreamsGroupHeartbeatResponse | None:
        """The answer to a heartbeat that changes nothing (it writes nothing but the session
        moving on); None: ask :meth:`streams_group_heartbeat`
        (``StreamsGroupManager.steady_heartbeat``)."""
        return self.streams.steady_heartbeat(request)

    def streams_group_describe(
        self, group_ids: list[str], now_ms: int
    ) -> list[DescribedStreamsGroup]:
        return streams_group_describe(self.group_manager.groups, group_ids)

    def _partition_count(self, topic: str) -> int | None:
        image = self.topics.by_name.get(topic)
        return None if image is None else image.num_partitions

    # ---- consumer groups (KIP-848) ---------------------------------------------------------------
    def consumer_group_heartbeat(
        self,
        request: consumer_api.ConsumerGroupHeartbeatRequest,
        now_ms: int,
        principal: str = "",
    ) -> CoordinatorResult[consumer_api.ConsumerGroupHeartbeatResponse]:
        """``principal``: the caller's under the authorizer (a new regex keeps the topics it
        may Describe; the records carry the result, so replay needs no principal)."""
        return self.consumer.heartbeat(request, now_ms, principal)

    def consumer_group_steady_heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        client_id: str,
        client_host: str,
        now_ms: int,
    ) -> SteadyAnswer | None:
        """A heartbeat carrying nothing but its ids, epoch and context, when it is the steady
        case: its answer, with the group and member ids of the member's session, the state's
        own strings (for :meth:`consumer_group_steady_heartbeat_again`); it writes nothing
        but the session moving on. None:
        ask :meth:`consumer_group_heartbeat` (``ConsumerGroupManager.steady_heartbeat``)."""
        return self.consumer.steady_heartbeat(
            group_id, member_id, member_epoch, client_id, client_host, now_ms
        )

    def consumer_group_steady_heartbeat_again(
        self, now_ms: int, group_id: str, member_id: str
    ) -> None:
        """What :meth:`consumer_group_steady_heartbeat` changes when it answers (the member's
        session, by the ids it gave), for the same heartbeat answered again
        (the runtime's ``answer_again``; ``now_ms`` first, as that passes it)."""
        self.consumer.steady_heartbeat_again(group_id, member_id, now_ms)

    def consumer_group_install_assignment(
        self, request: consumer_api.ConsumerGroupInstallAssignmentRequest, now_ms: int
    ) -> CoordinatorResult[consumer_api.ConsumerGroupInstallAssignmentResponse]:
        return self.consumer.install_assignment(request, now_ms)

    def alter_group_configs(
        self, request: consumer_api.AlterGroupConfigsRequest, now_ms: int
    ) -> CoordinatorResult[consumer_api.AlterGroupConfigsResponse]:
        return self.consumer.configs.alter(request, now_ms)

    def update_topics(self, image: TopicsImage, now_ms: int) -> CoordinatorResult[None]:
        """A new catalog image (group types react to it: epochs, regex resolution; the
        offsets of deleted topics go, as Kafka deletes them)."""
        previous, self.topics = self.topics, image
        self.streams.topics_changed()
        result = self.consumer.update_topics(previous, image, now_ms)
        gone = [
            name
            for name, topic in previous.by_name.items()
            if name not in image.by_name or image.by_name[name].topic_id != topic.topic_id
        ]
        tombstones = self.offset_manager.on_topics_deleted(gone)
        if tombstones:
            result = dataclasses.replace(result, records=(*result.records, *tombstones))
        return result

    # ---- reads --------------------------------------------------------------------------------
    def fetch_offsets(
        self, request: api.OffsetFetchRequestGroup, now_ms: int, require_stable: bool = False
    ) -> api.OffsetFetchResponseGroup:
        return self.offset_manager.fetch_offsets(request, require_stable)

    def list_groups(self, request: api.ListGroupsRequest, now_ms: int) -> api.ListGroupsResponse:
        return self.group_manager.list_groups(request)

    def consumer_group_describe(
        self, group_ids: list[str], include_authorized_operations: bool, now_ms: int
    ) -> list[consumer_api.ConsumerGroupDescribedGroup]:
        return self.consumer.describe(group_ids, include_authorized_operations)

    def consumer_group_prepare_assignment(
        self, request: consumer_api.ConsumerGroupPrepareAssignmentRequest, now_ms: int
    ) -> consumer_api.ConsumerGroupPrepareAssignmentResponse:
        return self.consumer.prepare_assignment(request)

    def describe_group_configs(
        self, group_ids: list[str], now_ms: int
    ) -> list[consumer_api.DescribedGroupConfigs]:
        return [self.consumer.configs.describe(g) for g in group_ids]

    # ---- state machine contract ---------------------------------------------------------------
    def replay(self, record: Record) -> None:
        replayer = self._replayers.get(type(record.key))
        if replayer is None:
            raise ValueError(f"no replay for record key {type(record.key).__name__}")
        replayer(record.key, record.value)

    def snapshot(self) -> list[Record]:
        # groups first: replaying an offset of an unknown group creates a simple group
        return (
            self.group_manager.snapshot_records()
            + self.consumer.configs.snapshot_records()
            + self.offset_manager.snapshot_records()
        )

    def fingerprint(self) -> object:
        """The whole persistent state as plain data (replay-equals-live checks)."""
        groups = {
            gid: g.fingerprint()
            for gid, g in self.group_manager.groups.items()
            # An empty simple group without offsets has no record of its own (as in Kafka,
            # it would not survive a reload either).
            if not _is_bare_simple_group(g, self.offset_manager)
        }
        offsets = {
            (group, topic, partition): value
            for group, by_topic in self.offset_manager.offsets.items()
            for topic, parts in by_topic.items()
            for partition, value in parts.items()
        }
        return {
            "groups": groups,
            "offsets": offsets,
            "pending_txn_offsets": self.offset_manager.pending.fingerprint(),
            "group_configs": self.consumer.configs.fingerprint(),
        }

    def on_loaded(self, now_ms: int) -> None:
        self.group_manager.on_loaded(now_ms)
        self.consumer.on_loaded(now_ms)
        self.streams.on_loaded()
        self._schedule_cleanup()

    def on_unloaded(self) -> None:
        self.timer.cancel(GROUP_EXPIRATION)
        self.group_manager.on_unloaded()

    def _schedule_cleanup(self) -> None:
        self.timer.schedule(
            GROUP_EXPIRATION,
            self.config.offsets_retention_check_interval_ms,
            self.cleanup_group_metadata,
        )


def _is_bare_simple_group(group: object, offsets: OffsetMetadataManager) -> bool:
    # judged on the persisted state: a rebalance in progress is not persisted
    return (
        isinstance(group, ClassicGroup)
        and (group.persisted is None or not group.persisted.protocol_type)
        and not offsets.has_offsets(group.group_id)
    )
