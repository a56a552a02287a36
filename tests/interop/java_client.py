"""Apache Kafka's Java client (kafka-clients from the Kafka distribution the conformance suite
already fetches) as a child process: ``tests/interop/java/JavaClient.java``, compiled once
per source version into the Kafka cache, prints one JSON object per line."""

from __future__ import annotations

import json
import queue
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.interop.kafka_broker import compiled, libs

SOURCE = Path(__file__).resolve().parent / "java" / "JavaClient.java"


def unavailable_reason() -> str | None:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"the Java client tests need {tool} (JDK 17+) on PATH (not found)"
    return None


def classpath() -> str:
    """The compiled driver plus Kafka's jars (compiled on first use)."""
    return compiled(SOURCE, libs(), "java-client")


def run(
    bootstrap: str,
    *args: str,
    timeout: float = 60,
    properties: Path | None = None,
    expect_failure: bool = False,
) -> list[dict[str, Any]]:
    """Run a command to completion; its JSON lines. ``properties``: a file of client
    properties for every client it makes (security settings); ``expect_failure``: the
    command must fail (its stderr is then in the one entry returned)."""
    import os

    env = {**os.environ, "JAVA_CLIENT_PROPERTIES": str(properties) if properties else ""}
    done = subprocess.run(
        ["java", "-cp", classpath(), "JavaClient", bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    if expect_failure:
        assert done.returncode != 0, done.stdout
        return [{"stderr": done.stderr}]
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


#: log4j2 configuration: every request the client's NetworkClient sends, one line each
#: (``<unix ms> [Consumer ...] Sending LIST_OFFSETS request with header ...``), to the
#: file named by the system property ``requestlog``
REQUEST_LOG_CONFIG = """\
status = error
appender.requests.type = File
appender.requests.name = requests
appender.requests.fileName = ${sys:requestlog}
appender.requests.layout.type = PatternLayout
appender.requests.layout.pattern = %d{UNIX_MILLIS} %m%n
logger.network.name = org.apache.kafka.clients.NetworkClient
logger.network.level = debug
logger.network.additivity = false
logger.network.appenderRef.requests.ref = requests
rootLogger.level = warn
"""
SENT = re.compile(r"^(\d+) (?:\[[^]]*\] )?Sending ([A-Z_]+) request")


def request_log_options(path: Path) -> list[str]:
    """JVM options that make the client log each request it sends to ``path``."""
    config = path.with_suffix(".log4j2.properties")
    config.write_text(REQUEST_LOG_CONFIG)
    return [f"-Dlog4j2.configurationFile={config}", f"-Drequestlog={path}"]


def requests_sent(path: Path, start_ms: int = 0, end_ms: int | None = None) -> dict[str, int]:
    """Requests by API name (``LIST_OFFSETS``, ``FETCH``, ...) a client logged with
    :func:`request_log_options`, sent in [start_ms, end_ms) (wall clock, ms)."""
    counts: dict[str, int] = {}
    if not path.exists():
        return counts
    for line in path.read_text().splitlines():
        m = SENT.match(line)
        if m and int(m.group(1)) >= start_ms and (end_ms is None or int(m.group(1)) < end_ms):
            counts[m.group(2)] = counts.get(m.group(2), 0) + 1
    return counts


VERSION_SENT = re.compile(
    r"Sending ([A-Z_]+) request with header RequestHeader\(apiKey=\w+, apiVersion=(\d+)"
)


def versions_sent(path: Path) -> dict[str, set[int]]:
    """The versions of each API (by name) a client logged with :func:`request_log_options`."""
    out: dict[str, set[int]] = {}
    if path.exists():
        for m in VERSION_SENT.finditer(path.read_text()):
            out.setdefault(m.group(1), set()).add(int(m.group(2)))
    return out


class JavaConsumer:
    """A running ``consume`` command (or ``drain``: ``JavaConsumer(b, group, topic,
    command="drain")``): its events arrive on :attr:`events`; :meth:`close` closes its stdin,
    which makes it close the consumer (leaving the group) and exit."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        *args: str,
        command: str = "consume",
        request_log: Path | None = None,
    ) -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        jvm = [] if request_log is None else request_log_options(request_log)
        self.proc = subprocess.Popen(
            ["java", *jvm, "-cp", classpath(), "JavaClient", bootstrap, command, group, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        #: every event received, kept (``events`` is consumed by :meth:`drain`)
        self.history: list[dict[str, Any]] = []
        self.assignment: set[tuple[str, int]] = set()
        self.committed: set[tuple[str, int]] = set()
        #: ``drain``: (partition, offset) of every record read, and whether its commit failed
        self.records: list[tuple[int, int]] = []
        self.commit_failures: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                self.history.append(event)
                self.events.put(event)

    def drain(self) -> None:
        """Apply the events received so far."""
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            parts = {(t, p) for t, p in event.get("partitions", [])}
            if event["event"] == "assignment":
                self.assignment = parts
            elif event["event"] == "committed":
                self.committed |= parts
            elif event["event"] == "consumed":
                self.records.extend((p, o) for p, o in event["records"])
            elif event["event"] == "commit_failed":
                self.commit_failures.append(event["error"])

    def close(self, timeout: float = 30) -> str:
        """Close and wait; the process's stderr (for assertion messages). Closing again
        returns the same."""
        if self.stderr.closed:
            return self.stderr_text
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self.drain()
        self.stderr.seek(0)
        self.stderr_text = self.stderr.read()
        self.stderr.close()
        return self.stderr_text
