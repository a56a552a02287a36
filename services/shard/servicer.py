"""The GroupCoordinator and TopicCatalog gRPC services: decode, route, encode. Nothing else."""

from __future__ import annotations

# Served through generic handlers, so nothing else imports the module that declares the
# GroupCoordinator service; import it so that server reflection can describe the service.
from groupcoord.v1 import (
    catalog_pb2,
    classic_group_pb2,
    coordinator_pb2,  # noqa: F401
    groups_pb2,
    offsets_pb2,
)

from services.common.grpc_server import Method
from shards.catalog import TopicCatalog
from shards.coordinator import GroupCoordinatorService
from shards.core import api
from shards.core.classic import api as classic_api
from shards.core.consumer import api as consumer_api

GROUP_COORDINATOR = "groupcoord.v1.GroupCoordinator"
TOPIC_CATALOG = "groupcoord.v1.TopicCatalog"


def group_coordinator_methods(service: GroupCoordinatorService) -> list[Method]:
    return [
        Method(
            "OffsetCommit",
            offsets_pb2.OffsetCommitRequest,
            offsets_pb2.OffsetCommitResponse,
            api.OffsetCommitRequest,
            api.OffsetCommitResponse,
            service.offset_commit,
        ),
        Method(
            "OffsetFetch",
            offsets_pb2.OffsetFetchRequest,
            offsets_pb2.OffsetFetchResponse,
            api.OffsetFetchRequest,
            api.OffsetFetchResponse,
            service.offset_fetch,
        ),
        Method(
            "OffsetDelete",
            offsets_pb2.OffsetDeleteRequest,
            offsets_pb2.OffsetDeleteResponse,
            api.OffsetDeleteRequest,
            api.OffsetDeleteResponse,
            service.offset_delete,
        ),
        Method(
            "ListGroups",
            groups_pb2.ListGroupsRequest,
            groups_pb2.ListGroupsResponse,
            api.ListGroupsRequest,
            api.ListGroupsResponse,
            service.list_groups,
        ),
        Method(
            "DeleteGroups",
            groups_pb2.DeleteGroupsRequest,
            groups_pb2.DeleteGroupsResponse,
            api.DeleteGroupsRequest,
            api.DeleteGroupsResponse,
            service.delete_groups,
        ),
        Method(
            "FindCoordinator",
            groups_pb2.FindCoordinatorRequest,
            groups_pb2.FindCoordinatorResponse,
            api.FindCoordinatorRequest,
            api.FindCoordinatorResponse,
            service.find_coordinator,
        ),
        Method(
            "JoinGroup",
            classic_group_pb2.JoinGroupRequest,
            classic_group_pb2.JoinGroupResponse,
            classic_api.JoinGroupRequest,
            classic_api.JoinGroupResponse,
            service.join_group,
        ),
        Method(
            "SyncGroup",
            classic_group_pb2.SyncGroupRequest,
            classic_group_pb2.SyncGroupResponse,
            classic_api.SyncGroupRequest,
            classic_api.SyncGroupResponse,
            service.sync_group,
        ),
        Method(
            "Heartbeat",
            classic_group_pb2.HeartbeatRequest,
            classic_group_pb2.HeartbeatResponse,
            classic_api.HeartbeatRequest,
            classic_api.HeartbeatResponse,
            service.heartbeat,
        ),
        Method(
            "LeaveGroup",
            classic_group_pb2.LeaveGroupRequest,
            classic_group_pb2.LeaveGroupResponse,
            classic_api.LeaveGroupRequest,
            classic_api.LeaveGroupResponse,
            service.leave_group,
        ),
        Method(
            "DescribeGroups",
            groups_pb2.DescribeGroupsRequest,
            groups_pb2.DescribeGroupsResponse,
            classic_api.DescribeGroupsRequest,
            classic_api.DescribeGroupsResponse,
            service.describe_groups,
        ),
        *consumer_group_methods(service),
    ]


def consumer_group_methods(service: GroupCoordinatorService) -> list[Method]:
    from groupcoord.v1 import consumer_group_pb2 as pb

    return [
        Method(
            "ConsumerGroupHeartbeat",
            pb.ConsumerGroupHeartbeatRequest,
            pb.ConsumerGroupHeartbeatResponse,
            consumer_api.ConsumerGroupHeartbeatRequest,
            consumer_api.ConsumerGroupHeartbeatResponse,
            service.consumer_group_heartbeat,
        ),
        Method(
            "ConsumerGroupDescribe",
            pb.ConsumerGroupDescribeRequest,
            pb.ConsumerGroupDescribeResponse,
            consumer_api.ConsumerGroupDescribeRequest,
            consumer_api.ConsumerGroupDescribeResponse,
            service.consumer_group_describe,
        ),
        Method(
            "AlterGroupConfigs",
            pb.AlterGroupConfigsRequest,
            pb.AlterGroupConfigsResponse,
            consumer_api.AlterGroupConfigsRequest,
            consumer_api.AlterGroupConfigsResponse,
            service.alter_group_configs,
        ),
        Method(
            "DescribeGroupConfigs",
            pb.DescribeGroupConfigsRequest,
            pb.DescribeGroupConfigsResponse,
            consumer_api.DescribeGroupConfigsRequest,
            consumer_api.DescribeGroupConfigsResponse,
            service.describe_group_configs,
        ),
    ]


def topic_catalog_methods(catalog: TopicCatalog) -> list[Method]:
    return [
        Method(
            "CreateTopics",
            catalog_pb2.CreateTopicsRequest,
            catalog_pb2.CreateTopicsResponse,
            api.CreateTopicsRequest,
            api.CreateTopicsResponse,
            catalog.create_topics,
        ),
        Method(
            "DeleteTopics",
            catalog_pb2.DeleteTopicsRequest,
            catalog_pb2.DeleteTopicsResponse,
            api.DeleteTopicsRequest,
            api.DeleteTopicsResponse,
            catalog.delete_topics,
        ),
        Method(
            "DescribeTopics",
            catalog_pb2.DescribeTopicsRequest,
            catalog_pb2.DescribeTopicsResponse,
            api.DescribeTopicsRequest,
            api.DescribeTopicsResponse,
            catalog.describe_topics,
        ),
    ]
