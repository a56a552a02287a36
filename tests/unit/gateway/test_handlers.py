"""Every API's error shape (what a client gets when the shards cannot answer) is a valid
response at every served version."""

from __future__ import annotations

import pytest

from services.gateway import codec
from services.gateway.handlers import KafkaApis, Node, RequestInfo
from shards.core.errors import Errors

VERSIONS = [
    (k, v) for k, s in sorted(codec.SERVED.items()) for v in range(s.min_version, s.max_version + 1)
]


def sample_request(api_key: int, version: int) -> object:
    """A request with one of everything (one topic, one partition, one group, ...)."""
    cls = codec.request_class(api_key, version)
    one = {
        "topics": [
            {
                "name": "t",
                "partitions": [{"partition_index": 0}],
                "partition_indexes": [0],
                "assignments": [],
                "configs": [],
            }
        ],
        "groups": [{"group_id": "g", "topics": None}] if api_key == 9 else ["g"],
        "group_ids": ["g"],
        "groups_names": ["g"],
        "coordinator_keys": ["g"],
        "topic_names": ["t"],
        "members": [{"member_id": "m"}],
        "group_id": "g",
    }
    fields = {f for f in cls.__dataclass_fields__}  # type: ignore[attr-defined]
    return codec.build(cls, {k: v for k, v in one.items() if k in fields}, fill=True)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_error_shapes_build_at_every_version(api_key: int, version: int) -> None:
    apis = KafkaApis(None, None, Node(0, "h", 1), "c")  # type: ignore[arg-type]
    rq = RequestInfo(api_key, version, 1, "client", "/127.0.0.1")
    request = sample_request(api_key, version)
    _call, error_shape = apis.handlers[api_key]
    data = error_shape(rq, request, int(Errors.COORDINATOR_NOT_AVAILABLE), "down")
    entity = codec.build(codec.response_class(api_key, version), data)
    codec.encode_response(1, codec.response_header_v1(api_key, version), entity)
    unexpected = apis.unexpected(rq, request, RuntimeError("boom"))
    codec.build(codec.response_class(api_key, version), unexpected)
