"""A small asyncio Kafka client for the cluster the gateway fronts in proxy mode.

Theory of operation
-------------------
:mod:`.wire` is one TCP (optionally TLS) connection to one upstream broker: size-prefixed
frames out, frames in. Kafka answers the requests of a connection in the order they were
sent, so a connection keeps a FIFO of the correlation ids it is waiting for; a response whose
correlation id is not the head of that FIFO, an oversized frame or a closed socket fails the
connection and every request waiting on it (the gateway then closes the client connection
that used it, as Kafka clients expect of a broker that went away). Requests can be client
frames forwarded as bytes (``send_frame``) or requests groupcoord builds itself with kio's
entities (``request``).

:mod:`.cluster` is the cluster as a whole: bootstrap servers, the broker list learned from
Metadata, a control connection per broker for groupcoord's own requests (Metadata,
ApiVersions, ListOffsets), and the two calls other parts of groupcoord use --
:meth:`.cluster.UpstreamCluster.fetch_topics` (the topic catalog mirror) and
:meth:`.cluster.UpstreamCluster.log_end_offsets` (consumer lag).

The topic catalog mirror itself is :mod:`shards.catalog_mirror` (run by the shard that owns
offsets partition 0; see docs/multi-shard.md).
"""
