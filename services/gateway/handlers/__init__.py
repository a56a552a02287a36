"""The gateway's KafkaApis: one translator per served API, Kafka request -> gRPC -> response.

Each translator takes the decoded kio request and returns the response as plain data
(:func:`services.gateway.codec.build` shapes it for the request's version). Rules that a
Kafka broker applies in its API layer, before or after the group coordinator, live here
(except the topic checks of OffsetCommit/OffsetDelete and the request limits, which the
shard applies for gRPC callers and the gateway alike): topic names in ConsumerGroupDescribe,
authorized operations, the version-specific reshaping (OffsetFetch < v2 and LeaveGroup < v3
put group errors on partitions/top level; JoinGroup's protocol name null/""), the
mandatory SyncGroup v5 protocol fields, DeleteGroups de-duplication. Group rules proper
are the shard's: it receives the Kafka API version in ``context.api_version``.

Each API also has its *error shape* (Kafka's ``getErrorResponse``), used when the shard
cannot be reached or fails for good.

One module per API family, each a class of translators over the shared state of
:class:`.base.ApisBase` (the router, the topic catalog, the node); :class:`.apis.KafkaApis`
is all of them, with the table from API key to translator and error shape:

* :mod:`.connect` -- ApiVersions, SaslHandshake/SaslAuthenticate outside a SASL exchange,
  FindCoordinator;
* :mod:`.topics` -- Metadata, CreateTopics, DeleteTopics;
* :mod:`.no_data_plane` -- Produce, Fetch, ListOffsets;
* :mod:`.classic` -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup;
* :mod:`.consumer` -- ConsumerGroupHeartbeat, ConsumerGroupDescribe;
* :mod:`.offsets` -- OffsetCommit, OffsetFetch, OffsetDelete;
* :mod:`.groups` -- ListGroups, DescribeGroups, DeleteGroups;
* :mod:`.acls` -- DescribeAcls, CreateAcls, DeleteAcls;
* :mod:`.configs` -- DescribeConfigs, IncrementalAlterConfigs (GROUP resources).
"""

from services.gateway.handlers.apis import KafkaApis
from services.gateway.handlers.base import Node, RequestInfo
from services.gateway.handlers.no_data_plane import FETCH_MAX_WAIT_CAP_MS

__all__ = ["FETCH_MAX_WAIT_CAP_MS", "KafkaApis", "Node", "RequestInfo"]
