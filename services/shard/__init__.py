"""The shard process: serves the GroupCoordinator and TopicCatalog gRPC services."""
