"""Our client against our own broker (a real ``databus broker`` subprocess): interop both
ways with confluent-kafka, kafka-python and aiokafka, byte-identical; admin; timestamps."""

from __future__ import annotations

from functools import partial

import pytest
import trio

from databus.client import errors
from databus.client.admin import Admin
from databus.client.consumer import Consumer
from databus.client.producer import Producer
from databus.protocol.errors import ErrorCode
from tests.broker.clients import (
    Msg,
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
    kafka_python_produce,
)

READERS = {"confluent": confluent_consume, "kafka-python": kafka_python_consume,
           "aiokafka": aiokafka_consume}
WRITERS = {"confluent": confluent_produce, "kafka-python": partial(kafka_python_produce, acks="all"),
           "aiokafka": partial(aiokafka_produce, acks="all")}


def sample(n: int, partitions: int = 3, null_header: bool = True):
    flag = None if null_header else b""
    return [
        Msg(b"key-%d" % i if i % 5 else None,
            b"value-%d-" % i + bytes(range(256))[: i % 40] if i != 4 else None,
            (("trace-id", b"%08d" % i), ("flag", flag)) if i % 2 else (),
            partition=i % partitions, timestamp=1_690_000_000_000 + i * 7)
        for i in range(n)
    ]


async def create(bootstrap, topic, partitions=3):
    async with Admin(bootstrap) as admin:
        result = await admin.create_topics({topic: partitions})
    assert result == {topic: None}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_they_read_what_we_write(broker, topic, reader, codec):
    await create(broker.bootstrap, topic)
    records = sample(60)
    async with Producer(broker.bootstrap, {"compression.type": codec}) as p:
        futures = [await p.send(topic, m.value, key=m.key, headers=m.headers,
                                timestamp_ms=m.timestamp, partition=m.partition)
                   for m in records]
    reports = [f.result() for f in futures]
    seen = await trio.to_thread.run_sync(READERS[reader], broker.bootstrap, topic, len(records),
                                         None)
    got = {(g.partition, g.offset): (g.key, g.value, g.headers, g.timestamp) for g in seen}
    assert len(got) == len(records)
    for report, m in zip(reports, records):
        assert report.partition == m.partition
        assert got[(report.partition, report.offset)] == (m.key, m.value, m.headers, m.timestamp)


class CollectingSink:
    """A DeliverySink that keeps what it is told."""

    def __init__(self):
        self.segments = []

    def batch_done(self, start, count, first_offset, append_ms, error):
        self.segments.append((start, count, first_offset, error))


async def test_send_batch_reports_segments_that_map_to_the_written_offsets(broker, topic):
    """The bulk path: 300 records in one call, split over several batches (batch.size 4 KiB),
    answered one segment per batch; every (start + i) -> first_offset + i pair is where
    confluent-kafka reads that record back, and the per-record path still interleaves."""
    await create(broker.bootstrap, topic, partitions=1)
    records = [(1_700_000_000_000 + i, b"k%d" % i, b"v%d-" % i + b"x" * 40, ())
               for i in range(300)]
    first, second = CollectingSink(), CollectingSink()
    async with Producer(broker.bootstrap, {"batch.size": 4096, "linger.ms": 20}) as p:
        assert await p.partitions_for(topic) == [0]
        await p.send_batch(topic, 0, records[:150], first)
        single = await p.send(topic, b"single", key=b"s", partition=0)
        await p.send_batch(topic, 0, records[150:], second)
        await p.flush()
    offsets = {}
    for sink, call in ((first, records[:150]), (second, records[150:])):
        assert all(error is None for *_, error in sink.segments)
        assert len(sink.segments) > 1  # the records spanned batches
        # Each record of the call is covered exactly once.
        covered = sorted(i for start, count, _, _ in sink.segments
                         for i in range(start, start + count))
        assert covered == list(range(150))
        for start, count, first_offset, _ in sink.segments:
            for i in range(count):
                offsets[first_offset + i] = call[start + i]
    seen = await trio.to_thread.run_sync(confluent_consume, broker.bootstrap, topic, 301, None)
    by_offset = {g.offset: (g.key, g.value, g.timestamp) for g in seen}
    assert by_offset[single.result().offset] == (b"s", b"single", single.result().timestamp)
    assert single.result().offset == 150  # between the two calls, as queued
    for offset, (ts, k, v, _) in offsets.items():
        assert by_offset[offset] == (k, v, ts)


async def test_statistics_report_batch_size_and_compression_rate(broker, topic):
    await create(broker.bootstrap, topic, partitions=1)
    async with Producer(broker.bootstrap, {"compression.type": "lz4", "linger.ms": 50}) as p:
        for i in range(200):
            await p.send(topic, b"the same words again and again %d " % (i % 3) * 4, partition=0)
        await p.flush()
        stats = p.statistics()
    assert stats.batches_delivered >= 1
    assert stats.records_per_batch_avg == 200 / stats.batches_delivered
    assert 61 < stats.batch_size_avg <= stats.batch_size_max  # 61: the batch header
    assert 0 < stats.compression_rate_avg < 0.3  # repetitive text: lz4 shrinks it well


@pytest.mark.parametrize("writer", sorted(WRITERS))
async def test_we_read_what_they_write(broker, topic, writer):
    await create(broker.bootstrap, topic)
    records = sample(60, null_header=writer != "kafka-python")  # it rejects null header values
    await trio.to_thread.run_sync(WRITERS[writer], broker.bootstrap, topic, records)
    async with Consumer(broker.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, p) for p in range(3)])
        got = []
        with trio.move_on_after(15):
            while len(got) < len(records):
                got.extend(await c.poll(0.5))
    assert len(got) == len(records)
    for part in range(3):
        mine = [(r.key, r.value, r.headers, r.timestamp) for r in got if r.partition == part]
        sent = [(m.key, m.value, m.headers, m.timestamp) for m in records if m.partition == part]
        assert mine == sent  # in order, byte-identical
        offsets = [r.offset for r in got if r.partition == part]
        assert offsets == list(range(len(sent)))


async def test_offsets_for_times_and_ends(broker, topic):
    await create(broker.bootstrap, topic, 1)
    async with Producer(broker.bootstrap) as p:
        for i in range(10):
            await p.send(topic, b"x", timestamp_ms=1_000_000 + 10 * i)
    tp = (topic, 0)
    async with Consumer(broker.bootstrap) as c:
        c.assign([tp])
        assert (await c.offsets_for_times({tp: 1_000_035}))[tp] == (4, 1_000_040)
        assert (await c.offsets_for_times({tp: 2_000_000}))[tp] is None
        assert await c.end_offsets([tp]) == {tp: 10}
        c.seek_to_end(tp)
        assert await c.position(tp) == 10


async def test_out_of_range_position_resets_by_auto_offset_reset(broker, topic):
    """Position 500 of a 10-record partition: the broker answers OFFSET_OUT_OF_RANGE and the
    consumer resets as auto.offset.reset says (as Kafka's consumers do)."""
    await create(broker.bootstrap, topic, 1)
    tp = (topic, 0)
    async with Producer(broker.bootstrap) as p:
        for i in range(10):
            await p.send(topic, b"r%d" % i, partition=0)
    async with Consumer(broker.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        c.seek(tp, 500)
        got = []
        with trio.move_on_after(30):
            while len(got) < 10:
                got.extend(await c.poll(0.5))
    assert [(r.offset, r.value) for r in got] == [(i, b"r%d" % i) for i in range(10)]

    async with Consumer(broker.bootstrap, {"auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        c.seek(tp, 500)
        with trio.move_on_after(30):
            while await c.position(tp) == 500:  # until the out-of-range answer came back
                assert await c.poll(0.2) == []
        assert await c.position(tp) == 10
        async with Producer(broker.bootstrap) as p:
            await p.send(topic, b"after", partition=0)
        got = []
        with trio.move_on_after(30):
            while not got:
                got = await c.poll(0.5)
        assert [(r.offset, r.value) for r in got] == [(10, b"after")]

    async with Consumer(broker.bootstrap, {"auto.offset.reset": "none"}) as c:
        c.assign([tp])
        c.seek(tp, 500)
        with trio.fail_after(30), pytest.raises(errors.OffsetOutOfRangeError, match="500"):
            while True:
                await c.poll(0.5)
        # the application's seek is the way out (Kafka's consumer works the same way); the
        # partition was never paused in the application's eyes
        assert c.paused() == set()
        c.seek(tp, 8)
        got = []
        with trio.move_on_after(30):
            while len(got) < 3:
                got.extend(await c.poll(0.5))
        assert [r.offset for r in got] == [8, 9, 10]


async def test_admin_topics_configs_partitions(broker, topic):
    async with Admin(broker.bootstrap) as admin:
        assert await admin.create_topics({topic: 2}, configs={"retention.ms": "3600000"}) == {topic: None}
        again = await admin.create_topics({topic: 2})
        assert isinstance(again[topic], errors.TopicAlreadyExistsError)
        assert topic in await admin.list_topics()
        desc = (await admin.describe_topics([topic]))[topic]
        assert [p.partition for p in desc.partitions] == [0, 1]
        missing = (await admin.describe_topics([topic + "-missing"]))[topic + "-missing"]
        assert isinstance(missing, errors.UnknownTopicOrPartitionError)
        assert topic + "-missing" not in await admin.list_topics()  # describing creates nothing
        configs = (await admin.describe_configs([topic]))[topic]
        assert configs["retention.ms"].value == "3600000"
        assert await admin.create_partitions({topic: 4}) == {topic: None}
        assert len((await admin.describe_topics([topic]))[topic].partitions) == 4
        assert await admin.delete_topics([topic]) == {topic: None}
        assert topic not in await admin.list_topics()



async def test_admin_ensure_topics_creates_the_missing_ones_and_raises_other_errors(broker, topic):
    async with Admin(broker.bootstrap) as admin:
        assert await admin.ensure_topics({topic: 2}, configs={"retention.ms": "3600000"})
        # an existing topic is left as it is (2 partitions, not 5); the new one is made
        assert await admin.ensure_topics({topic: 5, topic + "-b": 1})
        described = await admin.describe_topics([topic, topic + "-b"])
        assert [len(described[t].partitions) for t in (topic, topic + "-b")] == [2, 1]
        with pytest.raises(errors.for_code(ErrorCode.invalid_topic_exception)):
            await admin.ensure_topics({"no spaces allowed": 1}, or_auto_create=True)


async def test_admin_ensure_topics_leaves_them_to_a_cluster_without_create_topics(mock_cluster,
                                                                                  topic):
    """librdkafka's mock cluster has no CreateTopics: or_auto_create says so (False), and
    without it the error is raised."""
    async with Admin(mock_cluster.bootstrap) as admin:
        assert await admin.ensure_topics({topic: 1}, or_auto_create=True) is False
        with pytest.raises(errors.UnsupportedVersionError):
            await admin.ensure_topics({topic: 1})

async def test_admin_groups(broker, topic):
    await create(broker.bootstrap, topic, 2)
    async with Producer(broker.bootstrap) as p:
        for i in range(6):
            await p.send(topic, b"v", partition=i % 2)
    group = f"admin-{topic}"
    async with Admin(broker.bootstrap) as admin:
        async with Consumer(broker.bootstrap, {
            "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
        }) as c:
            c.subscribe([topic])
            got = []
            with trio.move_on_after(15):
                while len(got) < 6:
                    got.extend(await c.poll(0.5))
            await c.commit()
            assert (group, "consumer") in await admin.list_groups()
            desc = (await admin.describe_groups([group]))[group]
            assert desc.state == "Stable" and desc.protocol == "range"
            assert {tp for m in desc.members for tp in m.assignment} == {(topic, 0), (topic, 1)}
        assert await admin.list_group_offsets(group) == {(topic, 0): 3, (topic, 1): 3}
        assert await admin.delete_groups([group]) == {group: None}


async def test_group_of_ours_and_a_confluent_consumer(broker, topic):
    """Two of our consumers and one confluent-kafka consumer in one group share the topic."""
    import threading
    import time

    confluent_kafka = pytest.importorskip("confluent_kafka")
    await create(broker.bootstrap, topic, 6)
    async with Producer(broker.bootstrap, {"partitioner": "round_robin"}) as p:
        for i in range(600):
            await p.send(topic, b"%d" % i)
    group = f"mixed-{topic}"
    theirs: list = []
    their_assignment: list = []
    stop = threading.Event()

    def confluent_member():
        c = confluent_kafka.Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group, "log_level": 3,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
        })
        c.subscribe([topic], on_assign=lambda _c, ps: their_assignment.append(
            {p.partition for p in ps}))
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    theirs.append((m.partition(), m.offset()))
        finally:
            c.close()

    ours: dict[str, list] = {"a": [], "b": []}
    our_assignment: dict[str, set] = {}

    async def member(name):
        async with Consumer(broker.bootstrap, {"group.id": group, "auto.offset.reset": "earliest"}) as c:
            c.subscribe([topic])
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:
                ours[name].extend((r.partition, r.offset) for r in await c.poll(0.3))
                everything = set(theirs) | set(ours["a"]) | set(ours["b"])
                if len(everything) >= 600 and c.assignment():
                    break
            our_assignment[name] = {p for _, p in c.assignment()}
            await trio.sleep(0.5)  # stay in the group until the others are done too

    async with trio.open_nursery() as n:
        n.start_soon(trio.to_thread.run_sync, confluent_member)
        try:
            async with trio.open_nursery() as members:
                members.start_soon(member, "a")
                members.start_soon(member, "b")
        finally:
            stop.set()
    everything = set(theirs) | set(ours["a"]) | set(ours["b"])
    assert len(everything) == 600
    final = [our_assignment["a"], our_assignment["b"], their_assignment[-1]]
    assert all(final) and set().union(*final) == set(range(6))
    assert sum(len(s) for s in final) == 6  # disjoint: range gives 2/2/2


async def test_cooperative_sticky_revokes_only_what_moves(broker, topic):
    await create(broker.bootstrap, topic, 4)
    group = f"coop-{topic}"
    config = {"group.id": group, "partition.assignment.strategy": "cooperative-sticky",
              "heartbeat.interval.ms": 300}
    events: list = []
    first_settled = trio.Event()
    done = trio.Event()

    async def member(name, ready=None):
        async with Consumer(
            broker.bootstrap, config,
            on_assigned=lambda ps: events.append((name, "assigned", sorted(ps))),
            on_revoked=lambda ps: events.append((name, "revoked", sorted(ps))),
        ) as c:
            c.subscribe([topic])
            while not done.is_set():
                await c.poll(0.2)
                if ready is not None and len(c.assignment()) == 4:
                    ready.set()
                    ready = None
            return c.assignment()

    results = {}

    async def run(name, ready=None):
        results[name] = await member(name, ready)

    async with trio.open_nursery() as n:
        n.start_soon(run, "a", first_settled)
        await first_settled.wait()
        n.start_soon(run, "b")
        with trio.move_on_after(20):
            while not any(e[0] == "b" and e[1] == "assigned" and e[2] for e in events):
                await trio.sleep(0.1)
        done.set()
    a_events = [e for e in events if e[0] == "a"]
    assert a_events[0] == ("a", "assigned", [(topic, p) for p in range(4)])
    revoked = [e[2] for e in a_events if e[1] == "revoked"]
    b_got = [e[2] for e in events if e[0] == "b" and e[1] == "assigned" and e[2]]
    assert revoked and b_got
    assert len(revoked[0]) == 2  # only the partitions that moved, not all four
    assert sorted(revoked[0]) == sorted(b_got[0])


async def test_subscribe_by_pattern_follows_new_topics(broker, topic):
    await create(broker.bootstrap, topic + "-a", 1)
    await create(broker.bootstrap, "other-" + topic, 1)
    async with Producer(broker.bootstrap) as p:
        await p.send(topic + "-a", b"a")
        await p.send("other-" + topic, b"not me")
    config = {"group.id": f"pattern-{topic}", "auto.offset.reset": "earliest",
              "metadata.max.age.ms": 500}
    async with Consumer(broker.bootstrap, config) as c:
        c.subscribe(pattern=topic.replace("-", "\\-") + "-.*")
        got = []
        with trio.move_on_after(15):
            while not got:
                got.extend(await c.poll(0.5))
        assert [r.value for r in got] == [b"a"]
        await create(broker.bootstrap, topic + "-b", 1)
        async with Producer(broker.bootstrap) as p:
            await p.send(topic + "-b", b"b")
        with trio.move_on_after(20):
            while len(got) < 2:
                got.extend(await c.poll(0.5))
        assert sorted(r.value for r in got) == [b"a", b"b"]
        assert c.subscription() == (topic + "-a", topic + "-b")


async def test_a_consumer_that_stops_polling_leaves_its_group(broker, topic):
    await create(broker.bootstrap, topic, 2)
    group = f"slow-{topic}"
    config = {"group.id": group, "max.poll.interval.ms": 1500, "heartbeat.interval.ms": 200,
              "session.timeout.ms": 30000}
    async with Consumer(broker.bootstrap, config) as slow:
        slow.subscribe([topic])
        with trio.move_on_after(15):
            while not slow.assignment():
                await slow.poll(0.2)
        assert len(slow.assignment()) == 2
        await trio.sleep(2.5)  # busy elsewhere: no poll for longer than max.poll.interval.ms
        async with Admin(broker.bootstrap) as admin:
            desc = (await admin.describe_groups([group]))[group]
        assert desc.members == ()  # it left (session.timeout.ms alone would take 30 s)
        with trio.move_on_after(15):  # polling again rejoins
            while len(slow.assignment()) < 2:
                await slow.poll(0.2)
        assert len(slow.assignment()) == 2


async def test_record_reader_reads_scattered_offsets_from_big_batches(broker, topic):
    """RecordReader: the records at the asked offsets (from batches of hundreds of records,
    lz4 and not, nearby offsets sharing a Fetch), nothing for offsets past the end."""
    from databus.client import RecordReader, SyncRecordReader

    await create(broker.bootstrap, topic, 2)
    for codec in ("none", "lz4"):
        async with Producer(broker.bootstrap, {"compression.type": codec, "linger.ms": 50,
                                               "batch.size": 200_000}) as p:
            for i in range(1000):
                await p.send(topic, b"%s-%d" % (codec.encode(), i) * 20, key=b"%d" % i,
                             partition=i % 2)
    # partition i % 2 holds "none" records at offsets 0..499, then "lz4" ones at 500..999
    wanted = [(topic, 0, 0), (topic, 0, 1), (topic, 0, 7), (topic, 0, 600), (topic, 1, 499),
              (topic, 1, 500), (topic, 1, 999), (topic, 0, 5000), (topic, 1, 1000)]
    async with RecordReader(broker.bootstrap) as reader:
        got = await reader.read(wanted)
        again = await reader.read(wanted[:2])
    assert sorted(got) == sorted(wanted[:7])
    for (t, partition, offset), record in got.items():
        codec, i = ("none", offset) if offset < 500 else ("lz4", offset - 500)
        i = 2 * i + partition
        assert (record.topic, record.partition, record.offset) == (t, partition, offset)
        assert (record.key, record.value) == (b"%d" % i, b"%s-%d" % (codec.encode(), i) * 20)
    assert again == {loc: got[loc] for loc in wanted[:2]}

    def read_blocking():
        with SyncRecordReader(broker.bootstrap) as sync_reader:
            return sync_reader.read(wanted)

    assert await trio.to_thread.run_sync(read_blocking) == got


async def test_a_parked_long_poll_does_not_hold_back_another_partitions_records(broker, topic):
    """Partition 0 holds 12 batches, fetched one per Fetch (max.partition.fetch.bytes 1);
    partition 1 is empty, so a Fetch carrying only it parks at the broker for
    fetch.max.wait.ms (here 5 minutes).  One Fetch in flight per broker: such a Fetch, sent
    while partition 0's batch was being handed out, would hold partition 0's next batch
    behind it.  Every poll must instead hand out partition 0's next record from the response
    that carried it (the poll's timeout, 30 s, is only a limit for the failure to show)."""
    await create(broker.bootstrap, topic, partitions=2)
    async with Producer(broker.bootstrap, {"linger.ms": 0}) as p:
        for i in range(12):
            await p.send(topic, b"v%d" % i, partition=0)
            await p.flush()  # one batch per record
    config = {"auto.offset.reset": "earliest", "fetch.max.wait.ms": 300_000,
              "max.partition.fetch.bytes": 1, "max.poll.records": 1}
    async with Consumer(broker.bootstrap, config) as c:
        c.assign([(topic, 0), (topic, 1)])
        for i in range(12):
            got = await c.poll(30.0)
            assert [(r.partition, r.offset, r.value) for r in got] == [(0, i, b"v%d" % i)], (
                f"record {i} of partition 0 not handed out: {got}")


async def test_getmany_columns_hands_out_what_poll_does(broker, topic):
    """The same records, read as columns (then as records again after a seek: the switch
    refetches) from a real broker; the Arrow table has one row per record."""
    from databus.client import arrow_table

    await create(broker.bootstrap, topic, partitions=2)
    messages = sample(40, partitions=2)
    async with Producer(broker.bootstrap, {"compression.type": "zstd"}) as p:
        for m in messages:
            await p.send(topic, m.value, key=m.key, headers=m.headers, timestamp_ms=m.timestamp,
                         partition=m.partition)
    async with Consumer(broker.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0), (topic, 1)])
        rows, tables = [], 0
        with trio.fail_after(30):
            while len(rows) < len(messages):
                got = await c.getmany_columns(timeout=5.0)
                for (_, partition), columns in got.items():
                    rows += [(partition, *row) for row in columns.rows()]
                tables += arrow_table(got.values()).num_rows
        c.seek_to_beginning()
        records = []
        with trio.fail_after(30):
            while len(records) < len(messages):
                records += await c.poll(5.0)
    assert tables == len(rows) == len(messages)
    assert sorted(rows) == sorted(
        (r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in records)
    assert sorted((r[0], r[2], r[3], r[4], r[5]) for r in rows) == sorted(
        (m.partition, m.timestamp, m.key, m.value, m.headers) for m in messages)
