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


def _assigned(c: JavaConsumer, n: int, timeout: float, where: str) -> dict[str, Any]:
    """The first assignment event with ``n`` partitions."""
    while True:
        event = _next(c, "assignment", timeout, where)
        if len(event["partitions"]) == n:
            return event


def idle_consumer(target: Target, protocol: str, window_s: float) -> dict[str, Any]:
    """One consumer of a 2-partition topic without records or committed offsets: once it has
    its assignment, the requests it sends and the CPU it uses in ``window_s``."""
    topic, group = unique("idle"), unique(f"idle-{protocol}")
    create_topic(target, topic, 2)
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "requests.log"
        c = JavaConsumer(target.bootstrap, group, topic, protocol, "-", "-", command="idle",
                         request_log=log)
        try:
            first = _assigned(c, 2, 60, f"{target.name} {protocol}")
            time.sleep(window_s)
        finally:
            c.close()
        closing = next(e for e in c.history if e["event"] == "closing")
        window_ms = closing["t"] - first["t"]
        return {
            "target": target.name,
            "protocol": protocol,
            "window_s": round(window_ms / 1000, 2),
            "cpu_s": round((closing["cpu_ms"] - first["cpu_ms"]) / 1000, 2),
            "requests": requests_sent(log, first["t"], closing["t"]),
        }


def classic_handover(target: Target) -> dict[str, Any]:
    """Two classic members (heartbeat every HANDOVER_HEARTBEAT_MS) of a 4-partition topic;
    the first closes: seconds from its close until the survivor has all 4 partitions."""
    topic, group = unique("ho"), unique("ho")
    create_topic(target, topic, 4)
    props = f"heartbeat.interval.ms={HANDOVER_HEARTBEAT_MS},session.timeout.ms=10000"
    a = JavaConsumer(target.bootstrap, group, topic, "classic", "-", props, command="idle")
    b = None
    try:
        _assigned(a, 4, 60, f"{target.name} first member")
        b = JavaConsumer(target.bootstrap, group, topic, "classic", "-", props, command="idle")
        _assigned(b, 2, 60, f"{target.name} second member")
        start = time.time()
        a.close()
        got = _assigned(b, 4, 60, f"{target.name} survivor")
        return {"target": target.name, "handover_s": round(got["t"] / 1000 - start, 3)}
    finally:
        a.close()
        if b is not None:
            b.close()


def static_duplicates(target: Target, window_s: float) -> dict[str, Any]:
    """Two classic members with one ``group.instance.id``, the second started once the first
    has its assignment; what each sees (exceptions from poll, assignments) and the
    JoinGroup/Heartbeat requests each sends in ``window_s`` after the second starts."""
    topic, group = unique("st"), unique("st")
    create_topic(target, topic, 2)
    props = "heartbeat.interval.ms=500,session.timeout.ms=10000"
    with tempfile.TemporaryDirectory() as d:
        logs = [Path(d) / "a.log", Path(d) / "b.log"]
        a = JavaConsumer(target.bootstrap, group, topic, "classic", "static-1", props,
                         command="idle", request_log=logs[0])
        b = None
        try:
            _assigned(a, 2, 60, f"{target.name} first member")
            start = int(time.time() * 1000)
            b = JavaConsumer(target.bootstrap, group, topic, "classic", "static-1", props,
                             command="idle", request_log=logs[1])
            time.sleep(window_s)
            end = int(time.time() * 1000)
        finally:
            a.close()
            if b is not None:
                b.close()
        out: dict[str, Any] = {"target": target.name, "window_s": window_s}
        for name, c, log in (("first", a, logs[0]), ("second", b, logs[1])):
            events = [e for e in c.history if start <= e.get("t", 0) < end]
            out[name] = {
                "errors": [e["error"] for e in events if e["event"] == "error"],
                "assignments": [len(e["partitions"]) for e in events if e["event"] == "assignment"],
                "requests": requests_sent(log, start, end),
            }
        return out
