"""The member side of KIP-848's client-side assignors, over gRPC (docs/client-side-assignors.md).

A :class:`ClientSideMember` is one consumer-group member: it heartbeats
(ConsumerGroupHeartbeat) at the interval the coordinator gives, declares its client-side
assignors, takes the assignments it is given (reporting what it owns, so revocations
complete), and -- when a heartbeat response says ``should_compute_assignment`` -- computes the
group's target assignment with its :class:`ClientSideAssignor`:

1. ``ConsumerGroupPrepareAssignment``: the group epoch to compute for, the assignor version,
   every member (subscribed topic ids, its metadata for the assignor, its current target)
   and the subscribed topics;
2. ``assignor.assign(spec)``, off the event loop (an assignor may take its time; the member
   keeps heartbeating meanwhile);
3. ``ConsumerGroupInstallAssignment`` of the result for that epoch. An assignor that raises
   installs ``error=1`` instead: the coordinator chooses another member.

What goes wrong, and what the member does (each has a test in
tests/component/test_client_side_helper_errors.py):

* a member that is no longer the chosen one (UNKNOWN_MEMBER_ID) or whose epoch moved
  (STALE_MEMBER_EPOCH) drops its computation -- if it is still needed, a later heartbeat
  says so again;
* INVALID_ASSIGNMENT (the coordinator validates what is installed): the member prepares
  again; if the group is still at the epoch it computed for, its assignor's assignment was
  wrong and computing again would give the same, so it hands the computation over
  (``error=1``) instead of holding it until its deadline; if the group moved on, its next
  heartbeat (still ``should_compute_assignment``) computes the new epoch's target;
* the coordinator unreachable (restarting, failing over): the call fails, the computation
  ends (``-1``) and the heartbeat loop keeps trying; once a coordinator answers, a heartbeat
  that still says ``should_compute_assignment`` starts the computation again.

``CoordinatorClient`` finds the group's shard and follows it when it moves.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from groupcoord.v1 import common_pb2, consumer_group_pb2

from services.client.coordinator_client import CoordinatorClient

log = logging.getLogger("groupcoord.client.assignor")

FENCED_MEMBER_EPOCH = 110
UNKNOWN_MEMBER_ID = 25
STALE_MEMBER_EPOCH = 113
INVALID_ASSIGNMENT = 10001

Partitions = Mapping[str, Sequence[int]]  # topic id -> partitions


@dataclass(frozen=True, slots=True)
class TopicSpec:
    topic_id: str
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: tuple[str, ...]
    #: the member's metadata for the group's assignor (-1: a classic member's subscription)
    metadata_version: int
    metadata_bytes: bytes
    #: the member's current target (topic id -> partitions): for sticky assignors
    target: dict[str, tuple[int, ...]]
    member_type: str = "consumer"


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """What PrepareAssignment returned: compute the target of ``group_epoch`` from it."""

    group_id: str
    group_epoch: int
    assignor_name: str
    assignor_version: int
    members: dict[str, MemberSpec]
    topics: dict[str, TopicSpec]  # by topic id


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    partitions: dict[str, tuple[int, ...]] = field(default_factory=dict)
    metadata_version: int = 0
    metadata_bytes: bytes = b""
    #: KIP-848's assignment Error (int8): an error code for the member, given to it with
    #: its assignment (0: none)
    error: int = 0


class ClientSideAssignor(Protocol):
    """A client-side assignor: its name, the versions it supports, the metadata this member
    declares for it, and the assignment computation (run on a worker thread)."""

    name: str
    minimum_version: int
    maximum_version: int

    def metadata(self) -> tuple[int, bytes]:
        """(version, bytes) of this member's metadata; a change asks for a new assignment."""
        ...

    def assign(self, spec: GroupSpec) -> Mapping[str, MemberAssignment]:
        """The target assignment: member id -> its partitions and metadata."""
        ...


def assignor_declarations(
    assignors: Sequence[ClientSideAssignor],
) -> list[consumer_group_pb2.ClientAssignor]:
    out = []
    for a in assignors:
        version, data = a.metadata()
        out.append(
            consumer_group_pb2.ClientAssignor(
                name=a.name,
                minimum_version=a.minimum_version,
                maximum_version=a.maximum_version,
                metadata_version=version,
                metadata_bytes=data,
            )
        )
    return out


def spec_of(response: consumer_group_pb2.ConsumerGroupPrepareAssignmentResponse) -> GroupSpec:
    members = {}
    for m in response.members:
        members[m.member_id] = MemberSpec(
            member_id=m.member_id,
            instance_id=m.instance_id if m.HasField("instance_id") else None,
            rack_id=m.rack_id if m.HasField("rack_id") else None,
            subscribed_topic_ids=tuple(m.subscribed_topic_ids),
            metadata_version=m.assignor.metadata_version,
            metadata_bytes=m.assignor.metadata_bytes,
            target={tp.topic_id: tuple(tp.partitions) for tp in m.target_partitions},
            member_type=m.member_type,
        )
    return GroupSpec(
        group_id=response.group_id,
        group_epoch=response.group_epoch,
        assignor_name=response.assignor_name,
        assignor_version=response.assignor_version,
        members=members,
        topics={
            t.topic_id: TopicSpec(t.topic_id, t.topic_name, t.num_partitions)
            for t in response.topics
        },
    )


class ChosenMember:
    """What a member chosen to compute its group's target does (KIP-848 client-side
    assignors): Prepare, its assignor off the event loop, Install. Shared by
    :class:`ClientSideMember` and the member library (``services.client.member``); the
    class using it has these attributes."""

    client: CoordinatorClient
    group_id: str
    member_id: str
    epoch: int
    assignors: list[ClientSideAssignor]
    on_compute: Callable[[GroupSpec], None] | None
    computations: int
    invalid_assignments: int

    # ---- the chosen member ---------------------------------------------------------------------
    async def _compute_logged(self) -> int:
        try:
            return await self.compute()
        except asyncio.CancelledError:
            raise
        except Exception as ex:  # noqa: BLE001 -- a later heartbeat asks again if needed
            log.warning("computing the assignment on %s failed: %r", self.member_id, ex)
            return -1

    async def compute(self) -> int:
        """Prepare, assign, install; the error code of the last call (0: installed)."""
        prepared = await self.client.call(
            self.group_id,
            "ConsumerGroupPrepareAssignment",
            consumer_group_pb2.ConsumerGroupPrepareAssignmentRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch
            ),
        )
        if prepared.error_code:
            log.info("prepare of %s: error %d", self.member_id, prepared.error_code)
            return int(prepared.error_code)
        spec = spec_of(prepared)
        assignor = next((a for a in self.assignors if a.name == spec.assignor_name), None)
        install = consumer_group_pb2.ConsumerGroupInstallAssignmentRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            group_epoch=spec.group_epoch,
        )
        try:
            if assignor is None:
                raise LookupError(f"no assignor named {spec.assignor_name}")
            if self.on_compute is not None:
                self.on_compute(spec)
            result = await asyncio.to_thread(assignor.assign, spec)
        except Exception as ex:  # noqa: BLE001 -- the coordinator chooses another member
            log.warning("assignor %s failed on %s: %r", spec.assignor_name, self.member_id, ex)
            install.error = 1
        else:
            for member_id, a in sorted(result.items()):
                installed = install.members.add(
                    member_id=member_id,
                    metadata_version=a.metadata_version,
                    metadata_bytes=a.metadata_bytes,
                    error=a.error,
                )
                for topic_id, parts in sorted(a.partitions.items()):
                    installed.partitions.add(topic_id=topic_id, partitions=sorted(parts))
        install.member_epoch = self.epoch  # the epoch may have moved while it computed
        response = await self.client.call(self.group_id, "ConsumerGroupInstallAssignment", install)
        if response.error_code == INVALID_ASSIGNMENT:
            return await self._refused(spec, response.error_message)
        if response.error_code:
            log.info(
                "install of %s: error %d %s",
                self.member_id,
                response.error_code,
                response.error_message,
            )
        elif not install.error:
            self.computations += 1
        return int(response.error_code)

    async def _refused(self, spec: GroupSpec, message: str) -> int:
        """INVALID_ASSIGNMENT: the group moved on while the assignor ran (the member is still
        chosen: its next heartbeat computes the new epoch's target), or the assignor's
        assignment is wrong. In the latter case computing again would give the same, so the
        member hands the computation over at once (``error`` = 1: the coordinator chooses the
        next member, or falls back) instead of holding it until its deadline."""
        log.warning("install of %s: INVALID_ASSIGNMENT %s", self.member_id, message)
        self.invalid_assignments += 1
        again = await self.client.call(
            self.group_id,
            "ConsumerGroupPrepareAssignment",
            consumer_group_pb2.ConsumerGroupPrepareAssignmentRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch
            ),
        )
        if again.error_code == 0 and again.group_epoch == spec.group_epoch:
            handed = await self.client.call(
                self.group_id,
                "ConsumerGroupInstallAssignment",
                consumer_group_pb2.ConsumerGroupInstallAssignmentRequest(
                    group_id=self.group_id,
                    member_id=self.member_id,
                    member_epoch=self.epoch,
                    group_epoch=spec.group_epoch,
                    error=1,
                ),
            )
            log.info(
                "%s handed the computation of epoch %d over (error %d)",
                self.member_id,
                spec.group_epoch,
                handed.error_code,
            )
        return INVALID_ASSIGNMENT


class ClientSideMember(ChosenMember):
    """One member of a consumer group that uses a client-side assignor."""

    def __init__(
        self,
        client: CoordinatorClient,
        group_id: str,
        topics: Sequence[str],
        assignors: Sequence[ClientSideAssignor],
        *,
        member_id: str | None = None,
        instance_id: str | None = None,
        rebalance_timeout_ms: int = 30_000,
        client_id: str = "groupcoord-python",
        on_change: Callable[[ClientSideMember], None] | None = None,
        on_compute: Callable[[GroupSpec], None] | None = None,
    ) -> None:
        self.client = client
        self.group_id = group_id
        self.topics = list(topics)
        self.assignors = list(assignors)
        self.member_id = member_id or str(uuid.uuid4())
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.client_id = client_id
        #: called when the member's epoch or assignment changed (and when it was fenced)
        self.on_change = on_change
        #: called with the spec just before the assignor runs (tests, logging)
        self.on_compute = on_compute
        self.epoch = 0
        self.owned: dict[str, tuple[int, ...]] = {}
        #: the assignor's metadata for this member, from its last assignment (None: none)
        self.assignment_metadata: tuple[int, bytes] | None = None
        #: the error the assignor gave this member with its last assignment (0: none)
        self.assignment_error = 0
        self.heartbeat_interval_s = 1.0
        self.computations = 0  # targets this member installed
        #: installs refused with INVALID_ASSIGNMENT (see :meth:`_refused`)
        self.invalid_assignments = 0
        self._declared: list[consumer_group_pb2.ClientAssignor] | None = None
        self._full_next = True
        self._computing: asyncio.Task[int] | None = None

    @property
    def computation(self) -> asyncio.Task[int] | None:
        """The member's latest computation (None: it was never chosen); its result is the
        error code of its last call (0: installed, -1: the calls failed)."""
        return self._computing

    # ---- heartbeats ----------------------------------------------------------------------------
    async def heartbeat(self) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
        request = consumer_group_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            context=common_pb2.RequestContext(client_id=self.client_id),
        )
        if self.instance_id is not None:
            request.instance_id = self.instance_id
        declared = assignor_declarations(self.assignors)
        if self.epoch == 0 or self._full_next or declared != self._declared:
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
            request.subscribed_topic_names.values.extend(self.topics)
            request.client_assignors.assignors.extend(declared)
        # what it owns, every time: the coordinator completes revocations from it
        owned = request.topic_partitions
        owned.SetInParent()
        for topic_id, parts in sorted(self.owned.items()):
            owned.topic_partitions.add(topic_id=topic_id, partitions=parts)
        response = await self.client.call(self.group_id, "ConsumerGroupHeartbeat", request)
        if response.error_code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
            log.info("member %s fenced (%d): rejoining", self.member_id, response.error_code)
            self._reset()
            return response
        if response.error_code:
            self._full_next = True
            return response
        self._full_next = False
        self._declared = declared
        changed = self.epoch != response.member_epoch
        self.epoch = response.member_epoch
        if response.heartbeat_interval_ms > 0:
            self.heartbeat_interval_s = response.heartbeat_interval_ms / 1000
        if response.HasField("assignment"):
            self.owned = {
                tp.topic_id: tuple(tp.partitions) for tp in response.assignment.topic_partitions
            }
            meta = (
                response.assignment_metadata if response.HasField("assignment_metadata") else None
            )
            self.assignment_metadata = (
                (meta.metadata_version, meta.metadata_bytes) if meta is not None else None
            )
            self.assignment_error = meta.error if meta is not None else 0
            changed = True
        if changed and self.on_change is not None:
            self.on_change(self)
        if response.should_compute_assignment and (
            self._computing is None or self._computing.done()
        ):
            self._computing = asyncio.create_task(self._compute_logged())
        return response

    def _reset(self) -> None:
        self.epoch = 0
        self.owned = {}
        self.assignment_metadata = None
        self.assignment_error = 0
        self._full_next = True
        if self.on_change is not None:
            self.on_change(self)

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeat until ``stop`` is set, then leave the group."""
        while not stop.is_set():
            try:
                await self.heartbeat()
            except Exception as ex:  # noqa: BLE001 -- a member keeps trying
                log.warning("heartbeat of %s failed: %r", self.member_id, ex)
                self._full_next = True
            try:
                await asyncio.wait_for(stop.wait(), self.heartbeat_interval_s)
            except TimeoutError:
                pass
        await self.leave()

    async def leave(self) -> None:
        if self._computing is not None:
            self._computing.cancel()
        if self.epoch > 0:
            await self.client.call(
                self.group_id,
                "ConsumerGroupHeartbeat",
                consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id=self.group_id, member_id=self.member_id, member_epoch=-1
                ),
            )
        self.epoch, self.owned = -1, {}
