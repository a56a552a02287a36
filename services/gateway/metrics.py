"""The gateway's metrics: connections, Kafka requests by API and version, bytes.

One :class:`GatewayMetrics` per gateway process (None when metrics are off: the connection
code then records nothing). Attribute sets are cached per (API key, version), so a request
costs two dict lookups and a few integer adds (the counters are ``Tally``s, observed at
collection time) and one histogram measurement. Names and meanings: docs/observability.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from services.gateway import codec
from services.process import metrics as m

TO_CLIENT = {"direction": "out"}
FROM_CLIENT = {"direction": "in"}
TO_UPSTREAM = {"direction": "to_upstream"}
FROM_UPSTREAM = {"direction": "from_upstream"}
ACCEPTED = {"outcome": "accepted"}
#: versions above this (or of an unknown API) are labelled "other"
MAX_VERSION_LABEL = 30
REFUSED = {"outcome": "refused"}
#: why the gateway closed a connection (gateway_connections_closed)
IDLE = {"reason": "idle"}
SLOW_REQUEST = {"reason": "slow_request"}


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``join_group``); ``unknown`` for a key Kafka does not have
    (a client may send any number: labels must stay a closed set)."""
    spec = codec.SERVED.get(api_key)
    if spec is not None:
        return spec.name.lower()
    from kio.schema.index import api_key_map

    name = api_key_map.get(api_key)
    return str(name) if name is not None else "unknown"


class GatewayMetrics:
    def __init__(self, provider: Any = None) -> None:
        meter = self._meter = m.meter(f"{m.PREFIX}.gateway", provider)
        self.connections = meter.create_counter(
            "gateway_connections",
            unit="{connection}",
            description="Client connections accepted (or refused: too many open).",
        )
        self.closed = meter.create_counter(
            "gateway_connections_closed",
            unit="{connection}",
            description="Client connections the gateway closed for their time: no request "
            "within the idle timeout (idle), a request not whole within its arrival time "
            "(slow_request).",
        )
        self.requests = m.Tally(
            meter,
            "gateway_requests",
            unit="{request}",
            description="Kafka requests received, by API and version (proxy mode: forwarded "
            "ones included).",
        )
        self.latency = meter.create_histogram(
            "gateway_request_duration",
            unit="s",
            description="Time to answer a Kafka request the gateway serves itself (group and "
            "offset APIs, metadata), by API and version.",
            explicit_bucket_boundaries_advisory=m.LATENCY_BUCKETS_S,
        )
        self.bytes = m.Tally(
            meter,
            "gateway_bytes",
            unit="By",
            description="Bytes of Kafka frames from clients (in) and to clients (out).",
        )
        self.forwarded = m.Tally(
            meter,
            "gateway_forwarded_bytes",
            unit="By",
            description="Proxy mode: bytes forwarded to the upstream brokers (to_upstream) "
            "and from them to clients (from_upstream).",
        )
        self._attrs: dict[tuple[int, int], dict[str, str]] = {}
        #: the one dict per label set (the tallies key their totals by dict identity)
        self._labels: dict[tuple[str, str], dict[str, str]] = {}
        self._open: list[Callable[[], int]] = []
        meter.create_observable_gauge(
            "gateway_open_connections",
            callbacks=[m.observe(self._open_connections)],
            unit="{connection}",
            description="Client connections open now.",
        )

    def attrs(self, api_key: int, version: int) -> dict[str, str]:
        key = (api_key, version)
        found = self._attrs.get(key)
        if found is None:
            name = api_name(api_key)
            known = name != "unknown" and 0 <= version <= MAX_VERSION_LABEL
            label = (name, str(version) if known else "other")
            found = self._labels.get(label)
            if found is None:  # a closed set: Kafka's API names x versions 0-30 and "other"
                found = self._labels[label] = {"api": label[0], "version": label[1]}
            if len(self._attrs) < 10_000:  # (a bounded cache: keys come from clients)
                self._attrs[key] = found
        return found

    def observe_shard_streams(self, streams: Callable[[], Iterable[Any]]) -> None:
        """Counters of the batched hop to the shards (services.rpc.batch_calls), read at
        collection time from the ``BatchedCoordinator`` of each shard ``streams`` returns."""
        meter = self._meter
        labels: dict[str, dict[str, str]] = {}

        def counter(name: str, attribute: str, unit: str, description: str) -> None:
            def values() -> Iterable[tuple[float, dict[str, str] | None]]:
                out = []
                for stub in list(streams()):
                    label = labels.get(stub.target)
                    if label is None:
                        label = labels[stub.target] = {"shard": stub.target}
                    out.append((getattr(stub, attribute), label))
                return out

            meter.create_observable_counter(
                name, callbacks=[m.observe(values)], unit=unit, description=description
            )

        counter(
            "gateway_shard_streams_opened",
            "streams_opened",
            "{stream}",
            "Batch streams opened to each shard (one more after each break).",
        )
        counter(
            "gateway_shard_stream_messages",
            "messages_sent",
            "{message}",
            "Stream messages sent to each shard, each carrying the calls queued meanwhile.",
        )
        counter(
            "gateway_shard_stream_calls",
            "calls_sent",
            "{call}",
            "Calls sent over the batch streams to each shard (calls / messages: batch size).",
        )
        counter(
            "gateway_shard_stream_cancels",
            "cancels_sent",
            "{call}",
            "Calls whose caller gave up, cancelled on the shard.",
        )

    def count_open(self, source: Callable[[], int]) -> None:
        """Add a listener's open-connection count to the gauge."""
        self._open.append(source)

    def _open_connections(self) -> Iterable[tuple[float, dict[str, str] | None]]:
        return [(sum(f() for f in list(self._open)), None)]
