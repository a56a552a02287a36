"""Coverage of a simulation run: which transitions, error paths and faults it exercised.

A run counts what it hit under ``area:what`` keys (a plain counter: recording one costs a
dict increment, and nothing here draws from a seeded RNG or changes an order, so a run's
trace is the same with or without it):

* ``event:<kind>`` -- the external events applied (the fault kinds and member churn);
* ``heartbeat:<error>`` / ``commit:<error>`` -- the Kafka error codes members were answered;
* ``group_state:<from>-><to>`` and ``member_state:<from>-><to>`` -- the consumer group and
  member reconciliation states the serving process went through, as the checker saw them
  (``new`` for a group or member it had not seen before);
* ``runtime:<path>`` -- code paths of the runtime a fault drove: a partition lost (with the
  runtime's reason), failed (with the cause's type), taken back, a process that failed to
  start; ``after:<event kind>-><path>`` ties each to the last event applied before it;
* ``net:<what>`` -- requests and answers lost, duplicated, timed out;
* ``store:<what>`` -- store calls that failed before or after applying, waited out a stall,
  went to a dead process;
* ``mode:multi-shard`` and ``ownership:<what>`` (multi-shard seeds) -- the ownership
  managers' counters: ``moved_in`` (partitions loaded), ``moved_out`` (handed off or lost),
  ``failovers`` (taken over from a shard gone from the registry); ``shard:<what>`` -- shards
  paused, resumed, killed, stopped, started while a predecessor's registry entry lives;
  ``route:<what>`` -- what FindCoordinator told the clients (a coordinator, or none yet);
* ``assignor:slow: computations`` / ``assignor:slow: failed`` -- the slow server-side
  assignor's computations and failures (seeds with one); ``assignor:slow: failure spared,
  faults over`` -- failures it drew once the faults were over and did not make (a failure
  is a fault: the liveness bound is asked of a quiet system);
* ``mode:assignor service`` and ``assignor_service:<what>`` (seeds computing their targets
  on the assignor service) -- the shards' clients' counters (``client calls``, ``client
  remote_ok``, ``client retries``, ``client failures.<status>``, ``client
  fallbacks.<reason>``) and what the network and the replicas did (requests and answers
  lost, connections refused or reset, deadlines, replicas killed, paused, overloaded);
* ``mode:gateway`` and ``gateway:<what>`` (seeds with gateways) -- what the gateways'
  translators answered (``heartbeat <error>``, ``commit <error>``, ``join <error>``,
  ``sync <error>``, ``classic heartbeat <error>``, ``leave <error>``), what the network between
  gateways and shards did (``shard call refused``, ``shard call lost``, ``shard answer
  lost``, ``shard call deadline exceeded``), gateways ``killed`` and ``paused``;
  ``route:gateway`` / ``route:no gateway`` -- a member connecting to one (or finding none);
* ``admin:<kind> <error>`` -- the answers to the admin's topic deletions, OffsetDeletes and
  DeleteGroups (``<kind> failed``: a store error or no answer in time);
* ``mode:streams``, ``streams:<what>`` and ``streams_state:<from>-><to>`` (seeds with a
  Kafka Streams application: sim/streams.py) -- its members' heartbeat and commit answers
  (``heartbeat <error>``, ``commit <error>``), timeouts, members crashed and left, and the
  streams group's states as the checker saw them.
"""

from __future__ import annotations

from collections import Counter


class Coverage:
    """The counters of one run (``Result.coverage`` holds them as a plain dict)."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        #: the kind of the last event applied (``after:`` keys); "start" before any
        self.last_event = "start"

    def hit(self, area: str, what: str, n: int = 1) -> None:
        if n:
            self.hits[f"{area}:{what}"] += n

    def path(self, what: str) -> None:
        """A runtime code path, and the event that most likely led to it."""
        self.hits[f"runtime:{what}"] += 1
        self.hits[f"after:{self.last_event}->{what}"] += 1

    def as_dict(self, *more: Counter[str]) -> dict[str, int]:
        total = Counter(self.hits)
        for m in more:
            total.update(m)
        return dict(sorted(total.items()))
