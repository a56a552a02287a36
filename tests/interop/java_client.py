"""Apache Kafka's Java client (kafka-clients from the Kafka distribution the conformance suite
already fetches) as a child process: ``tests/interop/java/JavaClient.java``, compiled once
per source version into the Kafka cache, prints one JSON object per line."""

from __future__ import annotations

import hashlib
import json
import queue
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from tests.interop.kafka_broker import CACHE, KAFKA_VERSION, libs

SOURCE = Path(__file__).resolve().parent / "java" / "JavaClient.java"


def unavailable_reason() -> str | None:
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            return f"the Java client tests need {tool} (JDK 17+) on PATH (not found)"
    return None


def classpath() -> str:
    """The compiled driver plus Kafka's jars (compiled on first use)."""
    jars = libs()
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = CACHE / KAFKA_VERSION / "java-client" / digest
    if not (out / "JavaClient.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-cp", f"{jars}/*", "-d", str(out), str(SOURCE)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return f"{out}:{jars}/*"


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


class JavaConsumer:
    """A running ``consume`` command (or ``drain``: ``JavaConsumer(b, group, topic,
    command="drain")``): its events arrive on :attr:`events`; :meth:`close` closes its stdin,
    which makes it close the consumer (leaving the group) and exit."""

    def __init__(self, bootstrap: str, group: str, *args: str, command: str = "consume") -> None:
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            ["java", "-cp", classpath(), "JavaClient", bootstrap, command, group, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
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
                self.events.put(json.loads(line))

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
        """Close and wait; the process's stderr (for assertion messages)."""
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
        err = self.stderr.read()
        self.stderr.close()
        return err
