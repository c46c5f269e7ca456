"""What one ShareFetch may hand out, as librdkafka's share-consumer tests (0170-0185) expect
it from Kafka: MaxBytes bounds the answer (only its first batch may exceed it),
``share.isolation.level=read_committed`` stops at the last stable offset and never delivers
an aborted transaction's records, and the first fetch of a member with two fresh
share-partitions gets one partition's records.

One broker for the module, run as librdkafka's CI runs Kafka for these tests
(``group.share.min.record.lock.duration.ms=1000``); confluent-kafka's ShareConsumer is the
client.  Each test has its own topic and group (``share.auto.offset.reset=earliest``).
"""

from __future__ import annotations

import itertools
import time

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest

from databus.broker.process import BrokerProcess

DEADLINE_S = 30
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("share-limits"), options={
        "num.partitions": 1, "group.share.min.record.lock.duration.ms": 1000,
    }) as process:
        yield process


def new_work(broker, partitions: int = 1, **group_configs: str) -> tuple[str, str]:
    n = next(_names)
    topic, group = f"limits-{n}", f"limits-group-{n}"
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([kadmin.NewTopic(topic, partitions)])[topic].result()
    configs = {"share.auto.offset.reset": "earliest", **group_configs}
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
        kadmin.ConfigEntry(k, v, incremental_operation=kadmin.AlterConfigOpType.SET)
        for k, v in configs.items()])
    admin.incremental_alter_configs([resource])[resource].result()
    return topic, group


def share_consumer(broker, group: str, topic: str, **config) -> confluent_kafka.ShareConsumer:
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group,
        "share.acknowledgement.mode": "explicit", **config})
    consumer.subscribe([topic])
    return consumer


def first_poll(consumer) -> list:
    """The records of the first poll that returns any (within the deadline)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        messages = [m for m in consumer.poll(1.0) or () if m.error() is None]
        if messages:
            return messages
    raise AssertionError("no records within the deadline")


def drain(consumer, expected: int, settle_s: float = 3.0) -> list:
    """Poll, accepting everything, until ``expected`` records came and then nothing more for
    ``settle_s`` (more would show up there)."""
    got: list = []
    deadline = time.monotonic() + DEADLINE_S
    quiet_until = None
    while time.monotonic() < deadline:
        messages = [m for m in consumer.poll(0.5) or () if m.error() is None]
        for message in messages:
            consumer.acknowledge(message, confluent_kafka.AcknowledgeType.ACCEPT)
        got.extend(messages)
        if len(got) >= expected:
            if messages or quiet_until is None:
                quiet_until = time.monotonic() + settle_s
            elif time.monotonic() >= quiet_until:
                break
    return got


def produce_one_batch_each(broker, topic: str, values: list[bytes], partition: int = 0):
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "linger.ms": 0, "batch.num.messages": 1})
    for value in values:
        producer.produce(topic, value=value, partition=partition)
        producer.flush(30)  # one record per batch
    assert producer.flush(30) == 0


def test_a_small_fetch_max_bytes_gets_one_batch_not_two(broker):
    topic, group = new_work(broker)
    produce_one_batch_each(broker, topic, [b"x" * 2000 for _ in range(5)])
    consumer = share_consumer(broker, group, topic, **{"fetch.max.bytes": 3000})
    try:
        messages = first_poll(consumer)
        # one batch of ~2 KB fits 3000 bytes, a second would not: Kafka gives one record
        assert len(messages) == 1, [m.offset() for m in messages]
    finally:
        consumer.close()


def test_receive_message_max_bytes_bounds_the_response(broker):
    """An answer larger than receive.message.max.bytes drops librdkafka's connection (and
    the records it carried come back only after their locks expire).  With the answer
    bounded by fetch.max.bytes every record arrives, a poll at a time, each once."""
    topic, group = new_work(broker)
    produce_one_batch_each(broker, topic, [b"%d" % i + b"y" * 20_000 for i in range(20)])
    consumer = share_consumer(broker, group, topic, **{"receive.message.max.bytes": 100_000,
                                                       "fetch.max.bytes": 99_000})
    try:
        got = drain(consumer, 20)
        assert sorted(m.offset() for m in got) == list(range(20))
    finally:
        consumer.close()


def test_read_committed_skips_aborted_and_stops_at_the_last_stable_offset(broker):
    topic, group = new_work(broker, **{"share.isolation.level": "read_committed"})
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": f"txn-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce(topic, value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"committed-%d" % i)
    producer.commit_transaction(30)
    producer.begin_transaction()  # left open: its records are past the last stable offset
    for i in range(5):
        producer.produce(topic, value=b"open-%d" % i)
    producer.flush(30)

    consumer = share_consumer(broker, group, topic)
    try:
        got = drain(consumer, 10)
        assert sorted(m.value() for m in got) == sorted(b"committed-%d" % i for i in range(10))
        producer.commit_transaction(30)
        got = drain(consumer, 5)
        assert sorted(m.value() for m in got) == sorted(b"open-%d" % i for i in range(5))
    finally:
        consumer.close()


def test_read_uncommitted_delivers_the_aborted_records(broker):
    """The check above can fail: the same aborted records reach a read_uncommitted group."""
    topic, group = new_work(broker)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap,
                                         "transactional.id": f"txn-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(20):
        producer.produce(topic, value=b"aborted-%d" % i)
    producer.flush(30)
    producer.abort_transaction(30)
    consumer = share_consumer(broker, group, topic)
    try:
        assert len(drain(consumer, 20)) == 20
    finally:
        consumer.close()


def test_the_first_fetch_with_two_fresh_partitions_gets_one_partitions_records(broker):
    topic, group = new_work(broker, partitions=2)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for partition in (0, 1):
        for i in range(50):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(30) == 0
    consumer = share_consumer(broker, group, topic)
    try:
        messages = first_poll(consumer)
        assert len(messages) == 50 and len({m.partition() for m in messages}) == 1
        for message in messages:
            consumer.acknowledge(message, confluent_kafka.AcknowledgeType.ACCEPT)
        rest = drain(consumer, 50)
        assert {m.partition() for m in rest} | {messages[0].partition()} == {0, 1}
        assert len(rest) == 50
    finally:
        consumer.close()
