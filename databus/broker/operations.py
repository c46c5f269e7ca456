"""Kafka's authorized-operations bitfields (KIP-430) for Metadata, DescribeCluster and
DescribeGroups.

A client that asks (``include_*_authorized_operations``) gets, per resource, a bitfield
with bit N set for each ``AclOperation`` of code N it may perform; one that does not ask
gets INT32_MIN, Kafka's "not requested".  Without an authorizer every operation the
resource type supports is allowed, as in Kafka with no ``authorizer.class.name``; an ACL
authorizer filters ``SUPPORTED`` here, in one place.
"""

from __future__ import annotations

import enum

NOT_REQUESTED = -(2**31)


class AclOperation(enum.IntEnum):
    """Kafka's org.apache.kafka.common.acl.AclOperation codes."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


_A = AclOperation
# Kafka's AclEntry.supportedOperations per resource type
SUPPORTED = {
    "topic": (_A.READ, _A.WRITE, _A.CREATE, _A.DESCRIBE, _A.DELETE, _A.ALTER,
              _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS),
    "group": (_A.READ, _A.DESCRIBE, _A.DELETE),
    "cluster": (_A.CREATE, _A.CLUSTER_ACTION, _A.DESCRIBE_CONFIGS, _A.ALTER_CONFIGS,
                _A.IDEMPOTENT_WRITE, _A.ALTER, _A.DESCRIBE),
}


def bitfield(operations) -> int:
    bits = 0
    for op in operations:
        bits |= 1 << int(op)
    return bits


def authorized_operations(resource: str, requested: bool) -> int:
    """The bitfield for one ``resource`` type ("topic", "group", "cluster")."""
    if not requested:
        return NOT_REQUESTED
    return bitfield(SUPPORTED[resource])
