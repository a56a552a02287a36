"""The transactional application of the simulator (sim/txn.py): offsets committed in
transactions, the upstream's markers followed by every shard with the real outcome follower,
and what the group ends with."""

from __future__ import annotations

import pytest

from services.upstream.txn_markers import Marker, control_markers
from sim.txn import GROUP, PARTITIONS, PRODUCER_ID, record_batch, txn_app
from sim.world import Config, Sim, run

CFG = Config()


def _coordinator_state(sim: Sim) -> tuple[dict[int, int], dict[object, object]]:
    sm = sim.checker._owner_of(GROUP)
    assert sm is not None
    committed = sm.offset_manager.offsets.get(GROUP, {}).get("t0", {})
    return (
        {p: v.offset for p, v in committed.items()},
        sm.offset_manager.pending.by_group.get(GROUP, {}),
    )


#: transactional seeds: 82 (TV2, three shards, a streams application beside), 48 (TV1,
#: three shards), 164 (TV2, one shard process)
SEEDS = [82, 48, 164]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_group_ends_with_the_last_committed_transactions_offsets(seed: int) -> None:
    # each transaction's offsets are pending until the follower of the shard serving the
    # group reads the transaction's marker upstream: COMMIT makes them the group's, ABORT
    # drops them; at the end nothing is pending and each partition holds the offset of the
    # last committed transaction that carried it
    assert txn_app(seed, CFG)
    seen: list[Sim] = []
    result = run(seed, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.done and app.v2 == (seed != 48)
    assert any(t.committed for t in app.txns) and any(t.committed is False for t in app.txns)
    committed, pending = _coordinator_state(seen[0])
    assert not pending
    last = {p: v for p, v in app.last_committed().items() if v is not None}
    assert committed == last and set(last) <= set(PARTITIONS)
    # no aborted transaction's offset is the group's
    aborted = {v for t in app.txns if t.committed is False for v in t.offsets.values()}
    assert not aborted & set(committed.values())
    assert result.coverage.get("txn:pending offsets resolved")
    assert result.coverage.get("txn:fetch UNSTABLE_OFFSET_COMMIT")


def test_a_late_request_under_v2_is_fenced_upstream() -> None:
    # seed 132 (TV2): a TxnOffsetCommit reached the gateway after its transaction ended;
    # AddOffsetsToTxn, sent upstream first, fails (EndTxn bumped the epoch): nothing written
    result = run(132)
    assert not result.violations, result.violations
    assert result.coverage.get("txn:TV2: a late TxnOffsetCommit fenced upstream")


def test_a_late_entry_under_v2_is_discarded_by_the_next_marker() -> None:
    # seed 47 (TV2): a shard wrote a transaction's pending offsets after its marker (the
    # request held by a store stall past the client's timeout); the producer's next marker,
    # at a higher epoch, discards them
    seen: list[Sim] = []
    result = run(47, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and app.v2
    late = [t for t in app.txns if t.late]
    assert late
    committed, pending = _coordinator_state(seen[0])
    assert not pending
    assert not {v for t in late for v in t.offsets.values()} & set(committed.values())


def test_a_late_entry_under_v1_is_kafkas_hazard() -> None:
    # seed 1105 (TV1): a duplicate of the last transaction's TxnOffsetCommit arrived after its
    # COMMIT marker and its entry hangs (no later marker of the producer): under transaction
    # version 1 Kafka has the same hazard (KIP-890), so the checker leaves it
    seen: list[Sim] = []
    result = run(1105, inspect=seen.append)
    assert not result.violations, result.violations
    app = seen[0].txn
    assert app is not None and not app.v2 and app.txns[-1].late
    assert result.coverage.get("txn:TV1: a late entry (as Kafka: unchecked)")
    _, pending = _coordinator_state(seen[0])
    assert pending  # (hanging, as in Kafka)


def test_the_simulated_upstream_batches_are_what_the_marker_reader_reads() -> None:
    data = record_batch(5, 7, 1, control=False) + record_batch(6, PRODUCER_ID, 3, True, 0)
    data += record_batch(7, PRODUCER_ID, 4, control=True)
    assert control_markers(data) == (
        [Marker(6, PRODUCER_ID, 3, False), Marker(7, PRODUCER_ID, 4, True)],
        8,
    )
