"""Static membership (KIP-345) with confluent-kafka consumers against a real broker: a member
with ``group.instance.id`` that restarts within its session timeout gets its partitions back
with no rebalance (the other member is never revoked), a duplicate instance id fences the
running one, and ``databus groups describe --members --verbose`` shows the instance ids."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, KafkaError

from tests.groups.harness import create_topic
from tests.helpers.broker import BrokerProcess

TOPIC, GROUP = "static", "static-group"


class Member:
    """A confluent-kafka consumer with ``group.instance.id`` that records its rebalance
    callbacks."""

    def __init__(self, bootstrap: str, instance_id: str) -> None:
        self.events: list[tuple[str, list[int]]] = []
        self.errors: list[KafkaError] = []
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP,
            "group.instance.id": instance_id, "client.id": f"client-{instance_id}",
            "session.timeout.ms": 30000, "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range", "enable.auto.commit": False,
            "error_cb": self.errors.append,
        })
        self.consumer.subscribe([TOPIC], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, consumer, partitions) -> None:
        self.events.append(("assign", sorted(p.partition for p in partitions)))

    def _revoked(self, consumer, partitions) -> None:
        self.events.append(("revoke", sorted(p.partition for p in partitions)))

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error():
            self.errors.append(msg.error())

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.consumer.assignment())


def poll_until(members, done, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"no {what}: {[m.events for m in members]}"
        for m in members:
            m.poll()


def describe_members(bootstrap: str) -> list[list[str]]:
    out = subprocess.run(
        [sys.executable, "-m", "databus.cli", "--log-level", "WARNING", "groups", "describe",
         "--bootstrap-server", bootstrap, "--group", GROUP, "--members", "--verbose"],
        capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


def test_static_member_restart_keeps_partitions_and_a_duplicate_is_fenced(tmp_path):
    with BrokerProcess(tmp_path, options={"group.initial.rebalance.delay.ms": 300}) as broker:
        create_topic(broker.bootstrap, TOPIC, 4)
        a, b = Member(broker.bootstrap, "ia"), Member(broker.bootstrap, "ib")
        poll_until([a, b], lambda: a.assignment() and b.assignment()
                   and len(a.assignment() + b.assignment()) == 4, "shared assignment")
        before_a, before_b = a.assignment(), b.assignment()
        table = describe_members(broker.bootstrap)
        assert table[0] == ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                            "#PARTITIONS", "ASSIGNMENT"]
        assert sorted((row[2], row[4]) for row in table[1:]) == [
            ("ia", "client-ia"), ("ib", "client-ib")]
        old_ids = {row[2]: row[1] for row in table[1:]}
        b_events = list(b.events)

        a.consumer.close()  # a static member sends no LeaveGroup: the broker keeps its place
        restarted = Member(broker.bootstrap, "ia")
        poll_until([restarted, b], lambda: restarted.assignment(), "assignment after restart")
        assert restarted.assignment() == before_a
        for _ in range(40):  # b keeps heartbeating meanwhile: nothing may reach it
            b.poll()
            restarted.poll()
        assert b.events == b_events and b.assignment() == before_b
        rows = {row[2]: row for row in describe_members(broker.bootstrap)[1:]}
        assert rows["ia"][1] != old_ids["ia"] and rows["ib"][1] == old_ids["ib"]

        duplicate = Member(broker.bootstrap, "ia")  # same group.instance.id while it runs
        poll_until([duplicate, restarted, b], lambda: any(
            e.code() in (KafkaError.FENCED_INSTANCE_ID, KafkaError._FATAL)
            for e in restarted.errors), "FENCED_INSTANCE_ID for the older instance")
        assert b.events == b_events
        for member in (duplicate, b):
            member.consumer.close()
        restarted.consumer.close()
