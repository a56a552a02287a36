"""The Kafka-protocol gateway: unmodified Kafka clients in, gRPC calls on the shards out.

Theory of operation
-------------------
A connection is a byte stream of size-prefixed request frames. :mod:`.framing` cuts frames
(checking the declared size against the limit before buffering the frame) and parses the
request header; it has no I/O, so the fuzz tests drive it directly. :mod:`.codec` decodes
bodies and encodes responses with kio (Kafka's own message definitions, generated) and
knows which API versions are served (:data:`.codec.SERVED`). :mod:`.connection` runs one
connection like a Kafka broker does: one request in flight at a time (the next frame is
not read until the response is written), so pipelined requests are answered -- and take
effect -- in order; connections are independent asyncio tasks (:mod:`.server`).

:mod:`.handlers` is the gateway's ``KafkaApis``: each served API has a translator that turns
the Kafka request into gRPC calls and the answers into the Kafka response of the request's
version (plus the API's error shape for transport failures). It keeps no group state; the
only things it caches are *routes* (offsets partition -> owning shard, :mod:`.router`,
refreshed on NOT_COORDINATOR) and the *topic catalog* (:mod:`.topic_cache`, refreshed on a
miss), neither of which can make an answer wrong for longer than a retry.

:mod:`.app` wires it: settings, telemetry, router, server. ``groupcoord gateway`` and
``groupcoord dev --kafka-port`` build one.
"""
