"""The gRPC services of groupcoord as the proto declares them: the one list of their RPCs.

Servers, clients and the gateway take the RPCs, their names and their message types from
these descriptors rather than from lists of their own, so that an RPC added to the proto is
served and callable without touching them.
"""

from __future__ import annotations

import re

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from groupcoord.v1 import catalog_pb2, coordinator_pb2

GROUP_COORDINATOR_SERVICE: ServiceDescriptor = coordinator_pb2.DESCRIPTOR.services_by_name[
    "GroupCoordinator"
]
TOPIC_CATALOG_SERVICE: ServiceDescriptor = catalog_pb2.DESCRIPTOR.services_by_name["TopicCatalog"]


def snake_case(rpc_name: str) -> str:
    """``ConsumerGroupHeartbeat`` -> ``consumer_group_heartbeat``: the Python name of an RPC."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc_name).lower()


def message_class(descriptor: Descriptor) -> type[Message]:
    """The generated class of a message type (the same class the ``*_pb2`` module holds)."""
    return message_factory.GetMessageClass(descriptor)


def request_class(rpc: MethodDescriptor) -> type[Message]:
    return message_class(rpc.input_type)


def response_class(rpc: MethodDescriptor) -> type[Message]:
    return message_class(rpc.output_type)
