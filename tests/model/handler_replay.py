"""A trace of ``models/kip848.qnt`` (joins, heartbeats delivered or lost, leaves, session
timeouts, zombies giving up, OffsetCommits -- late ones too -- sent and arriving: the model's
``stepMembership``)
replayed against the core's whole heartbeat handler
(``CoordinatorStateMachine.consumer_group_heartbeat``, records replayed as the runtime does),
with an assignor that answers the model's target, and its OffsetCommit handler
(``commit_offset``). After every step the group epoch and every member's record in the core
must equal the model's (assignment epochs included), a delivered answer must carry the
model's epoch and assignment, and an arriving commit must be written (its offset read back)
exactly when the model accepts it -- nothing written when refused. A session timeout is the
core's own timer for that member, fired (``CONSUMER_SESSION_TIMEOUT``); a zombie giving up
is the client's alone (nothing reaches the core).
"""

from __future__ import annotations

from typing import Any

from services.shard.assignor_executor import InProcessAssignor
from shards.core import api as core_api
from shards.core.consumer import api
from shards.core.consumer.group import ConsumerGroup
from shards.core.consumer.target_assignment import TargetAssignment, TargetAssignmentRequest
from shards.core.coordinator_config import CoordinatorConfig
from shards.core.errors import ApiError
from shards.core.state_machine import CoordinatorStateMachine
from shards.core.timer_keys import TimerKind, member_key
from shards.core.topics import TopicImage, TopicsImage, uuid_to_text
from tests.support.core_harness import ShardHarness, at_once

TOPIC = "t"
TOPIC_ID = uuid_to_text(b"model-topic-t".ljust(16, b"\x00"))


def member_id(name: str) -> str:
    return uuid_to_text(f"model-member-{name}".encode()[:16].ljust(16, b"\x00"))


class ModelAssignor(InProcessAssignor):
    """Answers whatever target the model chose (set before each step)."""

    def __init__(self, config: CoordinatorConfig) -> None:
        super().__init__(tuple(config.consumer_group_assignors))
        self.target: dict[str, frozenset[int]] = {}
        self.asked = 0

    def compute(self, request: TargetAssignmentRequest) -> TargetAssignment:
        self.asked += 1
        return {
            member_id(m): ({TOPIC_ID: tuple(sorted(ps))} if ps else {})
            for m, ps in self.target.items()
        }


class ModelHarness(ShardHarness):
    def new_shard(self, timer: Any) -> CoordinatorStateMachine:
        self.assignor = ModelAssignor(self.config)
        return CoordinatorStateMachine(
            self.config, timer, self.topics, self.partition, assign=self.assignor,
            new_uuid=self.uuids,
        )  # fmt: skip


def _record(g: ConsumerGroup | None, name: str, shift: int) -> dict[str, Any]:
    """The member's record in the core, its epochs shifted to the model's."""
    m = None if g is None else g.members.get(member_id(name))
    if m is None:
        return {
            "epoch": 0,
            "state": "STABLE",
            "assigned": frozenset(),
            "pending": frozenset(),
            "epochs": {},
        }
    assigned = frozenset(m.assigned_partitions.get(TOPIC_ID, ()))
    pending = frozenset(m.partitions_pending_revocation.get(TOPIC_ID, ()))
    return {
        "epoch": m.member_epoch - shift if m.member_epoch else 0,
        "state": m.state.name,
        "assigned": assigned,
        "pending": pending,
        "epochs": {p: (m.epoch_of(TOPIC_ID, p) or 0) - shift for p in sorted(assigned | pending)},
    }


def replay_handler(states: list[dict[str, Any]]) -> list[str]:
    # (the model has no KIP-1263 assignment interval: every change gets its target at once)
    h = ModelHarness(at_once(), topics=TopicsImage.of(1, [TopicImage(TOPIC_ID, TOPIC, 4)]))
    problems: list[str] = []
    #: core epoch - model epoch, learned at the first join (the core's first epoch of a new
    #: group may differ from the model's 1); constant afterwards
    shift: int | None = None
    for i in range(1, len(states)):
        before, after = states[i - 1], states[i]
        action, m = after["lastAction"], after["actor"]
        where = f"step {i} ({action} {m})"
        owned = before["owned"][m]
        if action in ("send_commit", "send_late_commit", "zombie_fenced"):
            continue  # (nothing reaches the core)
        if action == "session_timeout":
            h.assignor.target = after["target"]
            key = member_key(TimerKind.CONSUMER_SESSION_TIMEOUT, "g", member_id(m))
            task = h.timer.tasks.pop(key, None)
            if task is None:
                problems.append(f"{where}: the core has no session timer for {m}")
                break
            h.timer.now_ms = max(h.timer.now_ms, task[0])  # (it fires at its deadline)
            h._apply(task[2](h.now))
            problems += _compare(h, after, shift or 0, where)
            if problems:
                break
            continue
        if action in ("commit_accepted", "commit_refused"):
            (c,) = before["inflight"] - after["inflight"]
            problems += _commit(h, c, i, shift or 0, action == "commit_accepted", where)
            if problems:
                break
            continue
        if action == "join":
            h.assignor.target = after["target"]
            epoch, full = 0, True
        elif action in ("heartbeat", "heartbeat_lost"):
            h.assignor.target = before["target"]
            epoch, full = before["clientEpoch"][m] + (shift or 0), False
        elif action == "leave":
            h.assignor.target = after["target"]
            epoch, full = -1, False
        else:
            return [f"{where}: not a step of stepMembership"]
        request = api.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id=member_id(m),
            member_epoch=epoch,
            rebalance_timeout_ms=10_000 if full else -1,
            subscribed_topic_names=(TOPIC,) if full else None,
            server_assignor="uniform" if full else None,
            topic_partitions=(api.TopicPartitions(TOPIC_ID, tuple(sorted(owned))),)
            if owned else (),
        )  # fmt: skip
        try:
            resp = h.write(lambda s, now, r=request: s.consumer_group_heartbeat(r, now))
        except Exception as ex:  # noqa: BLE001 - an error the model does not expect
            problems.append(f"{where}: the core answered {ex!r}")
            break
        if shift is None:
            shift = _group_epoch(h) - after["groupEpoch"]
        problems += _compare(h, after, shift, where)
        if action in ("join", "heartbeat"):
            if resp.member_epoch - shift != after["clientEpoch"][m]:
                problems.append(
                    f"{where}: answered epoch {resp.member_epoch}, model {after['clientEpoch'][m]}"
                )
            if resp.assignment is not None:
                got = frozenset(p for tp in resp.assignment for p in tp.partitions)
                if got != after["owned"][m]:
                    problems.append(f"{where}: answered {set(got)}, model {set(after['owned'][m])}")
        if problems:
            break
    return problems


def _group_epoch(h: ModelHarness) -> int:
    g = h.shard.group_manager.groups.get("g")
    return g.group_epoch if isinstance(g, ConsumerGroup) else 0


def _compare(h: ModelHarness, after: dict[str, Any], shift: int, where: str) -> list[str]:
    """The core's group epoch and member records against the model's state ``after``."""
    problems = []
    g = h.shard.group_manager.groups.get("g")
    group = g if isinstance(g, ConsumerGroup) else None
    core_epoch = 0 if group is None else group.group_epoch
    if core_epoch - shift != after["groupEpoch"] and after["inGroup"]:
        problems.append(
            f"{where}: group epoch core {core_epoch}-{shift}, model {after['groupEpoch']}"
        )
    for name in sorted(after["members"]):
        core, model = _record(group, name, shift), after["members"][name]
        if core != model:
            problems.append(f"{where}: member {name}: core {core}, model {model}")
    return problems


def _commit(
    h: ModelHarness, c: dict[str, Any], offset: int, shift: int, accept: bool, where: str
) -> list[str]:
    """The commit ``c`` of the model through the core's OffsetCommit handler (v9, one
    partition, ``offset``): written and read back if ``accept``, else refused, nothing
    written."""
    request = core_api.OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=c["epoch"] + shift,
        member_id=member_id(c["member"]),
        topics=(
            core_api.OffsetCommitRequestTopic(
                TOPIC, (core_api.OffsetCommitRequestPartition(c["partition"], offset),)
            ),
        ),
    )
    log = len(h.log)
    try:
        h.write(lambda s, now: s.commit_offset(request, now))
    except ApiError as ex:
        if accept:
            return [f"{where}: the core refused {dict(c)}: {ex}"]
        if len(h.log) != log:
            return [f"{where}: a refused commit wrote to the log"]
        return []
    if not accept:
        return [f"{where}: the core accepted {dict(c)}"]
    stored = h.shard.offset_manager.offsets.get("g", {}).get(TOPIC, {}).get(c["partition"])
    if stored is None or stored.offset != offset:
        return [f"{where}: committed {offset}, read back {stored}"]
    return []
