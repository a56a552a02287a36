"""The pure core of a coordinator shard: group state machines and offset management.

Theory of operation (after Kafka's group-coordinator module)
------------------------------------------------------------
A :class:`shards.core.state_machine.CoordinatorStateMachine` (Kafka's GroupCoordinatorShard;
here "shard" names a process) holds the state of one offsets partition: its groups and their
committed offsets. Handlers take a request and the current
time and return a :class:`shards.core.result.CoordinatorResult` -- the records to append and
the response -- without changing any state. ``replay(record)`` is the one function that
changes state; the runtime calls it for the records a handler returned (before their append
is durable, so that the next operation sees them; replies wait for durability and a failed
append discards the state by reloading the partition from its durable log), and for every
record of the log when the partition loads. Timers are keyed and replaceable and fire as
write operations.

Invariants
----------
* No I/O, no asyncio, no clock calls, no generated protobuf: time comes in as ``now_ms``;
  the only imports are the standard library, ``re2`` and this package (checked by
  ``tests/unit/test_layering.py``).
* Same inputs, same records: iteration is in sorted or insertion order, never set order.
* Replaying a partition's records into a fresh shard gives a state equal to the live one.
"""
