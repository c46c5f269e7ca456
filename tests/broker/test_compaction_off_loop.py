"""A large compaction does not stall the broker: it runs on a worker thread, so a consumer
group's heartbeats keep being answered (no rebalance, same member) and a message produced
while it runs is consumed before it ends."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from databus.protocol.records import build_batch
from databus.storage.config import LogConfig
from databus.storage.log_manager import LogManager
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.slow

KEYS = 1000
BATCHES = 2000  # 2M records, 28 MB: the compaction takes seconds (about 5 s on a laptop core)
STARTED = "compaction: cleaning big-0"
FINISHED = "compaction: big-0: "


def fill(data_dir) -> None:
    """The big topic, written straight into the data directory (fast), as a cleanly shut
    down broker would leave it.  cleanup.policy=delete for now: nothing compacts it yet."""
    manager = LogManager(data_dir, LogConfig())
    manager.open()
    manager.create_topic("big", 1, {"segment.bytes": str(1 << 20)})
    manager.create_topic("live", 1, {})
    now = int(time.time() * 1000)
    batch = build_batch([(b"k%04d" % i, b"v", (), now) for i in range(KEYS)])
    big = manager.get_log("big", 0)
    for _ in range(BATCHES):  # the same batch again and again: every key repeats
        big.append(batch)
    big.roll()
    manager.close()


def test_heartbeats_and_fetches_flow_during_a_large_compaction(tmp_path):
    fill(tmp_path / "data")
    options = {"log.retention.check.interval.ms": 200, "group.min.session.timeout.ms": 1000,
               "group.initial.rebalance.delay.ms": 0}
    with BrokerProcess(tmp_path, options) as broker:
        events: list[str] = []
        got: list[bytes] = []
        consumer = Consumer({
            "bootstrap.servers": broker.bootstrap, "group.id": "steady",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            # the compaction lasts longer than this: inline, it would expire the member
            "session.timeout.ms": 3000, "heartbeat.interval.ms": 300,
        })
        consumer.subscribe(
            ["live"],
            on_assign=lambda c, parts: events.append("assigned"),
            on_revoke=lambda c, parts: events.append("revoked"),
            on_lost=lambda c, parts: events.append("lost"),
        )
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})

        def poll_until(done, what: str, timeout: float = 120) -> None:
            deadline = time.monotonic() + timeout
            while not done():
                assert time.monotonic() < deadline, f"{what}:\n{broker.log_text()[-3000:]}"
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    got.append(message.value())

        def round_trip(value: bytes) -> None:
            producer.produce("live", value)
            assert producer.flush(30) == 0
            poll_until(lambda: value in got, f"{value!r} was not consumed")

        try:
            round_trip(b"before")
            member = consumer.memberid()
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            resource = ConfigResource(ResourceType.TOPIC, "big", incremental_configs=[
                ConfigEntry("cleanup.policy", "compact",
                            incremental_operation=AlterConfigOpType.SET)])
            for future in admin.incremental_alter_configs([resource]).values():
                future.result(30)
            poll_until(lambda: STARTED in broker.log_text(), "compaction never started")

            round_trip(b"during")
            assert FINISHED not in broker.log_text(), (
                "the message produced during the compaction was consumed only after it ended: "
                "the broker stalled (or the compaction became too small to overlap a round trip)")

            poll_until(lambda: FINISHED in broker.log_text(), "compaction never finished")
            round_trip(b"after")  # a few more heartbeats after it, on the same member
            assert events == ["assigned"], "the group rebalanced during the compaction"
            assert consumer.memberid() == member
            group = admin.describe_consumer_groups(["steady"])["steady"].result(30)
            assert [m.member_id for m in group.members] == [member]
            assert "removed all" in broker.log_text(), "the compaction did its work"
        finally:
            consumer.close()
