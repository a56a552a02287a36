"""The pure core of a coordinator shard: group state machines and offset management.

Theory of operation (after Kafka's group-coordinator module)
------------------------------------------------------------
A :class:`shards.core.state_machine.CoordinatorStateMachine` (Kafka's GroupCoordinatorShard;
here "shard" names a process) holds the state of one offsets partition: its groups and their
committed offsets. Handlers take a request and the current
time and return a :class:`shards.runtime.contract.CoordinatorResult` -- the records to append and
the response. ``replay(record)`` is the function that changes hard state; the runtime calls
it for the records a handler returned (before their append is durable, so that the next
operation sees them; replies wait for durability and a failed append discards the state by
reloading the partition from its durable log), and for every record of the log when the
partition loads. Timers are keyed (``timer_keys``) and replaceable and fire as write
operations.

Hard and soft state (as Kafka's group coordinator)
--------------------------------------------------
*Hard* state is what the log holds and a load rebuilds: committed offsets, group configs,
every consumer-group record, and a classic group's last GroupMetadata record
(``ClassicGroup.persisted``). *Soft* state is in memory only and starts empty after a load:
a classic rebalance in progress (PreparingRebalance/CompletingRebalance, pending members,
pending syncs, the generation being synced), parked JoinGroup/SyncGroup replies, timers,
assignment tasks in flight, and indexes and caches derived from hard state.

Handlers of consumer groups and offsets do not change state: their records are replayed.
Handlers of classic groups, as Kafka's, change the group themselves (soft state, then the
GroupMetadata record of it) and say so on the result: ``replay_records=False``, appended
without replay (Kafka's ``replayRecords``); so does the online downgrade. The one other
change a handler makes: a consumer heartbeat that creates (or upgrades) a group registers
the group object at its end, so that the tasks it started hold the object that its records
are replayed into -- as Kafka's ``getOrMaybeCreateConsumerGroup`` puts a new group into its
map inside the heartbeat (its timeline structures revert that on a failed append). Here a
failed append discards all of it (the partition reloads).

Invariants
----------
* No I/O, no asyncio, no clock calls, no generated protobuf: time comes in as ``now_ms``;
  the only imports are the standard library, ``re2`` and this package (checked by
  ``tests/unit/test_layering.py``).
* Same inputs, same records: iteration is in sorted or insertion order, never set order.
* Replaying a partition's records into a fresh shard gives a hard state equal to the live
  one.
"""
