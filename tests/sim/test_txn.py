"""The transactional application of the simulator (sim/txn.py): offsets committed in
transactions, the upstream's markers followed by every shard with the real outcome follower,
and what the group ends with."""

from __future__ import annotations

import pytest

from services.upstream.txn_markers import Marker, control_markers
from sim.breakages import BREAKAGES
from sim.events import Config, Event
from sim.txn import (
    CLASSIC_GROUP,
    GROUP,
    MEMBERS_GROUP,
    PRODUCER_ID,
    STREAMS_GROUP,
    record_batch,
    txn_app,
)
from sim.world import Sim, run
from tests.sim import AS_SWEPT_EOS_HANGS, AS_SWEPT_TXN

CFG = Config()


def _coordinator_state(
    sim: Sim, group: str = GROUP
) -> tuple[dict[tuple[str, int], int], dict[object, object]]:
    """``group``'s committed offsets and pending transactional offsets on its coordinator."""
    sm = sim.checker._owner_of(group)
    assert sm is not None
    committed = sm.offset_manager.offsets.get(group, {})
    return (
        {(t, p): v.offset for t, parts in committed.items() for p, v in parts.items()},
        sm.offset_manager.pending.by_group.get(group, {}),
    )


#: transactional seeds: 82 (TV2, three shards, a streams application beside), 370 (TV1,
#: three shards, streams beside), 19 (TV2, one shard process)
SEEDS = [82, 370, 19]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_groups_end_with_the_last_committed_transactions_offsets(seed: int) -> None:
    # each transaction's offsets are pending until the follower of the shard serving the
    # group reads the transaction's marker upstream: COMMIT makes them the group's, ABORT
    # drops them; at the end nothing is pending and each partition holds the offset of the
    # last committed transaction that carried it -- the simple group's (x0) and the
    # transactional consumers' group's (x1, member epochs checked)
    assert txn_app(seed, CFG)
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.done and app.v2 == (seed != 370)
    for group in (GROUP, MEMBERS_GROUP):
        txns = [t for t in app.txns if t.group == group]
        assert any(t.committed for t in txns)
        committed, pending = _coordinator_state(seen[0], group)
        assert not pending
        assert committed == app.last_committed(group)
        # no aborted transaction's offset is the group's
        aborted = {v for t in txns if t.committed is False for v in t.offsets.values()}
        assert not aborted & set(committed.values())
    assert any(t.committed is False for t in app.txns)
    assert all(t.generation > 0 for t in app.txns if t.group == MEMBERS_GROUP)
    assert result.coverage.get("txn:pending offsets resolved")


def test_a_late_request_under_v2_is_fenced_upstream() -> None:
    # seed 164 (TV2): a TxnOffsetCommit reached the gateway after its transaction ended;
    # AddOffsetsToTxn, sent upstream first, fails (EndTxn bumped the epoch): nothing written
    result = run(164, cfg=AS_SWEPT_TXN)
    assert not result.violations, result.violations
    assert result.coverage.get("txn:TV2: a late TxnOffsetCommit fenced upstream")


def test_an_entry_written_after_its_marker_is_resolved_by_it() -> None:
    # seed 890 (TV2): a shard wrote a transaction's pending offsets after its marker (the
    # request held by a store stall past the client's timeout; its floor read before the
    # marker): the follower offers the new entry the markers from its floor, its own first
    seen: list[Sim] = []
    result = run(890, cfg=AS_SWEPT_TXN, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.v2
    assert result.coverage.get("txn:pending written after its marker")
    assert not any(t.late for t in app.txns)  # (none past it: TV2 fences those upstream)
    for group in (GROUP, MEMBERS_GROUP):
        committed, pending = _coordinator_state(seen[0], group)
        assert not pending
        assert committed == app.last_committed(group)


def test_a_late_entry_under_v1_is_kafkas_hazard() -> None:
    # seed 210 (TV1): an entry written after its transaction's marker is left to the
    # producer's next marker at the same epoch, as Kafka's TV1 leaves it (KIP-890): the
    # checker does not hold those offsets to the last committed transaction's
    seen: list[Sim] = []
    result = run(210, cfg=AS_SWEPT_TXN, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and not app.v2 and any(t.late for t in app.txns)
    assert result.coverage.get("txn:TV1: a late entry (as Kafka: unchecked)")


def test_a_zombie_consumers_transaction_is_fenced_by_the_group() -> None:
    # seed 162: a transactional consumer cut off past its session (its partitions given to
    # the other) still ran transactions over what it thought it held; once its link was
    # back, its TxnOffsetCommit at its old member epoch was refused (UNKNOWN_MEMBER_ID: the
    # group removed it) and the transaction aborted -- KIP-447's fencing. The breakage
    # txn-zombie-commits (the group not asked) is caught on this seed.
    seen: list[Sim] = []
    result = run(162, cfg=AS_SWEPT_TXN, inspect=seen.append)
    assert not result.violations, result.violations
    assert result.coverage.get("txn:TxnOffsetCommit UNKNOWN_MEMBER_ID")
    app = seen[0].txn
    assert app is not None
    fenced = [t for t in app.txns if "UNKNOWN_MEMBER_ID" in t.answers]
    assert fenced and all(t.group == MEMBERS_GROUP and t.committed is False for t in fenced)


@pytest.mark.parametrize("seed", [2801, 2873])
def test_a_marker_read_while_the_partition_was_away_is_read_again(seed: int) -> None:
    # seeds 2801 and 2873 (TV1, three shards): a store stall cost the shard holding x0 its
    # lease between the follower's reading of the pending entries and its applying of the
    # transaction's ABORT marker (applied to nothing); the shard loaded the partition again.
    # The follower read on from past the marker: the producer's next COMMIT, at the same
    # epoch, committed the aborted offsets (2801), or the entry hung (2873). Now an entry of
    # a partition loaded again is offered the markers from its floor again.
    seen: list[Sim] = []
    result = run(seed, cfg=AS_SWEPT_TXN, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and not app.v2 and seen[0].multi
    committed, pending = _coordinator_state(seen[0])
    assert not pending
    aborted = {v for t in app.txns if t.committed is False for v in t.offsets.values()}
    assert not aborted & set(committed.values())


@pytest.mark.parametrize("seed", [180, 341])
def test_a_hung_transaction_is_aborted_by_the_coordinator_fencing_the_producer(
    seed: int,
) -> None:
    # seeds 180 (TV1, one shard process) and 341 (TV2, three shards): applications crash
    # between their TxnOffsetCommit and EndTxn; the offsets stay pending until the
    # transaction coordinator aborts the transaction -- on its timeout, or at the restarted
    # producer's InitProducerId -- with the producer's epoch bumped (under TV1 above the
    # entry's own marker epoch: an abort all the same); nothing of them is ever committed
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.v2 == (seed == 341) and seen[0].multi == (seed == 341)
    assert seen[0].retention.retention_ms is None  # (offsets kept: compared below)
    hung = [t for t in app.txns if t.hung]
    assert hung and all(t.committed is False and t.marker_at >= 0 for t in hung)
    assert app.hanging == 0
    for group in (GROUP, MEMBERS_GROUP):
        committed, pending = _coordinator_state(seen[0], group)
        assert not pending
        assert committed == app.last_committed(group)
        assert not {v for t in hung for v in t.offsets.values()} & set(committed.values())
    assert result.coverage.get("txn:hung transaction aborted at InitProducerId")
    assert result.coverage.get("txn:hung transaction aborted on the coordinator's timeout")


def test_a_classic_zombies_transaction_is_fenced_by_its_generation() -> None:
    # seed 3062 (TV2, one shard process) has transactional classic consumers in x2 too:
    # c12, cut off past its 3 s session, kept its generation and partitions (as Kafka's
    # client does while its coordinator is unreachable) and, its link back, committed in a
    # transaction at generation 1 -- the group had moved on without it (generation 2, c11
    # alone): UNKNOWN_MEMBER_ID, the transaction aborted; every accepted one was written
    # where the log's group had its member at that generation
    seen: list[Sim] = []
    result = run(3062, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.classic and app.v2
    txns = [t for t in app.txns if t.group == CLASSIC_GROUP]
    fenced = [t for t in txns if "UNKNOWN_MEMBER_ID" in t.answers]
    assert fenced and all(t.committed is False and t.generation == 1 for t in fenced)
    assert any(t.committed for t in txns)
    committed, pending = _coordinator_state(seen[0], CLASSIC_GROUP)
    assert not pending and committed == app.last_committed(CLASSIC_GROUP)
    assert result.coverage.get("commit-epoch:classic transactional: of the generation")


def test_the_checker_catches_a_classic_zombies_accepted_transaction() -> None:
    # the same seed with KIP-447's fencing gone from TxnOffsetCommit: c12's offsets are
    # written at generation 1 where the log's group is at generation 2 without it
    with BREAKAGES["txn-zombie-commits"]():
        result = run(3062)
    assert any(
        "of classic group x2 in a transaction at generation 1" in v for v in result.violations
    )


@pytest.mark.parametrize("seed", [24, 82])
def test_an_exactly_once_streams_application_commits_its_tasks_in_transactions(
    seed: int,
) -> None:
    # seeds 24 (TV1, one shard process) and 82 (TV2, three shards, the transactional
    # applications beside):
    # the streams application runs exactly-once -- each thread's commits are TxnOffsetCommits
    # of its producer at its member epoch, serialized per producer; a late one at an older
    # epoch of a task given up since is refused STALE_MEMBER_EPOCH (seed 24) and aborted; the
    # streams group ends with the last committed transactions' offsets, nothing pending
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    sim = seen[0]
    app, streams = sim.txn, sim.streams
    assert app is not None and streams is not None and streams.eos
    assert app.full == (seed == 82) and app.v2 == (seed == 82)
    txns = [t for t in app.txns if t.group == STREAMS_GROUP]
    assert any(t.committed for t in txns) and all(t.generation > 0 for t in txns)
    committed, pending = _coordinator_state(sim, STREAMS_GROUP)
    assert not pending and committed == app.last_committed(STREAMS_GROUP)
    assert result.coverage.get("streams:commit (transaction) NONE")
    assert not result.coverage.get("streams:commit NONE")  # (no plain OffsetCommit)
    if seed == 24:
        stale = [t for t in txns if "STALE_MEMBER_EPOCH" in t.answers]
        assert stale and all(t.committed is False for t in stale)


@pytest.mark.parametrize("seed", [288, 307, 580])
def test_an_exactly_once_thread_crashed_in_a_transaction_is_aborted_on_the_timeout(
    seed: int,
) -> None:
    # seeds 288 (TV2, one shard process), 307 (TV1, three shards) and 580 (TV1, through the
    # gateways), the streams application alone: an exactly-once thread crashes between its
    # TxnOffsetCommit and EndTxn; its offsets stay pending until the transaction coordinator
    # aborts the transaction on its timeout (a new thread has a transactional id of its own:
    # no InitProducerId ends it), fencing the producer; the thread's session expires and a
    # new thread of its instance takes its tasks; nothing of the hung transaction is
    # committed, the group ends with the last committed transactions' offsets
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    sim = seen[0]
    app, streams = sim.txn, sim.streams
    assert app is not None and streams is not None and streams.eos_hangs and not app.full
    assert (app.v2, sim.multi, app.via_gateway) == (seed == 288, seed == 307, seed == 580)
    hung = [t for t in app.txns if t.hung]
    assert hung and all(t.group == STREAMS_GROUP for t in hung)
    assert all(t.committed is False and t.marker_at >= 0 for t in hung) and app.hanging == 0
    crashed = [m for m in streams.members if m.crashed_in_txn]
    assert crashed and not any(m.alive for m in crashed)
    # (a new thread of its instance in its place; seed 288's application then shuts down)
    assert all(
        any(m.slot == c.slot and m.index > c.index for m in streams.members) for c in crashed
    )
    committed, pending = _coordinator_state(sim, STREAMS_GROUP)
    assert not pending and committed == app.last_committed(STREAMS_GROUP)
    assert not {v for t in hung for v in t.offsets.values()} & set(committed.values())
    assert result.coverage.get("streams:thread crashed in a transaction")
    assert result.coverage.get("txn:hung transaction aborted on the coordinator's timeout")
    assert not result.coverage.get("txn:hung transaction aborted at InitProducerId")
    # without the share the same seed's threads never crash in a transaction
    off = run(seed, cfg=Config(streams_eos_hang_share=0.0))
    assert not off.violations and not off.coverage.get("streams:thread crashed in a transaction")


def test_a_thread_taken_down_with_its_transaction_out_is_replaced_once() -> None:
    # seed 856600 of the sweep (shrunk): the application's fault injector crashed s1 while its
    # transaction was out, and that transaction then hung -- two replacements of one thread
    # (static: one instance id), one of them refused UNRELEASED_INSTANCE_ID for ever
    events = [
        Event(3404, "classic_join", 2),
        Event(4348, "crash", 59),
        Event(5828, "member_join", 2),
    ]
    seen: list[Sim] = []
    result = run(856600, events, cfg=AS_SWEPT_EOS_HANGS, inspect=seen.append)
    assert not result.violations, result.violations
    assert result.coverage.get("streams:thread crashed in a transaction, already replaced")
    streams = seen[0].streams
    assert streams is not None
    live = [m.instance_id for m in streams.members if m.alive]
    assert len(live) == len(set(live))


def test_a_thread_asking_for_the_shutdown_does_not_crash_in_its_transaction() -> None:
    # seed 868133 of the sweep (shrunk): s2 asked for the application's shutdown while its
    # transaction was out; the transaction then hung and took s2 down before a heartbeat
    # carried the request -- the application waited for a shutdown nobody had heard of
    events = [Event(1448, "store_fail", 2), Event(3206, "failover", 2027)]
    seen: list[Sim] = []
    result = run(868133, events, cfg=AS_SWEPT_EOS_HANGS, inspect=seen.append)
    assert not result.violations, result.violations
    streams = seen[0].streams
    assert streams is not None and streams.shutting_down and streams.told_at is not None
    assert not any(m.alive for m in streams.members)


def test_a_transaction_that_ends_while_the_gateway_reads_the_floor_is_refused() -> None:
    # seed 882432 of the sweep (shrunk; TV2, through the gateways): m9's TxnOffsetCommit was
    # duplicated; the copy's AddOffsetsToTxn passed while the transaction was open, m9 got
    # COORDINATOR_NOT_AVAILABLE and aborted (the ABORT marker at 5), then the copy read the
    # floor (6) and was written: an entry above its own marker, pending for ever (m9 then
    # crashed, its producer never wrote again). The gateway now asks the transaction again
    # after the floor (services/gateway/txn_offsets.py): refused, nothing left pending
    events = [
        Event(825, "member_join", 2),
        Event(1213, "member_crash", 6),
        Event(2093, "gateway_pause", (1, 4596)),
        Event(5786, "lease_loss", None),
        Event(6313, "member_join", 0),
    ]
    seen: list[Sim] = []
    result = run(882432, events, cfg=AS_SWEPT_EOS_HANGS, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.v2 and app.via_gateway
    _, pending = _coordinator_state(seen[0], MEMBERS_GROUP)
    assert not pending
    assert result.coverage.get("txn:TV2: a late TxnOffsetCommit fenced upstream")


@pytest.mark.parametrize("seed", [3, 15])
def test_transactions_through_the_gateways_real_handler(seed: int) -> None:
    # gateway seeds 3 (TV1, one shard process) and 15 (TV2, three shards): the exactly-once
    # streams threads send their TxnOffsetCommits (v3 / v5 frames) to a gateway, whose real
    # handler adds the offsets partition to the transaction upstream (v5), reads the floor
    # from the simulated upstream and forwards the request to the shard through its router
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    sim = seen[0]
    app = sim.txn
    assert app is not None and app.via_gateway and app.v2 == (seed == 15)
    assert sim.multi == (seed == 15)
    assert result.coverage.get("txn:TxnOffsetCommit through a gateway")
    assert result.coverage.get("gateway:txn commit NONE")
    txns = [t for t in app.txns if t.group == STREAMS_GROUP]
    assert any(t.committed for t in txns)
    committed, pending = _coordinator_state(sim, STREAMS_GROUP)
    assert not pending and committed == app.last_committed(STREAMS_GROUP)


def test_the_simulated_upstream_batches_are_what_the_marker_reader_reads() -> None:
    data = record_batch(5, 7, 1, control=False) + record_batch(6, PRODUCER_ID, 3, True, 0)
    data += record_batch(7, PRODUCER_ID, 4, control=True)
    assert control_markers(data) == (
        [Marker(6, PRODUCER_ID, 3, False), Marker(7, PRODUCER_ID, 4, True)],
        8,
    )
