"""Topic administration through confluent-kafka's AdminClient against a real broker."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_create_with_partitions_and_configs_then_describe(admin):
    futures = admin.create_topics([
        NewTopic("adm-a", 3, config={"retention.ms": "3600000", "cleanup.policy": "compact"}),
        NewTopic("adm-b", 1),
    ])
    for future in futures.values():
        future.result(30)
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics["adm-a"].partitions) == 3
    assert len(metadata.topics["adm-b"].partitions) == 1
    (described,) = admin.describe_configs([ConfigResource("topic", "adm-a")]).values()
    configs = described.result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact"
    assert not configs["retention.ms"].is_default
    assert configs["segment.bytes"].is_default
    assert configs["segment.bytes"].value == str(1 << 30)


def test_create_errors_are_per_topic(admin):
    admin.create_topics([NewTopic("adm-dup", 1)])["adm-dup"].result(30)
    futures = admin.create_topics([
        NewTopic("adm-dup", 1),
        NewTopic("adm-badconf", 1, config={"retention.ms": "soon"}),
        NewTopic("adm-rf3", 1, replication_factor=3),
        NewTopic("adm-ok", 2),
    ])
    codes = {}
    for name, future in futures.items():
        try:
            future.result(30)
            codes[name] = KafkaError.NO_ERROR
        except KafkaException as exc:
            codes[name] = exc.args[0].code()
    assert codes == {
        "adm-dup": KafkaError.TOPIC_ALREADY_EXISTS,
        "adm-badconf": KafkaError.INVALID_CONFIG,
        "adm-rf3": KafkaError.INVALID_REPLICATION_FACTOR,
        "adm-ok": KafkaError.NO_ERROR,
    }


def test_add_partitions(admin):
    admin.create_topics([NewTopic("adm-grow", 2)])["adm-grow"].result(30)
    admin.create_partitions([NewPartitions("adm-grow", 5)])["adm-grow"].result(30)
    assert len(admin.list_topics("adm-grow", timeout=10).topics["adm-grow"].partitions) == 5
    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions("adm-grow", 3)])["adm-grow"].result(30)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_delete_topic(admin, broker):
    from .clients import Msg, confluent_consume, confluent_produce

    admin.create_topics([NewTopic("adm-gone", 1)])["adm-gone"].result(30)
    confluent_produce(broker.bootstrap, "adm-gone", [Msg(None, b"before")])
    admin.delete_topics(["adm-gone"])["adm-gone"].result(30)
    assert "adm-gone" not in admin.list_topics(timeout=10).topics
    with pytest.raises(KafkaException) as missing:
        admin.delete_topics(["adm-gone"])["adm-gone"].result(30)
    assert missing.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # re-created, it starts empty (new topic id, offsets from 0)
    admin.create_topics([NewTopic("adm-gone", 1)])["adm-gone"].result(30)
    confluent_produce(broker.bootstrap, "adm-gone", [Msg(None, b"after")])
    got = confluent_consume(broker.bootstrap, "adm-gone", 1)
    assert [(g.offset, g.value) for g in got] == [(0, b"after")]


def test_describe_cluster_and_broker_config(admin, broker):
    cluster = admin.describe_cluster().result(30)
    assert cluster.cluster_id and len(cluster.nodes) == 1
    assert cluster.controller.id == cluster.nodes[0].id == 1
    assert cluster.nodes[0].port == broker.port
    (described,) = admin.describe_configs([ConfigResource("broker", "1")]).values()
    configs = described.result(30)
    assert configs["num.partitions"].value == "1"
    assert configs["socket.request.max.bytes"].value == str(100 * 1024 * 1024)


def test_internal_topics_are_listed_as_internal_and_never_auto_created(admin, broker):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    metadata = producer.list_topics("__not_created", timeout=10)
    assert metadata.topics["__not_created"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic("__mine", 1)])["__mine"].result(30)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST


def test_metadata_marks_internal_topics(broker):
    from databus.protocol.entities import build
    from databus.protocol.framing import request_schema

    from .wire import WireClient

    with WireClient(broker.bootstrap) as client:
        everything = client.request(build(request_schema(3, 9), topics=None,
                                          allow_auto_topic_creation=False,
                                          include_cluster_authorized_operations=False,
                                          include_topic_authorized_operations=False))
        topics = {t.name: t.is_internal for t in everything.topics}
    assert topics["__consumer_offsets"] is True  # created by the group coordinator at start
    assert not any(internal for name, internal in topics.items() if not name.startswith("__"))


def test_internal_topics_cannot_be_written_deleted_or_grown_by_clients(admin, broker):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    producer.produce("__consumer_offsets", b"garbage", partition=0,
                     on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    with pytest.raises(KafkaException) as deleted:
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(30)
    assert deleted.value.args[0].code() == KafkaError.INVALID_REQUEST
    with pytest.raises(KafkaException) as grown:
        admin.create_partitions([NewPartitions("__consumer_offsets", 60)])[
            "__consumer_offsets"].result(30)
    assert grown.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics


async def test_describe_log_dirs_gives_the_bytes_on_disk(admin, broker):
    """DescribeLogDirs through kafka-python's admin client and our own: each partition's size
    is the bytes of its .log files in the data directory."""
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient

    from databus.client import Admin

    admin.create_topics([NewTopic("adm-sizes", 2)])["adm-sizes"].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for n in range(5):
        producer.produce("adm-sizes", b"x" * 100 * (n + 1), partition=0)
    assert producer.flush(30) == 0
    on_disk = {p: sum(f.stat().st_size for f in (broker.data_dir / f"adm-sizes-{p}").glob("*.log"))
               for p in (0, 1)}
    assert on_disk[0] > 1500 and on_disk[1] == 0

    theirs = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = theirs.describe_log_dirs({"adm-sizes": [0, 1]})
    finally:
        theirs.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0 and log_dir["log_dir"] == str(broker.data_dir)
    (topic,) = log_dir["topics"]
    assert {p["partition_index"]: p["partition_size"] for p in topic["partitions"]} == on_disk

    async with Admin(broker.bootstrap) as ours:
        sizes = await ours.describe_log_dirs(["adm-sizes"])
        everything = await ours.describe_log_dirs()
    assert sizes == {("adm-sizes", 0): on_disk[0], ("adm-sizes", 1): on_disk[1]}
    assert everything[("adm-sizes", 0)] == on_disk[0]
