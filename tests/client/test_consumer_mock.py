"""Our consumer against librdkafka's mock cluster: manual mode, seeks, groups, mixed groups."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from databus.client import ConsumerStatistics, TopicPartition, errors
from databus.client.consumer import Consumer
from databus.client.producer import Producer
from tests.broker.clients import Msg, confluent_produce

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


async def drain(consumer: Consumer, count: int, timeout: float = 15.0):
    out = []
    with trio.move_on_after(timeout):
        while len(out) < count:
            out.extend(await consumer.poll(0.5))
    return out


async def produce(bootstrap, topic, n, **config):
    async with Producer(bootstrap, config) as p:
        futures = [await p.send(topic, b"v%d" % i, key=b"k%d" % i, timestamp_ms=1_600_000_000_000 + i)
                   for i in range(n)]
    return [f.result() for f in futures]


@pytest.mark.parametrize("codec", CODECS)
async def test_reads_what_confluent_wrote_with_every_codec(mock_cluster, topic, codec):
    records = [
        Msg(b"k%d" % i if i % 4 else None, b"value %d" % i if i != 3 else None,
            (("h", b"%d" % i), ("n", None)) if i % 2 else (), partition=i % 4,
            timestamp=1_650_000_000_000 + i)
        for i in range(200)
    ]
    reports = await trio.to_thread.run_sync(
        lambda: confluent_produce(mock_cluster.bootstrap, topic, records, **{"compression.type": codec})
    )
    async with Consumer(mock_cluster.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, p) for p in range(4)])
        got = await drain(c, len(records))
    assert len(got) == len(records)
    by_key = {(r.partition, r.offset): r for r in got}
    for (part, off), m in zip(reports, records):
        r = by_key[(part, off)]
        assert (r.key, r.value, r.headers, r.timestamp, r.timestamp_type) == (
            m.key, m.value, m.headers, m.timestamp, 0)


async def test_manual_assignment_seek_and_offsets(mock_cluster, topic):
    reports = await produce(mock_cluster.bootstrap, topic, 40)
    p0 = sorted(r.offset for r in reports if r.partition == 0)
    assert len(p0) >= 3
    tp = TopicPartition(topic, 0)  # the consumer's own (topic, partition) tuples equal it
    async with Consumer(mock_cluster.bootstrap, {"auto.offset.reset": "latest"}) as c:
        c.assign([tp])
        assert c.statistics() == ConsumerStatistics(
            assigned_partitions=1, buffered_records=0, fetches_in_flight=0, member_id=None,
            generation_id=None,
        )
        assert await c.position(tp) == p0[-1] + 1  # latest
        assert await c.poll(0.3) == []
        c.seek_to_beginning(tp)
        got = await drain(c, len(p0))
        assert [r.offset for r in got] == p0
        c.seek(tp, p0[2])
        got = await drain(c, len(p0) - 2)
        assert [r.offset for r in got] == p0[2:]  # records before the seek offset are skipped
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: p0[-1] + 1}
        c.seek_to_end(tp)
        assert await c.position(tp) == p0[-1] + 1


async def test_pause_and_resume(mock_cluster, topic):
    await produce(mock_cluster.bootstrap, topic, 40, partitioner="round_robin")
    async with Consumer(mock_cluster.bootstrap, {"auto.offset.reset": "earliest"}) as c:
        c.assign([(topic, 0), (topic, 1)])
        c.pause((topic, 0))
        got = await drain(c, 10, timeout=5)
        assert {r.partition for r in got} == {1} and len(got) == 10
        assert c.paused() == {(topic, 0)}
        assert await c.poll(0.3) == []  # partition 0 stays paused
        c.resume((topic, 0))
        got = await drain(c, 10, timeout=5)
        assert {r.partition for r in got} == {0}


async def test_group_of_our_consumers_shares_and_commits(mock_cluster, topic):
    await produce(mock_cluster.bootstrap, topic, 400)
    group = f"g-{topic}"
    config = {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "heartbeat.interval.ms": 500, "session.timeout.ms": 6000}
    seen: dict[str, list] = {"a": [], "b": []}
    assigned: dict[str, list] = {"a": [], "b": []}
    committed = []
    both_committed = trio.Event()

    async def member(name):
        async with Consumer(mock_cluster.bootstrap, config,
                            on_assigned=lambda ps: assigned[name].append(ps)) as c:
            c.subscribe([topic])
            with trio.move_on_after(20):
                while len(seen["a"]) + len(seen["b"]) < 400:
                    seen[name].extend(await c.poll(0.3))
            # Commit while both are members: the first to leave starts a rebalance, and a
            # commit during a rebalance fails (REBALANCE_IN_PROGRESS), as in Kafka.
            await c.commit()
            committed.append(name)
            if len(committed) == 2:
                both_committed.set()
            await both_committed.wait()

    async with trio.open_nursery() as n:
        n.start_soon(member, "a")
        n.start_soon(member, "b")
    offsets = [(r.partition, r.offset) for r in seen["a"] + seen["b"]]
    assert len(offsets) == 400 and len(set(offsets)) == 400
    final = {name: set(ps[-1]) for name, ps in assigned.items() if ps}
    if len(final) == 2:
        assert not (final["a"] & final["b"])
    # a new member of the group starts from the committed offsets: nothing left to read
    await produce(mock_cluster.bootstrap, topic, 4, partitioner="round_robin")
    async with Consumer(mock_cluster.bootstrap, config) as c:
        c.subscribe([topic])
        got = await drain(c, 4, timeout=15)
        assert len(got) == 4 and {r.value for r in got} == {b"v0", b"v1", b"v2", b"v3"}
        committed = {p: await c.committed((topic, p)) for p in range(4)}
        assert all(off is not None and off > 0 for off in committed.values())


async def test_mixed_group_with_confluent_consumer(mock_cluster, topic):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    await produce(mock_cluster.bootstrap, topic, 400)
    group = f"mixed-{topic}"
    theirs: list = []
    stop = threading.Event()
    their_assignment: list = []

    def confluent_member():
        c = confluent_kafka.Consumer({
            "bootstrap.servers": mock_cluster.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
            "heartbeat.interval.ms": 500, "session.timeout.ms": 6000, "log_level": 3,
        })
        c.subscribe([topic], on_assign=lambda cons, ps: their_assignment.append(
            sorted(p.partition for p in ps)))
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and not m.error():
                    theirs.append((m.partition(), m.offset()))
        finally:
            c.close()

    ours: list = []
    async with trio.open_nursery() as n:
        n.start_soon(trio.to_thread.run_sync, confluent_member)
        try:
            async with Consumer(mock_cluster.bootstrap, {
                "group.id": group, "auto.offset.reset": "earliest",
                "heartbeat.interval.ms": 500, "session.timeout.ms": 6000,
            }) as c:
                c.subscribe([topic])

                def settled() -> bool:
                    # both members hold partitions of one generation: disjoint, all four
                    mine = {p for _, p in c.assignment()}
                    theirs_now = set(their_assignment[-1]) if their_assignment else set()
                    return bool(mine and theirs_now and not (mine & theirs_now)
                                and mine | theirs_now == {0, 1, 2, 3})

                # Go on until every record is read AND the group has settled: our member may
                # read all 400 before the other one joins, or stop in mid-rebalance.
                deadline = time.monotonic() + 25
                while ((len(set(ours) | set(theirs)) < 400 or not settled())
                       and time.monotonic() < deadline):
                    ours.extend((r.partition, r.offset) for r in await c.poll(0.3))
                our_partitions = {p for _, p in c.assignment()}
        finally:
            stop.set()
    assert len(set(ours) | set(theirs)) == 400
    assert their_assignment and our_partitions  # both members got partitions
    assert not (set(their_assignment[-1]) & our_partitions)
    assert our_partitions | set(their_assignment[-1]) == {0, 1, 2, 3}


async def test_subscribe_without_group_is_a_clear_error(mock_cluster):
    async with Consumer(mock_cluster.bootstrap) as c:
        with pytest.raises(errors.ConfigError, match="group.id"):
            c.subscribe(["x"])
    with pytest.raises(errors.ConsumerClosedError):
        await c.poll(0)


async def test_auto_offset_reset_none_raises(mock_cluster, topic):
    await produce(mock_cluster.bootstrap, topic, 4)
    async with Consumer(mock_cluster.bootstrap, {"group.id": f"none-{topic}",
                                                 "auto.offset.reset": "none"}) as c:
        c.assign([(topic, 0)])
        with pytest.raises(errors.NoOffsetForPartitionError, match="auto.offset.reset=none"):
            await c.poll(1)
