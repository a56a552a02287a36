"""Real consumers against groupcoord without a data plane (coordinator-only mode): they get
their assignments, retry Fetch/ListOffsets with backoff instead of spinning, and leave their
group when closed. Each consumer runs in a child process so that its CPU time is its own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.interop.clients import confluent_admin, create_topic, describe
from tests.interop.support import Target, unique, wait_until

pytestmark = [pytest.mark.interop, pytest.mark.slow]
RUN_S = 5.0

# A confluent-kafka (librdkafka) consumer of a group with committed offsets: before the
# gateway answered Fetch it retried the unsupported request in a busy loop (100% CPU).
CONFLUENT = """
import json, resource, sys, time
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group, protocol, run_s = sys.argv[1:6]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
              "enable.auto.commit": False, "log_level": 3})
c.commit(offsets=[TopicPartition(topic, p, 5) for p in range(2)], asynchronous=False)
c.subscribe([topic])
deadline = time.monotonic() + 30
while not c.assignment() and time.monotonic() < deadline:
    c.poll(0.2)
before = resource.getrusage(resource.RUSAGE_SELF)
start = time.monotonic()
errors = []
while time.monotonic() - start < float(run_s):
    m = c.poll(0.2)
    if m is not None and m.error():
        errors.append(str(m.error()))
after = resource.getrusage(resource.RUSAGE_SELF)
cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
assigned = sorted(tp.partition for tp in c.assignment())
c.close()
print(json.dumps({"cpu": cpu, "wall": time.monotonic() - start, "assigned": assigned,
                  "errors": errors}))
"""

AIOKAFKA = """
import asyncio, json, sys, time
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, group = sys.argv[1:4]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
c.commit(offsets=[TopicPartition(topic, p, 5) for p in range(3)], asynchronous=False)
c.close()

async def main():
    consumers = [AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                  enable_auto_commit=False, heartbeat_interval_ms=500,
                                  session_timeout_ms=10000) for _ in range(3)]
    for k in consumers:
        await k.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        await asyncio.gather(*(k.getmany(timeout_ms=200) for k in consumers))
        if sum(len(k.assignment()) for k in consumers) == 3 and all(
            k.assignment() for k in consumers
        ):
            break
    assigned = [sorted(tp.partition for tp in k.assignment()) for k in consumers]
    stopped = await asyncio.gather(*(k.stop() for k in consumers), return_exceptions=True)
    print(json.dumps({"assigned": assigned, "stopped": [repr(s) for s in stopped]}))

asyncio.run(main())
"""


def run_child(script: str, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_confluent_consumer_with_committed_offsets_backs_off_and_leaves(
    groupcoord_target: Target, protocol: str
) -> None:
    target = groupcoord_target
    topic, group = unique("nd"), unique(f"nd-{protocol}")
    create_topic(target, topic, 2)
    got = run_child(CONFLUENT, target.bootstrap, topic, group, protocol, str(RUN_S))
    assert got["assigned"] == [0, 1]
    # a busy loop shows as ~100% of the wall time; backing off is a few per cent at most
    assert float(got["cpu"]) < 0.25 * float(got["wall"]), got  # type: ignore[arg-type]
    assert got["errors"] == [], got  # retried quietly, nothing surfaced to the application
    # close() left the group: it is empty at once, not after a session timeout
    admin = confluent_admin(target)
    wait_until(lambda: len(describe(admin, group).members) == 0, timeout=3, what="empty group")


def test_aiokafka_consumers_stop_cleanly(groupcoord_target: Target) -> None:
    target = groupcoord_target
    topic, group = unique("nd-aio"), unique("nd-aio")
    create_topic(target, topic, 3)
    got = run_child(AIOKAFKA, target.bootstrap, topic, group)
    assert sorted(p for a in got["assigned"] for p in a) == [0, 1, 2], got  # type: ignore[union-attr]
    # before the gateway answered Fetch, stop() raised CancelledError from the fetcher
    assert got["stopped"] == ["None", "None", "None"], got
