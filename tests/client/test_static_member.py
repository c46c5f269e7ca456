"""Our consumer as a static member (``group.instance.id``, KIP-345) against our broker: closed
and restarted within ``session.timeout.ms`` it gets its partition straight back, with no
rebalance: the other member is never revoked and the group's generation does not move.
(Our client sends the instance id in JoinGroup, SyncGroup, Heartbeat, LeaveGroup and
OffsetCommit; a static member does not leave on close, as in Kafka.)"""

from __future__ import annotations

import trio

from databus.client.admin import Admin
from databus.client.consumer import Consumer
from databus.client.producer import Producer
from tests.helpers.broker import BrokerProcess

TOPIC, GROUP = "static-ours", "static-ours-group"


def config(instance: str) -> dict:
    return {"group.id": GROUP, "group.instance.id": instance, "session.timeout.ms": 30000,
            "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}


async def poll_until(consumers, done, what: str) -> list:
    got = []
    with trio.fail_after(30):  # a bound on a hang, not a timing assertion
        while not done():
            for consumer in consumers:
                got += await consumer.poll(0.05)
    assert done(), what
    return got


async def test_a_restarted_static_member_keeps_its_partition_without_rebalance(tmp_path):
    with BrokerProcess(tmp_path, options={"group.initial.rebalance.delay.ms": 0}) as broker:
        async with Admin(broker.bootstrap) as admin:
            assert await admin.create_topics({TOPIC: 2}) == {TOPIC: None}
        async with Producer(broker.bootstrap) as producer:
            for i in range(4):
                await producer.send(TOPIC, b"%d" % i, partition=i % 2)
        revoked_b: list = []
        async with Consumer(broker.bootstrap, config("b"),
                            on_revoked=revoked_b.extend) as b:
            b.subscribe([TOPIC])
            async with Consumer(broker.bootstrap, config("a")) as a:  # closed: no LeaveGroup
                a.subscribe([TOPIC])
                await poll_until([a, b], lambda: len(a.assignment()) == len(b.assignment()) == 1,
                                 "one partition each")
                mine = a.assignment()
                generation = b._group.generation_id
                # what the first join handed b and then took back is no part of the restart
                # (on a busy machine b may join alone first and hold both partitions)
                revoked_b.clear()
            async with Consumer(broker.bootstrap, config("a")) as again:
                again.subscribe([TOPIC])
                await poll_until([again, b], lambda: again.assignment() == mine,
                                 "the restarted member's partition")
                assert again._group.generation_id == generation
                assert b._group.generation_id == generation
                assert revoked_b == []
