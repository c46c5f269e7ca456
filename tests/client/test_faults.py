"""Broker failures under our producer: kill -9 and restart, SIGSTOP and SIGCONT.

Each test owns its broker subprocess (tests/helpers/broker.py) and always resumes and kills
it in ``finally``.
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from databus.client import errors
from databus.client.admin import Admin
from databus.client.producer import Producer
from tests.broker.clients import confluent_consume
from tests.helpers.broker import BrokerProcess


@pytest.fixture
def own_broker(tmp_path):
    broker = BrokerProcess(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        if broker.alive():
            os.kill(broker.pid, signal.SIGCONT)
        broker.close()


async def create(bootstrap, topic, partitions):
    async with Admin(bootstrap) as admin:
        assert await admin.create_topics({topic: partitions}) == {topic: None}


def values_by_partition(records):
    out: dict[int, list[bytes]] = {}
    for got in sorted(records, key=lambda r: (r.partition, r.offset)):
        out.setdefault(got.partition, []).append(got.value)
    return out


async def test_kill9_and_restart_mid_stream_delivers_exactly_once(own_broker, topic):
    await create(own_broker.bootstrap, topic, 2)
    total = 3000
    config = {"request.timeout.ms": 2000, "retry.backoff.ms": 100, "linger.ms": 2,
              "batch.size": 4096, "delivery.timeout.ms": 60000}
    async with Producer(own_broker.bootstrap, config) as p:
        futures = []
        for i in range(total):
            futures.append(await p.send(topic, b"%06d" % i, partition=i % 2))
            if i % 50 == 0:
                await trio.sleep(0.001)  # pace the stream so batches are in flight all along
            if i == total // 3:
                await futures[i // 2].wait()  # records are flowing to the broker
                # kill -9 and restart on the same port while the sender keeps going
                await trio.to_thread.run_sync(own_broker.restart)
        await p.flush()
        stats = p.statistics()
    assert stats.connections_opened >= 3  # bootstrap, broker 1, and broker 1 again
    assert all(f.exception() is None for f in futures)
    seen = await trio.to_thread.run_sync(confluent_consume, own_broker.bootstrap, topic, total, None)
    by_part = values_by_partition(seen)
    for part in (0, 1):
        expected = [b"%06d" % i for i in range(part, total, 2)]
        assert by_part[part] == expected  # every record once, in send order
    offsets = {(f.result().partition, f.result().offset) for f in futures}
    assert len(offsets) == total


async def test_sigstop_then_sigcont_delivers_everything_queued_in_order(own_broker, topic):
    await create(own_broker.bootstrap, topic, 2)
    config = {"request.timeout.ms": 1000, "delivery.timeout.ms": 30000, "linger.ms": 1,
              "retry.backoff.ms": 100}
    async with Producer(own_broker.bootstrap, config) as p:
        await (await p.send(topic, b"warm-up", partition=0)).wait()
        os.kill(own_broker.pid, signal.SIGSTOP)
        try:
            futures = [await p.send(topic, b"%04d" % i, partition=i % 2) for i in range(400)]
            await trio.sleep(2.5)  # requests time out and are retried against a frozen broker
            assert not any(f.done() for f in futures)
            assert p.statistics().retries >= 1
        finally:
            os.kill(own_broker.pid, signal.SIGCONT)
        await p.flush()
    assert all(f.exception() is None for f in futures)
    seen = await trio.to_thread.run_sync(confluent_consume, own_broker.bootstrap, topic, 401, None)
    by_part = values_by_partition(seen)
    assert by_part[0] == [b"warm-up"] + [b"%04d" % i for i in range(0, 400, 2)]
    assert by_part[1] == [b"%04d" % i for i in range(1, 400, 2)]


async def test_sigstop_blocks_sends_then_fails_them_with_memory_bounded(own_broker, topic):
    await create(own_broker.bootstrap, topic, 1)
    memory = 20_000
    config = {"buffer.memory": memory, "batch.size": 4000, "max.block.ms": 500,
              "request.timeout.ms": 1000, "delivery.timeout.ms": 2500, "linger.ms": 0}
    async with Producer(own_broker.bootstrap, config) as p:
        await (await p.send(topic, b"warm-up")).wait()
        os.kill(own_broker.pid, signal.SIGSTOP)
        try:
            futures = []
            with pytest.raises(errors.BufferExhaustedError, match="max.block.ms=500"):
                for _i in range(10_000):
                    futures.append(await p.send(topic, b"x" * 100))
            stats = p.statistics()
            assert 0 < stats.buffered_bytes <= memory
            assert len(futures) < 10_000
            with trio.fail_after(10):
                for f in futures:
                    with pytest.raises(errors.DeliveryTimeoutError, match="delivery.timeout.ms=2500"):
                        await f.wait()
            assert p.statistics().buffered_bytes == 0
        finally:
            os.kill(own_broker.pid, signal.SIGCONT)
        after = await p.send(topic, b"after")
        meta = await after.wait()
    assert meta.offset >= 1


async def test_consumer_carries_on_across_a_broker_restart(own_broker, topic):
    from databus.client.consumer import Consumer

    await create(own_broker.bootstrap, topic, 1)
    async with Producer(own_broker.bootstrap) as p:
        for i in range(200):
            await p.send(topic, b"%04d" % i)
    got = []
    async with Consumer(own_broker.bootstrap, {"auto.offset.reset": "earliest",
                                               "max.poll.records": 50,
                                               "request.timeout.ms": 2000}) as c:
        c.assign([(topic, 0)])
        while len(got) < 50:
            got.extend(await c.poll(1))
        await trio.to_thread.run_sync(own_broker.restart)  # kill -9 while we consume
        async with Producer(own_broker.bootstrap) as p:
            for i in range(200, 300):
                await p.send(topic, b"%04d" % i)
        with trio.move_on_after(20):
            while len(got) < 300:
                got.extend(await c.poll(1))
    assert [r.value for r in got] == [b"%04d" % i for i in range(300)]
    assert [r.offset for r in got] == list(range(300))


async def test_producer_recovers_when_its_topic_is_deleted_and_comes_back(own_broker, topic):
    """UNKNOWN_TOPIC_OR_PARTITION mid-stream: metadata is refreshed and sends are retried
    until the topic exists again (here auto-created, with one partition, by the broker's Metadata)."""
    await create(own_broker.bootstrap, topic, 2)
    async with Producer(own_broker.bootstrap, {"retry.backoff.ms": 50, "delivery.timeout.ms": 20000,
                                             "request.timeout.ms": 5000}) as p:
        before = [await p.send(topic, b"before", partition=0) for _ in range(5)]
        await p.flush()
        async with Admin(own_broker.bootstrap) as admin:
            assert await admin.delete_topics([topic]) == {topic: None}
        after = [await p.send(topic, b"after", partition=0) for _ in range(5)]
        await p.flush()
        stats = p.statistics()
    assert all(f.exception() is None for f in before + after)
    assert stats.retries >= 1  # the first attempt met the deleted topic
    seen = await trio.to_thread.run_sync(confluent_consume, own_broker.bootstrap, topic, 5, None)
    assert [g.value for g in seen] == [b"after"] * 5


async def test_a_partition_that_disappears_ends_in_a_delivery_timeout(own_broker, topic):
    await create(own_broker.bootstrap, topic, 2)
    config = {"retry.backoff.ms": 50, "delivery.timeout.ms": 1500, "request.timeout.ms": 1000}
    async with Producer(own_broker.bootstrap, config) as p:
        await (await p.send(topic, b"x", partition=1)).wait()
        async with Admin(own_broker.bootstrap) as admin:
            assert await admin.delete_topics([topic]) == {topic: None}
        lost = await p.send(topic, b"y", partition=1)  # the topic comes back with 1 partition
        with pytest.raises(errors.DeliveryTimeoutError, match="UNKNOWN_TOPIC_OR_PARTITION"):
            await lost.wait()
