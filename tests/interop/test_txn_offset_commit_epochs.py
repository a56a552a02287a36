"""TxnOffsetCommit at older member epochs, side by side with Apache Kafka 4.4.0 (docs/
exactly-once.md, section 4): the same raw requests to Kafka directly and to groupcoord's
gateway in proxy mode with ``exactly_once`` in front of it, every answer compared.

KIP-1251 (Kafka 4.4) applies to transactional commits too: a member's older epoch commits
the partitions it has held since then. Refusals differ by version: up to v5 a stale epoch
is answered ILLEGAL_GENERATION, from v6 (KIP-1319, topics by id) STALE_MEMBER_EPOCH. Two
transactions: v3 under transaction version 1 (AddOffsetsToTxn first, EndTxn v4), v6 under
version 2 (no AddOffsetsToTxn: the commit adds the offsets partition; EndTxn v5). Each
aborted at the end, so nothing is committed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from services.gateway import codec
from tests.interop.sequences import (
    Member,
    err,
    lone_classic_member,
    moved_on,
    older_epoch_cases,
)
from tests.interop.support import Target, unique
from tests.support.gateway import exactly_once_stack
from tests.support.kafka_wire import KafkaWire, request

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: what a transaction coordinator answers while it loads or finishes the previous outcome
_RETRIABLE = {
    "coordinator_load_in_progress",
    "coordinator_not_available",
    "not_coordinator",
    "concurrent_transactions",
}


async def _until_done(wire: KafkaWire, make: Any, code_of: Any) -> Any:
    for _ in range(200):
        r = await wire.send(make())
        if err(code_of(r)) not in _RETRIABLE:
            return r
        await asyncio.sleep(0.1)
    raise AssertionError(f"still retriable: {r}")


async def _epochs(bootstrap: str, version: int) -> list[tuple[str, Any]]:
    host, port = bootstrap.rsplit(":", 1)
    wire = await KafkaWire.connect(host, int(port))
    obs: list[tuple[str, Any]] = []
    try:
        topic, group, m1, m2, first = await moved_on(wire, "txe", obs)
        tv2 = version >= 5
        tx = unique("txe-tx")
        # (the first lookup of a transaction coordinator creates Kafka's transaction log)
        await _until_done(
            wire,
            lambda: request("find_coordinator", 4, key_type=1, coordinator_keys=[tx]),
            lambda r: r.coordinators[0].error_code,
        )
        init = await _until_done(
            wire,
            lambda: request(
                "init_producer_id",
                5 if tv2 else 4,
                transactional_id=tx,
                transaction_timeout=60000,
                producer_id=-1,
                producer_epoch=-1,
            ),
            lambda r: r.error_code,
        )
        obs.append(("init producer", err(init.error_code)))
        pid, pepoch = int(init.producer_id), int(init.producer_epoch)

        async def add_offsets(group_id: str, which: str) -> None:
            # (transaction version 1: the group's offsets partition joins the transaction
            # first; from version 2 the commit adds it)
            if tv2:
                return
            added = await _until_done(
                wire,
                lambda: request(
                    "add_offsets_to_txn",
                    3,
                    transactional_id=tx,
                    producer_id=pid,
                    producer_epoch=pepoch,
                    group_id=group_id,
                ),
                lambda r: r.error_code,
            )
            obs.append((f"add offsets of the {which} group", err(added.error_code)))

        await add_offsets(group, "consumer")

        async def commit(
            member: Member | str,
            epoch: int,
            partitions: list[int],
            instance: str | None = None,
            twice: bool = False,
            group_id: str = group,
        ) -> list[str]:
            named = {"topic_id": codec.to_uuid(m1.topic_id)} if version >= 6 else {"name": topic}
            entry = {
                **named,
                "partitions": [{"partition_index": p, "committed_offset": 7} for p in partitions],
            }
            r = await _until_done(
                wire,
                lambda: request(
                    "txn_offset_commit",
                    version,
                    transactional_id=tx,
                    group_id=group_id,
                    producer_id=pid,
                    producer_epoch=pepoch,
                    generation_id=epoch,
                    member_id=member if isinstance(member, str) else member.member_id,
                    group_instance_id=instance,
                    topics=[entry, entry] if twice else [entry],
                ),
                lambda r: r.topics[0].partitions[0].error_code,
            )
            return [err(p.error_code) for t in r.topics for p in t.partitions]

        cases = older_epoch_cases(m1, m2, first)
        cases["m2 at its epoch, its partitions"] = (m2, m2.epoch, list(m2.owned))
        for name, (m, epoch, parts) in cases.items():
            obs.append((f"commit {name}", await commit(m, epoch, parts)))
        kept = list(m1.owned)
        # a dynamic member's commit naming a group instance id (a static member's field)
        obs.append(
            (
                "commit m1 at its epoch with an instance id it does not have",
                await commit(m1, m1.epoch, kept, instance=unique("txe-instance")),
            )
        )
        obs.append(
            (
                "commit m1 at its first epoch with an instance id it does not have",
                await commit(m1, first, kept, instance=unique("txe-instance")),
            )
        )
        # one topic twice in one request (by name up to v5, by id from v6)
        obs.append(
            (
                "commit m1 at its first epoch, the topic twice",
                await commit(m1, first, kept, twice=True),
            )
        )
        obs.append(
            (
                "commit m1 at its current epoch, m2's partition, the topic twice",
                await commit(m1, m1.epoch, list(m2.owned)[:1], twice=True),
            )
        )
        # a classic group's generation (ILLEGAL_GENERATION at any version)
        classic = unique("txe-classic")
        await add_offsets(classic, "classic")
        cm, gen = await lone_classic_member(wire, classic)
        for name, (member_id, generation, instance) in {
            "at its generation": (cm, gen, None),
            "at an older generation": (cm, gen - 1, None),
            "at a newer generation": (cm, gen + 1, None),
            "unknown member": ("unknown-member", gen, None),
            "with an instance id it does not have": (cm, gen, unique("txe-instance")),
        }.items():
            obs.append(
                (
                    f"commit classic {name}",
                    await commit(member_id, generation, kept, instance, group_id=classic),
                )
            )
        ended = await _until_done(
            wire,
            lambda: request(
                "end_txn",
                5 if tv2 else 4,
                transactional_id=tx,
                producer_id=pid,
                producer_epoch=pepoch,
                committed=False,
            ),
            lambda r: r.error_code,
        )
        obs.append(("abort", err(ended.error_code)))
        for m in (m1, m2):
            await m.heartbeat(epoch=-1)
        return obs
    finally:
        await wire.close()


@pytest.mark.parametrize("version", [3, 6])
async def test_txn_offset_commit_at_older_epochs_answered_as_kafka(
    kafka_target: Target, tmp_path: Path, version: int
) -> None:
    kafkas = await _epochs(kafka_target.bootstrap, version)
    async with exactly_once_stack(tmp_path, kafka_target.bootstrap) as stack:
        ours = await _epochs(stack.bootstrap, version)
    differences = [(a, b) for a, b in zip(kafkas, ours, strict=True) if a != b]
    assert not differences, f"Kafka vs groupcoord: {differences}\nKafka: {kafkas}"
    # and the rule was exercised: an older epoch accepted for partitions held since then,
    # refused (as this version says) for one that was not
    stale = "stale_member_epoch" if version >= 6 else "illegal_generation"
    answers = dict(kafkas)
    assert answers["commit m1 at its first epoch, its partitions"] == ["none", "none"]
    assert set(answers["commit m1 at its first epoch, m2's partition"]) == {stale}
    # a consumer group's transactional commit does not check the group instance id (Kafka
    # neither), and a topic named twice is answered once per entry
    assert answers["commit m1 at its epoch with an instance id it does not have"] == ["none"] * 2
    assert answers["commit m1 at its first epoch, the topic twice"] == ["none"] * 4
    assert answers["commit classic at its generation"] == ["none"] * 2
    assert set(answers["commit classic at an older generation"]) == {"illegal_generation"}
