"""Drive real Kafka clients (confluent-kafka / librdkafka, kafka-python) through group
scenarios and report what *they* observed. The same scenario runs against groupcoord and
against Apache Kafka, with the same expectations."""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.interop.support import Target, balanced, wait_until

QUIET = {"log_level": 3}  # librdkafka: no warnings


def create_topic(target: Target, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target.bootstrap, **QUIET})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    # Kafka creates topics asynchronously: wait until metadata has every partition.
    wait_until(
        lambda: (
            len(
                getattr(admin.list_topics(name, timeout=10).topics.get(name), "partitions", {})
                or {}
            )
            == partitions
        ),
        what=f"topic {name} in metadata",
    )


# ---- confluent-kafka --------------------------------------------------------------------


@dataclass
class ConfluentGroup:
    """Consumers of one group, polled round-robin from the calling thread."""

    target: Target
    group: str
    protocol: str  # "consumer" or "classic"
    consumers: list[Any] = field(default_factory=list)

    def add(self, topic: str, n: int, protocol: str | None = None) -> None:
        from confluent_kafka import Consumer

        protocol = protocol or self.protocol
        for _ in range(n):
            conf: dict[str, Any] = {
                "bootstrap.servers": self.target.bootstrap,
                "group.id": self.group,
                "client.id": f"{self.group}-{len(self.consumers)}",
                "enable.auto.commit": False,
                "group.protocol": protocol,
                **QUIET,
            }
            if protocol == "classic":
                conf.update(
                    {
                        "session.timeout.ms": 10000,
                        "heartbeat.interval.ms": 500,
                        "partition.assignment.strategy": "range",
                    }
                )
            c = Consumer(conf)
            c.subscribe([topic])
            self.consumers.append(c)

    def poll_round(self, live: list[Any]) -> None:
        for c in live:
            c.poll(0.05)

    def assignments(self, live: list[Any]) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in live]

    def wait_balanced(self, partitions: int, timeout: float = 45.0) -> list[set[int]]:
        live = list(self.consumers)

        def check() -> list[set[int]] | None:
            self.poll_round(live)
            asg = self.assignments(live)
            return asg if balanced(asg, partitions) else None

        try:
            return wait_until(check, timeout, interval=0.0, what="a balanced assignment")
        except AssertionError as ex:
            raise AssertionError(f"{ex}; assignments {self.assignments(live)}") from None

    def close_one(self) -> None:
        self.consumers.pop(0).close()

    def close(self) -> None:
        while self.consumers:
            with contextlib.suppress(Exception):
                self.consumers.pop().close()


@contextlib.contextmanager
def confluent_group(target: Target, group: str, protocol: str) -> Iterator[ConfluentGroup]:
    g = ConfluentGroup(target, group, protocol)
    try:
        yield g
    finally:
        g.close()


def confluent_admin(target: Target) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": target.bootstrap, **QUIET})


def describe(admin: Any, group: str) -> Any:
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)


def listed(admin: Any, group: str) -> Any | None:
    result = admin.list_consumer_groups(request_timeout=15).result(30)
    return next((g for g in result.valid if g.group_id == group), None)


def committed_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    r = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=15
    )[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in r.topic_partitions if tp.offset >= 0}


def alter_offsets(admin: Any, group: str, offsets: dict[tuple[str, int], int]) -> list[Any]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    r = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, tps)], request_timeout=15
    )[group].result(30)
    return [tp.error for tp in r.topic_partitions]


def delete_group(admin: Any, group: str) -> None:
    admin.delete_consumer_groups([group], request_timeout=15)[group].result(30)


# ---- kafka-python -----------------------------------------------------------------------


class KafkaPythonGroup:
    """kafka-python consumers, each polled by its own thread (its poll drives the group)."""

    def __init__(self, target: Target, group: str) -> None:
        self.target = target
        self.group = group
        self.consumers: list[Any] = []
        self._calls: list[queue.SimpleQueue[tuple[Callable[[Any], Any], Any]]] = []
        self._stops: list[threading.Event] = []
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def add(self, topic: str, n: int) -> None:
        from kafka import KafkaConsumer

        for _ in range(n):
            c = KafkaConsumer(
                bootstrap_servers=self.target.bootstrap,
                group_id=self.group,
                client_id=f"{self.group}-{len(self.consumers)}",
                enable_auto_commit=False,
                session_timeout_ms=30000,
                heartbeat_interval_ms=500,
                max_poll_interval_ms=20000,
            )
            stop = threading.Event()
            calls: queue.SimpleQueue[tuple[Callable[[Any], Any], Any]] = queue.SimpleQueue()
            t = threading.Thread(target=self._loop, args=(c, topic, stop, calls), daemon=True)
            self.consumers.append(c)
            self._calls.append(calls)
            self._stops.append(stop)
            self._threads.append(t)
            t.start()

    def _loop(
        self,
        consumer: Any,
        topic: str,
        stop: threading.Event,
        calls: queue.SimpleQueue[tuple[Callable[[Any], Any], Any]],
    ) -> None:
        consumer.subscribe([topic])
        # Fetch metadata before the first poll joins the group. Without it kafka-python
        # 3.0.12's leader assigns from a snapshot taken before the subscription (no
        # partitions), the next metadata update makes it rejoin, and if that second
        # SyncGroup is still in flight when a 50 ms poll returns, the client loses it:
        # ``_perform_assignment`` has already made the snapshots equal and
        # ``rejoin_needed`` is False, so no later poll awaits the join again and the
        # consumer stays REBALANCING with no partitions (seen against Apache Kafka too).
        consumer.topics()
        try:
            while not stop.is_set():
                while not calls.empty():
                    fn, future = calls.get()
                    try:
                        future.set_result(fn(consumer))
                    except Exception as ex:  # noqa: BLE001 - handed to the caller
                        future.set_exception(ex)
                try:
                    consumer.poll(timeout_ms=50)
                except Exception as ex:  # noqa: BLE001 - recorded for the test to inspect
                    self.errors.append(ex)
                    time.sleep(0.05)
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    def run_in(self, index: int, fn: Callable[[Any], Any], timeout: float = 30.0) -> Any:
        """Run ``fn(consumer)`` on that consumer's own thread (the client is not thread-safe)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._calls[index].put((fn, future))
        return future.result(timeout)

    def assignments(self) -> list[set[int]]:
        return [{tp.partition for tp in c.assignment()} for c in self.consumers]

    def wait_balanced(self, partitions: int, timeout: float = 45.0) -> list[set[int]]:
        seen: list[list[set[int]]] = []

        def check() -> list[set[int]] | None:
            asg = self.assignments()
            seen[:] = [asg]
            return asg if balanced(asg, partitions) else None

        try:
            return wait_until(check, timeout, what="a balanced assignment")
        except AssertionError as ex:
            raise AssertionError(f"{ex}; assignments {seen}; errors {self.errors[-3:]}") from None

    def close_one(self) -> None:
        self._stops.pop(0).set()
        self._threads.pop(0).join(30)
        self.consumers.pop(0)
        self._calls.pop(0)

    def close(self) -> None:
        for s in self._stops:
            s.set()
        for t in self._threads:
            t.join(30)
        self._stops, self._threads, self.consumers, self._calls = [], [], [], []


@contextlib.contextmanager
def kafka_python_group(target: Target, group: str) -> Iterator[KafkaPythonGroup]:
    g = KafkaPythonGroup(target, group)
    try:
        yield g
    finally:
        g.close()


@contextlib.contextmanager
def balanced_kafka_python_group(
    target: Target, group: str, topic: str, n: int, partitions: int
) -> Iterator[KafkaPythonGroup]:
    """``n`` kafka-python consumers that have reached a balanced assignment (support.balanced)."""
    with kafka_python_group(target, group) as g:
        g.add(topic, n)
        g.wait_balanced(partitions)
        yield g
