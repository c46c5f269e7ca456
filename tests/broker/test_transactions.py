"""Kafka transactions against a real ``databus broker`` process, with confluent-kafka's
transactional producer and read_committed consumer: committed records are visible, aborted
ones never; sendOffsetsToTransaction commits a group's offsets with the records; kill -9 of
the broker in the middle of a transaction loses nothing and resurrects nothing; a second
instance of a transactional id fences the first; a transaction past its timeout is aborted.

Every read_committed read ends on a record committed after the aborted ones, so "never
visible" is checked on a read that went past them, not on a read that stopped early.
"""

from __future__ import annotations

import time

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.helpers.broker import BrokerProcess

from .clients import confluent_consume

OPTIONS = {
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 100,
}


def txn_producer(broker, txn_id: str, **conf) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                         "retry.backoff.ms": 50, **conf})
    producer.init_transactions(30)
    return producer


def send(producer: Producer, topic: str, values, *, commit: bool | None = True) -> None:
    """One transaction of ``values``: committed, aborted (commit=False) or left open (None)."""
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value)
    producer.flush(30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)


def values(broker, topic: str, count: int, **conf) -> list[bytes]:
    """read_uncommitted unless told (librdkafka's own default is read_committed)."""
    conf.setdefault("isolation.level", "read_uncommitted")
    return [g.value for g in confluent_consume(broker.bootstrap, topic, count, timeout=30,
                                               **conf)]


def committed(broker, topic: str, count: int) -> list[bytes]:
    return values(broker, topic, count, **{"isolation.level": "read_committed"})


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("txn"), OPTIONS) as running:
        yield running


def test_committed_records_are_visible_and_aborted_ones_never(broker):
    producer = txn_producer(broker, "visible")
    send(producer, "tx-visible", [b"c1", b"c2"])
    send(producer, "tx-visible", [b"a1", b"a2", b"a3"], commit=False)
    send(producer, "tx-visible", [b"c3"])
    assert committed(broker, "tx-visible", 3) == [b"c1", b"c2", b"c3"]
    # read_uncommitted sees everything that was written (markers are not records)
    assert values(broker, "tx-visible", 6) == [b"c1", b"c2", b"a1", b"a2", b"a3", b"c3"]


def test_an_open_transaction_holds_read_committed_readers_back(broker):
    producer = txn_producer(broker, "open")
    send(producer, "tx-open", [b"c1"])
    send(producer, "tx-open", [b"pending"], commit=None)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("tx-open", b"after")
    plain.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "open-reader",
                         "isolation.level": "read_committed"})
    try:
        # the last stable offset stops at the open transaction (offset 2 after c1 and its
        # marker); read_uncommitted's end is the log end
        low, high = consumer.get_watermark_offsets(TopicPartition("tx-open", 0), timeout=10)
        assert (low, high) == (0, 2)
    finally:
        consumer.close()
    producer.commit_transaction(30)
    assert committed(broker, "tx-open", 3) == [b"c1", b"pending", b"after"]


def test_offsets_sent_to_the_transaction_commit_with_it(broker):
    source = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        source.produce("tx-in", b"in%d" % i)
    source.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ctp",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = txn_producer(broker, "ctp")
    try:
        consumer.assign([TopicPartition("tx-in", 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 6 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(6, 0.5) if not m.error()]
        assert len(got) == 6

        def process(batch, commit):
            producer.begin_transaction()
            for msg in batch:
                producer.produce("tx-out", msg.value().replace(b"in", b"out"))
            producer.send_offsets_to_transaction(
                [TopicPartition("tx-in", 0, batch[-1].offset() + 1)],
                consumer.consumer_group_metadata(), 30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)

        process(got[:4], commit=True)
        process(got[4:], commit=False)  # neither its records nor its offset count
        position = consumer.committed([TopicPartition("tx-in", 0)], timeout=10)[0].offset
        assert position == 4
        process(got[4:], commit=True)
        position = consumer.committed([TopicPartition("tx-in", 0)], timeout=10)[0].offset
        assert position == 6
    finally:
        consumer.close()
    assert committed(broker, "tx-out", 6) == [b"out%d" % i for i in range(6)]


def test_kill9_mid_transaction_and_a_zombie_is_fenced(tmp_path):
    with BrokerProcess(tmp_path, OPTIONS) as broker:
        first = txn_producer(broker, "app")
        send(first, "tx-crash", [b"before"])
        # crash with a transaction open and its records written: the coordinator's
        # ONGOING state and the partitions it covers come back from __transaction_state
        send(first, "tx-crash", [b"survives"], commit=None)
        broker.restart()
        first.commit_transaction(30)
        # crash again with another one open; then a new instance of the same
        # transactional id takes over: the open transaction is aborted, the old one fenced
        send(first, "tx-crash", [b"zombie"], commit=None)
        broker.restart()
        second = txn_producer(broker, "app")
        with pytest.raises(KafkaException) as fenced:
            first.commit_transaction(30)
        assert fenced.value.args[0].fatal(), fenced.value
        send(second, "tx-crash", [b"new"])
        # (the aborted-transaction index rebuilt after a crash: tests/storage)
        assert committed(broker, "tx-crash", 3) == [b"before", b"survives", b"new"]
        assert b"zombie" in values(broker, "tx-crash", 4)  # it was written, then aborted


def test_a_transaction_past_its_timeout_is_aborted(broker):
    producer = txn_producer(broker, "slow", **{"transaction.timeout.ms": 1000})
    send(producer, "tx-slow", [b"late"], commit=None)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("tx-slow", b"after")
    plain.flush(10)
    # "after" is readable once the abort moved the last stable offset past "late"
    assert committed(broker, "tx-slow", 1) == [b"after"]
    with pytest.raises(KafkaException):
        producer.commit_transaction(30)
    assert "open longer than its timeout" in broker.log_text()


def test_our_consumer_reads_committed_only(broker):
    from databus.client import SyncConsumer

    producer = txn_producer(broker, "ours")
    send(producer, "tx-ours", [b"c1"])
    send(producer, "tx-ours", [b"a1", b"a2"], commit=False)
    send(producer, "tx-ours", [b"c2"])
    for level, expected in (("read_committed", [b"c1", b"c2"]),
                            ("read_uncommitted", [b"c1", b"a1", b"a2", b"c2"])):
        consumer = SyncConsumer(broker.bootstrap, {"isolation.level": level,
                                                   "auto.offset.reset": "earliest"})
        try:
            consumer.assign([("tx-ours", 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 30
            while len(got) < len(expected) and time.monotonic() < deadline:
                got += [r.value for r in consumer.poll(0.5)]
            assert got == expected, level
        finally:
            consumer.close()


async def test_our_transactional_producer(broker):
    """Our trio Producer's transactional API against the broker, read back with
    confluent-kafka's read_committed consumer; a second instance fences the first."""
    from databus.client import Producer
    from databus.client.errors import ProducerFencedError

    config = {"transactional.id": "ours-tx"}
    async with Producer(broker.bootstrap, config) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send("tx-ours-out", b"c1")
        await producer.send_offsets_to_transaction({("tx-ours-out", 0): 1}, "ours-group")
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send("tx-ours-out", b"aborted")
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send("tx-ours-out", b"c2")
        async with Producer(broker.bootstrap, config) as newer:
            await newer.init_transactions()  # aborts the open one, fences the first
            with pytest.raises(ProducerFencedError):
                await producer.commit_transaction()
            newer.begin_transaction()
            await newer.send("tx-ours-out", b"c3")
            await newer.commit_transaction()
    got = await trio.to_thread.run_sync(committed, broker, "tx-ours-out", 2)
    assert got == [b"c1", b"c3"]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ours-group"})
    try:
        (position,) = await trio.to_thread.run_sync(
            lambda: consumer.committed([TopicPartition("tx-ours-out", 0)], timeout=10))
        assert position.offset == 1
    finally:
        consumer.close()


async def test_partitions_added_to_a_transaction_in_one_request(broker):
    """add_partitions_to_transaction: several partitions of two topics added at once; the
    abort reaches each of them (its marker), the commit too."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from databus.client import Producer

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("tx-many-a", 3), NewTopic("tx-many-b", 1)]
                                      ).values():
        future.result(10)
    tps = [("tx-many-a", 0), ("tx-many-a", 1), ("tx-many-a", 2), ("tx-many-b", 0)]
    async with Producer(broker.bootstrap, {"transactional.id": "many-tx"}) as producer:
        await producer.init_transactions()
        for commit in (False, True):
            producer.begin_transaction()
            await producer.add_partitions_to_transaction(tps)
            for topic, partition in tps:
                await producer.send(topic, b"c" if commit else b"a", partition=partition)
            await (producer.commit_transaction() if commit else producer.abort_transaction())
    got = await trio.to_thread.run_sync(lambda: [g.value for g in confluent_consume(
        broker.bootstrap, "tx-many-a", 3, None, timeout=30,
        **{"isolation.level": "read_committed"})])
    assert got == [b"c"] * 3
    assert await trio.to_thread.run_sync(committed, broker, "tx-many-b", 1) == [b"c"]
    # every partition holds: the aborted record, its ABORT marker, the committed record and
    # its COMMIT marker, so each was in both transactions
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "many-probe"})
    try:
        for topic, partition in tps:
            low, high = await trio.to_thread.run_sync(
                lambda t=topic, p=partition: probe.get_watermark_offsets(
                    TopicPartition(t, p), timeout=10))
            assert (low, high) == (0, 4), (topic, partition)
    finally:
        probe.close()


def test_kafka_python_and_aiokafka_transactions(broker):
    """The two other Python clients' transactional producers and read_committed consumers."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp")
    producer.init_transactions()
    for value, commit in ((b"k1", True), (b"k-aborted", False), (b"k2", True)):
        producer.begin_transaction()
        producer.send("tx-kp", value)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    consumer = KafkaConsumer("tx-kp", bootstrap_servers=broker.bootstrap,
                             isolation_level="read_committed", auto_offset_reset="earliest",
                             consumer_timeout_ms=20000)
    got = []
    for message in consumer:  # the first two: the aborted one lies between them
        got.append(message.value)
        if len(got) == 2:
            break
    consumer.close()
    assert got == [b"k1", b"k2"]

    async def aio() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("tx-aio", b"a1")
            await producer.begin_transaction()
            await producer.send_and_wait("tx-aio", b"a-aborted")
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send_and_wait("tx-aio", b"a2")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("tx-aio", bootstrap_servers=broker.bootstrap,
                                    isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < 2:
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                got += [m.value for msgs in batches.values() for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(aio()) == [b"a1", b"a2"]
