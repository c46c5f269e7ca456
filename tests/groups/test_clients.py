"""Consumer groups of real Kafka clients against a real broker process.

Consumers run in their own processes (tests/groups/consumer_proc.py) so that one can be
closed cleanly (LeaveGroup) and another killed with kill -9 (no LeaveGroup, no commit).
They commit after processing, so "nothing lost" means every produced value was reported
by some consumer (at-least-once).
"""

from __future__ import annotations

import contextlib
import time

import confluent_kafka
import pytest

from databus.protocol.errors import ErrorCode
from tests.groups.harness import ConsumerProcess, create_topic, produce
from tests.groups.raw import RawClient, subscription
from tests.helpers.broker import BrokerProcess
from tests.helpers.wait import wait_for

SESSION_MS = 6000  # group.min.session.timeout.ms, Kafka's default floor
BROKER_OPTIONS = {"group.initial.rebalance.delay.ms": 300}


def consumed(consumers) -> set[str]:
    out: set[str] = set()
    for c in consumers:
        out |= c.values()
    return out


def owns_exactly(consumers, partitions: set[int]):
    """Every partition owned by exactly one of ``consumers``, each of them owning some."""
    def check() -> bool:
        assignments = [c.current_assignment() for c in consumers]
        flat = [p for a in assignments for p in a]
        return all(assignments) and sorted(flat) == sorted(partitions)
    return check


def describe_all(consumers):
    return lambda: " | ".join(c.describe() for c in consumers)


def test_three_consumers_on_six_partitions_survive_close_and_kill9(tmp_path):
    topic, group = "six", "trio-group"
    with BrokerProcess(tmp_path, options=BROKER_OPTIONS) as broker, \
            contextlib.ExitStack() as stack:
        create_topic(broker.bootstrap, topic, 6)
        first = [f"a{i}" for i in range(300)]
        produce(broker.bootstrap, topic, first, 6)
        consumers = [
            stack.enter_context(ConsumerProcess("confluent", broker.bootstrap, group, topic,
                                                session_ms=SESSION_MS))
            for _ in range(3)
        ]
        closing, killed, survivor = consumers
        wait_for(owns_exactly(consumers, set(range(6))), "3 members sharing 6 partitions",
                 timeout=60, log=describe_all(consumers))
        wait_for(lambda: consumed(consumers) >= set(first), "the first 300 records", timeout=30,
                 log=describe_all(consumers))

        # A clean close sends LeaveGroup: its partitions move to the others at once (well
        # before the session timeout could have expired the member).
        assert closing.terminate() == 0
        wait_for(owns_exactly([killed, survivor], set(range(6))),
                 "the closed member's partitions to move", timeout=SESSION_MS / 1000 - 1,
                 log=describe_all(consumers))
        second = [f"b{i}" for i in range(300)]
        produce(broker.bootstrap, topic, second, 6)
        wait_for(lambda: consumed(consumers) >= set(first + second), "the second batch", timeout=30,
                 log=describe_all(consumers))

        # kill -9: no LeaveGroup; the coordinator notices after the session timeout.
        killed.kill9()
        third = [f"c{i}" for i in range(300)]
        produce(broker.bootstrap, topic, third, 6)
        wait_for(lambda: survivor.current_assignment() == list(range(6)),
                 "the survivor to own every partition", timeout=40, log=describe_all(consumers))
        wait_for(lambda: consumed(consumers) >= set(first + second + third),
                 "every record, at least once", timeout=30, log=describe_all(consumers))


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_mixed_clients_share_one_group(tmp_path, assignor):
    topic, group = "mixed", f"mixed-{assignor}"
    with BrokerProcess(tmp_path, options=BROKER_OPTIONS) as broker, \
            contextlib.ExitStack() as stack:
        create_topic(broker.bootstrap, topic, 6)
        consumers = [
            stack.enter_context(ConsumerProcess(client, broker.bootstrap, group, topic,
                                                assignor=assignor, session_ms=SESSION_MS))
            for client in ("confluent", "kafka-python", "aiokafka")
        ]
        wait_for(owns_exactly(consumers, set(range(6))), "three clients sharing the partitions",
                 timeout=60, log=describe_all(consumers))
        # Produced once the group is stable: records read by a member that then loses the
        # partition in a join would be read again (at least once), and that is not what
        # this test is about.
        values = [f"m{i}" for i in range(600)]
        produce(broker.bootstrap, topic, values, 6)
        wait_for(lambda: consumed(consumers) >= set(values), "every record", timeout=30,
                 log=describe_all(consumers))
        # Each record went to the member owning its partition: no duplicates in a stable
        # group with commits after processing.
        seen = [r for c in consumers for r in c.records]
        assert len(seen) == len(values)
        for c in consumers:
            assert {p for p, _, _ in c.records} <= set(c.current_assignment())


def test_committed_offsets_survive_broker_kill9(tmp_path):
    topic, group = "durable", "durable-group"
    with BrokerProcess(tmp_path, options=BROKER_OPTIONS) as broker:
        create_topic(broker.bootstrap, topic, 1)
        produce(broker.bootstrap, topic, [f"v{i}" for i in range(100)], 1)
        conf = {
            "bootstrap.servers": broker.bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
        }
        consumer = confluent_kafka.Consumer(conf)
        try:
            consumer.subscribe([topic])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 40 and time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    got.append(m)
            assert len(got) >= 40
            tp = confluent_kafka.TopicPartition(topic, 0, 40, metadata="after v39")
            committed = consumer.commit(offsets=[tp], asynchronous=False)
            assert committed[0].error is None
        finally:
            consumer.close()

        broker.kill9()  # the commit was acknowledged, so it was fsynced
        broker.restart()

        consumer = confluent_kafka.Consumer(conf)
        try:
            (stored,) = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], 20)
            assert stored.offset == 40
            assert stored.metadata == "after v39"
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            first = None
            while first is None and time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and not m.error():
                    first = m
            assert first is not None
            assert (first.offset(), first.value()) == (40, b"v40")
        finally:
            consumer.close()


def test_group_recovers_when_leader_dies_during_completing_rebalance(tmp_path):
    """The leader gets the member list, then dies before SyncGroup: the follower's SyncGroup
    waits, the leader's session expires, the follower rejoins, leads, and consumes all."""
    topic, group = "leaderless", "leader-dies"
    with BrokerProcess(tmp_path, options={"group.initial.rebalance.delay.ms": 2000}) as broker:
        create_topic(broker.bootstrap, topic, 2)
        values = [f"x{i}" for i in range(50)]
        produce(broker.bootstrap, topic, values, 2)
        leader = RawClient(broker.bootstrap, client_id="doomed-leader")
        join = {
            "group_id": group, "session_timeout": SESSION_MS, "rebalance_timeout": 30_000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(topic)}],
        }
        first = leader.call(11, 5, join)
        assert first.error_code == ErrorCode.member_id_required
        # The raw member's second JoinGroup parks for the initial delay; the real consumer
        # joins during it, so both end up in generation 1 with the raw member as leader.
        with ConsumerProcess("confluent", broker.bootstrap, group, topic,
                             session_ms=SESSION_MS) as follower:
            response = leader.call(11, 5, {**join, "member_id": first.member_id})
            assert response.error_code == ErrorCode.none
            assert response.leader == first.member_id
            assert len(response.members) == 2, "the follower did not join within the delay"
            leader.close()  # dies: no SyncGroup, no heartbeat, no LeaveGroup
            wait_for(lambda: follower.current_assignment() == [0, 1], "the follower to take over",
                     timeout=40, log=follower.describe)
            wait_for(lambda: follower.values() >= set(values), "every record", timeout=30,
                     log=follower.describe)


def test_adding_partitions_rebalances_the_group(tmp_path):
    """The leader notices the new partition count in metadata and rejoins; the coordinator
    treats a Stable leader's JoinGroup as a rebalance trigger, so the new partitions get
    owners."""
    import confluent_kafka.admin

    topic, group = "grow", "growers"
    with BrokerProcess(tmp_path, options=BROKER_OPTIONS) as broker, \
            contextlib.ExitStack() as stack:
        create_topic(broker.bootstrap, topic, 2)
        consumers = [
            stack.enter_context(ConsumerProcess("confluent", broker.bootstrap, group, topic,
                                                session_ms=SESSION_MS))
            for _ in range(2)
        ]
        wait_for(owns_exactly(consumers, {0, 1}), "two members on two partitions", timeout=60,
                 log=describe_all(consumers))
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([confluent_kafka.admin.NewPartitions(topic, 4)])[topic].result(15)
        wait_for(owns_exactly(consumers, {0, 1, 2, 3}), "the new partitions to be owned",
                 timeout=30, log=describe_all(consumers))
        values = [f"g{i}" for i in range(40)]
        produce(broker.bootstrap, topic, values, 4)
        wait_for(lambda: consumed(consumers) >= set(values), "every record", timeout=30,
                 log=describe_all(consumers))


def test_running_group_carries_on_across_a_broker_kill9(tmp_path):
    """The group's membership is restored from __consumer_offsets: consumers that outlive
    the broker reconnect, keep (or renegotiate) their partitions and consume what follows."""
    topic, group = "carry-on", "carry-on-group"
    with BrokerProcess(tmp_path, options=BROKER_OPTIONS) as broker, \
            contextlib.ExitStack() as stack:
        create_topic(broker.bootstrap, topic, 4)
        before = [f"p{i}" for i in range(100)]
        produce(broker.bootstrap, topic, before, 4)
        consumers = [
            stack.enter_context(ConsumerProcess("confluent", broker.bootstrap, group, topic,
                                                session_ms=SESSION_MS))
            for _ in range(2)
        ]
        wait_for(owns_exactly(consumers, set(range(4))), "two members on 4 partitions", timeout=60,
                 log=describe_all(consumers))
        wait_for(lambda: consumed(consumers) >= set(before), "the first records", timeout=30,
                 log=describe_all(consumers))
        broker.restart()  # kill -9, then start on the same port and data
        after = [f"q{i}" for i in range(100)]
        produce(broker.bootstrap, topic, after, 4)
        wait_for(lambda: consumed(consumers) >= set(before + after),
                 "the records produced after the restart", timeout=60, log=describe_all(consumers))
        wait_for(owns_exactly(consumers, set(range(4))), "one owner per partition", timeout=30,
                 log=describe_all(consumers))
