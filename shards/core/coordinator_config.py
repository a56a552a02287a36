"""Coordinator configuration, with Kafka 4.x's defaults (every duration in milliseconds)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

MINUTE_MS = 60_000


class MigrationPolicy(enum.Enum):
    """``consumer_group_migration_policy``: which online conversions between classic and
    consumer groups are allowed (``shards.core.migration``)."""

    DISABLED = "disabled"
    DOWNGRADE = "downgrade"
    UPGRADE = "upgrade"
    BIDIRECTIONAL = "bidirectional"

    @classmethod
    def parse(cls, text: str) -> MigrationPolicy:
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ValueError(
                f"unknown consumer_group_migration_policy {text!r}: one of "
                + ", ".join(p.value for p in cls)
            ) from None

    @property
    def upgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    # offsets (offsets.retention.minutes, offsets.retention.check.interval.ms,
    # offset.metadata.max.bytes)
    offsets_retention_ms: int = 7 * 24 * 60 * MINUTE_MS
    offsets_retention_check_interval_ms: int = 10 * MINUTE_MS
    offset_metadata_max_bytes: int = 4096
    # number of offsets partitions (offsets.topic.num.partitions)
    num_partitions: int = 50
    # consumer groups (group.consumer.*)
    consumer_group_session_timeout_ms: int = 45_000
    consumer_group_min_session_timeout_ms: int = 45_000
    consumer_group_max_session_timeout_ms: int = 60_000
    consumer_group_heartbeat_interval_ms: int = 5_000
    consumer_group_min_heartbeat_interval_ms: int = 5_000
    consumer_group_max_heartbeat_interval_ms: int = 15_000
    consumer_group_max_size: int = 2**31 - 1
    # KIP-1263 (Kafka 4.4): a consumer group's target assignment is computed at most once per
    # this interval (group config consumer.assignment.interval.ms, within the min/max); a
    # change meanwhile leaves the group Assigning until the interval since the last target
    # has passed (docs/consumer-groups.md). 0: at once.
    consumer_group_assignment_interval_ms: int = 1_000
    consumer_group_min_assignment_interval_ms: int = 0
    consumer_group_max_assignment_interval_ms: int = 15_000
    # group.consumer.assignor.offload.enable (per group consumer.assignor.offload.enable):
    # false computes the target of a group whose assignor is in-process inside the operation
    # that needs it whatever its size; true (Kafka's default) leaves it to the size caps below
    consumer_group_assignor_offload_enable: bool = True
    consumer_group_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_group_migration_policy: str = "bidirectional"
    # A target assignment is computed inside the operation that needs it (as Kafka 4.1 does
    # in the heartbeat, giving Kafka's epochs) when the group has at most this many members
    # + subscribed partitions, at most ..._max_members members, and a built-in assignor
    # (uniform/range: ~0.3 ms for 100 members and 4 900 partitions; the cost grows with the
    # members: ~5 ms for 500 members and 1 000 partitions, ~35 ms for 3 000 -- every join of
    # a join storm paid it, issue 36 item 5); larger groups and custom assignors are assigned
    # off the partition loop, one computation per group at a time. 0: always off the loop.
    consumer_group_inline_assignment_max_size: int = 5_000
    consumer_group_inline_assignment_max_members: int = 500
    # KIP-848 client-side assignors (gRPC only; docs/client-side-assignors.md): whether groups
    # whose members all declare a common client-side assignor use it (group config
    # consumer.client.assignors.enable), how long the chosen member has to install the
    # target (consumer.client.assignment.timeout.ms) before another member is chosen, and
    # the server-side assignor used once every member had its turn ("" = the default
    # assignor, the first of consumer_group_assignors; "none" = keep choosing members).
    consumer_group_client_assignors_enable: bool = True
    consumer_group_client_assignment_timeout_ms: int = 30_000
    consumer_group_client_assignment_fallback_assignor: str = ""
    # streams groups (group.streams.*; per group streams.* group configs)
    streams_group_session_timeout_ms: int = 45_000
    streams_group_min_session_timeout_ms: int = 45_000
    streams_group_max_session_timeout_ms: int = 60_000
    streams_group_heartbeat_interval_ms: int = 5_000
    streams_group_min_heartbeat_interval_ms: int = 5_000
    streams_group_max_heartbeat_interval_ms: int = 15_000
    # standby replicas of each active task (0: none), at most ..._max_...
    streams_group_num_standby_replicas: int = 0
    streams_group_max_standby_replicas: int = 2
    # what the heartbeat tells members (they matter to task offsets and warm-ups, which
    # groupcoord does not use): how often to report task offsets, the acceptable lag
    streams_group_task_offset_interval_ms: int = 60_000
    streams_group_min_task_offset_interval_ms: int = 15_000
    streams_group_acceptable_recovery_lag: int = 10_000
    # Kafka 4.4's: a new (or emptied) group's first target waits this long for more members
    # (status ASSIGNMENT_DELAYED meanwhile), and a target is computed at most once per
    # interval (the heartbeat after it computes the next)
    streams_group_initial_rebalance_delay_ms: int = 3_000
    # the client tags a member must have for rack-aware standby placement (comma-separated;
    # empty: none): a member without them is told MISSING_CLIENT_TAGS (Kafka 4.4's sticky
    # assignor does not place by tags; nor does groupcoord's)
    streams_group_rack_aware_assignment_tags: str = ""
    # Kafka 4.4 keeps these and (its 4.4.0 assignor and refiner) assigns no warm-up tasks and
    # nothing differently with offloading: groupcoord keeps them, with the same effect
    streams_group_num_warmup_replicas: int = 2
    streams_group_max_warmup_replicas: int = 20
    streams_group_assignor_offload_enable: bool = True
    streams_group_assignment_interval_ms: int = 1_000
    streams_group_min_assignment_interval_ms: int = 0
    streams_group_max_assignment_interval_ms: int = 15_000
    # classic groups (group.*)
    classic_group_min_session_timeout_ms: int = 6_000
    classic_group_max_session_timeout_ms: int = 30 * MINUTE_MS
    classic_group_initial_rebalance_delay_ms: int = 3_000
    classic_group_max_size: int = 2**31 - 1
    classic_group_new_member_join_timeout_ms: int = 5 * MINUTE_MS
    # snapshots: write one after this many records were appended since the last one
    snapshot_interval_records: int = 10_000
    #: the settings above given explicitly (``--set``), whatever their values: as Kafka lists
    #: a broker setting in its properties as STATIC_BROKER_CONFIG even when it equals the
    #: default, a group config's describe lists a given shard setting (not a setting itself)
    given: frozenset[str] = frozenset()

    def validate(self) -> None:
        """ValueError naming the first setting out of range (Kafka's own bounds, where it
        has them), so that a bad value is refused at start-up instead of failing every
        request later."""
        for name, value in (
            ("num_partitions", self.num_partitions),
            ("offsets_retention_ms", self.offsets_retention_ms),
            ("offsets_retention_check_interval_ms", self.offsets_retention_check_interval_ms),
            ("consumer_group_session_timeout_ms", self.consumer_group_session_timeout_ms),
            ("consumer_group_min_session_timeout_ms", self.consumer_group_min_session_timeout_ms),
            ("consumer_group_heartbeat_interval_ms", self.consumer_group_heartbeat_interval_ms),
            (
                "consumer_group_min_heartbeat_interval_ms",
                self.consumer_group_min_heartbeat_interval_ms,
            ),
            ("consumer_group_max_size", self.consumer_group_max_size),
            ("classic_group_min_session_timeout_ms", self.classic_group_min_session_timeout_ms),
            ("classic_group_max_size", self.classic_group_max_size),
            (
                "classic_group_new_member_join_timeout_ms",
                self.classic_group_new_member_join_timeout_ms,
            ),
            ("snapshot_interval_records", self.snapshot_interval_records),
            ("streams_group_min_session_timeout_ms", self.streams_group_min_session_timeout_ms),
            (
                "streams_group_min_heartbeat_interval_ms",
                self.streams_group_min_heartbeat_interval_ms,
            ),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        for name, value in (
            ("offset_metadata_max_bytes", self.offset_metadata_max_bytes),
            ("streams_group_acceptable_recovery_lag", self.streams_group_acceptable_recovery_lag),
            (
                "consumer_group_min_assignment_interval_ms",
                self.consumer_group_min_assignment_interval_ms,
            ),
            (
                "classic_group_initial_rebalance_delay_ms",
                self.classic_group_initial_rebalance_delay_ms,
            ),
            (
                "streams_group_initial_rebalance_delay_ms",
                self.streams_group_initial_rebalance_delay_ms,
            ),
            (
                "streams_group_min_assignment_interval_ms",
                self.streams_group_min_assignment_interval_ms,
            ),
        ):
            if value < 0:
                raise ValueError(f"{name} must not be negative, got {value}")
        for low, value, high, what in (
            (
                self.consumer_group_min_session_timeout_ms,
                self.consumer_group_session_timeout_ms,
                self.consumer_group_max_session_timeout_ms,
                "consumer_group_{}session_timeout_ms",
            ),
            (
                self.consumer_group_min_heartbeat_interval_ms,
                self.consumer_group_heartbeat_interval_ms,
                self.consumer_group_max_heartbeat_interval_ms,
                "consumer_group_{}heartbeat_interval_ms",
            ),
            (
                self.consumer_group_min_assignment_interval_ms,
                self.consumer_group_assignment_interval_ms,
                self.consumer_group_max_assignment_interval_ms,
                "consumer_group_{}assignment_interval_ms",
            ),
            (
                self.streams_group_min_session_timeout_ms,
                self.streams_group_session_timeout_ms,
                self.streams_group_max_session_timeout_ms,
                "streams_group_{}session_timeout_ms",
            ),
            (
                self.streams_group_min_heartbeat_interval_ms,
                self.streams_group_heartbeat_interval_ms,
                self.streams_group_max_heartbeat_interval_ms,
                "streams_group_{}heartbeat_interval_ms",
            ),
            (
                self.streams_group_min_assignment_interval_ms,
                self.streams_group_assignment_interval_ms,
                self.streams_group_max_assignment_interval_ms,
                "streams_group_{}assignment_interval_ms",
            ),
        ):
            if not low <= value <= high:
                raise ValueError(
                    f"{what.format('')} must lie between {what.format('min_')} and "
                    f"{what.format('max_')}: {low} <= {value} <= {high} does not hold"
                )
        if self.consumer_group_heartbeat_interval_ms >= self.consumer_group_session_timeout_ms:
            raise ValueError(
                "consumer_group_heartbeat_interval_ms must be below "
                "consumer_group_session_timeout_ms"
            )
        if (
            not 0
            <= self.streams_group_num_standby_replicas
            <= (self.streams_group_max_standby_replicas)
        ):
            raise ValueError(
                "streams_group_num_standby_replicas must lie between 0 and "
                f"streams_group_max_standby_replicas ({self.streams_group_max_standby_replicas}),"
                f" got {self.streams_group_num_standby_replicas}"
            )
        if (
            not 0
            <= self.streams_group_num_warmup_replicas
            <= self.streams_group_max_warmup_replicas
        ):
            raise ValueError(
                "streams_group_num_warmup_replicas must lie between 0 and "
                f"streams_group_max_warmup_replicas ({self.streams_group_max_warmup_replicas}),"
                f" got {self.streams_group_num_warmup_replicas}"
            )
        if (
            self.streams_group_task_offset_interval_ms
            < self.streams_group_min_task_offset_interval_ms
        ):
            raise ValueError(
                "streams_group_task_offset_interval_ms must be at least "
                "streams_group_min_task_offset_interval_ms "
                f"({self.streams_group_min_task_offset_interval_ms}), "
                f"got {self.streams_group_task_offset_interval_ms}"
            )
        if self.classic_group_min_session_timeout_ms > self.classic_group_max_session_timeout_ms:
            raise ValueError(
                "classic_group_min_session_timeout_ms must not exceed "
                "classic_group_max_session_timeout_ms"
            )
        if not self.consumer_group_assignors:
            raise ValueError("consumer_group_assignors must name at least one assignor")
        if self.consumer_group_client_assignment_timeout_ms < 1:
            raise ValueError("consumer_group_client_assignment_timeout_ms must be at least 1")
        fallback = self.consumer_group_client_assignment_fallback_assignor
        if fallback not in ("", "none", *self.consumer_group_assignors):
            raise ValueError(
                f"consumer_group_client_assignment_fallback_assignor {fallback!r}: one of "
                f"{', '.join(self.consumer_group_assignors)}, '' (the default) or 'none'"
            )
        MigrationPolicy.parse(self.consumer_group_migration_policy)
