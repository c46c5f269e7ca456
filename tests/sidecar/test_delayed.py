"""Delayed messages end to end: apps send with ``delay=`` through a real sidecar, the delay
service (a consumer group over the delay topics) delivers each message once, never before its
time; a cancelled one never arrives; when a delay-service member dies without a word (no
final commit, no LeaveGroup), another member delivers what it held.

A built-in broker subprocess is the cluster; the consumer that checks is confluent-kafka.
Small numbers and delays of a few seconds here; `databus bench delay` runs the big ones.
"""

from __future__ import annotations

import random

import pytest
import trio

from databus import Client
from databus.sidecar.delay.service import DelayService
from tests.helpers.broker import BrokerProcess
from tests.helpers.revoked import NotesRevoked

from .harness import consume_all, running_sidecar, short_tmpdir, sidecar_config

BROKER = {"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 500}
FAST_GROUP = {"session.timeout.ms": 1500, "heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("delay"), BROKER) as running:
        yield running


def send_delayed(path: str, stream: str, count: int, max_delay: float) -> dict:
    """``count`` delayed messages to ``stream`` (value -> future), and one sent then
    cancelled."""
    rng = random.Random(18)
    with Client(path) as client:
        client.send(stream, b"plain").result(10)  # the topic exists before anyone reads
        futures = {b"m%d" % i: client.send(stream, b"m%d" % i, key=b"k%d" % (i % 7),
                                           delay=rng.uniform(0.3, max_delay))
                   for i in range(count)}
        doomed = client.send(stream, b"cancelled", delay=max_delay)
        client.flush(30)
        for future in futures.values():
            assert future.result().topic.startswith("databus-delay-")  # where it waits
        client.cancel_delayed(stream, doomed.delay_id).result(10)
    return futures


def check(got, sent: dict) -> None:
    values = [value for _p, _o, _k, value, _h in got if value != b"plain"]
    assert b"cancelled" not in values
    assert sorted(values) == sorted(sent), "each delayed message arrives once"
    for _p, _o, _k, value, headers in got:
        if value == b"plain":
            continue
        due = int(dict(headers)["databus-deliver-at"])
        # delivered (written) no earlier than its time: the record's timestamp is when the
        # delay service wrote it
        assert _timestamps[value] >= due, (value, due, _timestamps[value])


_timestamps: dict[bytes, int] = {}


def consume(bootstrap: str, topic: str, count: int):
    import confluent_kafka

    got = consume_all(bootstrap, topic, count, timeout=30)
    # consume_all drops timestamps; read them again (same order) for the "never early" check
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "ts",
                                         "auto.offset.reset": "earliest", "log_level": 0})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        while len(_timestamps) < count - 1:
            for msg in consumer.consume(1000, 0.5):
                if not msg.error() and msg.value() != b"plain":
                    _timestamps[msg.value()] = msg.timestamp()[1]
    finally:
        consumer.close()
    return got


async def test_delayed_messages_arrive_once_not_early_and_cancel_works(broker):
    _timestamps.clear()
    bootstrap = broker.bootstrap
    with short_tmpdir() as tmp:
        config = sidecar_config(tmp, clusters={"main": {"bootstrap.servers": bootstrap}},
                                streams={"orders": {}},
                                delay={"enabled": True, "consumer": FAST_GROUP})
        async with running_sidecar(config) as sidecar:
            sent = await trio.to_thread.run_sync(
                send_delayed, sidecar.addresses.socket, "orders", 150, 2.0)
            got = await trio.to_thread.run_sync(consume, bootstrap, "orders", len(sent) + 1)
            check(got, sent)
            (service,) = sidecar.delay_services
            assert service.delivered == len(sent)


async def test_a_dead_members_delayed_messages_move_to_another(broker):
    _timestamps.clear()
    bootstrap = broker.bootstrap
    with short_tmpdir() as tmp:
        # the sidecar only routes; the delay service runs as two members of one group (the
        # same as the first test's: its committed offsets leave nothing of it to redo)
        config = sidecar_config(tmp, clusters={"main": {"bootstrap.servers": bootstrap}},
                                streams={"refunds": {}})
        survivor = DelayService("main", bootstrap, group_id="databus-delay",
                                consumer=FAST_GROUP)
        doomed = DelayService("main", bootstrap, group_id="databus-delay",
                                consumer=FAST_GROUP)
        async with running_sidecar(config) as sidecar, trio.open_nursery() as nursery:
            with trio.CancelScope() as doomed_scope:
                async with trio.open_nursery() as inner:
                    inner.start_soon(doomed.run)
                    sent = await trio.to_thread.run_sync(
                        send_delayed, sidecar.addresses.socket, "refunds", 100, 2.5)
                    while doomed.forwarded + doomed.delivered == 0:
                        await trio.sleep(0.05)  # it holds the partitions and works
                    doomed_scope.cancel()  # dies: no final commit, no LeaveGroup
            # the dead member's session expires; the survivor gets its partitions and
            # reads from the last commit
            nursery.start_soon(survivor.run)
            await trio.to_thread.run_sync(consume, bootstrap, "refunds", len(sent) + 1)
            assert set(_timestamps) == set(sent), "none lost"
            assert survivor.delivered > 0
            nursery.cancel_scope.cancel()


class Watched(NotesRevoked, DelayService):
    """A member that notes the partitions taken from it."""


async def test_members_share_one_partition_topics_and_keep_theirs_when_one_dies(broker):
    # the level topics have one partition each (the broker's default): the service's
    # cooperative-sticky assignment spreads the topics over the members (range gave every
    # topic's partition 0 to one member), and a member that lives keeps its partitions,
    # and the records it holds, when another dies (eager range revoked everything)
    def holds(*members):
        return [sorted(m.scheduler.partitions) for m in members]

    keeper = Watched("main", broker.bootstrap, group_id="delay-share", consumer=FAST_GROUP)
    doomed = Watched("main", broker.bootstrap, group_id="delay-share", consumer=FAST_GROUP)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keeper.run)
            with trio.CancelScope() as doomed_scope:
                async with trio.open_nursery() as inner:
                    inner.start_soon(doomed.run)
                    while [len(p) for p in holds(keeper, doomed)] != [10, 10]:
                        await trio.sleep(0.05)
                    kept = holds(keeper)[0]
                    keeper.revoked.clear()
                    doomed_scope.cancel()  # dies: no final commit, no LeaveGroup
            while len(keeper.scheduler.partitions) < 20:
                await trio.sleep(0.05)
            assert keeper.revoked == []
            assert set(kept) < set(keeper.scheduler.partitions)
            await keeper.stop()
