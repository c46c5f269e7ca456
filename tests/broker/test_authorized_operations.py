"""KIP-430 authorized-operations bitfields, asked by a real client (confluent-kafka's
AdminClient, include_authorized_operations=True): with authorization off, every operation
Kafka supports for the resource type; not asked, none (INT32_MIN on the wire)."""

from __future__ import annotations

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from databus.broker.operations import NOT_REQUESTED, SUPPORTED, authorized_operations, bitfield
from databus.storage.acls import ResourceType

TOPIC_OPS = {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
             AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
             AclOperation.ALTER_CONFIGS}
CLUSTER_OPS = {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
               AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
               AclOperation.DESCRIBE}


def test_bitfields_golden():
    assert bitfield(SUPPORTED[ResourceType.TOPIC]) == 0b1101_1111_1000  # 3..8, 10, 11
    assert bitfield(SUPPORTED[ResourceType.GROUP]) == (1 << 3) | (1 << 6) | (1 << 8)
    assert bitfield(SUPPORTED[ResourceType.CLUSTER]) == 0b1_1111_1010_0000
    assert authorized_operations(None, ResourceType.CLUSTER, "kafka-cluster", False) \
        == NOT_REQUESTED == -(2**31)


def test_admin_client_sees_every_operation_when_authorization_is_off(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("authz-ops", 1)])["authz-ops"].result(10)
    cluster = admin.describe_cluster(include_authorized_operations=True,
                                     request_timeout=10).result()
    assert set(cluster.authorized_operations) == CLUSTER_OPS
    futures = admin.describe_topics(TopicCollection(["authz-ops"]),
                                    include_authorized_operations=True, request_timeout=10)
    topic = futures["authz-ops"].result()
    assert set(topic.authorized_operations) == TOPIC_OPS
    group = admin.describe_consumer_groups(["authz-group"], include_authorized_operations=True,
                                           request_timeout=10)["authz-group"].result()
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE,
                                                AclOperation.DELETE}
    plain = admin.describe_cluster(request_timeout=10).result()
    assert not plain.authorized_operations
