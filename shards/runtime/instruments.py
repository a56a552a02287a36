"""The runtime's metrics: what happens on the write path (appends, snapshots, loads).

Made once per runtime from an OpenTelemetry meter provider (the process's global one unless
one is given) and handed to every partition; ``None`` means metrics are off and the partitions
record nothing. Attribute sets are built here once. Counts the runtime keeps anyway (partition
states, waiting replies) are not instruments: the process observes them at collection time.
The names and meanings: docs/observability.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry import metrics

#: latency histograms of every process, in seconds: 100 us .. 30 s
LATENCY_BUCKETS_S: Sequence[float] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
BATCH_BUCKETS: Sequence[float] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

FENCED = {"reason": "fenced"}
TIMEOUT = {"reason": "timeout"}
ERROR = {"reason": "error"}
#: the store's primary has the write but too few replicas confirmed it (Redis WAIT/WAITAOF)
UNCONFIRMED = {"reason": "unconfirmed"}
OK = {"outcome": "ok"}
FAILED = {"outcome": "failed"}


class RuntimeInstruments:
    def __init__(self, provider: Any = None) -> None:
        meter = (provider or metrics.get_meter_provider()).get_meter("groupcoord.runtime")
        self.append_duration = meter.create_histogram(
            "storage_append_duration",
            unit="s",
            description="Time of one durable append of a partition's batch (group commit).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self.append_batch_records = meter.create_histogram(
            "storage_append_batch_records",
            unit="{record}",
            description="Records in one appended batch.",
            explicit_bucket_boundaries_advisory=BATCH_BUCKETS,
        )
        self.append_failures = meter.create_counter(
            "storage_append_failures",
            unit="{append}",
            description="Appends that failed, by reason: fenced (the store refused a stale "
            "epoch: another owner has the partition), timeout, error.",
        )
        self.snapshot_duration = meter.create_histogram(
            "storage_snapshot_duration",
            unit="s",
            description="Time to encode and write one partition snapshot, by outcome.",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self.lease_read_duration = meter.create_histogram(
            "storage_lease_read_duration",
            unit="s",
            description="Time of one read of a partition's lease in the store before reads are "
            "answered (multi-shard), by outcome: held, lost (the store no longer holds it for "
            "this shard), unanswered (failed, or no answer before the local deadline).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        self.load_duration = meter.create_histogram(
            "partition_load_duration",
            unit="s",
            description="Time to load an offsets partition (acquire, read, replay).",
            explicit_bucket_boundaries_advisory=LATENCY_BUCKETS_S,
        )
        #: the longest load so far, in seconds (observed as partition_load_time_max)
        self.load_time_max_s = 0.0

    def append_failed(self, reason: dict[str, str]) -> None:
        self.append_failures.add(1, reason)

    def loaded(self, seconds: float) -> None:
        self.load_duration.record(seconds)
        if seconds > self.load_time_max_s:
            self.load_time_max_s = seconds
