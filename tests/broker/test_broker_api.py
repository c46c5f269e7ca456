"""The Broker object in-process (what the group coordinator and handlers build on):
append / append_durably, group commit, periodic flush, clean close."""

from __future__ import annotations

import trio

from databus.broker.broker import Broker
from databus.broker.config import BrokerConfig
from databus.protocol.records import build_batch


def a_batch(tag: bytes = b"v") -> bytes:
    return build_batch([(None, tag, (), 1_700_000_000_000)])


async def start(nursery, tmp_path, **settings) -> Broker:
    broker = Broker(BrokerConfig(log_dir=str(tmp_path), **settings))
    await nursery.start(broker.run)
    return broker


async def test_append_durably_returns_after_the_fsync(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        broker.create_topic("durable", 1)
        plog = broker.get_log("durable", 0)
        info = broker.append("durable", 0, a_batch())
        assert plog.recovery_point <= info.last_offset  # appended, not yet on disk
        info = await broker.append_durably("durable", 0, a_batch())
        assert (info.first_offset, plog.recovery_point) == (1, 2)
        nursery.cancel_scope.cancel()


async def test_concurrent_durable_appends_share_fsyncs(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        for p in range(4):
            broker.create_topic(f"gc{p}", 1)
        rounds_before = broker.group_commit.rounds
        offsets = []

        async def writer(i: int) -> None:
            info = await broker.append_durably(f"gc{i % 4}", 0, a_batch(b"%d" % i))
            offsets.append(info.last_offset)

        async with trio.open_nursery() as writers:
            for i in range(60):
                writers.start_soon(writer, i)
        assert sorted(offsets) == sorted(o for o in range(15) for _ in range(4))
        assert all(broker.get_log(f"gc{p}", 0).recovery_point == 15 for p in range(4))
        # one fsync round per request would be 60; group commit needs a handful
        assert broker.group_commit.rounds - rounds_before < 10
        nursery.cancel_scope.cancel()


async def test_flush_interval_messages_flushes_without_acks_all(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, log_flush_interval_messages=3)
        broker.create_topic("periodic", 1)
        plog = broker.get_log("periodic", 0)
        for _ in range(3):
            broker.append("periodic", 0, a_batch())
        with trio.fail_after(30):
            while plog.recovery_point < 3:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


async def test_close_writes_the_clean_shutdown_marker_and_reopens(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path)
        broker.create_topic("kept", 2)
        broker.append("kept", 1, a_batch(b"x"))
        cluster_id = broker.cluster_id
        nursery.cancel_scope.cancel()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    async with trio.open_nursery() as nursery:
        again = await start(nursery, tmp_path)
        assert again.cluster_id == cluster_id  # meta.properties keeps it
        assert again.topic("kept").partitions == 2
        assert again.get_log("kept", 1).log_end_offset == 1
        nursery.cancel_scope.cancel()


async def test_recovery_points_are_checkpointed_periodically(tmp_path):
    async with trio.open_nursery() as nursery:
        broker = await start(nursery, tmp_path, log_flush_offset_checkpoint_interval_ms=50)
        broker.create_topic("ckpt", 1)
        await broker.append_durably("ckpt", 0, a_batch())
        checkpoint = tmp_path / "recovery-point-offset-checkpoint"
        with trio.fail_after(30):
            while "ckpt 0 1" not in (checkpoint.read_text() if checkpoint.exists() else ""):
                await trio.sleep(0.02)
        nursery.cancel_scope.cancel()


def test_one_produce_to_four_partitions_is_one_fsync_round(tmp_path):
    """acks=all to several partitions in one request: every partition's fsync is asked for
    at once, so one round covers them all (one partition after another took a round each)."""
    from .test_api_versions import create_topic, make, req
    from .test_assembly import brokers_in_a_thread
    from .test_pipelining import MS
    from .wire import WireClient

    mod = req(0, 8)
    with brokers_in_a_thread(tmp_path, 1) as ([broker], [bootstrap]), \
            WireClient(bootstrap) as client:
        create_topic(client, "four", partitions=4)
        rounds_before = broker.group_commit.rounds
        response = client.request(make(0, 8, acks=-1, timeout=5000 * MS, transactional_id=None,
                                       topic_data=(build_topic_data(mod, "four", range(4)),)))
        codes = [p.error_code for p in response.responses[0].partition_responses]
        assert codes == [0, 0, 0, 0]
        assert [broker.get_log("four", p).recovery_point for p in range(4)] == [1, 1, 1, 1]
        assert broker.group_commit.rounds - rounds_before == 1


def build_topic_data(mod, topic: str, partitions):
    from databus.protocol.entities import build

    return build(mod.TopicProduceData, name=topic, partition_data=tuple(
        build(mod.PartitionProduceData, index=p, records=a_batch(b"p%d" % p))
        for p in partitions))
