"""The coordinator runtime: the partitions this process serves, their event loops, group
commit, timers, load / reload / unload and lease renewal (Kafka's ``CoordinatorRuntime``).
It knows nothing about groups: the state machines come from a factory, records from a codec.
What a state machine and the runtime promise each other is :mod:`shards.runtime.contract`
(pure; the core imports it); the partitions' timers are :mod:`shards.runtime.timers`.

Invariants: operations on one partition run one at a time on the asyncio loop; a reply is
released only once everything it could have seen is durable; a partition whose append
failed is reloaded from its log, one fenced by another owner is closed.

Time: every timestamp, delay and timeout comes from one injected :class:`~shards.clock.Clock`
(``SystemClock`` in production, ``ManualClock`` in tests); nothing here reads the wall clock
or sleeps on its own. See :mod:`shards.clock`.
"""
