"""Java consumers that read nothing, measured: the requests they send (by API, from the
client's own request log), their CPU time, how long a classic hand-over takes, and what two
static members with one ``group.instance.id`` do. Used side by side on groupcoord
(coordinator-only) and Apache Kafka by ``test_java_idle.py`` and ``bench/java_idle.py``."""

from __future__ import annotations

import queue
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.interop.clients import create_topic
from tests.interop.java_client import JavaConsumer, requests_sent
from tests.interop.support import Target, unique

#: the hand-over scenario's heartbeat interval: a survivor learns of a rebalance this fast
HANDOVER_HEARTBEAT_MS = 200


def _next(c: JavaConsumer, kind: str, timeout: float, where: str) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = c.events.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if event["event"] == kind:
            return event
    raise AssertionError(f"{where}: no {kind} event in {timeout} s")


def assigned(c: JavaConsumer, n: int, timeout: float, where: str) -> dict[str, Any]:
    """The first assignment event with ``n`` partitions."""
    while True:
        event = _next(c, "assignment", timeout, where)
        if len(event["partitions"]) == n:
            return event


def idle_consumers(target: Target, protocols: list[str], window_s: float) -> list[dict[str, Any]]:
    """One consumer per protocol (``classic``, ``consumer``), started together, each of its
    own 2-partition topic without records or committed offsets: once all have their
    assignments, the requests each sends and the CPU each uses in ``window_s``."""
    with tempfile.TemporaryDirectory() as d:
        running = []
        try:
            for i, protocol in enumerate(protocols):
                topic, group = unique("idle"), unique(f"idle-{protocol}")
                create_topic(target, topic, 2)
                log = Path(d) / f"requests-{i}.log"
                c = JavaConsumer(
                    target.bootstrap,
                    group,
                    topic,
                    protocol,
                    "-",
                    "-",
                    command="idle",
                    request_log=log,
                )
                running.append((protocol, c, log))
            firsts = [assigned(c, 2, 60, f"{target.name} {p}") for p, c, _ in running]
            time.sleep(window_s)
        finally:
            for _, c, _ in running:  # all told to close first, then waited for
                assert c.proc.stdin is not None
                c.proc.stdin.close()
            for _, c, _ in running:
                c.close()
        out = []
        for (protocol, c, log), first in zip(running, firsts, strict=True):
            closing = next(e for e in c.history if e["event"] == "closing")
            out.append(
                {
                    "target": target.name,
                    "protocol": protocol,
                    "window_s": round((closing["t"] - first["t"]) / 1000, 2),
                    "cpu_s": round((closing["cpu_ms"] - first["cpu_ms"]) / 1000, 2),
                    "requests": requests_sent(log, first["t"], closing["t"]),
                }
            )
        return out


def idle_consumer(target: Target, protocol: str, window_s: float) -> dict[str, Any]:
    """:func:`idle_consumers` with one consumer (the CPU time is then its alone)."""
    return idle_consumers(target, [protocol], window_s)[0]


def classic_handover(target: Target) -> dict[str, Any]:
    """Two classic members (heartbeat every HANDOVER_HEARTBEAT_MS) of a 4-partition topic;
    the first closes: seconds from its close until the survivor has all 4 partitions."""
    topic, group = unique("ho"), unique("ho")
    create_topic(target, topic, 4)
    props = f"heartbeat.interval.ms={HANDOVER_HEARTBEAT_MS},session.timeout.ms=10000"
    a = JavaConsumer(target.bootstrap, group, topic, "classic", "-", props, command="idle")
    b = None
    try:
        assigned(a, 4, 60, f"{target.name} first member")
        b = JavaConsumer(target.bootstrap, group, topic, "classic", "-", props, command="idle")
        assigned(b, 2, 60, f"{target.name} second member")
        start = time.time()
        a.close()
        got = assigned(b, 4, 60, f"{target.name} survivor")
        return {"target": target.name, "handover_s": round(got["t"] / 1000 - start, 3)}
    finally:
        a.close()
        if b is not None:
            b.close()


def _joined(c: JavaConsumer, timeout: float, where: str) -> int:
    """When (ms) ``c`` first owned partitions or was fenced."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = c.events.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            break
        if event["event"] == "error" or (event["event"] == "assignment" and event["partitions"]):
            return int(event["t"])
    raise AssertionError(f"{where}: not joined in {timeout} s")


def static_duplicates(target: Target, window_s: float) -> dict[str, Any]:
    """Two classic members with one ``group.instance.id``, the second started once the first
    has its assignment; what each sees (exceptions from poll, assignments) and the requests
    each sends in the ``window_s`` after the second has joined."""
    topic, group = unique("st"), unique("st")
    create_topic(target, topic, 2)
    props = "heartbeat.interval.ms=500,session.timeout.ms=10000"
    with tempfile.TemporaryDirectory() as d:
        logs = [Path(d) / "a.log", Path(d) / "b.log"]
        a = JavaConsumer(
            target.bootstrap,
            group,
            topic,
            "classic",
            "static-1",
            props,
            command="idle",
            request_log=logs[0],
        )
        b = None
        try:
            assigned(a, 2, 60, f"{target.name} first member")
            b = JavaConsumer(
                target.bootstrap,
                group,
                topic,
                "classic",
                "static-1",
                props,
                command="idle",
                request_log=logs[1],
            )
            # the window opens when the second has joined (replacing the first)
            start = _joined(b, 60, f"{target.name} second member")
            time.sleep(window_s)
            end = int(time.time() * 1000)
        finally:
            # a member fenced while closing can hang in close() (on Kafka too): not waited for
            a.close(timeout=3)
            if b is not None:
                b.close(timeout=3)
        out: dict[str, Any] = {"target": target.name, "window_s": window_s}
        assert b is not None
        for name, c, log in (("first", a, logs[0]), ("second", b, logs[1])):
            events = [e for e in c.history if start <= e.get("t", 0) < end]
            out[name] = {
                "errors": [e["error"] for e in events if e["event"] == "error"],
                "assignments": [len(e["partitions"]) for e in events if e["event"] == "assignment"],
                "requests": requests_sent(log, start, end),
            }
        return out
