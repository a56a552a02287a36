"""The shard's metrics: Kafka's group-coordinator metrics and the shard's own.

Two kinds (docs/observability.md lists them all):

* **Counters of what is written**, from the runtime's record observer
  (:class:`RecordCounters`): offset commits, expirations and deletions, consumer and classic
  rebalances. The observer sees the records of every write once its batch is durable (a
  failed append counts nothing) -- one call per write, a loop over its records, pre-built
  attribute sets.
* **Observed at collection time** (:class:`ShardMetrics`): groups by protocol and state,
  partitions by state, the event queue, leases, partitions moved, failovers, the assignor
  client's counters, the client-side computations' counters (plain integers the partitions'
  managers bump as they decide, one object per process), the longest partition load.
  Nothing else is updated per operation: a collection takes one snapshot of the loop-owned
  state on the loop (``LoopSampler``).

Labels are bounded: protocol, state, partition number (at most ``--num-partitions``), method,
error name. Group ids appear only with the opt-in ``group_series`` (``--metrics-group-series
N``): one series per group for at most N groups.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.process import metrics as m
from shards.core.records import ConsumerGroupMetadataKey, GroupMetadataKey, OffsetCommitKey
from shards.core.timer_keys import GROUP_EXPIRATION
from shards.runtime.contract import Record, TimerKey
from shards.runtime.partition import PartitionState

CONSUMER = {"protocol": "consumer"}
CLASSIC = {"protocol": "classic"}
#: the label set of the counters without labels (a Tally keys its totals by dict identity)
NO_LABELS: dict[str, str] = {}
#: classic groups whose last rebalance generation is remembered (beyond: forgotten, and a
#: group's next GroupMetadata record with members counts as a rebalance)
MAX_REMEMBERED_GENERATIONS = 100_000

PARTITION_STATES = ("loading", "active", "failed")
CONSUMER_STATES = ("empty", "assigning", "reconciling", "stable", "dead")
CLASSIC_STATES = ("empty", "preparingrebalance", "completingrebalance", "stable", "dead")
STREAMS_STATES = ("empty", "notready", "assigning", "reconciling", "stable", "dead")


class RecordCounters:
    """Counts what the writes of this process appended durably (the runtime's
    ``record_observer``).

    * an ``OffsetCommit`` record with a value: a commit; a tombstone written by the periodic
      expiration timer: an expiration; any other tombstone (OffsetDelete, DeleteGroups): a
      deletion;
    * a ``ConsumerGroupMetadata`` record with a value: a consumer-group rebalance (the group
      epoch moved: a member joined, left or changed its subscription, or the group was
      created);
    * a ``GroupMetadata`` record with members and a generation this process has not written
      for that group before: a completed classic-group rebalance.
    """

    def __init__(self, provider: Any = None) -> None:
        meter = m.meter(f"{m.PREFIX}.shard", provider)
        self.commits = m.Tally(
            meter,
            "offset_commits",
            unit="{offset}",
            description="Offsets committed (per partition).",
        )
        self.expirations = m.Tally(
            meter,
            "offset_expirations",
            unit="{offset}",
            description="Offsets removed by the retention (offsets.retention.minutes).",
        )
        self.deletions = m.Tally(
            meter,
            "offset_deletions",
            unit="{offset}",
            description="Offsets deleted by OffsetDelete or DeleteGroups.",
        )
        self.rebalances = m.Tally(
            meter,
            "group_rebalances",
            unit="{rebalance}",
            description="Rebalances by protocol: consumer groups (writes that bump the group "
            "epoch), classic groups (completed generations).",
        )
        self._generations: dict[str, int] = {}

    def __call__(self, records: Sequence[Record], timer_key: TimerKey | None) -> None:
        commits = deleted = consumer = classic = 0
        for record in records:
            key = record.key
            cls = type(key)
            if cls is OffsetCommitKey:
                if record.value is None:
                    deleted += 1
                else:
                    commits += 1
            elif cls is ConsumerGroupMetadataKey:
                if record.value is not None:
                    consumer += 1
            elif cls is GroupMetadataKey:
                classic += self._classic(key.group, record.value)
        if commits:
            self.commits.add(commits, NO_LABELS)
        if deleted:
            if timer_key == GROUP_EXPIRATION:
                self.expirations.add(deleted, NO_LABELS)
            else:
                self.deletions.add(deleted, NO_LABELS)
        if consumer:
            self.rebalances.add(consumer, CONSUMER)
        if classic:
            self.rebalances.add(classic, CLASSIC)

    def _classic(self, group: str, value: Any) -> int:
        if value is None:
            self._generations.pop(group, None)
            return 0
        if not value.members or self._generations.get(group) == value.generation:
            return 0
        if len(self._generations) >= MAX_REMEMBERED_GENERATIONS:
            self._generations.clear()
        self._generations[group] = value.generation
        return 1


@dataclass
class Sample:
    """The loop-owned state one collection reports."""

    partitions: dict[str, int] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    consumer_states: dict[str, int] = field(default_factory=dict)
    classic_states: dict[str, int] = field(default_factory=dict)
    streams_states: dict[str, int] = field(default_factory=dict)
    #: partition -> replies waiting for an append
    queues: dict[int, int] = field(default_factory=dict)
    #: (group, protocol, state) -> members, for at most ``group_series`` groups
    group_members: list[tuple[str, str, str, int]] = field(default_factory=list)
    leases: int = 0


class ShardMetrics:
    """The observable instruments of a shard process (see the module docstring)."""

    def __init__(self, app: Any, provider: Any = None, group_series: int = 0) -> None:
        self.app = app
        self.group_series = group_series
        self.provider = provider
        self.sampler: m.LoopSampler[Sample] | None = None

    def start(self) -> None:
        """Register the instruments (on the loop, once the app's pieces exist)."""
        self.sampler = m.LoopSampler(asyncio.get_running_loop(), self.sample, Sample())
        meter = m.meter(f"{m.PREFIX}.shard", self.provider)
        s = self._sampled
        meter.create_observable_gauge(
            "partitions",
            callbacks=[  # registered first: its callback takes the collection's sample
                s(
                    lambda x: [(x.partitions.get(k, 0), {"state": k}) for k in PARTITION_STATES],
                    fresh=True,
                )
            ],
            unit="{partition}",
            description="Offsets partitions of this process by state: loading, active, failed.",
        )
        meter.create_observable_gauge(
            "groups",
            callbacks=[
                s(
                    lambda x: [
                        (x.groups.get(k, 0), {"protocol": k})
                        for k in ("consumer", "classic", "streams")
                    ]
                )
            ],
            unit="{group}",
            description="Groups on this process's partitions, by protocol (consumer, classic, "
            "streams).",
        )
        meter.create_observable_gauge(
            "consumer_groups",
            callbacks=[
                s(lambda x: [(x.consumer_states.get(k, 0), {"state": k}) for k in CONSUMER_STATES])
            ],
            unit="{group}",
            description="Consumer (KIP-848) groups by state.",
        )
        meter.create_observable_gauge(
            "classic_groups",
            callbacks=[
                s(lambda x: [(x.classic_states.get(k, 0), {"state": k}) for k in CLASSIC_STATES])
            ],
            unit="{group}",
            description="Classic groups by state (simple groups, which only commit offsets, "
            "are Empty classic groups, as in Kafka).",
        )
        meter.create_observable_gauge(
            "streams_groups",
            callbacks=[
                s(lambda x: [(x.streams_states.get(k, 0), {"state": k}) for k in STREAMS_STATES])
            ],
            unit="{group}",
            description="Streams (KIP-1071) groups by state.",
        )
        meter.create_observable_gauge(
            "event_queue_size",
            callbacks=[
                s(lambda x: [(n, {"partition": str(p)}) for p, n in sorted(x.queues.items())])
            ],
            unit="{operation}",
            description="Operations waiting on a partition: replies waiting for their "
            "records (or the records they saw) to become durable. One series per partition "
            "served here.",
        )
        meter.create_observable_gauge(
            "leases_held",
            callbacks=[s(lambda x: [(x.leases, None)])],
            unit="{lease}",
            description="Partition leases this process holds (active or loading partitions).",
        )
        clock = self.app.clock
        meter.create_observable_gauge(
            "clock_offset",
            callbacks=[m.observe(lambda: [(clock.offset_ms / 1000, None)])],
            unit="s",
            description="The store server's clock minus this host's (0 when the store has "
            "no clock of its own): the shard takes wall time from the store, so this only "
            "says how far off this host's clock is.",
        )
        runtime = self.app.runtime
        meter.create_observable_counter(
            "partitions_self_fenced",
            callbacks=[m.observe(lambda: [(runtime.self_fenced if runtime else 0, None)])],
            unit="{partition}",
            description="Partitions this process stopped serving at their local lease "
            "deadline (cut off from the store, or paused beyond the lease).",
        )
        instruments = getattr(self.app.runtime, "instruments", None)
        if instruments is not None:
            meter.create_observable_gauge(
                "partition_load_time_max",
                callbacks=[m.observe(lambda: [(instruments.load_time_max_s, None)])],
                unit="s",
                description="The longest partition load since the process started (the "
                "average: partition_load_duration_seconds sum / count).",
            )
        if self.group_series > 0:
            meter.create_observable_gauge(
                "group_members",
                callbacks=[
                    s(
                        lambda x: [
                            (n, {"group": g, "protocol": p, "state": st})
                            for g, p, st, n in x.group_members
                        ]
                    )
                ],
                unit="{member}",
                description="Opt-in (--metrics-group-series N): members of each group, for "
                "at most N groups (the first N group ids in sorted order).",
            )
        self._ownership(meter)
        self._assignor(meter)
        self._client_assignments(meter)
        self._history(meter)

    def _client_assignments(self, meter: Any) -> None:
        """Client-side assignors (docs/client-side-assignors.md): counted by the partitions'
        managers as they decide, in the process's ``client_stats``."""
        stats = getattr(self.app, "client_stats", None)
        if stats is None:
            return
        for name, attr, description in (
            (
                "client_assignments_chosen",
                "chosen",
                "Client-side computations asked of a member (a member chosen to compute a "
                "target: a new one, or the next member's turn).",
            ),
            (
                "client_assignments_installed",
                "installed",
                "Client-side assignments installed as the target.",
            ),
            (
                "client_assignments_rejected",
                "rejected",
                "InstallAssignment calls answered INVALID_ASSIGNMENT.",
            ),
            (
                "client_assignment_fallbacks",
                "fallbacks",
                "Targets computed by the server-side fallback assignor after every member "
                "had its turn.",
            ),
        ):
            meter.create_observable_counter(
                name,
                callbacks=[m.observe(_attr_reader(stats, attr))],
                unit="{computation}",
                description=description,
            )
        meter.create_observable_counter(
            "client_assignments_given_up",
            callbacks=[
                m.observe(
                    lambda: [
                        (stats.given_up_deadline, {"reason": "deadline"}),
                        (stats.given_up_member_left, {"reason": "member_left"}),
                        (stats.given_up_error, {"reason": "error"}),
                        (stats.given_up_server_side, {"reason": "server_side"}),
                    ]
                )
            ],
            unit="{computation}",
            description="Chosen members' turns that ended without an install, by reason: "
            "deadline (consumer.client.assignment.timeout.ms), member_left (it left, was "
            "fenced or expired), error (it installed error != 0), server_side (the group "
            "went server-side: a member without client-side assignors, a server assignor "
            "named, or the group config).",
        )

    def _history(self, meter: Any) -> None:
        sink = self.app.settings.history
        if sink is None:
            return
        meter.create_observable_counter(
            "history_events",
            callbacks=[
                m.observe(
                    lambda: [
                        (sink.written_events, {"outcome": "written"}),
                        (sink.failed_events, {"outcome": "failed"}),
                    ]
                )
            ],
            unit="{event}",
            description="Group history events (docs/analytics.md) written by the history "
            "sink, and lost because its writer failed (outcome).",
        )
        meter.create_observable_counter(
            "history_dropped_batches",
            callbacks=[m.observe(lambda: [(sink.dropped_batches, None)])],
            unit="{batch}",
            description="Durable batches the history sink dropped because its queue was full.",
        )

    def _sampled(self, values: Any, fresh: bool = False) -> Any:
        def read() -> Any:
            assert self.sampler is not None
            return values(self.sampler.get(fresh))

        return m.observe(read)

    def _ownership(self, meter: Any) -> None:
        ownership = self.app.ownership
        if ownership is None:
            return
        stats = ownership.stats
        meter.create_observable_counter(
            "partitions_moved",
            callbacks=[
                m.observe(
                    lambda: [
                        (stats.get("moved_in", 0), {"direction": "in"}),
                        (stats.get("moved_out", 0), {"direction": "out"}),
                    ]
                )
            ],
            unit="{partition}",
            description="Partitions loaded here (in) and handed off or lost (out).",
        )
        meter.create_observable_counter(
            "failovers",
            callbacks=[m.observe(lambda: [(stats.get("failovers", 0), None)])],
            unit="{partition}",
            description="Partitions taken over from a shard that left the registry while "
            "still holding their lease (a crashed or paused shard).",
        )

    def _assignor(self, meter: Any) -> None:
        client = self.app.assignor_client
        if client is None:
            return
        stats = client.stats

        def failures() -> list[tuple[float, dict[str, str] | None]]:
            return [
                (n, {"reason": k.split(".", 1)[1]})
                for k, n in sorted(dict(stats).items())
                if k.startswith("failures.")
            ]

        def fallbacks() -> list[tuple[float, dict[str, str] | None]]:
            return [
                (n, {"reason": k.split(".", 1)[1]})
                for k, n in sorted(dict(stats).items())
                if k.startswith("fallbacks.")
            ]

        for name, key, description in (
            ("assignor_client_calls", "calls", "Target assignments asked of the assignor client."),
            ("assignor_client_attempts", "attempts", "Calls to assignor replicas (attempts)."),
            ("assignor_client_retries", "retries", "Attempts after a failed one."),
            ("assignor_client_remote_ok", "remote_ok", "Assignments computed remotely."),
        ):
            meter.create_observable_counter(
                name,
                callbacks=[m.observe(_counter_reader(stats, key))],
                unit="{call}",
                description=description,
            )
        meter.create_observable_counter(
            "assignor_client_failures",
            callbacks=[m.observe(failures)],
            unit="{call}",
            description="Failed attempts by gRPC status (or bad_response).",
        )
        meter.create_observable_counter(
            "assignor_client_fallbacks",
            callbacks=[m.observe(fallbacks)],
            unit="{call}",
            description="Assignments computed in-process after the remote replicas failed, "
            "by reason.",
        )

    # ---- one collection's snapshot (on the loop) -----------------------------------------
    def sample(self) -> Sample:
        out = Sample()
        runtime = self.app.runtime
        if runtime is None:
            return out
        members: list[tuple[str, str, str, int]] = []
        for p, part in list(runtime.partitions.items()):
            state = part.state
            if state is PartitionState.LOADING:
                _inc(out.partitions, "loading")
                out.leases += 1
            elif state is PartitionState.FAILED:
                _inc(out.partitions, "failed")
            elif state is PartitionState.ACTIVE:
                _inc(out.partitions, "active")
                out.leases += 1
                out.queues[p] = part.waiting()
                sm = part.sm
                if sm is None:
                    continue
                for group in sm.group_manager.groups.values():
                    protocol = group.type.value
                    state_name = group.state_name().lower()
                    _inc(out.groups, protocol)
                    _inc(
                        out.consumer_states
                        if protocol == "consumer"
                        else out.streams_states
                        if protocol == "streams"
                        else out.classic_states,
                        state_name,
                    )
                    if self.group_series > 0:
                        members.append((group.group_id, protocol, state_name, len(group.members)))
        if members:
            members.sort()
            out.group_members = members[: self.group_series]
        return out


def _inc(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _attr_reader(stats: Any, attr: str) -> Any:
    def read() -> list[tuple[float, dict[str, str] | None]]:
        return [(getattr(stats, attr), None)]

    return read


def _counter_reader(stats: Any, key: str) -> Any:
    def read() -> list[tuple[float, dict[str, str] | None]]:
        return [(stats.get(key, 0), None)]

    return read
