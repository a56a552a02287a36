"""The shard process: serves the GroupCoordinator and TopicCatalog gRPC services."""

#: how many distinct steady heartbeat requests the servicer remembers, ~0.28 KB each
#: (``services.shard.servicer.steady_heartbeat_answer``; here, where the command line reads
#: it without importing the servicer)
STEADY_MEMO_ENTRIES = 16_384
