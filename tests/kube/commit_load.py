"""Offset commits through the gateway Service by real Kafka clients (confluent-kafka), with a
ledger of what was acknowledged: the acknowledged-commit checker of the node tests.

One thread per group commits the same increasing value to every partition of a topic
(``Consumer.commit``, synchronous, no subscription: Kafka's simple-consumer commit), ~10 a
second. Before an attempt the value joins the key's *unknown* values; an acknowledgement
makes it the key's last acknowledged value and clears them. :meth:`CommitLoad.check` then
reads every group's committed offsets through the gateway: each must be the last acknowledged
value or one whose outcome was unknown (nothing acknowledged lost, nothing invented). The
longest time between two acknowledgements of a group is its outage ("served throughout")."""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

#: librdkafka settings of the load's clients: fail an attempt within seconds, reconnect fast
CLIENT = {
    "enable.auto.commit": False,
    "socket.connection.setup.timeout.ms": 5000,
    "socket.timeout.ms": 10000,
    "reconnect.backoff.max.ms": 1000,
}


@dataclass
class Key:
    acked: int = -1
    unknown: list[int] = field(default_factory=list)


@dataclass
class Group:
    name: str
    keys: dict[int, Key]
    acks: int = 0
    last_ack: float = 0.0
    longest_gap: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)


class CommitLoad:
    def __init__(self, bootstrap: str, topic: str, groups: list[str], partitions: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.groups = {g: Group(g, {p: Key() for p in range(partitions)}) for g in groups}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(g,), name=f"commit-{g}", daemon=True)
            for g in groups
        ]

    def start(self) -> None:
        now = time.monotonic()
        for g in self.groups.values():
            g.last_ack = now
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        assert not any(t.is_alive() for t in self._threads), "a commit thread did not stop"

    def acks(self) -> dict[str, int]:
        with self._lock:
            return {name: g.acks for name, g in self.groups.items()}

    def _run(self, name: str) -> None:
        group = self.groups[name]
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": name, **CLIENT})
        value = 0
        try:
            while not self._stop.is_set():
                value += 1
                with self._lock:
                    for key in group.keys.values():
                        key.unknown.append(value)
                offsets = [TopicPartition(self.topic, p, value) for p in range(self.partitions)]
                try:
                    consumer.commit(offsets=offsets, asynchronous=False)
                except KafkaException as e:
                    with self._lock:
                        group.errors[e.args[0].name()] += 1
                    time.sleep(0.2)
                    continue
                now = time.monotonic()
                with self._lock:
                    for key in group.keys.values():
                        key.acked, key.unknown = value, []
                    group.acks += 1
                    group.longest_gap = max(group.longest_gap, now - group.last_ack)
                    group.last_ack = now
                time.sleep(0.1)
        finally:
            consumer.close()

    def check(self) -> dict[str, float]:
        """After :meth:`stop`: every key holds its last acknowledged value or an unknown one;
        returns each group's longest time without an acknowledgement (s)."""
        for name, group in self.groups.items():
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": name, **CLIENT})
            try:
                wanted = [TopicPartition(self.topic, p) for p in range(self.partitions)]
                # nothing committed: librdkafka's OFFSET_INVALID (-1001), the ledger's -1
                stored = {tp.partition: max(tp.offset, -1) for tp in _committed(consumer, wanted)}
            finally:
                consumer.close()
            for p, key in group.keys.items():
                allowed = {key.acked, *key.unknown}
                assert stored[p] in allowed, (
                    f"{name}/{p}: stored {stored[p]}, last acknowledged {key.acked}, "
                    f"unknown {key.unknown[-5:]}"
                )
        return {name: round(g.longest_gap, 2) for name, g in self.groups.items()}

    def errors(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {name: dict(g.errors) for name, g in self.groups.items()}


#: errors a client retries: the group's coordinator is moving or loading (a shard pod was
#: just deleted), not an answer about the offsets
_RETRIABLE = {"COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS"}


def _committed(consumer: Consumer, wanted: list[TopicPartition]) -> list[TopicPartition]:
    """The committed offsets, the read retried (at most 10 times, 3 s apart) while the
    coordinator is moving, as Kafka's clients retry it; any other error is raised."""
    for attempt in range(10):
        try:
            return list(consumer.committed(wanted, 30))
        except KafkaException as e:
            if e.args[0].name() not in _RETRIABLE or attempt == 9:
                raise
            time.sleep(3)
    raise AssertionError("unreachable")
