"""Our producer against librdkafka's three-broker mock cluster; confluent-kafka reads back."""

from __future__ import annotations

import pytest
import trio

from databus.client import errors
from databus.client.producer import Producer, RecordMetadata
from tests.broker.clients import Msg, confluent_consume, confluent_produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def sample_records(n: int):
    """Keys, values (one null, one empty), headers (incl. a null value) and timestamps."""
    out = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % (i % 13)
        value = None if i == 5 else (b"" if i == 6 else b"value-%d-" % i + bytes(range(i % 50)))
        headers = (("trace", b"t%d" % i), ("empty", None)) if i % 3 else ()
        out.append((key, value, headers, 1_700_000_000_000 + i))
    return out


def spread_topic(mock_cluster, base: str) -> str:
    """A topic (auto-created by asking) whose partition leaders are on several brokers."""
    for i in range(20):
        name = f"{base}-{i}"
        if len(set(mock_cluster.leaders(name).values())) > 1:
            return name
    raise AssertionError("the mock cluster put every leader on one broker 20 times")


@pytest.mark.parametrize("codec", CODECS)
async def test_every_codec_is_read_byte_identical_by_confluent(mock_cluster, topic, codec):
    topic = spread_topic(mock_cluster, topic)
    records = sample_records(300)
    async with Producer(mock_cluster.bootstrap, {"compression.type": codec, "linger.ms": 2}) as p:
        futures = [
            await p.send(topic, v, key=k, headers=h, timestamp_ms=ts) for k, v, h, ts in records
        ]
    reports = [f.result() for f in futures]
    assert all(isinstance(r, RecordMetadata) and r.offset >= 0 for r in reports)
    assert len({(r.partition, r.offset) for r in reports}) == len(records)
    seen = await trio.to_thread.run_sync(confluent_consume, mock_cluster.bootstrap, topic,
                                         len(records), None)
    by_position = {(g.partition, g.offset): (g.key, g.value, g.headers, g.timestamp) for g in seen}
    assert len(by_position) == len(records)
    for report, (k, v, h, ts) in zip(reports, records):
        got = by_position[(report.partition, report.offset)]
        # librdkafka reports an empty value as b"" and a null one as None, as we sent them
        assert got == (k, v, tuple(h), ts)


async def test_keyed_records_land_where_confluent_murmur2_random_puts_them(mock_cluster, topic):
    keys = [b"user-%d" % i for i in range(200)] + [b"", b"\x00\xff", "ключ".encode()]
    theirs = await trio.to_thread.run_sync(
        lambda: confluent_produce(
            mock_cluster.bootstrap, topic + "-c",
            [Msg(k, b"v") for k in keys],
            partitioner="murmur2_random",
        )
    )
    their_partition = {key: part for key, (part, _off) in zip(keys, theirs)}
    async with Producer(mock_cluster.bootstrap) as p:
        futures = [await p.send(topic, b"v", key=k) for k in keys]
    ours = {k: f.result().partition for k, f in zip(keys, futures)}
    assert ours == their_partition


async def test_explicit_partition_wins_and_bad_partition_is_an_error(mock_cluster, topic):
    async with Producer(mock_cluster.bootstrap, {"partitioner": "round_robin"}) as p:
        futures = [await p.send(topic, b"v", key=b"k", partition=2) for _ in range(5)]
        with pytest.raises(errors.UnknownTopicOrPartitionError, match="partition 9"):
            await p.send(topic, b"v", partition=9)
    assert {f.result().partition for f in futures} == {2}
    offsets = [f.result().offset for f in futures]
    assert offsets == sorted(offsets) and len(set(offsets)) == 5


async def test_delivery_reports_offsets_in_order_per_partition(mock_cluster, topic):
    async with Producer(mock_cluster.bootstrap, {"batch.size": 500, "linger.ms": 0}) as p:
        futures = [await p.send(topic, b"%06d" % i, partition=i % 2) for i in range(400)]
        await p.flush()
        stats = p.statistics()
    assert stats.buffered_bytes == 0 and stats.incomplete_records == 0
    assert stats.delivered_records == 400 and stats.producer_id >= 0
    for part in (0, 1):
        offs = [f.result().offset for i, f in enumerate(futures) if i % 2 == part]
        assert offs == list(range(offs[0], offs[0] + 200))


async def test_callbacks_and_wait(mock_cluster, topic):
    seen = []
    async with Producer(mock_cluster.bootstrap) as p:
        fut = await p.send(topic, b"x")
        fut.add_done_callback(lambda f: seen.append(f.result().offset))
        meta = await fut.wait()
        assert fut.done() and fut.exception() is None
        late = []
        fut.add_done_callback(lambda f: late.append(True))  # already done: runs at once
    assert seen == [meta.offset] and late == [True]


async def test_bad_records_fail_fast_with_clear_errors(mock_cluster, topic):
    async with Producer(mock_cluster.bootstrap, {"max.request.size": 1000}) as p:
        with pytest.raises(errors.MessageTooLargeError, match="max.request.size=1000"):
            await p.send(topic, b"x" * 2000)
        with pytest.raises(TypeError, match="value must be bytes"):
            await p.send(topic, "text")
        with pytest.raises(TypeError, match="header"):
            await p.send(topic, b"x", headers=[("h", 5)])
        assert p.statistics().incomplete_records == 0
    with pytest.raises(errors.ProducerClosedError):
        await p.send(topic, b"x")


async def test_acks_zero_reports_without_offsets(mock_cluster, topic):
    async with Producer(mock_cluster.bootstrap, {"acks": 0}) as p:
        futures = [await p.send(topic, b"fire-and-forget") for _ in range(10)]
    assert all(f.result().offset == -1 for f in futures)
    seen = await trio.to_thread.run_sync(confluent_consume, mock_cluster.bootstrap, topic, 10, None)
    assert len(seen) == 10


async def test_unreachable_cluster_fails_send_after_max_block(topic):
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there any more
    async with Producer(f"127.0.0.1:{port}", {"max.block.ms": 300}) as p:
        with pytest.raises(errors.RequestTimedOutError, match="not present in metadata after 300 ms"):
            await p.send(topic, b"x")


async def test_a_failing_callback_does_not_stop_deliveries(mock_cluster, topic):
    def bad(_fut):
        raise RuntimeError("application bug")

    async with Producer(mock_cluster.bootstrap) as p:
        first = await p.send(topic, b"a")
        first.add_done_callback(bad)
        await first.wait()
        second = await p.send(topic, b"b")
        assert (await second.wait()).offset >= 0


async def test_futures_of_one_batch_share_its_outcome_and_call_back_in_record_order(
        mock_cluster, topic):
    """send() keeps no per-record state in the batch: each future reads the batch's outcome
    (offset = base + its index) when asked, and callbacks added out of order still run in
    record order, each future's own callbacks in the order they were added."""
    calls = []
    async with Producer(mock_cluster.bootstrap, {"linger.ms": 200}) as p:
        futures = [await p.send(topic, b"v%d" % i, partition=0) for i in range(5)]
        assert not any(f.done() for f in futures)
        for i in (3, 0, 4, 1):
            futures[i].add_done_callback(lambda f, i=i: calls.append((i, f.result().offset)))
        futures[0].add_done_callback(lambda f: calls.append(("again", f.partition)))
        await futures[2].wait()
    offsets = [f.result().offset for f in futures]
    assert offsets == list(range(offsets[0], offsets[0] + 5))
    assert calls == [(0, offsets[0]), ("again", 0), (1, offsets[1]), (3, offsets[3]),
                     (4, offsets[4])]
    assert [(f.topic, f.partition) for f in futures] == [(topic, 0)] * 5
