"""Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat, server-side target
assignment, per-member reconciliation, ConsumerGroupDescribe."""
