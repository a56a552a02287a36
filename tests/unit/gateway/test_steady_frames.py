"""services.gateway.steady on its own: which frames it answers, when it asks the coordinator
to decide and when to give a decision again, what it remembers -- with a coordinator stand-in
that records its calls. (Over the wire, against a real shard: tests/component/
test_gateway_steady_frames.py.)"""

from __future__ import annotations

from typing import Any

import pytest

from services.gateway import fast_codec
from services.gateway.steady import PER_CONNECTION, SteadyHeartbeats
from shards.core.steady import SteadyAnswer, SteadyDecision
from tests.support.kafka_wire import encode_request, request

HOST = "/127.0.0.1"


def heartbeat(version: int = 0, member: str = "m-1", epoch: int = 3, **extra: Any) -> Any:
    data: dict[str, Any] = {
        "group_id": "g",
        "member_id": member,
        "member_epoch": epoch,
        "rebalance_timeout": -1,
        "subscribed_topic_names": None,
        "server_assignor": None,
        "topic_partitions": None,
        **extra,
    }
    if version >= 1:
        data.setdefault("subscribed_topic_regex", None)
    return request("consumer_group_heartbeat", version, **data)


def frame(req: Any, correlation_id: int = 7, client_id: str | None = "c") -> bytes:
    return encode_request(req, correlation_id, client_id)[4:]  # (without its size prefix)


class Coordinator:
    """A steady path whose decisions and givings-again are recorded; :meth:`invalidate`
    invalidates the token it hands out, as a partition's change does."""

    def __init__(self, classic: Any = None) -> None:
        self.decided: list[tuple[Any, ...]] = []
        self.given_again: list[tuple[Any, ...]] = []
        self.token = object()
        self.steady = True
        self.classic = classic

    def invalidate(self) -> None:
        self.token = object()

    def decide(self, *args: Any) -> SteadyDecision | None:
        self.decided.append(args)
        if not self.steady:
            return None
        group, member, epoch, _client, _host = args
        return SteadyDecision(SteadyAnswer(epoch, 5000, False, group, member), self.token)

    def again(self, token: Any, group: str, member: str) -> bool:
        self.given_again.append((token, group, member))
        return token is self.token


@pytest.fixture
def coordinator() -> Coordinator:
    return Coordinator()


@pytest.fixture
def steady(coordinator: Coordinator) -> SteadyHeartbeats:
    return SteadyHeartbeats(coordinator, classic=False)


def expected(correlation_id: int, member: str, epoch: int) -> bytes:
    data = {
        "error_code": 0,
        "error_message": None,
        "member_id": member,
        "member_epoch": epoch,
        "heartbeat_interval": 5000,
        "assignment": None,
    }
    encoded = fast_codec.consumer_group_heartbeat(correlation_id, data)
    assert encoded is not None
    return encoded


@pytest.mark.parametrize("version", [0, 1])
def test_decided_once_then_given_again_with_each_correlation_id(
    steady: SteadyHeartbeats, coordinator: Coordinator, version: int
) -> None:
    memory = steady.memory()
    first = steady.answer(memory, frame(heartbeat(version), 7), HOST)
    assert first == expected(7, "m-1", 3)
    assert coordinator.decided == [("g", "m-1", 3, "c", HOST)]
    for cid in (8, 9, 2**31 - 1):
        assert steady.answer(memory, frame(heartbeat(version), cid), HOST) == expected(
            cid, "m-1", 3
        )
    assert len(coordinator.decided) == 1  # given again: no decision taken
    assert coordinator.given_again == [(coordinator.token, "g", "m-1")] * 3


def test_a_change_on_the_partition_decides_anew(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    memory = steady.memory()
    steady.answer(memory, frame(heartbeat()), HOST)
    coordinator.invalidate()  # (a write on the partition: the decision may not hold)
    assert steady.answer(memory, frame(heartbeat(), 8), HOST) == expected(8, "m-1", 3)
    assert len(coordinator.decided) == 2
    # remembered with the new token: given again from then on
    steady.answer(memory, frame(heartbeat(), 9), HOST)
    assert len(coordinator.decided) == 2
    # not the steady case any more (the coordinator says so): the handler answers, each time
    coordinator.invalidate()
    coordinator.steady = False
    assert steady.answer(memory, frame(heartbeat(), 10), HOST) is None
    assert steady.answer(memory, frame(heartbeat(), 11), HOST) is None
    assert len(coordinator.decided) == 4


@pytest.mark.parametrize(
    "extra",
    [
        {"instance_id": "i-1"},
        {"rack_id": "r"},
        {"rebalance_timeout": 30_000},
        {"subscribed_topic_names": ["t"]},
        {"server_assignor": "uniform"},
        {"topic_partitions": []},
    ],
    ids=lambda e: next(iter(e)),
)
def test_anything_but_ids_and_epoch_goes_to_the_handler(
    steady: SteadyHeartbeats, coordinator: Coordinator, extra: dict[str, Any]
) -> None:
    assert steady.answer(steady.memory(), frame(heartbeat(**extra)), HOST) is None
    assert coordinator.decided == []


def test_a_regex_in_v1_goes_to_the_handler(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    assert (
        steady.answer(steady.memory(), frame(heartbeat(1, subscribed_topic_regex="t.*")), HOST)
        is None
    )
    assert coordinator.decided == []


def test_other_apis_and_versions_go_to_the_handler(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    memory = steady.memory()
    classic = request("heartbeat", 4, group_id="g", generation_id=1, member_id="m-1")
    assert steady.answer(memory, frame(classic), HOST) is None
    raw = bytearray(frame(heartbeat()))
    raw[2:4] = (2).to_bytes(2, "big")  # a version not served
    assert steady.answer(memory, bytes(raw), HOST) is None
    assert coordinator.decided == [] and len(memory.answers) == 0 and memory.classic is None


def test_the_client_id_and_host_are_part_of_the_decision(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    memory = steady.memory()
    steady.answer(memory, frame(heartbeat(), client_id="a"), HOST)
    steady.answer(memory, frame(heartbeat(), client_id="b"), HOST)  # another request
    steady.answer(memory, frame(heartbeat(), client_id=None), "/10.0.0.9")
    assert [d[3:] for d in coordinator.decided] == [("a", HOST), ("b", HOST), ("", "/10.0.0.9")]


def test_a_connection_remembers_a_few_requests(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    memory = steady.memory()
    members = [f"m-{i}" for i in range(PER_CONNECTION + 1)]
    for m in members:
        assert steady.answer(memory, frame(heartbeat(member=m)), HOST) == expected(7, m, 3)
    assert len(memory.answers) <= PER_CONNECTION
    # a remembered one is given again; the others decided anew, never answered wrongly
    for m in members:
        assert steady.answer(memory, frame(heartbeat(member=m), 8), HOST) == expected(8, m, 3)
    assert len(memory.answers) <= PER_CONNECTION


def test_cut_frames_are_left_to_the_handler(
    steady: SteadyHeartbeats, coordinator: Coordinator
) -> None:
    whole = frame(heartbeat())
    for n in range(8, len(whole)):
        try:
            got = steady.answer(steady.memory(), whole[:n], HOST)
        except Exception:  # noqa: BLE001 - the connection asks the handler then
            continue
        assert got is None, n
    assert coordinator.decided == []


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_classic_heartbeats_decoded_once_and_asked_each_time(version: int) -> None:
    asked: list[tuple[Any, ...]] = []
    codes: list[int | None] = [0, 27, None]

    def classic(*ids: Any) -> int | None:
        asked.append(ids)
        return codes[len(asked) - 1]

    steady = SteadyHeartbeats(Coordinator(classic))
    memory = steady.memory()
    data: dict[str, Any] = {"group_id": "g", "generation_id": 4, "member_id": "m-1"}
    if version >= 3:
        data["group_instance_id"] = "i-1"
    beat = request("heartbeat", version, **data)
    encode = fast_codec.ENCODERS[(12, version)]
    assert steady.answer(memory, frame(beat, 5), HOST) == encode(5, {"error_code": 0})
    assert steady.answer(memory, frame(beat, 6), HOST) == encode(6, {"error_code": 27})
    assert steady.answer(memory, frame(beat, 7), HOST) is None  # the handler answers it
    instance = "i-1" if version >= 3 else None
    assert asked == [("g", 4, "m-1", instance)] * 3
    assert memory.classic is not None and len(memory.classic) == 1


def test_classic_heartbeats_left_to_the_handler_without_the_coordinator_call(
    steady: SteadyHeartbeats,
) -> None:
    beat = request("heartbeat", 4, group_id="g", generation_id=4, member_id="m-1")
    memory = steady.memory()
    assert steady.answer(memory, frame(beat), HOST) is None
    assert memory.classic is None
