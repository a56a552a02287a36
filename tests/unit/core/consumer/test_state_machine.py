"""A hypothesis state machine over one consumer group: random joins (dynamic and static,
by names or regex, either assignor), heartbeats, lost responses, leaves, static restarts,
subscription and topic changes, assignments delivered late or stale, clock jumps and shard
restarts; targets computed inside the operations (small groups) or all off the loop; and
KIP-848 client-side assignors: members declaring one, the chosen member computing (or not:
deadlines, fallback), installs that are stale or invalid.

After every step: no partition has two owners, replaying the log (and the snapshot) gives
the live state, the derived indexes match, epochs are ordered. Stale callers are fenced
(heartbeats and commits with a wrong epoch). ``settle`` then checks convergence: with no
further changes, every member reaches STABLE at the group epoch and the clients own
exactly their targets.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    precondition,
    rule,
)

from shards.core.consumer import api as capi
from shards.core.consumer.api import TopicPartitions
from shards.core.consumer.group import ConsumerGroup
from shards.core.consumer.member import MemberState
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError, Errors
from shards.runtime.contract import AsyncTask
from tests.support.machines import quick_and_slow
from tests.unit.core.consumer.support import (
    Consumers,
    FakeConsumer,
    image,
    round_robin_install,
    tid,
)

TOPIC_NAMES = ("t0", "t1", "t2", "x0")
SUBSCRIPTIONS = st.sampled_from([("t0",), ("t1",), ("t0", "t1"), ("t2", "x0"), ("t0", "t2")])
REGEXES = st.sampled_from(["t[01]", "x.*", "t.*"])
CLIENT_ASSIGNORS = st.sampled_from(
    [
        None,
        (capi.ClientAssignor("rr", 0, 1, 0, 1, b"m"),),
        (capi.ClientAssignor("other", 0, 0), capi.ClientAssignor("rr", 1, 3, 0, 2, b"n")),
    ]
)
#: what a client-side assignment step may meet (the member is not chosen any more, its epoch
#: moved, the group moved on or is gone)
CLIENT_SIDE_ERRORS = (
    Errors.GROUP_ID_NOT_FOUND,
    Errors.UNKNOWN_MEMBER_ID,
    Errors.STALE_MEMBER_EPOCH,
    Errors.INVALID_ASSIGNMENT,
)


class ConsumerGroupMachine(RuleBasedStateMachine):
    clients = Bundle("clients")

    @initialize(inline=st.booleans())
    def setup(self, inline: bool) -> None:
        self.topics = {"t0": 4, "t1": 3}
        self.incarnation = {name: 0 for name in TOPIC_NAMES}
        self.version = 1
        # inline: targets computed inside the operations (a small group, as in Kafka); else
        # every one off the loop (a large group, a custom assignor)
        config = CoordinatorConfig(
            num_partitions=1,
            consumer_group_inline_assignment_max_size=5_000 if inline else 0,
            consumer_group_client_assignment_timeout_ms=10_000,
        )
        self.c = Consumers(config, topics=self._image())
        self.c.h.shard.on_loaded(self.c.h.now)
        self.ids = itertools.count(1)
        self.all_clients: list[FakeConsumer] = []
        self.stale: list[AsyncTask] = []
        # client-side computations prepared and not installed yet (installed late, or never)
        self.prepared: list[tuple[str, int, Any]] = []

    def _image(self) -> Any:
        ids = {n: tid(f"{n}#{self.incarnation[n]}") for n in self.topics}
        return image(version=self.version, ids=ids, **self.topics)

    def _write(self, fn: Any) -> Any:
        """Run a step, keeping the assignment tasks it supersedes (to deliver them late)."""
        before = dict(self.c.h.tasks)
        try:
            return fn()
        finally:
            for key, task in before.items():
                if self.c.h.tasks.get(key) is not task:
                    self.stale.append(task)

    def _group(self) -> ConsumerGroup | None:
        g = self.c.h.shard.group_manager.groups.get("g")
        return g if isinstance(g, ConsumerGroup) else None

    # ---- membership -----------------------------------------------------------------------
    @rule(
        target=clients,
        subscription=SUBSCRIPTIONS,
        regex=st.none() | REGEXES,
        static=st.booleans(),
        # "rr": a client-side assignor asked for by name (when the client declares it)
        assignor=st.none() | st.sampled_from(["uniform", "range", "rr"]),
        client_assignors=CLIENT_ASSIGNORS,
    )
    def join(
        self,
        subscription: tuple[str, ...],
        regex: str | None,
        static: bool,
        assignor: str | None,
        client_assignors: tuple[capi.ClientAssignor, ...] | None,
    ) -> FakeConsumer:
        n = next(self.ids)
        client = FakeConsumer(
            self.c,
            f"m{n}",
            topics=() if regex else subscription,
            regex=regex,
            instance_id=f"i{n}" if static else None,
            rebalance_timeout_ms=30_000,
            client_assignors=client_assignors,
        )
        self._write(client.heartbeat)
        asks = assignor == "rr" and any(a.name == "rr" for a in client_assignors or ())
        if assignor is not None and client.joined and (assignor != "rr" or asks):
            self._write(lambda: self._choose_assignor(client, assignor))
        self.all_clients.append(client)
        return client

    def _choose_assignor(self, client: FakeConsumer, assignor: str) -> None:
        """A heartbeat naming a server assignor: its answer may carry a new assignment (the
        target is recomputed inline), which the client takes as from any heartbeat; the
        coordinator sends an assignment once, not again on every heartbeat (as Kafka)."""
        r = self.c.heartbeat(
            member_id=client.member_id,
            member_epoch=client.epoch,
            instance_id=client.instance_id,
            server_assignor=assignor,
            # a client-side assignor is asked for along with the declarations
            client_assignors=client.client_assignors if assignor == "rr" else None,
        )
        client.epoch = r.member_epoch
        if r.assignment is not None:
            client.owned = {tp.topic_id: tp.partitions for tp in r.assignment}

    @rule(client=clients)
    def heartbeat(self, client: FakeConsumer) -> None:
        self._write(client.heartbeat)

    @rule(client=clients)
    def heartbeat_response_lost(self, client: FakeConsumer) -> None:
        epoch, owned = client.epoch, dict(client.owned)
        self._write(client.heartbeat)
        # the client never saw the answer: it retries with a full request
        client.epoch, client.owned, client.full_next = epoch, owned, True

    @rule(client=clients, subscription=SUBSCRIPTIONS)
    def change_subscription(self, client: FakeConsumer, subscription: tuple[str, ...]) -> None:
        if not client.joined:
            return
        client.topics, client.regex = subscription, ""
        self._write(lambda: self._change(client, subscription))

    def _change(self, client: FakeConsumer, subscription: tuple[str, ...]) -> None:
        try:
            r = self.c.heartbeat(
                member_id=client.member_id,
                member_epoch=client.epoch,
                instance_id=client.instance_id,
                subscribed_topic_names=subscription,
                subscribed_topic_regex="",
            )
        except ApiError:
            return
        client.epoch = r.member_epoch
        if r.assignment is not None:
            client.owned = {tp.topic_id: tp.partitions for tp in r.assignment}

    @rule(client=consumes(clients))
    def leave(self, client: FakeConsumer) -> None:
        self.all_clients.remove(client)
        if client.joined:
            try:
                self._write(client.leave)
            except ApiError as ex:
                assert ex.code in (
                    Errors.UNKNOWN_MEMBER_ID,
                    Errors.GROUP_ID_NOT_FOUND,
                    Errors.FENCED_INSTANCE_ID,
                )

    @precondition(lambda self: any(c.instance_id for c in self.all_clients))
    @rule(data=st.data())
    def static_restart(self, data: st.DataObject) -> None:
        """A static member's process restarts: temporary leave, rejoin with a new id."""
        client = data.draw(st.sampled_from([c for c in self.all_clients if c.instance_id]))
        if client.joined:
            try:
                self._write(lambda: client.leave(temporary=True))
            except ApiError:
                client.reset()
        client.member_id = f"m{next(self.ids)}"
        self._write(client.heartbeat)

    # ---- stale callers --------------------------------------------------------------------
    @rule(client=clients, delta=st.sampled_from([-2, 1, 5]))
    def zombie_heartbeat_is_fenced(self, client: FakeConsumer, delta: int) -> None:
        g = self._group()
        member = g.members.get(client.member_id) if g else None
        if member is None or member.member_epoch < 1:
            return
        epoch = member.member_epoch + delta
        if epoch < 1 or epoch == member.previous_member_epoch:
            return
        with pytest.raises(ApiError) as info:
            self.c.heartbeat(
                member_id=client.member_id,
                member_epoch=epoch,
                instance_id=client.instance_id,
                topic_partitions=(),
            )
        assert info.value.code is Errors.FENCED_MEMBER_EPOCH

    @rule(client=clients)
    def commit_checks_the_epoch(self, client: FakeConsumer) -> None:
        g = self._group()
        member = g.members.get(client.member_id) if g else None
        try:
            self._write(
                lambda: self.c.commit("g", member_id=client.member_id, epoch=client.epoch, t0=1)
            )
            ok = True
        except ApiError as ex:
            ok = False
            assert ex.code in (
                Errors.STALE_MEMBER_EPOCH,
                Errors.UNKNOWN_MEMBER_ID,
                Errors.GROUP_ID_NOT_FOUND,
            )
        # KIP-1251: the current epoch, or an older one the member has held t0-0 since (t0's
        # id as the catalog has it now: an id per incarnation; none while it is deleted)
        t0 = tid(f"t0#{self.incarnation['t0']}") if "t0" in self.topics else None
        held_since = None if member is None or t0 is None else member.epoch_of(t0, 0)
        allowed = member is not None and (
            member.member_epoch == client.epoch
            or (held_since is not None and held_since <= client.epoch < member.member_epoch)
        )
        if g is not None and g.members:
            assert ok == allowed, (ok, member, client.epoch)

    @rule(client=clients, full=st.booleans())
    def steady_path_matches_general_path(self, client: FakeConsumer, full: bool) -> None:
        """The steady-state shortcut answers exactly as the general pipeline would."""
        from shards.core.consumer.api import ConsumerGroupHeartbeatRequest

        fields: dict[str, Any] = {}
        if full:
            fields = {
                "rebalance_timeout_ms": client.rebalance_timeout_ms,
                "subscribed_topic_names": client.topics,
                "topic_partitions": tuple(
                    TopicPartitions(t, ps) for t, ps in sorted(client.owned.items())
                ),
            }
        request = ConsumerGroupHeartbeatRequest(
            "g", client.member_id, client.epoch, client.instance_id, **fields
        )
        manager = self.c.h.shard.consumer
        now = self.c.h.now
        try:
            fast = manager.steady.answer(request, now)
        except ApiError:
            return
        if not full and client.instance_id is None:
            # what the gRPC servicer's shortcut asks, with the request's fields as values
            plain = manager.steady_heartbeat("g", client.member_id, client.epoch, "", "", now)
            if fast is None:
                assert plain is None
            else:
                answer = fast.response
                assert plain == (
                    answer.member_epoch,
                    answer.heartbeat_interval_ms,
                    answer.should_compute_assignment,
                    "g",
                    client.member_id,
                )
                # the session's ids are the state's own strings (a memory keeps them)
                group = manager.consumer_group("g")
                assert group is not None
                assert plain[3] is group.group_id
                assert plain[4] is group.members[client.member_id].member_id
        if fast is None:
            return
        general = manager.heartbeat_pipeline(request, now)
        assert list(general.records) == [] and not general.tasks
        assert fast.response == general.response

    @rule(ms=st.sampled_from([0, 1, 1_000]))
    def steady_decisions_hold_between_operations(self, ms: int) -> None:
        """What lets the shard give a steady heartbeat's answer again without deciding
        (the runtime's ``answer_again``: while the partition's read token is valid):
        with none in between -- only time passing and members' steady heartbeats, which are
        not counted -- every member's steady decision stays what it was."""
        manager = self.c.h.shard.consumer
        now = self.c.h.now
        members = [(c.member_id, c.epoch) for c in self.all_clients if c.joined]
        first = [manager.steady_heartbeat("g", m, e, "", "", now) for m, e in members]
        later = [manager.steady_heartbeat("g", m, e, "", "", now + ms) for m, e in members[::-1]]
        assert first == later[::-1]

    @rule(
        client=clients,
        who=st.sampled_from(["member", "stale member", "admin", "admin, another group"]),
    )
    def steady_decisions_hold_across_offset_commits(self, client: FakeConsumer, who: str) -> None:
        """Offset commits are not counted either (``write(counted=False)``): what one changes
        -- offsets, a simple group of its own -- no steady decision reads, whether it is
        accepted (a member at its epoch; the admin client while the group is empty, or for a
        group that does not exist) or refused (a stale epoch; the admin client of a group
        with members)."""
        manager = self.c.h.shard.consumer
        now = self.c.h.now
        members = [(c.member_id, c.epoch) for c in self.all_clients if c.joined]
        first = [manager.steady_heartbeat("g", m, e, "", "", now) for m, e in members]
        group, member_id, epoch = {
            "member": ("g", client.member_id, client.epoch),
            "stale member": ("g", client.member_id, client.epoch - 1),
            "admin": ("g", "", -1),
            "admin, another group": ("simple", "", -1),
        }[who]
        try:
            self._write(lambda: self.c.commit(group, member_id=member_id, epoch=epoch, t0=7))
        except ApiError:
            pass
        later = [manager.steady_heartbeat("g", m, e, "", "", now) for m, e in members]
        assert first == later

    # ---- client-side assignors ---------------------------------------------------------------
    def _chosen_client(self) -> FakeConsumer | None:
        g = self._group()
        chosen = g.computing_member() if g is not None else None
        return next((cl for cl in self.all_clients if cl.member_id == chosen), None)

    @rule()
    def chosen_member_computes(self) -> None:
        client = self._chosen_client()
        if client is None:
            return
        try:
            self._write(lambda: round_robin_install(self.c, client.member_id, client.epoch))
        except ApiError as ex:
            assert ex.code in CLIENT_SIDE_ERRORS, ex

    @rule()
    def chosen_member_prepares_only(self) -> None:
        """The chosen member prepares and is slow: its install comes later (or never)."""
        client = self._chosen_client()
        if client is None:
            return
        request = capi.ConsumerGroupPrepareAssignmentRequest("g", client.member_id, client.epoch)
        try:
            prepared = self.c.h.read(
                lambda s, now: s.consumer_group_prepare_assignment(request, now)
            )
        except ApiError as ex:
            assert ex.code in CLIENT_SIDE_ERRORS, ex
            return
        self.prepared.append((client.member_id, client.epoch, prepared))

    @precondition(lambda self: self.prepared)
    @rule(data=st.data(), corrupt=st.booleans())
    def late_install(self, data: st.DataObject, corrupt: bool) -> None:
        """Install what was prepared earlier, as it was (perhaps stale by now), or with a
        partition given twice: refused unless still current and valid, never corrupting."""
        member_id, epoch, prepared = self.prepared.pop(
            data.draw(st.integers(0, len(self.prepared) - 1))
        )
        members = sorted(m.member_id for m in prepared.members)
        installed = []
        for i, mid in enumerate(members):
            parts = tuple(
                TopicPartitions(t.topic_id, tuple(range(i, t.num_partitions, len(members))))
                for t in prepared.topics
                if t.topic_id
                in next(m for m in prepared.members if m.member_id == mid).subscribed_topic_ids
            )
            if corrupt:
                parts = tuple(TopicPartitions(t.topic_id, (0,)) for t in prepared.topics)
            # with KIP-848's per-member assignment Error for some
            installed.append(capi.InstalledMember(mid, parts, 1, b"late", i % 3))
        request = capi.ConsumerGroupInstallAssignmentRequest(
            "g", member_id, epoch, prepared.group_epoch, 0, tuple(installed)
        )
        before = list(self.c.h.log)
        try:
            self._write(
                lambda: self.c.h.write(
                    lambda s, now: s.consumer_group_install_assignment(request, now)
                )
            )
        except ApiError as ex:
            assert ex.code in CLIENT_SIDE_ERRORS, ex
            assert self.c.h.log == before  # refused: nothing written
        else:
            assert not (corrupt and len(members) > 1 and prepared.topics), "corrupt installed"

    @rule()
    def chosen_member_gives_up(self) -> None:
        client = self._chosen_client()
        g = self._group()
        if client is None or g is None:
            return
        request = capi.ConsumerGroupInstallAssignmentRequest(
            "g", client.member_id, client.epoch, g.group_epoch, 1
        )
        try:
            self._write(
                lambda: self.c.h.write(
                    lambda s, now: s.consumer_group_install_assignment(request, now)
                )
            )
        except ApiError as ex:
            assert ex.code in CLIENT_SIDE_ERRORS, ex

    # ---- the world ----------------------------------------------------------------------------
    @rule(name=st.sampled_from(TOPIC_NAMES), partitions=st.integers(1, 5))
    def create_or_grow_topic(self, name: str, partitions: int) -> None:
        self.topics[name] = max(partitions, self.topics.get(name, 0))
        self.version += 1
        self._write(lambda: self.c.update_topics(self._image()))

    @precondition(lambda self: len(self.topics) > 1)
    @rule(name=st.sampled_from(TOPIC_NAMES))
    def delete_topic(self, name: str) -> None:
        if name not in self.topics:
            return
        del self.topics[name]
        self.incarnation[name] += 1  # a re-created topic gets a new id
        self.version += 1
        self._write(lambda: self.c.update_topics(self._image()))

    @rule()
    def run_assignments(self) -> None:
        self._write(self.c.assign)

    @precondition(lambda self: self.stale)
    @rule(data=st.data())
    def deliver_stale_assignment(self, data: st.DataObject) -> None:
        task = self.stale.pop(data.draw(st.integers(0, len(self.stale) - 1)))
        answer = self.c.assignor.compute(task.request)
        self._write(lambda: self.c.h._apply(task.on_done(answer, self.c.h.now)))

    @rule(ms=st.sampled_from([100, 3_000, 5_000, 20_000, 46_000]))
    def clock_jump(self, ms: int) -> None:
        self._write(lambda: self.c.h.sleep(ms))

    @rule(from_snapshot=st.booleans())
    def restart_shard(self, from_snapshot: bool) -> None:
        self.stale.clear()  # the old shard's tasks died with it
        self.c.restart(from_snapshot)
        self._write(lambda: self.c.h.sleep(0))

    # ---- convergence ----------------------------------------------------------------------------
    @rule()
    def settle(self) -> None:
        c = self.c
        for round_ in range(60):
            self._write(c.assign)
            for client in list(self.all_clients):
                response = self._write(client.heartbeat)
                if response is not None and response.should_compute_assignment:
                    try:  # a well-behaved client computes when told to
                        self._write(lambda: round_robin_install(c, client.member_id, client.epoch))  # noqa: B023
                    except ApiError as ex:
                        assert ex.code in CLIENT_SIDE_ERRORS, ex
            if self._converged():
                break
            if round_ % 3 == 2:
                self._write(lambda: c.h.sleep(5_000))  # lets stuck sessions expire
        else:
            raise AssertionError(f"no convergence: {self._describe()}")
        g = self._group()
        if g is None or not g.members:
            return
        assert g.state_name() == "Stable"
        for m in g.members.values():
            assert m.state is MemberState.STABLE and m.member_epoch == g.group_epoch
        for client in self.all_clients:
            assert client.owned == dict(g.target_of(client.member_id)), client
            # a client-side assignor's metadata reached the member with its target
            member = g.members[client.member_id]
            assert member.assignment_metadata == g.target_metadata_of(client.member_id)

    def _converged(self) -> bool:
        if self.c.h.tasks:
            return False
        g = self._group()
        live = [cl for cl in self.all_clients]
        if g is None:
            return not live
        members = g.members
        if {cl.member_id for cl in live} != set(members):
            return False
        for cl in live:
            m = members[cl.member_id]
            if not (m.is_reconciled_to(g.group_epoch) and cl.epoch == m.member_epoch):
                return False
            if cl.owned != dict(g.target_of(cl.member_id)):
                return False
        # (an Empty group keeps the epoch of its last target, as in Kafka)
        return not members or g.group_epoch == g.assignment_epoch

    def _describe(self) -> str:
        g = self._group()
        return repr(
            (
                g
                and (
                    g.group_epoch,
                    g.assignment_epoch,
                    [(m.member_id, m.member_epoch, m.state) for m in g.members.values()],
                ),
                [(cl.member_id, cl.epoch, cl.errors[-3:]) for cl in self.all_clients],
                list(self.c.h.tasks),
            )
        )

    # ---- invariants ---------------------------------------------------------------------------
    @invariant()
    def one_owner_per_partition(self) -> None:
        g = self._group()
        if g is None:
            return
        seen: dict[tuple[str, int], str] = {}
        for m in g.members.values():
            for assignment in (m.assigned_partitions, m.partitions_pending_revocation):
                for topic_id, parts in assignment.items():
                    for p in parts:
                        other = seen.setdefault((topic_id, p), m.member_id)
                        assert other == m.member_id, f"{topic_id}-{p}: {other} and {m.member_id}"
        # clients the coordinator considers in sync own only what it gave them
        for client in self.all_clients:
            m = g.members.get(client.member_id)
            if m is None or m.member_epoch != client.epoch:
                continue
            for topic_id, parts in client.owned.items():
                held = set(m.assigned_partitions.get(topic_id, ())) | set(
                    m.partitions_pending_revocation.get(topic_id, ())
                )
                assert set(parts) <= held, (client, m)

    @invariant()
    def epochs_are_ordered(self) -> None:
        g = self._group()
        if g is None:
            return
        assert g.assignment_epoch <= g.group_epoch
        for m in g.members.values():
            assert m.member_epoch <= g.assignment_epoch or m.member_epoch == -2, m
            assert m.member_epoch != 0 or m.state is MemberState.STABLE

    @invariant()
    def replay_equals_live(self) -> None:
        if hasattr(self, "c"):
            self.c.check()


def _owned(tps: tuple[TopicPartitions, ...] | None) -> dict[str, tuple[int, ...]]:
    return {} if tps is None else {tp.topic_id: tp.partitions for tp in tps}


test_consumer_group_machine, test_consumer_group_machine_long = quick_and_slow(
    ConsumerGroupMachine, quick=(30, 40), slow=(400, 80)
)
