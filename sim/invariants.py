"""The invariants, checked after every step of a simulation.

* **one writer per partition epoch** -- :mod:`sim.store` sees every acknowledged append; an
  append accepted at an epoch that is not the partition's current one, or two processes
  appending at one epoch, is a violation (collected here);
* **no acknowledged commit lost** -- every offset commit a member got a success for has its
  record in the durable log of its partition (the simulation keeps every entry: no
  snapshots trim the log);
* **no partition owned by two members at once** -- in every consumer group of the serving
  process (classic members in it included), the partitions assigned to members plus those
  pending their revocation never overlap: a member is given a partition only once its
  previous owner revoked it; in every classic group, the assignments the coordinator holds
  for its members (one generation's) never overlap;
* **epochs monotonic** -- a group's epoch never goes back, in the serving process's live
  state nor in the log (members check their own member epoch on every answer); a classic
  group's generation never goes back in the log nor in one load of its partition, and a
  conversion (upgrade, downgrade) keeps the epoch (see ``Checker._epoch``);
* **no zombie commits** (KIP-1251) -- an OffsetCommit a KIP-848 member got a success for, sent
  at an epoch older than the member's, was written where the group's log had the member
  holding that partition (assigned or pending revocation) since that epoch or before: from the
  log alone (the members' current-assignment records before the commit's record), not from
  the coordinator's own check;
* **synced generations durable** -- a classic SyncGroup answered NONE at generation N: the
  group's log holds generation (or, converted since, group epoch) N or later;
* **replay equals live** -- a partition rebuilt from its durable log has exactly the live
  state of the process serving it (when it has nothing in flight);
* **a lease is one interval** -- per (partition, epoch) the store's lease is live for one
  stretch of the store's time: once seen expired (or gone), it never becomes live again --
  only a live lease may be renewed, and a new holder gets a new epoch;
* **a shard serves only under its lease** (multi-shard seeds) -- a running shard process
  that counts a partition as served (ACTIVE, accepting, before its local lease deadline)
  holds that partition's live lease in the store at its epoch: a shard resumed after a pause
  longer than its lease, or cut off from the store, refuses requests before another shard
  can take the partition (except within a lease period of a fault that makes the store
  itself forget or expire leases under their holder: ``lease_loss``, ``store_clock``);
* **deleted topics released** -- once every group settled, no member of a consumer group
  holds (or is revoking) a partition of a topic an admin deleted;
* **liveness** -- checked by :class:`sim.world.Sim`: after the faults stop, every group is
  Stable with exactly its live members within a bound.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from shards.adapters.catalog_codec import decode_catalog
from shards.adapters.record_codec import RecordCodec
from shards.core.classic import consumer_protocol as cp
from shards.core.classic.group import STABLE, ClassicGroup
from shards.core.consumer.group import ConsumerGroup, ConsumerGroupState
from shards.core.placement import partition_for
from shards.core.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    GroupMetadataKey,
    OffsetCommitKey,
    TxnOffsetCommitKey,
)
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.streams.group import StreamsGroup
from shards.core.streams.records import (
    StreamsGroupCurrentMemberAssignmentKey,
    StreamsGroupMemberMetadataKey,
    StreamsGroupMetadataKey,
)
from shards.runtime.partition import PartitionState
from sim.streams import GROUP as STREAMS_GROUP
from sim.streams import SOURCE as STREAMS_SOURCE

if TYPE_CHECKING:
    from sim.world import Sim


class _NoTimer:
    """The replayed copy schedules nothing."""

    def schedule(self, *args: Any) -> None:
        pass

    def schedule_keyed(self, *args: Any) -> None:
        pass

    def postpone(self, *args: Any) -> bool:
        return False

    def cancel(self, *args: Any) -> None:
        pass

    def is_scheduled(self, *args: Any) -> bool:
        return False


#: where a commit was written: (member -> member epoch, [(holder of the partition, the
#: epoch it was assigned to it at)])
_Written = tuple[dict[str, int], list[tuple[str, int]]]


class Checker:
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.codec = RecordCodec()
        #: group id -> its epoch (a classic group's: its generation in the log) as last seen
        self.group_epochs: dict[str, int] = {}
        #: group id -> (classic?, its member ids) as last seen (conversions: _epoch)
        self._last_seen: dict[str, tuple[bool, frozenset[str]]] = {}
        #: (classic group id, process) -> the live generation last seen there
        self.classic_live: dict[tuple[str, str], int] = {}
        #: group id -> the highest generation / group epoch written to its log
        self._durable_epoch: dict[str, int] = {}
        self._synced_checked = 0
        #: a classic member's assignment (consumer protocol bytes) -> its partitions
        self._assignments: dict[bytes, list[tuple[str, int]]] = {}
        self._seen_violations = 0
        self._acked_checked = 0
        self.checks = 0
        #: partition -> [state machine replaying its log, last offset replayed,
        #: ((that offset, id of its topics image), its fingerprint) or None]
        self._shadows: dict[int, list[Any]] = {}
        #: id(log entry) -> (entry, its records): each entry decoded once
        self._decoded: dict[int, tuple[Any, list[Any]]] = {}
        self._durable: set[tuple[str, str, int, int]] = set()
        #: (group, member) -> (member epoch, (topic id, partition) -> assignment epoch) as
        #: the log holds them so far (no zombie commits)
        self._log_holdings: dict[tuple[str, str], tuple[int, dict[tuple[str, int], int]]] = {}
        #: every topic id -> name seen in the store's catalog, and its version last read
        self._topic_names: dict[str, str] = {}
        self._catalog_version = -1
        #: a commit record (group, topic, partition, offset) -> where each copy was written
        #: (:meth:`_holders`)
        self._commit_holders: dict[tuple[str, str, int, int], list[_Written]] = {}
        #: ... of each transactional offset, where its pending record was written
        self._txn_holders: dict[tuple[str, str, int, int], list[_Written]] = {}
        #: a classic group's last GroupMetadata in the log: (generation, member ids); and
        #: for each transactional offset of a classic group, that where it was written
        self._classic_log: dict[str, tuple[int, frozenset[str]]] = {}
        self._classic_at: dict[tuple[str, str, int, int], list[tuple[int, frozenset[str]]]] = {}
        self._durable_seen: dict[int, int] = {}
        #: the log offset up to which group deletions were looked for, per partition
        self._deletions_seen: dict[int, int] = {}
        #: group id -> how many of its lives ended in the log so far (deleted or replaced)
        self._lives_ended: dict[str, int] = {}
        #: (group, topic, partition) -> [(virtual s it became durable, its offset, -1: gone)]
        self._offset_history: dict[tuple[str, str, int], list[tuple[float, int]]] = {}
        #: the keys whose history is not in time order (the others are looked up by
        #: bisection: a seed with long histories and many reads was quadratic -- seed 352797
        #: of the sweep ran for minutes)
        self._history_unordered: set[tuple[str, str, int]] = set()
        self._history_seen: dict[int, int] = {}
        self._reads_checked = 0
        #: group -> the type of group its log holds ("consumer", "classic", None: none)
        self._log_kinds: dict[str, str | None] = {}
        #: group -> its members as its log holds them
        self._log_members: dict[str, set[str]] = {}
        #: partition -> the epoch of the live lease last seen there
        self._lease_live: dict[int, int] = {}
        #: (partition, epoch) of leases seen expired or gone: store time when first seen so
        self._lease_ended: dict[tuple[int, int], int] = {}
        #: the last group / member state seen (coverage of the transitions: sim.coverage)
        self._states: dict[str, str] = {}
        self._member_states: dict[tuple[str, str], str] = {}

    # ---- helpers ----------------------------------------------------------------------------
    def _true_owner(self) -> list[tuple[Any, Any]]:
        """(process, partition) for every partition served ACTIVE by the process holding its
        current epoch."""
        out = []
        for proc in self.sim.processes:
            if not proc.alive:
                continue
            for n, p in proc.runtime.partitions.items():
                if p.state is PartitionState.ACTIVE and p.epoch == self.sim.data.epochs.get(n):
                    out.append((proc, p))
        return out

    def _replay(self, proc: Any, partition: int) -> CoordinatorStateMachine:
        """The partition rebuilt from its durable log. Incremental: the simulation never
        trims a log (no snapshots, no truncation), so the copy replays each entry once."""
        data = self.sim.data
        shadow = self._shadows.get(partition)
        if shadow is None:
            sm = CoordinatorStateMachine(
                self.sim.coordinator_config,
                _NoTimer(),
                proc.catalog.image,
                partition,
                new_uuid=self.sim.new_uuid_for_replay,
            )
            shadow = self._shadows[partition] = [sm, 0, None]
        sm, done, _ = shadow
        assert partition not in data.snapshots, "the simulation takes no snapshots"
        for entry in _after(data.logs.get(partition, []), done):
            for record in self._decode(entry):
                sm.replay(record)
            done = entry.offset
        shadow[1] = done
        sm.topics = proc.catalog.image
        return sm

    def records_since(self, seen: dict[int, int]) -> Iterator[tuple[float, Any]]:
        """(the virtual time its entry became durable, record) of every record of the
        durable logs after ``seen`` (partition -> the last entry offset seen: moved on)."""
        sim = self.sim
        at = sim.store_world.appended_at
        for partition, entries in sim.data.logs.items():
            for entry in _after(entries, seen.get(partition, 0)):
                when = at.get((partition, entry.offset), sim.loop.now)
                for record in self._decode(entry):
                    yield when, record
                seen[partition] = entry.offset

    def _decode(self, entry: Any) -> list[Any]:
        records = self._decoded.get(id(entry))
        if records is None:
            records = self._decoded[id(entry)] = (entry, self.codec.decode_batch(entry.data))
        return records[1]

    # ---- the checks -------------------------------------------------------------------------
    def check(self, full: bool) -> None:
        sim = self.sim
        self.checks += 1
        w = sim.store_world
        while self._seen_violations < len(w.violations):
            sim.violation(w.violations[self._seen_violations])
            self._seen_violations += 1
        self._leases()
        self._deletions()
        if sim.multi:
            self._serves_under_lease()
        for proc, p in self._true_owner():
            sm = p.sm
            if sm is None:
                continue
            # state with nothing in flight is durable state; records not durable yet may
            # still be discarded (a failed append), taking their epoch bump with them
            idle = p._inflight is None and not p._pending.records
            for gid, g in sm.group_manager.groups.items():
                if isinstance(g, ConsumerGroup):
                    self._exclusive(gid, g)
                    self._transitions(gid, g)
                elif isinstance(g, ClassicGroup):
                    self._classic_exclusive(gid, g)
                    self._classic_transitions(gid, g)
                elif isinstance(g, StreamsGroup) and sim.streams is not None:
                    sim.streams.exclusive(gid, g)
                    self._streams_transitions(gid, g)
                else:
                    continue
                if idle:
                    self._epoch(gid, g, f"{proc.name} live", f"{proc.name}@{p.epoch}")
            if full and idle:
                replayed = self._replay(proc, p.partition)
                shadow = self._shadows[p.partition]
                # the copy's fingerprint, computed again only when it replayed more of the log
                # or sees another topics image (a check costs the live fingerprint only)
                key = (shadow[1], id(replayed.topics))
                if shadow[2] is None or shadow[2][0] != key:
                    for gid, g in replayed.group_manager.groups.items():
                        if isinstance(g, ConsumerGroup | ClassicGroup | StreamsGroup):
                            self._epoch(gid, g, "log")
                    shadow[2] = (key, replayed.fingerprint())
                live, again = sm.fingerprint(), shadow[2][1]
                if live != again:
                    sim.violation(
                        f"replay differs from live state: partition {p.partition} on {proc.name}"
                        f" ({_diff(live, again)})"
                    )
        if full:
            self._acked()
            self._reads()
            sim.retention.check()
            if sim.txn is not None:
                sim.txn.check()

    def _serves_under_lease(self) -> None:
        sim = self.sim
        if sim.loop.now - sim.lease_fault_at < sim.cfg.shard_lease_ms / 1000:
            return
        now = sim.store_world.clock.now_ms()
        for proc in sim.processes:
            if not proc.alive or proc in sim.loop.paused:
                continue
            for n, p in proc.runtime.partitions.items():
                if p.state is not PartitionState.ACTIVE or not p._accepting or p.lease_lapsed():
                    continue
                lease = sim.data.leases.get(n)
                if (
                    lease is None
                    or lease.owner != proc.name
                    or lease.epoch != p.epoch
                    or lease.expires_at_ms <= now
                ):
                    held = "none" if lease is None else f"{lease.owner}@{lease.epoch}"
                    sim.violation(
                        f"serves without its lease: {proc.name} serves partition {n} at epoch "
                        f"{p.epoch}, the store's lease is {held}"
                        + ("" if lease is None or lease.expires_at_ms > now else " (expired)")
                    )

    def group_life(self, group_id: str) -> int:
        """How many lives of ``group_id`` have ended in the durable log so far (the log read
        up to now): a member that synced in one life and again in a later one may see a
        lower generation -- the group started over."""
        self._deletions()
        return self._lives_ended.get(group_id, 0)

    def _deletions(self) -> None:
        """A group deleted (an empty group without offsets cleaned up, DeleteGroups) or
        replaced (a join of the other protocol gives an empty group way: tombstones of the
        old type and a new group in one batch) starts over: its epoch history is forgotten.
        Checks are samples, so the end of a group and its new life can both fall between two
        of them; the log says so. It is followed batch by batch: which type of group holds
        the id, and its members as written (consumer groups: member records; classic
        groups: the members of the last GroupMetadata). A batch that tombstones the group's
        metadata ends its life unless the group had members when the batch began and the
        other type holds it after the batch -- a conversion (online upgrade or downgrade),
        which keeps the epoch; the same type again is the group deleted and created anew in
        one batch (seed 89911: emptied, deleted and rejoined while a store stall held the
        appends), which starts over.
        (A classic group written empty whose members have joined but never synced is
        converted with them, yet counts as replaced here: lenient, never a false alarm.)"""
        kinds, members = self._log_kinds, self._log_members
        for partition, entries in self.sim.data.logs.items():
            done = self._deletions_seen.get(partition, 0)
            for entry in _after(entries, done):
                began: dict[str, bool] = {}  # group -> it had members when the batch began
                ended: dict[str, str] = {}  # group -> the type whose metadata it tombstones
                #: groups an *empty* classic group of which was tombstoned in the batch: it is
                #: replaced, not converted (a KIP-848 join to an empty classic group starts a
                #: new consumer group) -- seed 979333: an emptied consumer group gave way to a
                #: classic join (a new empty classic group) which a KIP-848 join upgraded, all
                #: in one batch behind a store stall; the last tombstone, the classic one, looked
                #: like a conversion that keeps the epoch
                fresh: set[str] = set()
                for record in self._decode(entry):
                    key, value = record.key, record.value
                    if isinstance(
                        key, ConsumerGroupMemberMetadataKey | StreamsGroupMemberMetadataKey
                    ):
                        gid = key.group_id
                        began.setdefault(gid, bool(members.get(gid)))
                        held = members.setdefault(gid, set())
                        if value is None:
                            held.discard(key.member_id)
                        else:
                            held.add(key.member_id)
                        continue
                    if isinstance(key, ConsumerGroupMetadataKey):
                        gid, kind = key.group_id, "consumer"
                    elif isinstance(key, GroupMetadataKey):
                        gid, kind = key.group, "classic"
                    elif isinstance(key, StreamsGroupMetadataKey):
                        gid, kind = key.group_id, "streams"
                    else:
                        continue
                    began.setdefault(gid, bool(members.get(gid)))
                    if value is None:
                        if kinds.get(gid) == kind:
                            kinds[gid] = None
                            ended[gid] = kind
                            if kind == "classic":
                                if not members.get(gid):
                                    fresh.add(gid)
                                members[gid] = set()
                        continue
                    kinds[gid] = kind
                    if kind == "classic":
                        members[gid] = {m.member_id for m in value.members}
                for gid, was in ended.items():
                    # a conversion: the other type holds the group after the batch (the same
                    # type again is the group deleted and created anew: seed 89911)
                    if kinds.get(gid) not in (None, was) and began[gid] and gid not in fresh:
                        self.sim.coverage.hit("group", "converted (log)")
                        continue
                    self._lives_ended[gid] = self._lives_ended.get(gid, 0) + 1
                    self.group_epochs.pop(gid, None)
                    self._last_seen.pop(gid, None)
                    for k in [k for k in self.classic_live if k[0] == gid]:
                        del self.classic_live[k]
                    gone = kinds.get(gid) is None
                    self.sim.coverage.hit("group", "deleted" if gone else "replaced")
                if STREAMS_GROUP in began and not members.get(STREAMS_GROUP) and self.sim.streams:
                    # the streams group written empty (or deleted): an application shutdown
                    # request ends with it -- seen here, as checks may miss it in memory
                    # (seed 749399: emptied and deleted between two checks)
                    when = self.sim.store_world.appended_at.get((partition, entry.offset))
                    self.sim.streams.emptied(self.sim.loop.now if when is None else when)
                done = entry.offset
            self._deletions_seen[partition] = done

    def _leases(self) -> None:
        w = self.sim.store_world
        now = w.clock.now_ms()
        leases = self.sim.data.leases
        for partition, epoch in list(self._lease_live.items()):
            lease = leases.get(partition)
            if lease is None or lease.epoch != epoch:  # released, lost or taken over
                self._lease_ended.setdefault((partition, epoch), now)
                del self._lease_live[partition]
        for partition, lease in sorted(leases.items()):
            key = (partition, lease.epoch)
            if lease.expires_at_ms <= now:
                self._lease_ended.setdefault(key, now)
                self._lease_live.pop(partition, None)
            elif key in self._lease_ended:
                ended = self._lease_ended.pop(key)  # (reported once per revival)
                self.sim.violation(
                    f"lease revived: partition {partition} epoch {lease.epoch} "
                    f"({lease.owner}) had expired or ended (store time {ended}) and is live "
                    f"again at {now} until {lease.expires_at_ms}: renewed after expiry"
                )
            else:
                self._lease_live[partition] = lease.epoch

    def _exclusive(self, gid: str, g: ConsumerGroup) -> None:
        held: dict[tuple[str, int], str] = {}
        for mid, m in g.members.items():
            for assignment in (m.assigned_partitions, m.partitions_pending_revocation):
                for tid, parts in assignment.items():
                    for part in parts:
                        other = held.setdefault((tid, part), mid)
                        if other != mid:
                            self.sim.violation(
                                f"partition {tid[:6]}-{part} of group {gid} owned by two "
                                f"members at once: {other[:6]} and {mid[:6]}"
                            )

    def _transitions(self, gid: str, g: ConsumerGroup) -> None:
        hit = self.sim.coverage.hit
        state = g.state().value
        before = self._states.get(gid)
        if before != state:
            self._states[gid] = state
            hit("group_state", f"{before or 'new'}->{state}")
        seen = self._member_states
        for mid, m in g.members.items():
            ms = m.state.name
            b = seen.get((gid, mid))
            if b != ms:
                seen[(gid, mid)] = ms
                hit("member_state", f"{b or 'new'}->{ms}")

    def _classic_exclusive(self, gid: str, g: ClassicGroup) -> None:
        """In a classic group, the assignments the coordinator holds (those of one
        generation: the leader's SyncGroup sets them all at once) never overlap."""
        held: dict[tuple[str, int], str] = {}
        for mid, m in g.members.items():
            if not m.assignment:
                continue
            parts = self._assignments.get(m.assignment)
            if parts is None:
                try:
                    _, assignment = cp.decode_assignment(m.assignment)
                except cp.ConsumerProtocolError as ex:
                    self.sim.violation(f"group {gid}: undecodable assignment of {mid[:6]}: {ex}")
                    continue
                parts = self._assignments[m.assignment] = [
                    (tp.topic, part)
                    for tp in assignment.assigned_partitions
                    for part in tp.partitions
                ]
            for topic, part in parts:
                other = held.setdefault((topic, part), mid)
                if other != mid:
                    self.sim.violation(
                        f"partition {topic}-{part} of classic group {gid} generation "
                        f"{g.generation_id} owned by two members: {other[:6]} and {mid[:6]}"
                    )

    def _classic_transitions(self, gid: str, g: ClassicGroup) -> None:
        state = g.state.value
        key = f"classic {gid}"
        before = self._states.get(key)
        if before != state:
            self._states[key] = state
            self.sim.coverage.hit("classic_state", f"{before or 'new'}->{state}")

    def _streams_transitions(self, gid: str, g: StreamsGroup) -> None:
        state = g.state_name()
        key = f"streams {gid}"
        before = self._states.get(key)
        if before != state:
            self._states[key] = state
            self.sim.coverage.hit("streams_state", f"{before or 'new'}->{state}")

    def _epoch(
        self,
        gid: str,
        g: ConsumerGroup | ClassicGroup | StreamsGroup,
        where: str,
        proc: str | None = None,
    ) -> None:
        """A group's epoch (a consumer or streams group's group epoch, a classic group's
        generation) never goes back. A classic group's generation is moved on in memory when a join
        phase completes and written only with the leader's assignment (SyncGroup), as in
        Kafka: a process that takes over reloads the last written one, so a classic group's
        live generation is held monotonic per process, and against the log only through
        the synced generations (``_acked``: a SyncGroup answered at generation N means the
        log holds N or later). A conversion keeps the epoch (an upgrade makes the generation
        the group epoch, a downgrade the group epoch the generation): a group of the other
        type that holds a member of the last one seen is a conversion; one that holds none
        replaced an empty group (a join gives an empty group of the other type way) and
        starts over."""
        classic = isinstance(g, ClassicGroup)
        epoch = g.generation_id if isinstance(g, ClassicGroup) else g.group_epoch
        members = frozenset(g.members)
        last = self._last_seen.get(gid)
        self._last_seen[gid] = (classic, members)
        if last is not None and last[0] != classic:
            kind = "consumer->classic" if classic else "classic->consumer"
            if members & last[1]:
                self.sim.coverage.hit("migration", kind)
            else:  # a new group: its epoch starts over
                self.sim.coverage.hit("migration", f"{kind} (empty group replaced)")
                self.group_epochs.pop(gid, None)
                for key in [k for k in self.classic_live if k[0] == gid]:
                    del self.classic_live[key]
        if classic and proc is not None:
            before_here = self.classic_live.get((gid, proc), 0)
            if epoch < before_here:
                self.sim.violation(
                    f"classic group {gid} generation went back from {before_here} to {epoch} "
                    f"({where})"
                )
            self.classic_live[(gid, proc)] = epoch
            return
        before = self.group_epochs.get(gid, 0)
        if epoch < before:
            self.sim.violation(f"group {gid} epoch went back from {before} to {epoch} ({where})")
        else:
            self.group_epochs[gid] = epoch

    def _durable_max(self, gid: str, epoch: int) -> None:
        if epoch > self._durable_epoch.get(gid, 0):
            self._durable_epoch[gid] = epoch

    def _hold(self, group: str, member: str, value: Any) -> None:
        """A member's current-assignment record, applied to the log's holdings."""
        if value is None:
            self._log_holdings.pop((group, member), None)
            return
        held: dict[tuple[str, int], int] = {}
        for tps in (value.assigned_partitions, value.partitions_pending_revocation):
            for tp in tps:
                epochs = _given_at(tp.assignment_epochs, tp.partitions, value.member_epoch)
                for p, e in zip(tp.partitions, epochs, strict=True):
                    held[(tp.topic_id, p)] = e
        self._log_holdings[(group, member)] = (value.member_epoch, held)

    def _hold_tasks(self, group: str, member: str, value: Any) -> None:
        """A streams member's current-assignment record, applied to the log's holdings: its
        active tasks, assigned or pending revocation, as the partitions of the topic their
        subtopology reads (sim/streams.py's topology: a task per partition), at the epochs
        they were given at (KIP-1251's task epochs)."""
        if value is None:
            self._log_holdings.pop((group, member), None)
            return
        held: dict[tuple[str, int], int] = {}
        for tasks in (value.active_tasks, value.active_tasks_pending_revocation):
            for t in tasks:
                source = STREAMS_SOURCE.get(t.subtopology_id)
                epochs = _given_at(t.assignment_epochs, t.partitions, value.member_epoch)
                for tid, name in self._topic_names.items():
                    if name == source:
                        for p, e in zip(t.partitions, epochs, strict=True):
                            held[(tid, p)] = e
        self._log_holdings[(group, member)] = (value.member_epoch, held)

    def _holders(self, group: str, topic: str, partition: int) -> _Written:
        """Where a commit of ``topic``-``partition`` in ``group`` is written: every member's
        epoch, and who held the partition at which assignment epoch (every topic id that had
        the name: a topic re-created under its name has two)."""
        names = self._topic_names
        epochs: dict[str, int] = {}
        holders: list[tuple[str, int]] = []
        for (g, member), (member_epoch, held) in self._log_holdings.items():
            if g != group:
                continue
            epochs[member] = member_epoch
            for (tid, p), assigned in held.items():
                if p == partition and names.get(tid) == topic:
                    holders.append((member, assigned))
        return epochs, holders

    def _zombie(self, commit: tuple[str, str, int, int]) -> None:
        classic = self.sim.classic_txn_senders.get(commit)
        if classic is not None:
            self._classic_zombie(commit, *classic)
            return
        sender = self.sim.commit_senders.get(commit)
        if sender is None:
            return  # (a classic member's, or the admin's)
        member, epoch = sender
        written = self._commit_holders.get(commit) or self._txn_holders.get(commit, [])
        for epochs, holders in written:
            current = epochs.get(member)
            if current is None:
                continue
            if epoch == current:
                self.sim.coverage.hit("commit-epoch", "current")
                return  # the current epoch commits any partition (as Kafka: no check)
            if any(h == member and assigned <= epoch < current for h, assigned in holders):
                self.sim.coverage.hit("commit-epoch", "older, held since")
                return
        self.sim.violation(
            f"zombie commit acknowledged: {member} committed {commit[1]}-{commit[2]} of "
            f"{commit[0]} at epoch {epoch}; where it was written the log had "
            f"{[(e.get(member), h) for e, h in written]} (its epoch, the partition's holders "
            f"and their assignment epochs)"
        )

    def _classic_zombie(self, commit: tuple[str, str, int, int], member: str, gen: int) -> None:
        """A transactional classic consumer's accepted offset was written where the group's
        last GroupMetadata in the log had it at that generation. (Lenient where the group's
        memory runs ahead of its log -- a member removed, a rebalance not yet synced: Kafka
        writes the group at the end of a rebalance only; never a false alarm, as a member
        learns a generation only once it is written.)"""
        written = self._classic_at.get(commit, [])
        if any(g == gen and member in members for g, members in written):
            self.sim.coverage.hit("commit-epoch", "classic transactional: of the generation")
            return
        self.sim.violation(
            f"zombie commit acknowledged: {member} committed {commit[1]}-{commit[2]} of "
            f"classic group {commit[0]} in a transaction at generation {gen}; where it was "
            f"written the log had {[(g, sorted(m[:6] for m in ms)) for g, ms in written]} "
            "(the group's generation and members)"
        )

    def _catalog_names(self) -> None:
        """Every topic id -> name the store's catalog has held (ids are never reused): read
        from the store, not from a process -- with every shard down there is none to ask
        (seed 181438: a commit checked just after the only shard crashed)."""
        catalog = self.sim.data.catalog
        if catalog.version != self._catalog_version:
            self._catalog_version = catalog.version
            image = decode_catalog(catalog.version, catalog.data)
            self._topic_names.update((t.topic_id, t.name) for t in image.by_name.values())

    def _acked(self) -> None:
        sim = self.sim
        self._catalog_names()
        if self._acked_checked == len(sim.acked) and self._synced_checked == len(sim.synced):
            return
        durable = self._durable
        for partition, entries in sim.data.logs.items():
            done = self._durable_seen.get(partition, 0)
            for entry in _after(entries, done):
                for record in self._decode(entry):
                    key, value = record.key, record.value
                    if isinstance(key, OffsetCommitKey) and value is not None:
                        commit = (key.group, key.topic, key.partition, value.offset)
                        durable.add(commit)
                        if commit not in self._txn_holders:  # (else: a transaction's, see below)
                            self._commit_holders.setdefault(commit, []).append(
                                self._holders(key.group, key.topic, key.partition)
                            )
                    elif isinstance(key, TxnOffsetCommitKey) and value is not None:
                        # a transactional offset, pending: acknowledged once written (its
                        # COMMIT marker makes it an offset record later, wherever the
                        # partition then is): held to "no zombie commits" here
                        commit = (key.group, key.topic, key.partition, value.offset)
                        durable.add(commit)
                        self._txn_holders.setdefault(commit, []).append(
                            self._holders(key.group, key.topic, key.partition)
                        )
                        classic = self._classic_log.get(key.group)
                        if classic is not None:
                            self._classic_at.setdefault(commit, []).append(classic)
                    elif isinstance(key, ConsumerGroupCurrentMemberAssignmentKey):
                        self._hold(key.group_id, key.member_id, value)
                    elif isinstance(key, StreamsGroupCurrentMemberAssignmentKey):
                        self._hold_tasks(key.group_id, key.member_id, value)
                    elif isinstance(key, GroupMetadataKey):
                        if value is None:
                            self._classic_log.pop(key.group, None)
                            continue
                        self._durable_max(key.group, value.generation)
                        self._classic_log[key.group] = (
                            value.generation,
                            frozenset(m.member_id for m in value.members),
                        )
                    elif isinstance(key, ConsumerGroupMetadataKey) and value is not None:
                        self._durable_max(key.group_id, value.epoch)
                done = entry.offset
            self._durable_seen[partition] = done
        for commit in sim.acked[self._acked_checked :]:
            if commit not in durable:
                sim.violation(f"acknowledged commit lost: {commit}")
            else:
                self._zombie(commit)
        self._acked_checked = len(sim.acked)
        # a SyncGroup answered NONE at generation N: the group's log holds generation (or,
        # converted since, group epoch) N or later -- an assignment handed out is durable
        for gid, generation, name in sim.synced[self._synced_checked :]:
            if self._durable_epoch.get(gid, 0) < generation:
                sim.violation(
                    f"synced generation not durable: {name} got its assignment of group {gid} "
                    f"at generation {generation}, the log holds up to "
                    f"{self._durable_epoch.get(gid, 0)}"
                )
        self._synced_checked = len(sim.synced)

    def _reads(self) -> None:
        """A committed offset read back (OffsetFetch) is one the durable log held for that
        partition at some instant between the request's sending and its answer: the value
        current when it was sent, or one written (or a tombstone, answered -1) before the
        answer came. A shard answering from a state it no longer owns -- resumed after a
        pause, cut off from the store -- answers an older one: a stale read."""
        sim = self.sim
        if self._reads_checked == len(sim.reads):
            return
        history = self._offset_history
        for when, record in self.records_since(self._history_seen):
            key = record.key
            if isinstance(key, OffsetCommitKey):
                value = -1 if record.value is None else record.value.offset
                k = (key.group, key.topic, key.partition)
                seen = history.setdefault(k, [])
                if seen and when < seen[-1][0]:
                    self._history_unordered.add(k)
                seen.append((when, value))
        for group, topic, part, offset, sent, answered, who in sim.reads[self._reads_checked :]:
            k = (group, topic, part)
            allowed = {-1}
            written = history.get(k, [])
            if written and k not in self._history_unordered:
                # in time order: the value current at the sending, then those written
                # before the answer (what the loop below finds, in O(log n + found))
                first = bisect.bisect_right(written, sent, key=_when)
                last = bisect.bisect_right(written, answered, key=_when)
                if first:
                    allowed = {written[first - 1][1]}
                allowed.update(value for _, value in written[first:last])
            else:
                for when, value in written:
                    if when <= sent:
                        allowed = {value}
                    elif when <= answered:
                        allowed.add(value)
                    else:
                        break
            if offset in allowed:
                sim.coverage.hit("fetch", "read checked" if offset != -1 else "read checked (none)")
                continue
            sim.violation(
                f"stale read: {who} read offset {offset} of {group} {topic}-{part}; between "
                f"its sending ({sent * 1000:.0f} ms) and the answer ({answered * 1000:.0f} ms) "
                f"the log held {sorted(allowed)}"
            )
        self._reads_checked = len(sim.reads)

    # ---- liveness ---------------------------------------------------------------------------
    def _groups(self) -> dict[str, ConsumerGroup | ClassicGroup]:
        out: dict[str, ConsumerGroup | ClassicGroup] = {}
        for _, p in self._true_owner():
            for gid, g in p.sm.group_manager.groups.items():
                if isinstance(g, ConsumerGroup | ClassicGroup):
                    out[gid] = g
        return out

    def all_stable(self) -> bool:
        groups = self._groups()
        owners = self._true_owner()
        if len(owners) < self.sim.cfg.num_partitions:
            return False
        # settled under the current catalog: a shard paused or cut off through a topic
        # change sees it at its next poll, and its groups move then (seed 20433)
        latest = self.sim.data.catalog.version
        if any(p.sm is None or p.sm.topics.version < latest for _, p in owners):
            return False
        for gid in {m.group for m in self.sim.members}:
            live = {m.member_id for m in self.sim.members if m.group == gid and m.alive}
            g = groups.get(gid)
            if g is None:
                if live:
                    return False
                continue
            if set(g.members) != live:
                return False
            if isinstance(g, ClassicGroup):
                stable, epoch = g.state is STABLE, g.generation_id
            else:
                stable, epoch = g.state() is ConsumerGroupState.STABLE, g.group_epoch
            if live and not stable:
                return False
            for m in self.sim.members:
                if m.alive and m.group == gid:
                    # (a classic member: joined, its SyncGroup answered at that generation)
                    if m.epoch != epoch or not getattr(m, "joined", True):
                        return False
        streams = self.sim.streams
        if streams is not None and not streams.stable(self._streams_group()):
            return False
        txn = self.sim.txn
        return txn is None or txn.stable(self._owner_of)

    def _owner_of(self, group: str) -> CoordinatorStateMachine | None:
        """The state machine of ``group``'s coordinator (None: its partition not served)."""
        n = partition_for(group, self.sim.cfg.num_partitions)
        return next((p.sm for _, p in self._true_owner() if p.partition == n), None)

    def _streams_group(self) -> StreamsGroup | None:
        """The streams application's group, as its coordinator holds it (None: none)."""
        for _, p in self._true_owner():
            g = p.sm.group_manager.groups.get(STREAMS_GROUP)
            if isinstance(g, StreamsGroup):
                return g
        return None

    def deleted_topics_released(self) -> None:
        """Once settled: no member of a consumer group holds (or is revoking) a partition of
        a topic an admin deleted."""
        gone = self.sim.deleted_topic_ids
        names = set(gone.values())
        # (not a violation: a partition loaded after the deletion, or whose write of the
        # tombstones failed, never sees the image change, and a commit checked before the
        # deletion may land after it -- Kafka's coordinator, too, acts on the metadata
        # change when it sees it; counted, docs/simulation.md)
        for _, p in self._true_owner():
            for by_topic in p.sm.offset_manager.offsets.values():
                if names & set(by_topic):
                    self.sim.coverage.hit("admin", "offsets of a deleted topic kept")
        for gid, g in self._groups().items():
            if not isinstance(g, ConsumerGroup):
                continue
            for mid, m in g.members.items():
                for assignment in (m.assigned_partitions, m.partitions_pending_revocation):
                    for tid in set(assignment) & set(gone):
                        self.sim.violation(
                            f"deleted topic still assigned: {gone[tid]} ({tid[:6]}) to member "
                            f"{mid[:6]} of {gid} after the group settled"
                        )

    def describe(self) -> str:
        groups = self._groups()
        parts = []
        for gid in sorted({m.group for m in self.sim.members}):
            g = groups.get(gid)
            live = sorted(m.name for m in self.sim.members if m.group == gid and m.alive)
            if g is None:
                parts.append(f"{gid}: not loaded, live members {live}")
            elif isinstance(g, ClassicGroup):
                parts.append(
                    f"{gid}: classic {g.state.value} generation {g.generation_id}, "
                    f"{len(g.members)} members in the group, live {live}"
                )
            else:
                parts.append(
                    f"{gid}: {g.state().value} epoch {g.group_epoch}, {len(g.members)} members "
                    f"in the group, live {live}"
                )
        if self.sim.streams is not None:
            parts.append(self.sim.streams.describe(self._streams_group()))
        if self.sim.txn is not None:
            parts.append(self.sim.txn.describe(self._owner_of))
        return "; ".join(parts)


def _given_at(epochs: Any, partitions: Any, member_epoch: int) -> Any:
    """The epochs a record's partitions (or tasks) were given at: its KIP-1251 assignment
    epochs, or -- a record without them -- the member's epoch for each."""
    if len(epochs) != len(partitions):
        return (max(member_epoch, 0),) * len(partitions)
    return epochs


def _after(entries: list[Any], offset: int) -> list[Any]:
    """The entries of a log after ``offset`` (a log is in offset order; a check takes up
    where the last one ended without walking what it saw)."""
    return entries[bisect.bisect_right(entries, offset, key=_offset) :]


def _offset(entry: Any) -> int:
    return int(entry.offset)


def _diff(a: Any, b: Any) -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=repr):
            if a.get(k) != b.get(k):
                return f"{k!r}: live {str(a.get(k))[:200]} / log {str(b.get(k))[:200]}"
    return f"live {str(a)[:200]} / log {str(b)[:200]}"


def _when(entry: tuple[float, int]) -> float:
    """The time of an offset history entry (bisection key)."""
    return entry[0]
