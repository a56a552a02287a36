"""The ownership manager with real runtimes on one in-memory store, a fake registry and one
ManualClock the test moves (no sleeps): spread, graceful handoff, respect of live leases,
takeover after a crash, a zombie fenced by the store, FindCoordinator answers, node id
conflicts, and the background loops (heartbeats, rounds, lease polls) in virtual time."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from shards.clock import ManualClock
from shards.core.errors import ApiError, Errors
from shards.ownership import InMemoryMembership, Member, RegistrationConflict
from shards.ownership.manager import OwnershipManager, OwnershipSettings
from shards.ownership.view import NodeAddress
from shards.runtime.partition import PartitionState, answer_again, lease_margin_ms
from shards.runtime.runtime import CoordinatorRuntime
from shards.storage.base import StoreUnavailableError
from shards.storage.memory import InMemoryLogStore
from tests.unit.runtime.toy import Counter, JsonCodec

PARTITIONS = 12
LEASE_MS = 1_000


@dataclass
class Shard:
    manager: OwnershipManager
    runtime: CoordinatorRuntime

    @property
    def active(self) -> list[int]:
        return self.runtime.active_partitions()


class Link:
    """One shard's connection to the store and the registry, which a test can cut: while
    cut, every call of the wrapped objects raises StoreUnavailableError (as a Redis client
    does once its socket times out)."""

    def __init__(self) -> None:
        self.cut = False

    def wrap(self, target: Any) -> Any:
        link = self

        class Wrapped:
            def __getattr__(self, name: str) -> Any:
                attr = getattr(target, name)
                if not asyncio.iscoroutinefunction(attr) or name in ("start", "close"):
                    return attr

                async def call(*args: Any, **kwargs: Any) -> Any:
                    if link.cut:
                        raise StoreUnavailableError(f"{name}: the link is cut")
                    return await attr(*args, **kwargs)

                return call

        return Wrapped()


@pytest.fixture
def clock() -> ManualClock:
    """The one clock of the test: stores, registry, runtimes and managers."""
    return ManualClock()


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[InMemoryLogStore]:
    s = InMemoryLogStore(clock=clock)
    await s.start()
    yield s


@pytest.fixture
def registry() -> dict[str, Member]:
    return {}


@pytest.fixture
async def make_shard(
    store: InMemoryLogStore, registry: dict[str, Member], clock: ManualClock
) -> AsyncIterator[Callable[..., Shard]]:
    made: list[Shard] = []

    def make(
        node_id: int, owner: str | None = None, link: Link | None = None, store_only: bool = False
    ) -> Shard:
        """``store_only``: the link cuts the log store, not the registry (on a Redis Cluster
        they are in different slots, often on different primaries)."""
        owner = owner or f"owner-{node_id}"
        runtime = CoordinatorRuntime(
            link.wrap(store) if link is not None else store,
            JsonCodec(),
            Counter,
            owner=owner,
            clock=clock,
            lease_ms=LEASE_MS,
            respect_leases=True,
        )
        member = Member(str(node_id), node_id, owner, "127.0.0.1", 9000 + node_id, PARTITIONS)
        membership = InMemoryMembership(registry, clock)
        manager = OwnershipManager(
            link.wrap(store) if link is not None else store,
            link.wrap(membership) if link is not None and not store_only else membership,
            runtime,
            member,
            OwnershipSettings(PARTITIONS, LEASE_MS),
            clock,
        )
        shard = Shard(manager, runtime)
        made.append(shard)
        return shard

    yield make
    store.release_appends()  # a failed test may have left appends parked
    for s in made:
        await s.manager.stop()
        await s.runtime.close()


async def join(shard: Shard) -> None:
    """What start() does, without the background loops: register, one full round."""
    await shard.manager._heartbeat_once()
    await round_(shard)


async def round_(shard: Shard, full: bool = True) -> bool:
    waiting = await shard.manager.reconcile(full=full)
    await shard.manager.settle()
    return waiting


async def test_a_lone_shard_owns_every_partition(make_shard: Callable[..., Shard]) -> None:
    a = make_shard(0)
    await join(a)
    assert a.active == list(range(PARTITIONS))
    assert all(a.runtime.partitions[p].epoch == 1 for p in a.active)


async def test_a_joining_shard_gets_its_share_by_graceful_handoff(
    make_shard: Callable[..., Shard], store: InMemoryLogStore
) -> None:
    a, b = make_shard(0), make_shard(1)
    await join(a)
    # a write accepted by `a` on a partition that will move must survive the handoff
    writes = {p: a.runtime.partition(p).write(lambda sm, now: sm.incr("x")) for p in a.active}
    await join(b)
    # b registered but a still holds every lease: b waits, loads nothing yet
    assert b.active == []
    assert await round_(a) is False  # a sees b, hands off b's share (flush, release)
    assert await round_(b, full=False) is False  # the released leases are free now
    assert sorted(a.active + b.active) == list(range(PARTITIONS))
    assert set(a.active).isdisjoint(b.active)
    assert abs(len(a.active) - len(b.active)) <= 1
    for write in writes.values():
        assert await write == 1  # acknowledged before or during the handoff
    for p in b.active:
        part = b.runtime.partitions[p]
        assert part.epoch == 2  # the new owner bumped the epoch before reading the log
        assert part.sm.values == {"x": 1}  # ...and found the write a flushed


async def test_a_live_lease_is_respected_until_it_expires_after_a_crash(
    make_shard: Callable[..., Shard], clock: ManualClock, store: InMemoryLogStore
) -> None:
    a, b = make_shard(0), make_shard(1)
    await join(a)
    await join(b)
    await round_(a)
    await round_(b, full=False)
    a_had = a.active
    # `a` crashes: it stops heartbeating and renewing; nothing is released.
    clock.advance(LEASE_MS // 2)
    await b.manager._heartbeat_once()
    assert await round_(b) is False  # a is still registered: nothing changes
    clock.advance(LEASE_MS // 2 + 1)  # a's registration and leases have expired now
    await b.manager._heartbeat_once()
    await round_(b)
    assert b.active == list(range(PARTITIONS))
    for p in a_had:
        assert (await store.lease(p)).owner == "owner-1"  # type: ignore[union-attr]
    # The zombie wakes up and writes: its own lease deadline has passed, so it refuses
    # before asking the store, and drops the partition (self-fencing).
    p, q = a_had[0], a_had[1]
    with pytest.raises(ApiError) as err:
        await a.runtime.partition(p).write(lambda sm, now: sm.incr("zombie"))
    assert err.value.code == Errors.NOT_COORDINATOR
    await asyncio.sleep(0)
    assert p not in a.runtime.partitions
    assert store.stats.fenced == 0 and a.runtime.self_fenced == 1
    # A zombie whose deadline lies (a broken local clock) writes: the store's epoch
    # fencing still rejects it, the reply is an error, and the zombie drops the partition.
    a.runtime.partitions[q].serve_until = math.inf
    with pytest.raises(ApiError) as err:
        await a.runtime.partition(q).write(lambda sm, now: sm.incr("zombie"))
    assert err.value.code == Errors.NOT_COORDINATOR
    await asyncio.sleep(0)
    assert q not in a.runtime.partitions
    assert store.stats.fenced >= 1
    for n in (p, q):
        assert all(b"zombie" not in e.data for e in (await store.load(n)).entries)


async def test_a_shard_waiting_for_a_lease_does_not_take_it_by_force(
    make_shard: Callable[..., Shard], store: InMemoryLogStore
) -> None:
    a, b = make_shard(0), make_shard(1)
    await join(a)
    await join(b)
    for _ in range(3):
        assert await round_(b, full=False) is True  # still waiting: a holds them
    assert b.active == []
    assert [await store.current_epoch(p) for p in range(PARTITIONS)] == [1] * PARTITIONS


async def test_find_coordinator_answers_self_lease_holder_or_target(
    make_shard: Callable[..., Shard],
) -> None:
    a, b = make_shard(0), make_shard(1)
    await join(a)
    await join(b)
    await round_(a)
    await round_(b, full=False)
    await round_(a)  # refresh a's view of the leases
    for p in range(PARTITIONS):
        owner = "0" if p in a.active else "1"
        for shard in (a, b):
            node = shard.manager.owner_of(p)
            assert node is not None and str(node.node_id) == owner, (p, shard)
            assert node.port == 9000 + int(owner)


async def test_scale_out_and_back_in_keeps_partitions_spread(
    make_shard: Callable[..., Shard],
) -> None:
    shards = [make_shard(i) for i in range(3)]
    await join(shards[0])
    for s in shards[1:]:
        await join(s)
    for _ in range(2):
        for s in shards:
            await round_(s)
    loads = sorted(len(s.active) for s in shards)
    assert loads == [4, 4, 4]
    # the two others leave gracefully: deregister, unload (release), the survivor takes all
    for s in shards[1:]:
        await s.manager.stop()
        await s.runtime.close()
    await round_(shards[0])
    assert shards[0].active == list(range(PARTITIONS))


async def test_a_second_incarnation_of_a_node_id_waits_for_the_first(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    first = make_shard(0, owner="first")
    await join(first)
    second = make_shard(0, owner="second")
    with pytest.raises(RegistrationConflict):
        await second.manager._heartbeat_once()
    clock.advance(LEASE_MS + 1)  # the first one died: its entry expires
    await second.manager._heartbeat_once()
    await round_(second)
    assert second.active == list(range(PARTITIONS))


async def test_parked_replies_fail_and_accepted_writes_survive_a_handoff(
    make_shard: Callable[..., Shard], store: InMemoryLogStore
) -> None:
    a, b = make_shard(0), make_shard(1)
    await join(a)
    await join(b)
    moving = [p for p in range(PARTITIONS) if b.manager.target[p] == "1"]
    p = moving[0]
    store.hold_appends()
    accepted = a.runtime.partition(p).write(lambda sm, now: sm.incr("k"))
    parked = a.runtime.partition(p).write(lambda sm, now: sm.park())
    handoff = asyncio.ensure_future(round_(a))
    for _ in range(100):  # until the unload has begun (it waits for the held append)
        if p not in a.runtime.partitions:
            break
        await asyncio.sleep(0)
    # while it flushes, the partition no longer accepts anything
    with pytest.raises(ApiError) as err:
        a.runtime.partition(p).write(lambda sm, now: sm.incr("late"))
    assert err.value.code == Errors.NOT_COORDINATOR
    store.release_appends()
    await handoff
    assert await accepted == 1
    with pytest.raises(ApiError) as err:
        await parked
    assert err.value.code == Errors.NOT_COORDINATOR
    await round_(b, full=False)
    assert p in b.active and b.runtime.partitions[p].sm.values == {"k": 1}


async def test_reload_after_a_failed_append_does_not_steal_a_taken_partition(
    make_shard: Callable[..., Shard], store: InMemoryLogStore, clock: ManualClock
) -> None:
    a = make_shard(0)
    await join(a)
    p = 0
    # another owner takes p by force (as a repair does) while a's lease deadline holds
    assert await store.acquire(p, "owner-9", LEASE_MS) == 2
    store.fail_next_appends(1)
    with pytest.raises(ApiError):
        await a.runtime.partition(p).write(lambda sm, now: sm.incr("x"))
    # the runtime's reload backoff (50 ms), then its give-up
    assert await clock.run_until(lambda: p not in a.runtime.partitions, 1_000) == 50
    assert await store.current_epoch(p) == 2  # not bumped again by a forced takeover
    assert all(x.state is PartitionState.ACTIVE for x in a.runtime.partitions.values())


# ---- the background loops, driven by the clock ------------------------------------------------
async def start(shard: Shard) -> None:
    """What the shard app does: renew leases, register, first round, start the loops."""
    shard.runtime.start_lease_renewal()
    await shard.manager.start()
    await shard.manager.settle()  # the loads its first round started


def balanced(*shards: Shard) -> bool:
    owned = sorted(p for s in shards for p in s.active)
    sizes = [len(s.active) for s in shards]
    return owned == list(range(PARTITIONS)) and max(sizes) - min(sizes) <= 1


async def test_the_loops_keep_registration_and_leases_alive_for_many_ttls(
    make_shard: Callable[..., Shard], clock: ManualClock, store: InMemoryLogStore
) -> None:
    a = make_shard(0)
    await start(a)
    assert a.active == list(range(PARTITIONS))
    for _ in range(30):  # ten TTLs
        await clock.run_for(LEASE_MS // 3)
        members, now = await a.manager.membership.members()
        assert [m.member_id for m in members] == ["0"]
        # refreshed every TTL / 3: never less than two thirds of a TTL left
        assert members[0].expires_at_ms - now >= LEASE_MS - LEASE_MS // 3 - 1
    assert a.active == list(range(PARTITIONS))
    for p in range(PARTITIONS):
        lease = await store.lease(p)
        assert lease is not None and (lease.owner, lease.epoch) == ("owner-0", 1)


async def test_the_loops_rebalance_when_a_shard_joins_and_when_it_leaves(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    a, b = make_shard(0), make_shard(1)
    await start(a)
    await start(b)
    assert b.active == []  # a holds every lease: b waits for the handoff
    settings = a.manager.settings
    # a sees b at its next full round and hands off; b polls the released leases
    took = await clock.run_until(lambda: balanced(a, b), 10 * LEASE_MS)
    assert took <= settings.round_ms + settings.handoff_poll_ms + 20
    assert set(a.active).isdisjoint(b.active)
    # b leaves gracefully: a takes everything back without waiting for b's leases to expire
    await b.manager.stop()
    await b.runtime.close()
    took = await clock.run_until(lambda: a.active == list(range(PARTITIONS)), 10 * LEASE_MS)
    assert took <= settings.round_ms + 20


async def test_a_restarted_node_id_registers_once_its_predecessor_expired(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    first = make_shard(0, owner="first")
    await join(first)  # registered for one TTL, then silent (no loops: it died)
    second = make_shard(0, owner="second")
    starting = asyncio.ensure_future(start(second))
    took = await clock.run_until(starting.done, 10 * LEASE_MS)
    await starting
    # retried every TTL / 3 until the first entry expired
    assert LEASE_MS < took <= LEASE_MS + LEASE_MS // 3 + 1
    assert second.active == list(range(PARTITIONS))


# ---- self-fencing: the local lease deadline -----------------------------------------------------
async def test_a_shard_cut_off_from_the_store_self_fences_at_its_local_deadline(
    make_shard: Callable[..., Shard], clock: ManualClock, store: InMemoryLogStore
) -> None:
    """Cut off, a shard holds its partitions until its local lease deadline (from the last
    renewal it sent, minus the margin; its reads refused meanwhile: the store cannot confirm
    the lease), then nothing -- also when no request comes -- and
    FindCoordinator on it names the member the map gives each partition without it, which
    takes them once the store's leases expire."""
    link = Link()
    a, b = make_shard(0, link=link), make_shard(1)
    await start(a)
    await start(b)
    await clock.run_until(lambda: balanced(a, b), 10 * LEASE_MS)
    mine = a.active
    p = mine[0]
    part = a.runtime.partitions[p]
    link.cut = True
    cut_at = clock.monotonic_ms()
    deadline = part.serve_until
    assert cut_at < deadline <= cut_at + LEASE_MS - lease_margin_ms(LEASE_MS)
    await clock.run_for(int(deadline - cut_at) - 1)
    a.runtime.partition(p).check_active()  # still its lease: held until the deadline,
    with pytest.raises(ApiError) as unconfirmed:  # but a read needs the store to confirm it
        await a.runtime.read(p, lambda sm, now: sm.values)
    assert unconfirmed.value.code == Errors.NOT_COORDINATOR and p in a.runtime.partitions
    assert a.manager.owner_of(p) == NodeAddress(0, "127.0.0.1", 9000)
    await clock.run_until(lambda: not a.active, LEASE_MS)  # the renewer's sweep
    assert clock.monotonic_ms() - cut_at < LEASE_MS
    assert a.runtime.self_fenced == len(mine)
    with pytest.raises(ApiError) as err:
        a.runtime.partition(p)
    assert err.value.code == Errors.NOT_COORDINATOR
    # FindCoordinator on the cut shard: the member the store sends the partition to
    assert all(a.manager.owner_of(n) == NodeAddress(1, "127.0.0.1", 9001) for n in mine)
    took = await clock.run_until(lambda: b.active == list(range(PARTITIONS)), 10 * LEASE_MS)
    assert clock.monotonic_ms() - cut_at <= LEASE_MS + 2 * a.manager.settings.round_ms
    assert took > 0 and a.manager.cut_off()
    assert all(a.manager.owner_of(n) == NodeAddress(1, "127.0.0.1", 9001) for n in mine)
    # the link heals: a registers again and gets its share back by graceful handoff
    link.cut = False
    await clock.run_until(lambda: balanced(a, b), 20 * LEASE_MS)
    assert not a.manager.cut_off()


async def test_a_resumed_paused_shard_answers_nothing_from_memory(
    make_shard: Callable[..., Shard], clock: ManualClock, store: InMemoryLogStore
) -> None:
    """Paused beyond its lease (no loop ran: the clock jumps), then resumed: the first
    operation -- before the renewer had a chance to run -- is refused, not answered from
    the state the partition had before the pause, and no timer fires on that state."""
    a = make_shard(0)
    await join(a)
    p = 0
    assert await a.runtime.write(p, lambda sm, now: sm.incr("k")) == 1
    clock.advance(LEASE_MS + 1)  # SIGSTOP ... SIGCONT: nothing ran meanwhile
    with pytest.raises(ApiError) as err:
        await a.runtime.read(p, lambda sm, now: sm.values["k"])
    assert err.value.code == Errors.NOT_COORDINATOR
    assert p not in a.runtime.partitions and a.runtime.self_fenced == 1
    assert a.manager.cut_off()  # no registry heartbeat for a whole lease either


async def test_a_remembered_answer_is_not_given_again_past_the_deadline(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    a = make_shard(0)
    await join(a)
    part = a.runtime.partitions[0]
    token = part.read_token()
    assert part.answer_now(lambda sm, now: "steady") == "steady"
    assert answer_again(token, lambda sm, now: None)
    clock.advance(LEASE_MS)
    assert not answer_again(token, lambda sm, now: None)
    assert part.answer_now(lambda sm, now: "steady") is None


async def test_renewals_extend_the_deadline_from_when_they_were_sent(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    """With the loops running, the deadline keeps moving ahead for many leases."""
    a = make_shard(0)
    await start(a)
    await clock.run_for(20 * LEASE_MS)
    assert a.active == list(range(PARTITIONS)) and a.runtime.self_fenced == 0
    ahead = [a.runtime.partitions[p].serve_until - clock.monotonic_ms() for p in a.active]
    assert all(0 < d <= LEASE_MS - lease_margin_ms(LEASE_MS) for d in ahead)


async def test_after_a_store_outage_no_shard_takes_the_partitions_of_another_coming_back(
    make_shard: Callable[..., Shard], clock: ManualClock, store: InMemoryLogStore
) -> None:
    """The store is gone for everyone for longer than a lease: every registry entry and
    lease expires at once. When it comes back, the shards register again one heartbeat
    apart; the first one back must not compute a map of itself alone and take (then hand
    back) the others' partitions -- it keeps the members of its last view for a while, so
    each shard loads only its own share and nothing moves twice."""
    link = Link()
    shards = [make_shard(n, link=link) for n in range(3)]
    for s in shards:  # heartbeat phases a tenth of a lease apart
        await start(s)
        await clock.run_for(LEASE_MS // 10)
    await clock.run_until(lambda: balanced(*shards), 20 * LEASE_MS)
    share = {n: set(s.active) for n, s in enumerate(shards)}
    link.cut = True
    await clock.run_until(lambda: not any(s.active for s in shards), 2 * LEASE_MS)
    await clock.run_for(LEASE_MS)  # every entry and lease has expired in the store
    before = [s.manager.stats.copy() for s in shards]
    link.cut = False
    most = dict.fromkeys(range(3), 0)

    def back() -> bool:
        for n, s in enumerate(shards):
            assert set(s.active) <= share[n], f"shard {n} took {set(s.active) - share[n]}"
            most[n] = max(most[n], len(s.active))
        return balanced(*shards)

    took = await clock.run_until(back, 10 * LEASE_MS)
    assert {n: set(s.active) for n, s in enumerate(shards)} == share
    # one heartbeat to come back, one poll or round to load: well inside a lease
    assert took <= LEASE_MS // 3 + shards[0].manager.settings.round_ms + 50
    # each partition loaded once, none handed off
    moved = [s.manager.stats - b for s, b in zip(shards, before, strict=True)]
    assert [m["moved_in"] for m in moved] == [len(share[n]) for n in range(3)]
    assert all(m["moved_out"] == 0 for m in moved)


async def test_a_shard_that_died_during_a_store_outage_loses_its_share_a_bit_later(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    """The last view is kept for two heartbeat periods (2/3 TTL) only: a member that does
    not come back is dropped then, and its partitions are served by the others."""
    link = Link()
    shards = [make_shard(n, link=link) for n in range(3)]
    for s in shards:
        await start(s)
        await clock.run_for(LEASE_MS // 10)
    await clock.run_until(lambda: balanced(*shards), 20 * LEASE_MS)
    link.cut = True
    dead = shards.pop()
    await dead.manager.stop()  # dies while the store is gone: it cannot leave
    await dead.runtime.close()
    await clock.run_for(2 * LEASE_MS)
    link.cut = False
    took = await clock.run_until(lambda: balanced(*shards), 10 * LEASE_MS)
    settings = shards[0].manager.settings
    grace = 2 * LEASE_MS // 3
    assert grace <= took <= grace + settings.round_ms + settings.handoff_poll_ms + 50


async def test_loads_backing_off_retry_once_a_full_round_reads_every_lease_again(
    make_shard: Callable[..., Shard], clock: ManualClock
) -> None:
    """The log store fails for 3 s while the registry answers (a Redis Cluster primary fails
    over; the registry's slot is on another): the partitions' loads back off to seconds and
    no registry heartbeat fails to say when the store is back. The first full ownership round
    that reads every lease again does: the loads retry at once instead of up to 3.2 s later."""
    link = Link()
    a = make_shard(0, link=link, store_only=True)
    await start(a)
    assert a.active == list(range(PARTITIONS))
    link.cut = True
    with pytest.raises(ApiError):
        await a.runtime.partition(0).write(lambda sm, now: sm.incr("x"))
    # load attempts at 0, 50, 150, 350, 750, 1550 and 3150 ms fail; the next is due at 6350
    await clock.run_for(3_200)
    assert 0 not in a.active
    link.cut = False
    healed = clock.monotonic_ms()
    await clock.run_until(lambda: a.active == list(range(PARTITIONS)), 10_000)
    back_ms = clock.monotonic_ms() - healed
    # a full round every lease / 4 = 250 ms, then the load
    assert back_ms <= a.manager.settings.round_ms + 100, back_ms
