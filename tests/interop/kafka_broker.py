"""Apache Kafka itself, for conformance tests and benchmarks: fetched from Maven Central with
mvn (``tests/interop/kafka/pom.xml``) into ``.cache/kafka/<version>/libs`` once, then run as
a single-node KRaft broker (broker + controller) on loopback ports, with a random cluster id
and the short test timeouts of :data:`TEST_SETTINGS`.

Usage::

    reason = unavailable_reason()       # None, or why Kafka cannot run here (no java/mvn)
    with KafkaBroker(workdir) as kafka:  # fetches on first use, formats, starts, waits
        kafka.bootstrap                  # "127.0.0.1:<port>"

The pieces are shared with the multi-broker cluster (``kafka_cluster.py``): one node's
configuration (:func:`server_properties`), the Java command line (:func:`java_command`), a
node process (:class:`KafkaNode`), storage formatting (:func:`format_storage`) and readiness
(:func:`wait_ready`: every broker registered, internal topics loaded).

``python -m tests.interop.kafka_broker`` fetches (and with ``--run`` starts) it by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from subprocess import PIPE
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
KAFKA_VERSION = os.environ.get("GROUPCOORD_KAFKA_VERSION", "4.4.0")
CACHE = Path(os.environ.get("GROUPCOORD_KAFKA_CACHE", ROOT / ".cache" / "kafka"))
POM = Path(__file__).resolve().parent / "kafka" / "pom.xml"
TOOLS_POM = Path(__file__).resolve().parent / "kafka" / "tools" / "pom.xml"
STREAMS_POM = Path(__file__).resolve().parent / "kafka" / "streams" / "pom.xml"

#: The settings both servers under comparison run with: Kafka config -> (groupcoord setting,
#: value). Short timeouts so that rebalances take well under a second.
TEST_SETTINGS: dict[str, tuple[str | None, str]] = {
    "offsets.topic.num.partitions": ("num_partitions", "10"),
    "group.initial.rebalance.delay.ms": ("classic_group_initial_rebalance_delay_ms", "0"),
    "group.min.session.timeout.ms": ("classic_group_min_session_timeout_ms", "1000"),
    "group.consumer.heartbeat.interval.ms": ("consumer_group_heartbeat_interval_ms", "500"),
    "group.consumer.min.heartbeat.interval.ms": ("consumer_group_min_heartbeat_interval_ms", "100"),
    "group.consumer.session.timeout.ms": ("consumer_group_session_timeout_ms", "6000"),
    "group.consumer.min.session.timeout.ms": ("consumer_group_min_session_timeout_ms", "1000"),
    # KIP-1263's settings (Kafka 4.4; the reference gets them below): both servers compute a
    # target at once (interval 0; both default to 1 s) and groupcoord in-line for small
    # groups whatever offload says (docs/consumer-groups.md); the sequence
    # `assignment_interval` compares an interval set per group
    "group.consumer.assignment.interval.ms": ("consumer_group_assignment_interval_ms", "0"),
    "group.consumer.assignor.offload.enable": ("consumer_group_assignor_offload_enable", "false"),
    # streams: Kafka 4.4 disables a protocol this list leaves out (the setting is deprecated;
    # without it every protocol is on); the streams-group comparison needs it on
    "group.coordinator.rebalance.protocols": (None, "classic,consumer,streams"),
    "auto.create.topics.enable": (None, "false"),
    # Kafka 4.4 delays a new streams group's first assignment (status "Assignment delayed
    # due to the configured initial rebalance delay"; 3 s by default), and computes its
    # targets at most once per interval (1 s): both at 0 on both servers, so that the
    # streams tests see targets at once; `streams_assignment_delays` sets them per group
    "group.streams.initial.rebalance.delay.ms": ("streams_group_initial_rebalance_delay_ms", "0"),
    "group.streams.assignment.interval.ms": ("streams_group_assignment_interval_ms", "0"),
}
#: the settings of TEST_SETTINGS a Kafka before 4.4 does not have (KIP-1263): not given to it
SINCE_44 = (
    "group.consumer.assignment.interval.ms",
    "group.consumer.assignor.offload.enable",
    "group.streams.initial.rebalance.delay.ms",
    "group.streams.assignment.interval.ms",
)
if tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) < (4, 4):
    # Kafka 4.4 (KIP-1263) computes a consumer group's target assignment at most once per
    # `group.consumer.assignment.interval.ms` (default 1 s), on a background thread unless
    # offloading is off. Both servers run with the interval at 0 and offloading off (Kafka
    # 4.1's behaviour); the sequence `assignment_interval` sets the
    # interval per group (docs/gateway-conformance.md, "Kafka 4.1 to 4.4", row 24).
    NOT_FOR_THIS_KAFKA = SINCE_44
    # streams groups are early access before 4.2: the reference runs without them
    TEST_SETTINGS["group.coordinator.rebalance.protocols"] = (None, "classic,consumer")
else:
    NOT_FOR_THIS_KAFKA = ()


def groupcoord_args() -> list[str]:
    """``groupcoord dev`` arguments for the same settings."""
    pairs = [
        f"{name}={value}"
        for name, value in TEST_SETTINGS.values()
        if name and name != "num_partitions"
    ]
    return [
        "--num-partitions",
        TEST_SETTINGS["offsets.topic.num.partitions"][1],
        "--set",
        ",".join(pairs),
    ]


class KafkaUnavailable(RuntimeError):
    pass


def unavailable_reason() -> str | None:
    if shutil.which("java") is None:
        return "Apache Kafka conformance needs Java 17+ on PATH (not found)"
    if not (CACHE / KAFKA_VERSION / ".complete").exists() and shutil.which("mvn") is None:
        return "Apache Kafka conformance needs Maven (mvn) to fetch the broker (not found)"
    return None


def libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's jars, fetched with mvn on first use (one process at a time)."""
    return _fetched(POM, CACHE / version, version)


def compiled(source: Path, jars: Path, name: str) -> str:
    """The classpath of ``source`` compiled against ``jars`` (``javac`` once per source
    version, into ``CACHE/<kafka version>/<name>/<digest>``) plus those jars."""
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    out = CACHE / KAFKA_VERSION / name / digest
    if not (out / f"{source.stem}.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["javac", "-cp", f"{jars}/*", "-d", str(out), str(source)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return f"{out}:{jars}/*"


def tools_libs(version: str = KAFKA_VERSION) -> Path:
    """The jars of Kafka's command-line tools (``kafka-tools``: ConsumerGroupCommand, what
    ``bin/kafka-consumer-groups.sh`` runs), fetched like :func:`libs` into
    ``<cache>/<version>-tools/libs``."""
    return _fetched(TOOLS_POM, CACHE / f"{version}-tools", version)


def streams_libs(version: str = KAFKA_VERSION) -> Path:
    """The jars of Kafka Streams (``kafka-streams`` with its ``kafka-clients``), fetched like
    :func:`libs` into ``<cache>/<version>-streams/libs``."""
    return _fetched(STREAMS_POM, CACHE / f"{version}-streams", version)


def _fetched(pom: Path, target: Path, version: str) -> Path:
    done = target / ".complete"
    if done.exists():
        return target / "libs"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return target / "libs"
        if shutil.which("mvn") is None:
            raise KafkaUnavailable("mvn not found")
        shutil.rmtree(target / "libs", ignore_errors=True)
        cmd = [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(pom),
            f"-Dkafka.version={version}",
            f"-Dmaven.repo.local={CACHE / 'm2'}",
            "dependency:copy-dependencies",
            f"-DoutputDirectory={target / 'libs'}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise KafkaUnavailable(
                f"fetching Apache Kafka {version} with mvn failed:\n{proc.stdout[-3000:]}"
                f"\n{proc.stderr[-3000:]}"
            )
        done.write_text(version)
    return target / "libs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def random_cluster_id() -> str:
    from shards.core.topics import uuid_to_text

    while True:
        text = uuid_to_text(uuid.uuid4().bytes)
        if not text.startswith("-"):
            return text


_LOG4J2 = """\
Configuration:
  Appenders:
    File:
      name: file
      fileName: "{log}"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        ref: file
    Logger:
      - name: kafka.server.KafkaServer
        level: INFO
      - name: org.apache.kafka.coordinator.group
        level: INFO
"""


def java_command(main: str, *args: str, heap: str, log4j: Path) -> list[str]:
    """The one Java command line for every Kafka process: Kafka's own launcher options minus
    the ones for long-running production brokers."""
    return [
        "java",
        f"-Xmx{heap}",
        "-Xms256m",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        "-XX:+ExitOnOutOfMemoryError",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        f"{libs()}/*",
        main,
        *args,
    ]


def server_properties(
    *,
    node_id: int,
    roles: str,
    port: int | None,
    controller_port: int | None,
    voters: str,
    data: Path,
    replication: int = 1,
    rack: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """A KRaft node's configuration on loopback: ``roles`` is ``broker``, ``controller`` or
    ``broker,controller``; ``voters`` the static quorum (``id@host:port,...``); internal topics
    replicated ``replication`` times (min ISR 1, so that one broker down blocks nothing);
    :data:`TEST_SETTINGS` and ``extra`` on top."""
    listeners = []
    if port is not None:
        listeners.append(f"PLAINTEXT://127.0.0.1:{port}")
    if controller_port is not None:
        listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
    props = {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join(listeners),
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data),
    }
    if port is not None:
        props |= {
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "inter.broker.listener.name": "PLAINTEXT",
        }
    if rack is not None:
        props["broker.rack"] = rack
    props |= {
        "offsets.topic.replication.factor": str(replication),
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": "1",
        "num.partitions": "1",
        **{k: v for k, (_name, v) in TEST_SETTINGS.items() if k not in NOT_FOR_THIS_KAFKA},
        **(extra or {}),
    }
    return props


class KafkaNode:
    """One Kafka server process (broker, controller or both) in its own directory: its
    ``server.properties``, ``log4j2.yaml``, ``data/``, ``kafka.log`` and ``stdout.log``. The
    configuration (ports included) is fixed once, so a killed node restarts as itself."""

    def __init__(self, workdir: Path, props: dict[str, str], heap: str) -> None:
        self.workdir = workdir
        self.props = props
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    @property
    def node_id(self) -> int:
        return int(self.props["node.id"])

    @property
    def is_broker(self) -> bool:
        return "broker" in self.props["process.roles"].split(",")

    @property
    def port(self) -> int:
        """The PLAINTEXT (client) port of a broker."""
        return int(self.props["advertised.listeners"].rsplit(":", 1)[1])

    @property
    def config(self) -> Path:
        return self.workdir / "server.properties"

    def _java(self, main: str, *args: str) -> list[str]:
        return java_command(main, *args, heap=self.heap, log4j=self.workdir / "log4j2.yaml")

    def format_command(self, cluster_id: str) -> list[str]:
        """Write the configuration, wipe the data dir; the storage format command to run."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.props["log.dirs"], ignore_errors=True)
        self.config.write_text("".join(f"{k}={v}\n" for k, v in self.props.items()))
        (self.workdir / "log4j2.yaml").write_text(_LOG4J2.format(log=self.workdir / "kafka.log"))
        return self._java(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config)
        )

    def launch(self) -> None:
        """Start the server on its formatted storage (returns at once; see :func:`wait_ready`)."""
        assert not self.running, f"node {self.node_id} is already running"
        self._out = open(self.workdir / "stdout.log", "ab")  # noqa: SIM115 - closed in _reap()
        # Same process group as the tests: whatever kills the test run kills the broker too.
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(self.config)), stdout=self._out, stderr=subprocess.STDOUT
        )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self) -> str | None:
        """Why the node is not running when it should be (None while it runs)."""
        if self.proc is None:
            return f"node {self.node_id} was never started"
        if self.proc.poll() is None:
            return None
        return f"node {self.node_id} exited ({self.proc.returncode}): {self.log_tail()}"

    def kill(self) -> None:
        """SIGKILL: no controlled shutdown, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._reap(10)

    def terminate(self, timeout: float = 20.0) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL if it takes longer than ``timeout``."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
        self._reap(timeout)

    def _reap(self, timeout: float) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._out is not None:
            self._out.close()
            self._out = None

    def log_tail(self, n: int = 4000) -> str:
        out = []
        for name in ("stdout.log", "kafka.log"):
            p = self.workdir / name
            if p.exists():
                out.append(p.read_text(errors="replace")[-n:])
        return "\n".join(out)


def format_storage(nodes: Sequence[KafkaNode], cluster_id: str) -> None:
    """Format every node's storage for one cluster (the JVMs run in parallel)."""
    procs = [
        (n, subprocess.Popen(n.format_command(cluster_id), stdout=PIPE, stderr=PIPE, text=True))
        for n in nodes
    ]
    failures = []
    for node, proc in procs:
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0:
            failures.append(f"node {node.node_id}: {out}\n{err}")
    if failures:
        raise KafkaUnavailable("formatting storage failed: " + "\n".join(failures))


OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTIONS_TOPIC = "__transaction_state"


async def _probe_ready(brokers: dict[int, int], transactions: bool) -> str | None:
    """None when the cluster is ready, else what is missing: every broker answers Metadata
    listing all of ``brokers`` (node id -> port); the offsets topic exists and each of its
    partitions is loaded (an OffsetFetch on each, sent to its coordinator, answers without
    COORDINATOR_LOAD_IN_PROGRESS); with ``transactions``, the transaction state topic exists
    too and every partition of both has a leader."""
    from services.gateway.router import Router
    from tests.support.kafka_wire import KafkaWire, request

    # one group id on each offsets partition: every partition must be loaded
    partitions = int(TEST_SETTINGS["offsets.topic.num.partitions"][1])
    keys = Router("unused", partitions).probe_keys()
    internal = [OFFSETS_TOPIC, *([TRANSACTIONS_TOPIC] if transactions else [])]
    wires: dict[int, KafkaWire] = {}
    try:
        for node_id, port in sorted(brokers.items()):
            wires[node_id] = await KafkaWire.connect("127.0.0.1", port, "probe")
        metadata = {}
        for node_id, wire in wires.items():
            md = await wire.send(
                request(
                    "metadata",
                    12,
                    topics=[{"name": t} for t in internal],
                    allow_auto_topic_creation=False,
                ),
                timeout=5,
            )
            listed = sorted(b.node_id for b in md.brokers)
            if listed != sorted(brokers):
                return f"broker {node_id} lists brokers {listed}"
            metadata[node_id] = md
        first = wires[min(wires)]
        r = await first.send(
            request("find_coordinator", 4, key_type=0, coordinator_keys=keys), timeout=5
        )
        if any(c.error_code != 0 for c in r.coordinators):
            return "no group coordinator yet"
        by_node: dict[int, list[str]] = {}
        for c in r.coordinators:
            by_node.setdefault(int(c.node_id), []).append(c.key)
        for node_id, group_ids in sorted(by_node.items()):
            f = await wires[node_id].send(
                request(
                    "offset_fetch", 8, groups=[{"group_id": g, "topics": None} for g in group_ids]
                ),
                timeout=5,
            )
            if any(g.error_code != 0 for g in f.groups):
                return f"offsets partitions on broker {node_id} not loaded"
        if transactions:
            t = await first.send(
                request("find_coordinator", 4, key_type=1, coordinator_keys=["probe"]), timeout=5
            )
            if t.coordinators[0].error_code != 0:
                return "no transaction coordinator yet"
            for topic in metadata[min(metadata)].topics:
                if topic.error_code != 0 or any(p.leader_id < 0 for p in topic.partitions):
                    return f"{topic.name} not created or without leaders"
        return None
    except (OSError, asyncio.IncompleteReadError, TimeoutError) as ex:
        return f"{type(ex).__name__}: {ex}"
    finally:
        for wire in wires.values():
            await wire.close()


def wait_ready(
    nodes: Sequence[KafkaNode], timeout: float, transactions: bool = False, interval: float = 0.5
) -> None:
    """Until every broker among ``nodes`` is registered and the internal topics are usable
    (:func:`_probe_ready`); KafkaUnavailable when a node exits or time runs out."""
    brokers = {n.node_id: n.port for n in nodes if n.is_broker}
    deadline = time.monotonic() + timeout
    missing: str | None = "not probed"
    while time.monotonic() < deadline:
        for n in nodes:
            why = n.exited()
            if why:
                raise KafkaUnavailable(f"a Kafka node stopped while starting: {why}")
        missing = asyncio.run(_probe_ready(brokers, transactions))
        if missing is None:
            return
        time.sleep(interval)
    tails = "\n".join(n.log_tail() for n in nodes)
    raise KafkaUnavailable(f"Kafka was not ready in {timeout}s ({missing}): {tails}")


class KafkaBroker:
    """A single-node KRaft broker (broker + controller in one process, node id 1)."""

    def __init__(
        self, workdir: Path, extra: dict[str, str] | None = None, heap: str = "768m"
    ) -> None:
        self.workdir = workdir
        self.extra = extra or {}
        self.heap = heap
        self.port = 0
        self.node: KafkaNode | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.node.proc if self.node else None

    def start(self, ready_timeout: float = 120.0, port: int | None = None) -> None:
        """Start on ``port`` (default: a free one)."""
        self.port, controller = port or free_port(), free_port()
        props = server_properties(
            node_id=1,
            roles="broker,controller",
            port=self.port,
            controller_port=controller,
            voters=f"1@127.0.0.1:{controller}",
            data=self.workdir / "data",
            extra=self.extra,
        )
        self.node = KafkaNode(self.workdir, props, self.heap)
        format_storage([self.node], random_cluster_id())
        self.node.launch()
        try:
            wait_ready([self.node], ready_timeout)
        except BaseException:
            self.stop()
            raise

    def log_tail(self, n: int = 4000) -> str:
        return self.node.log_tail(n) if self.node else ""

    def stop(self) -> None:
        if self.node is not None:
            self.node.terminate()

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_kafka(workdir: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(workdir) as broker:
        yield broker


def kafka_for_tests(workdir: Path) -> Iterator[KafkaBroker]:
    """A started broker for a pytest fixture: the test is skipped where Kafka cannot run
    here (no Java or Maven) and fails if it could but did not start."""
    import pytest

    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    broker = KafkaBroker(workdir)
    try:
        broker.start()
    except KafkaUnavailable as ex:
        pytest.fail(f"Apache Kafka could not be started: {ex}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


if __name__ == "__main__":  # pragma: no cover - manual use
    print(libs())
    if "--run" in sys.argv:
        import tempfile

        with tempfile.TemporaryDirectory() as d, running_kafka(Path(d)) as k:
            print(f"Kafka {KAFKA_VERSION} on {k.bootstrap}; Ctrl-C to stop")
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
