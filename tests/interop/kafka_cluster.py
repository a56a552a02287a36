"""A multi-broker Apache Kafka (KRaft) cluster on loopback ports, for tests that need
replication, leader election or replica racks.

Node 1 is a combined broker + controller (the whole quorum) and nodes 2..N are brokers only:
N JVMs for N brokers, which starts fastest on a small machine. With
``dedicated_controller=True`` node 0 is a controller only and brokers 1..N can all be killed.
Each node has its own directory ``node-<id>/`` (configuration, data, logs) and fixed ports,
so that a killed broker restarts as itself. The jars, the Java command line, storage
formatting, logging and readiness probing are those of :mod:`tests.interop.kafka_broker`.

Usage::

    with KafkaCluster(workdir, brokers=2) as cluster:   # racks rack-a, rack-b
        cluster.bootstrap          # "127.0.0.1:<p1>,127.0.0.1:<p2>"
        cluster.broker(2)          # BrokerInfo(node_id=2, host=..., port=..., rack="rack-b")
        cluster.kill(2)            # SIGKILL
        cluster.start(2)           # same port, same data; back when registered again

Killing node 1 of a combined cluster also takes the quorum down: no leader election happens
until it is restarted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.interop.kafka_broker import (
    KafkaNode,
    format_storage,
    free_port,
    random_cluster_id,
    server_properties,
    wait_ready,
)

#: Failure detection in seconds rather than Kafka's 9 s session (heartbeat every 2 s).
CLUSTER_SETTINGS = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "transaction.state.log.num.partitions": "10",
    "min.insync.replicas": "1",
}


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def default_racks(brokers: int) -> list[str | None]:
    return [f"rack-{chr(ord('a') + i % 26)}" for i in range(brokers)]


class KafkaCluster:
    def __init__(
        self,
        workdir: Path,
        brokers: int = 2,
        extra: dict[str, str] | None = None,
        heap: str = "448m",
        racks: Sequence[str | None] | None = None,
        dedicated_controller: bool = False,
        controller_heap: str = "320m",
    ) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        racks = list(racks) if racks is not None else default_racks(brokers)
        if len(racks) != brokers:
            raise ValueError(f"{len(racks)} racks for {brokers} brokers")
        self.workdir = workdir
        self.extra = extra or {}
        self.nodes: dict[int, KafkaNode] = {}
        replication = min(brokers, 3)
        controller_id = 0 if dedicated_controller else 1
        controller_port = free_port()
        voters = f"{controller_id}@127.0.0.1:{controller_port}"
        common = {
            "voters": voters,
            "replication": replication,
            "extra": {**CLUSTER_SETTINGS, **self.extra},
        }
        if dedicated_controller:
            self.nodes[0] = self._node(
                0, "controller", None, controller_port, None, controller_heap, common
            )
        for i, rack in enumerate(racks):
            node_id = i + 1
            combined = node_id == controller_id
            self.nodes[node_id] = self._node(
                node_id,
                "broker,controller" if combined else "broker",
                free_port(),
                controller_port if combined else None,
                rack,
                heap,
                common,
            )
        self.start_seconds: float | None = None

    def _node(
        self,
        node_id: int,
        roles: str,
        port: int | None,
        controller_port: int | None,
        rack: str | None,
        heap: str,
        common: dict[str, object],
    ) -> KafkaNode:
        workdir = self.workdir / f"node-{node_id}"
        props = server_properties(
            node_id=node_id,
            roles=roles,
            port=port,
            controller_port=controller_port,
            data=workdir / "data",
            rack=rack,
            **common,  # type: ignore[arg-type]
        )
        return KafkaNode(workdir, props, heap)

    # ---- what tests read ------------------------------------------------------------------

    @property
    def broker_ids(self) -> list[int]:
        return sorted(i for i, n in self.nodes.items() if n.is_broker)

    @property
    def bootstrap(self) -> str:
        """Every broker's address (killed ones too: clients skip what does not answer)."""
        return ",".join(self.broker(i).address for i in self.broker_ids)

    def broker(self, node_id: int) -> BrokerInfo:
        node = self.nodes[node_id]
        if not node.is_broker:
            raise KeyError(f"node {node_id} is not a broker")
        return BrokerInfo(node_id, "127.0.0.1", node.port, node.props.get("broker.rack"))

    def running(self, node_id: int) -> bool:
        return self.nodes[node_id].running

    def log_tail(self, n: int = 4000) -> str:
        return "\n".join(f"--- node {i}\n{node.log_tail(n)}" for i, node in self.nodes.items())

    # ---- lifecycle ------------------------------------------------------------------------

    def start_all(self, ready_timeout: float = 180.0) -> None:
        """Format every node, start them all, wait until every broker is registered and the
        offsets and transaction topics exist (with their partitions loaded)."""
        t0 = time.monotonic()
        format_storage(list(self.nodes.values()), random_cluster_id())
        try:
            for node in self.nodes.values():
                node.launch()
            wait_ready(list(self.nodes.values()), ready_timeout, transactions=True)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (no controlled shutdown)."""
        self.nodes[node_id].kill()

    def start(self, node_id: int, ready_timeout: float = 120.0) -> None:
        """Restart a killed node on its port and data dir; returns once the whole cluster is
        ready again (every broker registered)."""
        self.nodes[node_id].launch()
        wait_ready(self._running_nodes(), ready_timeout, transactions=True)

    def _running_nodes(self) -> list[KafkaNode]:
        return [n for n in self.nodes.values() if n.proc is not None]

    def stop(self) -> None:
        """Stop everything: the brokers that are not controllers first (their controlled
        shutdown needs the quorum), then the rest."""
        first = [n for n in self.nodes.values() if "controller" not in n.props["process.roles"]]
        last = [n for n in self.nodes.values() if n not in first]
        for group in (first, last):
            for n in group:
                if n.running:
                    assert n.proc is not None
                    n.proc.terminate()
            for n in group:
                n.terminate(timeout=20)

    def __enter__(self) -> KafkaCluster:
        self.start_all()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
