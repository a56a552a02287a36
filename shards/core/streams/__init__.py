"""Streams groups (KIP-1071): Kafka Streams applications coordinated as a third group type.

A pure core, like ``shards.core.consumer``: handlers read the group, return records and an
answer, and only :mod:`~shards.core.streams.replay` changes a group. Invariants: the target
assignment gives every task of a ready topology to exactly one member; a member is given a
task only once no other member holds it; iteration is in sorted order, so the same inputs
give the same records. Design and status: docs/streams-groups.md.
"""
