"""Group reports (protocol version 2) against the real built-in broker: every message of a
frame is answered exactly once, at the offset where a Kafka consumer finds it, with its
timestamp — across partitions, across batch boundaries, with and without own timestamps."""

from __future__ import annotations

import os

import confluent_kafka
import trio

from databus.client.partitioners import murmur2_partition
from databus.protocol import sidecar_wire as wire

from .harness import RawConnection, broker_process, running_sidecar, sidecar_config

N = 3000
PARTITIONS = 4


def read_back(bootstrap: str, topic: str, expected: int) -> dict:
    """(partition, offset) -> (key, value, timestamp) as confluent-kafka reads them."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"verify-{topic}-{os.getpid()}",
        "enable.auto.commit": False, "log_level": 0,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out = {}
        for _ in range(200):
            for msg in consumer.consume(10000, timeout=0.2):
                if not msg.error():
                    out[(msg.partition(), msg.offset())] = (
                        msg.key(), msg.value(), msg.timestamp()[1]
                    )
            if len(out) >= expected:
                break
        return out
    finally:
        consumer.close()


def message(i: int) -> list:
    key = b"k%d" % (i % 40)
    if i % 3 == 0:  # every third carries its own timestamp
        return wire.message_array(i, "s", b"v%d" % i, key, None, None, 1_600_000_000_000 + i)
    return wire.message_array(i, "s", b"v%d" % i, key)


async def test_each_message_once_at_its_offset_with_its_timestamp(tmp_path, sock_dir):
    async with broker_process(str(tmp_path / "data"), **{"num.partitions": PARTITIONS}) as (
        bootstrap, _process,
    ):
        # Small batches: a frame's group for one partition spans several batches.
        config = sidecar_config(
            sock_dir, streams={"s": {"topic": "grouped"}},
            producer={"batch.size": 2048, "linger.ms": 20},
        )
        async with running_sidecar(config, embedded_bootstrap=bootstrap) as sidecar:

            def app(path):
                conn = RawConnection(path)
                try:
                    conn.send(wire.hello("group-test"))
                    assert conn.receive()["version"] == wire.PROTOCOL_VERSION
                    for first in range(0, N, 1000):
                        conn.send(wire.produce([message(i) for i in range(first, first + 1000)]))
                    conn.send(wire.flush(N + 1))
                    items = []
                    while True:
                        frame = conn.receive()
                        if frame["type"] == "flushed":
                            return items
                        assert frame["type"] == "reports", frame
                        items += frame["reports"]
                finally:
                    conn.close()

            items = await trio.to_thread.run_sync(app, sidecar.addresses.socket)
        stored = await trio.to_thread.run_sync(read_back, bootstrap, "grouped", N)

    groups = [item for item in items if type(item[0]) is list]
    assert len(groups) < N / 10  # answered a batch at a time, not a message at a time
    reports = [r for item in items for r in wire.parse_reports(item)]
    assert sorted(r.id for r in reports) == list(range(N))  # each exactly once
    assert len(stored) == N
    for r in reports:
        key = b"k%d" % (r.id % 40)
        assert r.code == 0 and r.topic == "grouped"
        assert r.partition == murmur2_partition(key, PARTITIONS)  # Java's placement
        own = 1_600_000_000_000 + r.id if r.id % 3 == 0 else None
        stored_key, stored_value, stored_ts = stored[(r.partition, r.offset)]
        assert (stored_key, stored_value) == (key, b"v%d" % r.id)
        assert r.timestamp == stored_ts
        if own is not None:
            assert r.timestamp == own
    # Per key, offsets grow with the id: the frame's order is kept inside each partition.
    by_key: dict[bytes, list] = {}
    for r in sorted(reports, key=lambda r: r.id):
        by_key.setdefault(r.id % 40, []).append(r.offset)
    assert all(offsets == sorted(offsets) for offsets in by_key.values())
