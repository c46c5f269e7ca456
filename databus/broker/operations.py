"""Kafka's authorized-operations bitfields (KIP-430) for Metadata, DescribeCluster,
DescribeTopicPartitions, DescribeGroups and ShareGroupDescribe.

A client that asks (``include_*_authorized_operations``) gets, per resource, a bitfield
with bit N set for each operation of code N (Kafka's AclOperation, storage/acls.py
``Operation``) that the resource type supports and the caller's principal may perform,
each decided by the authorizer as a request doing it would be (so without
``authorizer.class.name`` every supported operation, as in Kafka).  One that does not ask
gets INT32_MIN, Kafka's "not requested".
"""

from __future__ import annotations

from collections.abc import Iterable

from databus.storage.acls import SUPPORTED_OPERATIONS, Operation, ResourceType

NOT_REQUESTED = -(2**31)

# What the bitfield of each resource type may hold (Kafka's AclEntry.supportedOperations).
SUPPORTED = {rtype: SUPPORTED_OPERATIONS[rtype]
             for rtype in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER)}


def bitfield(operations: Iterable[Operation]) -> int:
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def authorized_operations(ctx, resource_type: ResourceType, name: str, requested: bool) -> int:
    """The bitfield of what ``ctx``'s principal may do on one resource (the cluster's name
    is storage.acls.CLUSTER_NAME), or NOT_REQUESTED."""
    if not requested:
        return NOT_REQUESTED
    return bitfield(op for op in SUPPORTED[resource_type]
                    if ctx.allowed(op, resource_type, name))
