"""Transactions and authorized operations under ACLs, as Kafka checks them.

User ``tx`` may produce to, consume from and describe tx-topic (group tx-group) and
DESCRIBE the cluster, nothing more, until it is given its transactional id:

- confluent-kafka's transactional producer is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  without WRITE on ``transactional.id`` (``databus acls --producer --transactional-id``), and
  commits a transaction with offsets once it has it;
- raw requests show the per-API refusals: FindCoordinator (transaction), AddPartitionsToTxn
  (TOPIC_AUTHORIZATION_FAILED for the topic it may not write, OPERATION_NOT_ATTEMPTED for the
  rest), AddOffsetsToTxn / TxnOffsetCommit (the group), EndTxn, WriteTxnMarkers
  (CLUSTER_ACTION: refused for tx, done for the super user), DescribeProducers (READ),
  Produce of transactional records (WRITE on the transactional id);
- confluent-kafka's AdminClient sees, with include_authorized_operations, only what tx may do.
"""

from __future__ import annotations

import datetime

import pytest

from databus.protocol.errors import ErrorCode
from tests.broker.clients import Msg, confluent_consume, confluent_produce
from tests.broker.test_api_versions import make
from tests.broker.wire import WireClient

from .conftest import USERS, databus


def _conf(secured, user, **extra):
    conf = secured.confluent("SASL_SSL", "SCRAM-SHA-256", user=user, **extra)
    conf.pop("bootstrap.servers")
    return conf


def _acl(admin_config, *args):
    result = databus("acls", "--add", "--allow-principal", "User:tx", *args, *admin_config)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def tx_limited(secured, admin_config):
    bootstrap = secured.broker.bootstrap_for("SASL_SSL")
    for topic in ("tx-topic", "tx-secret", "tx-markers"):
        confluent_produce(bootstrap, topic, [Msg(b"k", b"first")], **_conf(secured, "admin"))
    _acl(admin_config, "--producer", "--consumer", "--topic", "tx-topic", "--group", "tx-group")
    _acl(admin_config, "--operation", "Describe", "--cluster")
    return secured


def _login(secured, user="tx") -> WireClient:
    """A raw connection to the SASL_PLAINTEXT listener, logged in with PLAIN."""
    client = WireClient(secured.broker.bootstrap_for("SASL_PLAINTEXT"))
    assert client.request(make(17, 1, mechanism="PLAIN")).error_code == ErrorCode.none
    ok = client.request(make(36, 2, auth_bytes=f"\0{user}\0{USERS[user]}".encode()))
    assert ok.error_code == ErrorCode.none
    return client


def _transactional(secured, txn_id):
    import confluent_kafka

    return confluent_kafka.Producer({
        "bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"),
        "transactional.id": txn_id, **_conf(secured, "tx")})


def test_transactional_producer_needs_write_on_its_transactional_id(tx_limited, admin_config):
    import confluent_kafka

    secured = tx_limited
    producer = _transactional(secured, "tx-app")
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == \
        confluent_kafka.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    del producer

    _acl(admin_config, "--producer", "--transactional-id", "tx-app")
    producer = _transactional(secured, "tx-app")
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("tx-topic", b"in-txn")
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"), "group.id": "tx-group",
        **_conf(secured, "tx")})
    try:
        producer.send_offsets_to_transaction(
            [confluent_kafka.TopicPartition("tx-topic", 0, 1)],
            consumer.consumer_group_metadata(), 15)
        producer.commit_transaction(15)
        del producer
        (committed,) = consumer.committed([confluent_kafka.TopicPartition("tx-topic", 0)],
                                          timeout=10)
        assert committed.offset == 1
    finally:
        consumer.close()
    got = confluent_consume(secured.broker.bootstrap_for("SASL_SSL"), "tx-topic", 2, timeout=30,
                            **_conf(secured, "tx", **{"group.id": "tx-group",
                                                      "isolation.level": "read_committed"}))
    assert [g.value for g in got] == [b"first", b"in-txn"]


def _add_partitions(client, txn_id, topics):
    return client.request(make(
        24, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=1,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[{"name": t, "partitions": [0]} for t in topics]))


def _errors(answer):
    return {t.name: t.results_by_partition[0].partition_error_code
            for t in answer.results_by_topic_v3_and_below}


def test_transaction_apis_refuse_what_acls_do_not_allow(tx_limited, admin_config):
    secured = tx_limited
    _acl(admin_config, "--producer", "--transactional-id", "tx-raw")
    with _login(secured) as client:
        (found,) = client.request(make(10, 4, key_type=1,
                                       coordinator_keys=["tx-none", "tx-raw"])).coordinators[:1]
        assert found.error_code == ErrorCode.transactional_id_authorization_failed
        assert _errors(_add_partitions(client, "tx-none", ["tx-topic"])) == {
            "tx-topic": ErrorCode.transactional_id_authorization_failed}
        assert _errors(_add_partitions(client, "tx-raw", ["tx-topic", "tx-secret"])) == {
            "tx-topic": ErrorCode.operation_not_attempted,
            "tx-secret": ErrorCode.topic_authorization_failed}
        end = client.request(make(26, 3, transactional_id="tx-none", producer_id=1,
                                  producer_epoch=0, committed=True))
        assert end.error_code == ErrorCode.transactional_id_authorization_failed
        offsets = client.request(make(25, 3, transactional_id="tx-raw", producer_id=1,
                                      producer_epoch=0, group_id="not-tx-group"))
        assert offsets.error_code == ErrorCode.group_authorization_failed
        commit = client.request(make(
            28, 3, transactional_id="tx-raw", group_id="tx-group", producer_id=1,
            producer_epoch=0, generation_id=-1, member_id="", group_instance_id=None,
            topics=[{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": None}]}
                    for t in ("tx-topic", "tx-secret")]))
        assert {t.name: t.partitions[0].error_code for t in commit.topics} == {
            # tx-topic reaches the coordinator, which knows no such transaction
            "tx-topic": ErrorCode.invalid_producer_id_mapping,
            "tx-secret": ErrorCode.topic_authorization_failed}
        produced = client.request(make(
            0, 9, transactional_id="tx-none", acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=[{"name": "tx-topic",
                         "partition_data": [{"index": 0, "records": b"not appended"}]}]))
        assert produced.responses[0].partition_responses[0].error_code == \
            ErrorCode.transactional_id_authorization_failed
        producers = client.request(make(61, 0, topics=[
            {"name": t, "partition_indexes": [0]} for t in ("tx-topic", "tx-secret")]))
        assert {t.name: t.partitions[0].error_code for t in producers.topics} == {
            "tx-topic": ErrorCode.none, "tx-secret": ErrorCode.topic_authorization_failed}


def _write_marker(client, topic):
    answer = client.request(make(27, 1, markers=[{
        "producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
        "coordinator_epoch": 0, "topics": [{"name": topic, "partition_indexes": [0]}]}]))
    return answer.markers[0].topics[0].partitions[0].error_code


def test_write_txn_markers_needs_cluster_action(tx_limited):
    secured = tx_limited
    with _login(secured) as client:
        assert _write_marker(client, "tx-markers") == ErrorCode.cluster_authorization_failed
    with _login(secured, "admin") as client:  # a super user: as a broker would
        assert _write_marker(client, "tx-markers") == ErrorCode.none


def test_authorized_operations_are_the_callers(tx_limited):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient

    secured = tx_limited
    tx = AdminClient({"bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"),
                      **_conf(secured, "tx")})
    topic = tx.describe_topics(TopicCollection(["tx-topic"]), include_authorized_operations=True,
                               request_timeout=10)["tx-topic"].result()
    assert set(topic.authorized_operations) == {AclOperation.READ, AclOperation.WRITE,
                                                AclOperation.CREATE, AclOperation.DESCRIBE}
    cluster = tx.describe_cluster(include_authorized_operations=True, request_timeout=10).result()
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    group = tx.describe_consumer_groups(["tx-group"], include_authorized_operations=True,
                                        request_timeout=10)["tx-group"].result()
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    admin = AdminClient({"bootstrap.servers": secured.broker.bootstrap_for("SASL_SSL"),
                         **_conf(secured, "admin")})
    cluster = admin.describe_cluster(include_authorized_operations=True,
                                     request_timeout=10).result()
    assert AclOperation.CLUSTER_ACTION in set(cluster.authorized_operations)
