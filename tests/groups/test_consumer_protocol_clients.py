"""The consumer group protocol of KIP-848 (``group.protocol=consumer``) with confluent-kafka
(librdkafka) consumers against a real broker: partitions are assigned by the broker and move
between members one heartbeat at a time, never owned by two members at once, so a record
committed by one member is never consumed again by another; members joining and leaving;
offsets committed with the member epoch; the admin API and ``databus groups describe`` list
and describe the group as a ``consumer`` group; a subscription by regular expression; after kill -9 the group (its members, epochs and assignment) and its
offsets come back from ``__consumer_offsets``.

The broker's heartbeat interval is lowered to 300 ms (Kafka's 5 s default would make each
hand-over of a partition take seconds).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from tests.groups.harness import create_topic
from tests.groups.raw import RawClient
from tests.helpers.broker import BrokerProcess

TOPIC, GROUP = "cg", "cg-group"
OPTIONS = {"group.consumer.heartbeat.interval.ms": 300}


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path, options=OPTIONS) as process:
        create_topic(process.bootstrap, TOPIC, 4)
        yield process


def produce(bootstrap: str, start: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % 4)
    assert producer.flush(30) == 0


def groups_cli(bootstrap: str, *args: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "groups", "describe",
         "--bootstrap-server", bootstrap, "--group", GROUP, *args],
        capture_output=True, text=True, timeout=60, check=True).stdout


class Member:
    """A ``group.protocol=consumer`` consumer that commits each record it processes."""

    def __init__(self, bootstrap: str, name: str, topics=(TOPIC,), **extra) -> None:
        self.name = name
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": "consumer",
            "client.id": name, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", **extra,
        })
        self.consumer.subscribe(list(topics))
        self.closed = False

    def poll(self, seen: list) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        assert msg.error() is None, msg.error()
        seen.append((self.name, msg.partition(), msg.offset()))
        self.consumer.commit(message=msg, asynchronous=False)

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}

    def close(self) -> None:
        self.consumer.close()
        self.closed = True


def run(members, seen, done, what: str, timeout: float = 30) -> None:
    """Poll every open member until ``done()``; no partition may be owned by two members."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"no {what}: {[(m.name, m.owned()) for m in members]}"
        for m in members:
            if not m.closed:
                m.poll(seen)
        owned = [m.owned() for m in members if not m.closed]
        assert sum(len(o) for o in owned) == len(set().union(*owned)), (
            f"a partition with two owners: {owned}")


def consumed_once(seen, total: int) -> bool:
    return len({(p, o) for _, p, o in seen}) >= total


def test_members_share_partitions_and_hand_them_over_without_duplicates(broker):
    bootstrap = broker.bootstrap
    seen: list[tuple[str, int, int]] = []
    produce(bootstrap, 0, 20)
    c1, c2 = Member(bootstrap, "c1"), Member(bootstrap, "c2")
    members = [c1, c2]
    run(members, seen, lambda: len(c1.owned()) == len(c2.owned()) == 2
        and consumed_once(seen, 20), "two members with two partitions each")
    # a third member joins: partitions move to it only once their owner gave them up
    c3 = Member(bootstrap, "c3")
    members.append(c3)
    run(members, seen, lambda: c3.owned() and sum(len(m.owned()) for m in members) == 4,
        "a partition for the third member")
    produce(bootstrap, 20, 20)
    run(members, seen, lambda: consumed_once(seen, 40), "the next 20 records")
    # one leaves: the others take its partitions over
    c2.close()
    run(members, seen, lambda: len(c1.owned() | c3.owned()) == 4, "c2's partitions taken over")
    produce(bootstrap, 40, 20)
    run(members, seen, lambda: consumed_once(seen, 60), "the last 20 records")
    offsets = [(p, o) for _, p, o in seen]
    assert len(offsets) == len(set(offsets)) == 60, "a record was consumed twice"
    committed = c1.consumer.committed([confluent_kafka.TopicPartition(TOPIC, p)
                                       for p in range(4)], timeout=10)
    assert [tp.offset for tp in committed] == [15] * 4
    assert {name for name, _, _ in seen} == {"c1", "c2", "c3"}

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result()
    (group,) = [g for g in listed.valid if g.group_id == GROUP]
    assert group.type == confluent_kafka.ConsumerGroupType.CONSUMER
    described = admin.describe_consumer_groups([GROUP])[GROUP].result()
    assert described.type == confluent_kafka.ConsumerGroupType.CONSUMER
    assert sorted(m.client_id for m in described.members) == ["c1", "c3"]
    assert sorted(tp.partition for m in described.members
                  for tp in m.assignment.topic_partitions) == [0, 1, 2, 3]
    # databus groups describe: the broker's assignment, epochs and the committed offsets
    doc = json.loads(groups_cli(bootstrap, "--json"))["groups"][0]
    assert (doc["type"], doc["state"], doc["assignment_strategy"]) == (
        "consumer", "Stable", "uniform")
    assert doc["group_epoch"] == doc["assignment_epoch"] >= 3
    assert sorted(m["client_id"] for m in doc["members"]) == ["c1", "c3"]
    assert all(m["member_epoch"] == doc["group_epoch"] for m in doc["members"])
    assert [(o["partition"], o["current_offset"], o["lag"]) for o in doc["offsets"]] == [
        (p, 15, 0) for p in range(4)]
    table = [line.split() for line in groups_cli(bootstrap, "--members", "--verbose")
             .splitlines() if line.strip()]
    assert table[0] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                        "#PARTITIONS", "CURRENT-EPOCH", "ASSIGNMENT"]
    assert sorted(row[4] for row in table[1:]) == ["c1", "c3"]
    c1.close()
    c3.close()


def test_group_and_offsets_survive_kill_9(broker):
    bootstrap = broker.bootstrap
    seen: list[tuple[str, int, int]] = []
    produce(bootstrap, 0, 8)
    c1 = Member(bootstrap, "c1")
    run([c1], seen, lambda: consumed_once(seen, 8), "the first 8 records")
    with RawClient(bootstrap) as raw:
        before = raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]}).groups[0]
    broker.restart()  # kill -9, then start on the same port and data
    with RawClient(bootstrap) as raw:
        after = raw.call(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [GROUP]}).groups[0]
    assert after.error_code == ErrorCode.none
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch,
                                                           before.assignment_epoch)
    assert [(m.member_id, m.member_epoch, m.assignment) for m in after.members] == [
        (m.member_id, m.member_epoch, m.assignment) for m in before.members]
    # the member carries on with its epoch; the records after the commit come next
    produce(bootstrap, 8, 8)
    run([c1], seen, lambda: consumed_once(seen, 16), "the records produced after the restart")
    assert sorted((p, o) for _, p, o in seen) == sorted({(p, o) for _, p, o in seen})
    c1.close()
    # a new consumer of the group resumes from the committed offsets: nothing is re-read.
    # It subscribes by regular expression (librdkafka sends it as the subscribed topic regex)
    produce(bootstrap, 16, 4)
    c2 = Member(bootstrap, "c2", topics=["^c[g]$"])
    later: list = []
    run([c2], later, lambda: consumed_once(later, 4), "the records after the commit")
    assert sorted(o for _, _, o in later) == [4] * 4
    c2.close()
