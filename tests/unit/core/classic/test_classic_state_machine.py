"""A hypothesis state machine over one classic group: clients that join, sync, heartbeat,
commit, leave, restart (static members) or go silent; the clock; shard restarts.

Invariants after every step:
* replay equals live, and at rest (Empty/Stable) the group is exactly its last record;
* the group's bookkeeping is consistent (awaiting counts, static map, leader, protocols);
* in a Stable group every member holds the assignment the leader handed out for the current
  generation (a static member that replaced its slot holds that slot's assignment);
* a request naming a generation other than the group's never succeeds (heartbeat, sync,
  commit) -- and a JoinGroup naming an older one gets ILLEGAL_GENERATION.
At the end, with the clock run far enough, every parked JoinGroup/SyncGroup is answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from shards.core.classic.group import ClassicGroup, ClassicGroupState
from shards.core.errors import Errors
from tests.support.core_harness import Pending
from tests.support.machines import quick_and_slow
from tests.unit.core.classic.support import Classic

GROUP = "g"
N_CLIENTS = 4
REBALANCE_MS = 2_000
PROTOCOLS = (("range", b"r"), ("roundrobin", b"rr"))


@dataclass
class Client:
    index: int
    instance: str | None
    member_id: str = ""
    generation: int = -1
    incarnation: int = 0
    join: tuple[int, Pending] | None = None
    sync: tuple[int, int, Pending] | None = None  # (incarnation, generation, reply)
    leader_of: dict[str, None] = field(default_factory=dict)  # members, when leader
    session_ms: int = 1_000


class ClassicGroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = Classic(
            classic_group_initial_rebalance_delay_ms=100,
            classic_group_min_session_timeout_ms=100,
            classic_group_new_member_join_timeout_ms=5_000,
            classic_group_max_size=3,
        )
        self.clients = [
            Client(i, f"i{i}" if i % 2 == 0 else None, session_ms=800 + 400 * i)
            for i in range(N_CLIENTS)
        ]
        #: generation -> {member id -> assignment} handed out by that generation's leader
        self.plans: dict[int, dict[str, bytes]] = {}
        #: (generation, new member id) -> the member id whose slot it took over
        self.slots: dict[tuple[int, str], str] = {}
        #: every parked reply ever handed out (lost ones included): all must be answered
        self.parked: list[Pending] = []

    # ---- helpers ------------------------------------------------------------------------
    def group(self) -> ClassicGroup | None:
        g = self.c.h.shard.group_manager.groups.get(GROUP)
        return g if isinstance(g, ClassicGroup) else None

    def live_generation(self) -> int:
        g = self.group()
        return g.generation_id if g is not None else -1

    def on_join_response(self, client: Client, r: Any) -> None:
        if r.error_code == Errors.MEMBER_ID_REQUIRED:
            client.member_id = r.member_id
        elif r.error_code == Errors.ILLEGAL_GENERATION:
            client.generation = -1  # KIP-792: keep the member id, forget the generation
        elif r.error_code in (
            Errors.UNKNOWN_MEMBER_ID,
            Errors.FENCED_INSTANCE_ID,
            Errors.NOT_COORDINATOR,
        ):
            client.member_id, client.generation = "", -1
        elif r.error_code == Errors.NONE:
            previous = client.member_id
            client.member_id, client.generation = r.member_id, r.generation_id
            client.leader_of = (
                {m.member_id: None for m in r.members} if r.leader == r.member_id else {}
            )
            if client.instance is not None and previous == "" and r.generation_id in self.plans:
                # a static restart that kept the generation: the slot's old id
                old = [m for m in self.plans[r.generation_id] if m.startswith(client.instance)]
                for m in old:
                    self.slots[(r.generation_id, r.member_id)] = m
        # other errors (REBALANCE_IN_PROGRESS, GROUP_MAX_SIZE_REACHED...): retry later

    def settle(self) -> None:
        """Apply the replies that completed meanwhile to the clients' views."""
        for client in self.clients:
            if client.join is not None:
                incarnation, p = client.join
                if p.done:
                    client.join = None
                    if incarnation == client.incarnation:
                        self.on_join_response(client, p.value)
            if client.sync is not None:
                incarnation, generation, p = client.sync
                if p.done:
                    client.sync = None
                    if incarnation == client.incarnation and p.value.error_code in (
                        Errors.UNKNOWN_MEMBER_ID,
                        Errors.FENCED_INSTANCE_ID,
                    ):
                        client.member_id, client.generation = "", -1

    # ---- rules --------------------------------------------------------------------------
    @rule(i=st.integers(0, N_CLIENTS - 1))
    def join(self, i: int) -> None:
        client = self.clients[i]
        if client.join is not None:
            return
        live = self.live_generation()
        r = self.c.join(
            client.member_id,
            GROUP,
            protocols=PROTOCOLS if i % 3 else PROTOCOLS[::-1],
            session=client.session_ms,
            rebalance=REBALANCE_MS,
            instance=client.instance,
            generation=client.generation,
            client_id=f"c{i}",
        )
        if isinstance(r, Pending):
            client.join = (client.incarnation, r)
            self.parked.append(r)
        else:
            g = self.group()
            if 0 <= client.generation < live and g is not None and g.has_member(client.member_id):
                if client.instance is None or g.static_member_id(client.instance) == (
                    client.member_id
                ):
                    event("stale join")
                    assert r.error_code == Errors.ILLEGAL_GENERATION, r
            self.on_join_response(client, r)
            if r.error_code == Errors.MEMBER_ID_REQUIRED:
                self.join(i)  # as real clients do: rejoin with the given id at once
                return
        self.settle()

    @rule()
    def cooperative_round(self) -> None:
        """Every client behaves: joins, waits for the join phase, syncs (leader first)."""
        for i in range(N_CLIENTS):
            self.join(i)
        for _ in range(40):
            if all(c.join is None for c in self.clients):
                break
            self.c.sleep(100)
            self.settle()
        order = sorted(self.clients, key=lambda c: not c.leader_of)
        for client in order:
            self.sync(client.index)

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def sync(self, i: int) -> None:
        client = self.clients[i]
        if client.sync is not None or not client.member_id or client.generation < 0:
            return
        generation = client.generation
        plan: dict[str, bytes] = {}
        if client.leader_of:
            plan = {m: f"{generation}:{m}".encode() for m in client.leader_of}
        r = self.c.sync(client.member_id, generation, GROUP, plan, instance=client.instance)
        g = self.group()
        if g is not None and g.state is ClassicGroupState.STABLE and g.generation_id == generation:
            if g.is_leader(client.member_id) and client.leader_of and generation not in self.plans:
                self.plans[generation] = plan
        if isinstance(r, Pending):
            client.sync = (client.incarnation, generation, r)
            self.parked.append(r)
        else:
            if generation != self.live_generation():
                assert r.error_code != Errors.NONE, ("stale sync accepted", r)
            if r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                client.member_id, client.generation = "", -1
        self.settle()

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def heartbeat(self, i: int) -> None:
        client = self.clients[i]
        if not client.member_id:
            return
        live = self.live_generation()
        # the servicer's shortcut first (same state; it moves the session as the general
        # way does): it answers exactly the general way's NONE and REBALANCE_IN_PROGRESS
        fast = self.c.h.shard.classic_steady_heartbeat(
            GROUP, client.generation, client.member_id, client.instance, self.c.h.now
        )
        r = self.c.heartbeat(client.member_id, client.generation, GROUP, client.instance)
        quick = (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)
        assert fast == (r.error_code if r.error_code in quick else None), (fast, r)
        if client.generation != live:
            assert r.error_code != Errors.NONE, ("stale heartbeat accepted", client, live)
        if r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            client.member_id, client.generation = "", -1
        self.settle()

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def commit(self, i: int) -> None:
        client = self.clients[i]
        if not client.member_id or client.generation < 0:
            return
        live = self.live_generation()
        code = self.c.commit(client.member_id, client.generation, GROUP, client.instance)
        if client.generation != live:
            assert code != Errors.NONE, ("stale commit accepted", client, live)

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def leave(self, i: int) -> None:
        client = self.clients[i]
        if not client.member_id:
            return
        self.c.leave((client.member_id, client.instance), group=GROUP)
        client.member_id, client.generation, client.leader_of = "", -1, {}
        client.incarnation += 1
        self.settle()

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def stale_join(self, i: int) -> None:
        """A member names an older generation on JoinGroup (it lost a JoinGroup response)."""
        client = self.clients[i]
        g = self.group()
        if client.join is not None or g is None or g.generation_id < 1:
            return
        if not g.has_member(client.member_id) or g.state is ClassicGroupState.DEAD:
            return
        if client.instance is not None and g.static_member_id(client.instance) != client.member_id:
            return
        # (the size limit is checked first, as in Kafka: a member not yet waiting in a
        # rebalance that already waits for the maximum is turned away)
        full = (
            g.state is ClassicGroupState.PREPARING_REBALANCE
            and not g.member(client.member_id).is_awaiting_join
            and g.num_awaiting_join >= 3
        )
        r = self.c.join(
            client.member_id,
            GROUP,
            protocols=PROTOCOLS if i % 3 else PROTOCOLS[::-1],
            session=client.session_ms,
            rebalance=REBALANCE_MS,
            instance=client.instance,
            generation=g.generation_id - 1,
            client_id=f"c{i}",
        )
        if full:
            assert r.error_code == Errors.GROUP_MAX_SIZE_REACHED, r
            client.member_id, client.generation = "", -1
            return
        event("stale join")
        assert (r.error_code, r.member_id) == (Errors.ILLEGAL_GENERATION, client.member_id), r
        assert g.has_member(client.member_id)  # it keeps its member id
        client.generation = -1

    @rule(i=st.integers(0, N_CLIENTS - 1))
    def lose_replies(self, i: int) -> None:
        """The network loses the client's outstanding replies: it keeps its member id and the
        generation it knew, and will retry with them."""
        client = self.clients[i]
        if client.join is not None or client.sync is not None:
            client.incarnation += 1
            client.join = client.sync = None

    @rule(i=st.sampled_from([i for i in range(N_CLIENTS) if i % 2 == 0]))
    def static_restart(self, i: int) -> None:
        """The process restarts: it forgets its member id and generation (not its instance)."""
        client = self.clients[i]
        client.member_id, client.generation, client.leader_of = "", -1, {}
        client.incarnation += 1
        self.join(i)

    @rule(ms=st.sampled_from([1, 50, 100, 100, 400, 900, 2_000, 6_000]))
    def tick(self, ms: int) -> None:
        self.c.sleep(ms)
        self.settle()

    @rule()
    def restart_shard(self) -> None:
        self.c.restart()
        self.settle()

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def replay_equals_live(self) -> None:
        self.c.h.assert_replay_equals_live()
        self.c.assert_persisted_matches_live()

    @invariant()
    def bookkeeping_is_consistent(self) -> None:
        g = self.group()
        if g is None:
            return
        assert g.num_awaiting_join == sum(m.is_awaiting_join for m in g.members.values())
        assert g.static_members == {
            m.group_instance_id: m.member_id
            for m in g.members.values()
            if m.group_instance_id is not None
        }
        assert not set(g.pending_join_members) & set(g.members)
        # (pending_sync_members may keep the old id of a static member replaced in a Stable
        # group: Kafka does the same, and rebalances when the sync times out)
        if g.members:
            assert g.leader_id in g.members
        counts: dict[str, int] = {}
        for m in g.members.values():
            for p in m.supported_protocols:
                counts[p.name] = counts.get(p.name, 0) + 1
        assert g.supported_protocols == counts
        if g.state in (ClassicGroupState.EMPTY, ClassicGroupState.DEAD):
            assert not g.members or g.state is ClassicGroupState.DEAD
        if g.state is not ClassicGroupState.PREPARING_REBALANCE:
            assert g.num_awaiting_join == 0
        if g.state is not ClassicGroupState.COMPLETING_REBALANCE:
            assert not any(m.is_awaiting_sync for m in g.members.values())

    @invariant()
    def stable_members_hold_the_current_generation_assignment(self) -> None:
        g = self.group()
        if g is None or g.state is not ClassicGroupState.STABLE:
            return
        plan = self.plans.get(g.generation_id)
        if plan is None:
            return  # loaded from a record written before this run's model saw the plan
        event(f"stable group checked: {len(g.members)} members")
        for member in g.members.values():
            slot = self.slots.get((g.generation_id, member.member_id), member.member_id)
            assert member.assignment == plan.get(slot, b""), (member, plan)

    def teardown(self) -> None:
        # nothing waits forever: run the clock past every timeout
        for _ in range(6):
            self.c.sleep(10_000)
        waiting = [p for p in self.parked if not p.done]
        assert not waiting, f"replies never answered: {waiting}"


test_classic_group_machine, test_classic_group_machine_long = quick_and_slow(
    ClassicGroupMachine, quick=(60, 40), slow=(800, 80)
)
