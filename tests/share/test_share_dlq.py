"""Dead-letter topics of share groups (KIP-1191) with confluent-kafka's ShareConsumer: a
REJECTed record and one whose delivery count runs out are copied to the group's
``errors.deadletterqueue.topic.name`` with Kafka's ``__dlq.errors.*`` headers; the original
key and value only with ``errors.deadletterqueue.copy.record.enable``; names outside the
``dlq.`` prefix are refused; ``databus groups describe`` names the topic.

One broker for the module (locks of 1 s, so a released record comes back soon); each test
has its own topic, group and DLQ topic.
"""

from __future__ import annotations

import itertools
import time

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest

from databus.broker.process import BrokerProcess
from databus.cli import main

DEADLINE_S = 30
ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
RELEASE = confluent_kafka.AcknowledgeType.RELEASE
REJECT = confluent_kafka.AcknowledgeType.REJECT
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("share-dlq"), options={
        "num.partitions": 1, "group.share.min.record.lock.duration.ms": 1000,
    }) as process:
        yield process


def set_group_configs(broker, group: str, **configs: str) -> None:
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
        kadmin.ConfigEntry(k, v, incremental_operation=kadmin.AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result()


def new_work(broker, **dlq_configs: str) -> tuple[str, str, str]:
    n = next(_names)
    topic, group, dlq = f"jobs-{n}", f"workers-{n}", f"dlq.workers-{n}"
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([kadmin.NewTopic(topic, 1)])[topic].result()
    set_group_configs(broker, group, **{
        "share.auto.offset.reset": "earliest", "share.delivery.count.limit": "2",
        "share.record.lock.duration.ms": "1000",
        "errors.deadletterqueue.topic.name": dlq, **dlq_configs})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce(topic, key=b"k%d" % i, value=b"job-%d" % i)
    assert producer.flush(30) == 0
    return topic, group, dlq


def settle(broker, topic: str, group: str) -> None:
    """Offset 0 accepted, 1 rejected, 2 released at every delivery (limit 2: archived)."""
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group,
        "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deliveries_of_2 = 0
    deadline = time.monotonic() + DEADLINE_S
    try:
        while deliveries_of_2 < 2:
            assert time.monotonic() < deadline, "offset 2 was not delivered twice"
            for message in consumer.poll(0.5) or ():
                assert message.error() is None, message.error()
                offset = message.offset()
                if offset == 2:
                    deliveries_of_2 += 1
                consumer.acknowledge(message, {0: ACCEPT, 1: REJECT, 2: RELEASE}[offset])
        consumer.commit_sync(10)
    finally:
        consumer.close()


def read_dlq(broker, dlq: str, count: int) -> list:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": broker.bootstrap, "group.id": f"reader-{dlq}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([dlq])
    got: list = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message)
    finally:
        consumer.close()
    return got


def test_rejected_and_exhausted_records_land_in_the_dlq_with_kafkas_headers(broker):
    topic, group, dlq = new_work(broker)
    settle(broker, topic, group)
    letters = read_dlq(broker, dlq, 2)
    assert len(letters) == 2
    by_offset = {}
    for message in letters:
        headers = {k: v.decode() for k, v in message.headers()}
        by_offset[int(headers["__dlq.errors.offset"])] = (message, headers)
    assert sorted(by_offset) == [1, 2]
    _, rejected = by_offset[1]
    assert rejected == {
        "__dlq.errors.topic": topic, "__dlq.errors.partition": "0",
        "__dlq.errors.offset": "1", "__dlq.errors.group": group,
        "__dlq.errors.delivery.count": "1",
        "__dlq.errors.message": "Offset rejected by client."}
    message, exhausted = by_offset[2]
    assert exhausted["__dlq.errors.delivery.count"] == "2"
    assert exhausted["__dlq.errors.message"] == "Offset delivery count exceeded the threshold."
    # Kafka's default: the context alone, not the record
    assert message.key() is None and message.value() is None
    # the topic was created on first use, marked as a DLQ
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = kadmin.ConfigResource(kadmin.ResourceType.TOPIC, dlq)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["errors.deadletterqueue.group.enable"].value == "true"


def test_copy_record_enable_copies_key_and_value(broker):
    topic, group, dlq = new_work(broker, **{"errors.deadletterqueue.copy.record.enable": "true"})
    settle(broker, topic, group)
    letters = read_dlq(broker, dlq, 2)
    assert sorted((m.key(), m.value()) for m in letters) == [(b"k1", b"job-1"),
                                                             (b"k2", b"job-2")]


def test_a_group_without_a_dlq_writes_none(broker):
    """The check above can fail: without the config the same records are archived only."""
    topic, group, dlq = new_work(broker, **{"errors.deadletterqueue.topic.name": ""})
    settle(broker, topic, group)
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    assert dlq not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("name", ["jobs-dead", "__dlq.x", "dlq.bad name"])
def test_a_dlq_name_outside_the_prefix_is_refused_with_invalid_config(broker, name):
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        set_group_configs(broker, "some-group", **{"errors.deadletterqueue.topic.name": name})
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG


def test_groups_describe_shows_the_dlq(broker, capsys):
    topic, group, dlq = new_work(broker)
    settle(broker, topic, group)
    capsys.readouterr()
    assert main(["groups", "--bootstrap", broker.bootstrap, "--timeout", "20",
                 "describe", group]) == 0
    assert f"dead-letter topic (KIP-1191): {dlq}, copying records: false" in (
        capsys.readouterr().out)


def test_our_share_consumers_reject_lands_in_the_dlq(broker):
    import trio

    from databus.client import AcknowledgeType, ShareConsumer

    topic, group, dlq = new_work(broker)

    async def main() -> None:
        with trio.fail_after(DEADLINE_S):
            async with ShareConsumer(broker.bootstrap, {
                    "group.id": group, "share.acknowledgement.mode": "explicit"}) as sc:
                sc.subscribe([topic])
                settled = 0
                while settled < 3:
                    for record in await sc.poll(0.5):
                        sc.acknowledge(record, AcknowledgeType.REJECT if record.offset == 0
                                       else AcknowledgeType.ACCEPT)
                        settled += 1
                assert all(e is None for e in (await sc.commit()).values())

    trio.run(main)
    (letter,) = read_dlq(broker, dlq, 1)
    headers = {k: v.decode() for k, v in letter.headers()}
    assert (headers["__dlq.errors.offset"], headers["__dlq.errors.message"]) == (
        "0", "Offset rejected by client.")


def _share_version(bootstrap: str) -> int:
    import trio

    from databus.client import Admin

    async def ask() -> int:
        async with Admin(bootstrap) as admin:
            conn = await admin.cluster.any_connection()
            return conn.finalized_features.get("share.version", 0)

    return trio.run(ask)


def test_share_version_2_advertises_dlqs_and_level_1_refuses_them(broker, tmp_path):
    """ApiVersions' share.version feature is how a client (the sidecar's queue mode) learns
    that the broker keeps share groups' dead letters; at level 1 the DLQ config is refused
    as a broker without KIP-1191 would."""
    assert _share_version(broker.bootstrap) == 2
    with BrokerProcess(tmp_path, options={"share.version": 1}) as old:
        assert _share_version(old.bootstrap) == 1
        with pytest.raises(confluent_kafka.KafkaException) as refused:
            set_group_configs(old, "g", **{"errors.deadletterqueue.topic.name": "dlq.g"})
        assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
        set_group_configs(old, "g", **{"share.auto.offset.reset": "earliest"})  # others go
