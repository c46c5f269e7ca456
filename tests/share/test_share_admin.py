"""Administering share groups against a ``databus broker`` process: group configs through
confluent-kafka's AdminClient (IncrementalAlterConfigs / DescribeConfigs on GROUP
resources), ListGroups' share type, DescribeShareGroupOffsets / AlterShareGroupOffsets /
DeleteShareGroupOffsets, DeleteGroups, and a classic JoinGroup on a share group's id.
"""

from __future__ import annotations

import time

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest

from databus.broker.process import BrokerProcess
from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from tests.groups.raw import RawClient

from .member import ACCEPT, TOPIC, Member, acquired, produce


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path, options={"num.partitions": 1}) as process:
        yield process


def set_group_config(admin, group: str, name: str, value: str | None):
    op = (kadmin.AlterConfigOpType.SET if value is not None
          else kadmin.AlterConfigOpType.DELETE)
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
        kadmin.ConfigEntry(name, value or "", incremental_operation=op)])
    return admin.incremental_alter_configs([resource])[resource].result()


def group_configs(admin, group: str) -> dict[str, str]:
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result().items()}


def test_group_configs_are_validated_persisted_and_applied(broker):
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    assert group_configs(admin, "g")["share.auto.offset.reset"] == "latest"
    with pytest.raises(confluent_kafka.KafkaException) as bad:
        set_group_config(admin, "g", "share.record.lock.duration.ms", "1000")
    assert bad.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "15000" in bad.value.args[0].str()  # names the broker's bound
    with pytest.raises(confluent_kafka.KafkaException) as unknown:
        set_group_config(admin, "g", "share.no.such.thing", "1")
    assert unknown.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    set_group_config(admin, "g", "share.auto.offset.reset", "earliest")
    produce(broker.bootstrap, 5)  # before any member: only "earliest" sees them
    broker.stop()
    broker.restart()
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    assert group_configs(admin, "g")["share.auto.offset.reset"] == "earliest"
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "g",
        "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    got: list[int] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        for message in consumer.poll(1.0) or ():
            assert message.error() is None
            got.append(message.offset())
            consumer.acknowledge(message, confluent_kafka.AcknowledgeType.ACCEPT)
    consumer.commit_sync(10)
    consumer.close()
    assert got == [0, 1, 2, 3, 4]


def list_groups(client: RawClient, types=()):
    response = client.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                   "types_filter": list(types)})
    return sorted((g.group_id, g.group_type, g.group_state) for g in response.groups)


def offsets(client: RawClient, group: str = "g"):
    response = client.call(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
        "groups": [{"group_id": group, "topics": None}]})
    described = response.groups[0]
    if described.error_code != ErrorCode.none:
        return described.error_code
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag)
            for t in described.topics for p in t.partitions}


def test_share_group_offsets_listing_and_deletion(broker):
    produce(broker.bootstrap, 1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "classic", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    while consumer.poll(1.0) is None:
        pass
    try:
        with RawClient(broker.bootstrap) as client:
            member = Member(client)
            member.heartbeat()
            member.fetch(max_wait_ms=0)  # the group starts at the log end: 1
            produce(broker.bootstrap, 10)
            assert acquired(member.fetch()) == [(1, 10, 1)]
            member.acknowledge([(1, 3, ACCEPT)])
            assert offsets(client) == {(TOPIC, 0): (4, 7)}
            assert list_groups(client, ["share"]) == [("g", "share", "Stable")]
            assert list_groups(client, ["classic"]) == [("classic", "classic", "Stable")]
            assert len(list_groups(client)) == 2
            # a classic member cannot join the share group, nor a share member the classic one
            join = client.call(ApiKey.JOIN_GROUP, 5, {
                "group_id": "g", "session_timeout": 10_000, "rebalance_timeout": 10_000,
                "member_id": "", "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b""}]})
            assert join.error_code == ErrorCode.inconsistent_group_protocol
            # offsets of a group with members cannot be altered or deleted
            alter = client.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
                {"topic_name": TOPIC, "partitions": [{"partition_index": 0,
                                                      "start_offset": 8}]}]})
            assert alter.error_code == ErrorCode.non_empty_group
            delete = client.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["g"]})
            assert delete.results[0].error_code == ErrorCode.non_empty_group
            member.acknowledge([(4, 4, ACCEPT)], epoch=-1)  # closes the session: 5-10 back
            assert member.heartbeat(epoch=-1).error_code == ErrorCode.none
            alter = client.call(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "g", "topics": [
                {"topic_name": TOPIC, "partitions": [{"partition_index": 0,
                                                      "start_offset": 8}]}]})
            assert alter.error_code == ErrorCode.none
            assert alter.responses[0].partitions[0].error_code == ErrorCode.none
            assert offsets(client) == {(TOPIC, 0): (8, 3)}
            again = Member(client)
            again.heartbeat()
            assert acquired(again.fetch()) == [(8, 10, 1)]
            again.acknowledge([(8, 10, ACCEPT)], epoch=-1)
            again.heartbeat(epoch=-1)
            deleted = client.call(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
                "group_id": "g", "topics": [{"topic_name": TOPIC}]})
            assert deleted.error_code == ErrorCode.none
            assert offsets(client) == {}
            assert client.call(ApiKey.DELETE_GROUPS, 2, {
                "groups_names": ["g"]}).results[0].error_code == ErrorCode.none
            assert offsets(client) == ErrorCode.group_id_not_found
            assert list_groups(client, ["share"]) == []
    finally:
        consumer.close()
