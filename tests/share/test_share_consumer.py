"""confluent-kafka's ShareConsumer (librdkafka 2.15's share consumer) against a ``databus
broker`` process: the cases of "How to show it" in the share-groups issue.

Consumers start (and fetch once, which fixes the group's start offset at the log end,
``share.auto.offset.reset=latest``) before the records are produced.  No timing
assertions: every wait is "until this happens", bounded by a generous deadline.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter

import confluent_kafka
import confluent_kafka.admin
import pytest

from databus.broker.process import BrokerProcess

TOPIC = "jobs"
ACCEPT = confluent_kafka.AcknowledgeType.ACCEPT
RELEASE = confluent_kafka.AcknowledgeType.RELEASE
REJECT = confluent_kafka.AcknowledgeType.REJECT
DEADLINE_S = 90


def start_broker(tmp_path, **options) -> BrokerProcess:
    options = {"num.partitions": 1, **options}
    return BrokerProcess(tmp_path, options={k: v for k, v in options.items()}).start()


@pytest.fixture
def broker(tmp_path):
    # short locks (the floor lowered to allow them) so expiry cases finish quickly
    process = start_broker(tmp_path, **{"group.share.record.lock.duration.ms": 3000,
                                        "group.share.min.record.lock.duration.ms": 1000,
                                        "group.share.delivery.count.limit": 3})
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": process.bootstrap})
        admin.create_topics([confluent_kafka.admin.NewTopic(TOPIC, 1)])[TOPIC].result()
        yield process
    finally:
        process.close()


def produce(bootstrap: str, count: int, start: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(TOPIC, value=b"%d" % i)
        producer.poll(0)
    assert producer.flush(30) == 0


def share_consumer(bootstrap: str, mode: str = "explicit", group: str = "workers"):
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": bootstrap, "group.id": group,
        "share.acknowledgement.mode": mode,
    })
    consumer.subscribe([TOPIC])
    return consumer


def joined(consumers, rounds: int = 3) -> None:
    """Poll each consumer a few times so that it has joined and fetched once (its group's
    start offset is then fixed at the current log end)."""
    for _ in range(rounds):
        for consumer in consumers:
            assert not consumer.poll(0.5)


def records(messages) -> list:
    out = []
    for message in messages or ():
        assert message.error() is None, message.error()
        out.append(message)
    return out


def test_three_share_consumers_on_one_partition_accept_each_record_once(broker):
    count = 10_000
    consumers = [share_consumer(broker.bootstrap) for _ in range(3)]
    joined(consumers)
    produce(broker.bootstrap, count)
    deliveries: list[Counter] = [Counter() for _ in consumers]
    done = threading.Event()

    def work(index: int) -> None:
        consumer = consumers[index]
        deadline = time.monotonic() + DEADLINE_S
        while not done.is_set() and time.monotonic() < deadline:
            for message in records(consumer.poll(0.5)):
                deliveries[index][message.offset()] += 1
                consumer.acknowledge(message, ACCEPT)
                # a little work per record, so no consumer drains the queue alone
                time.sleep(0.0002)
            if sum(len(d) for d in deliveries) >= count:
                done.set()
        consumer.commit_sync(10)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for consumer in consumers:
        consumer.close()
    total = sum(deliveries, Counter())
    assert sorted(total) == list(range(count))  # nothing skipped
    assert set(total.values()) == {1}  # each accepted exactly once
    assert all(deliveries), [len(d) for d in deliveries]  # all three received records
    # and nothing is left for a newcomer
    late = share_consumer(broker.bootstrap)
    try:
        assert not any(records(late.poll(1.0)) for _ in range(4))
    finally:
        late.close()


def test_implicit_mode_accepts_on_the_next_poll_explicit_unacked_is_redelivered(broker):
    implicit = share_consumer(broker.bootstrap, mode="implicit")
    joined([implicit])
    produce(broker.bootstrap, 5)
    got: list = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 5 and time.monotonic() < deadline:
        got += records(implicit.poll(1.0))
    assert [m.offset() for m in got] == [0, 1, 2, 3, 4]
    implicit.poll(0.5)  # this poll accepts the previous ones
    implicit.close()

    # explicit, acknowledging nothing: closing releases the records, delivered again
    produce(broker.bootstrap, 3, start=5)
    lazy = share_consumer(broker.bootstrap)
    seen: list = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < 3 and time.monotonic() < deadline:
        seen += records(lazy.poll(1.0))
    assert [(m.offset(), m.delivery_count()) for m in seen] == [(5, 1), (6, 1), (7, 1)]
    lazy.close()
    again = share_consumer(broker.bootstrap)
    redelivered: list = []
    deadline = time.monotonic() + DEADLINE_S
    while len(redelivered) < 3 and time.monotonic() < deadline:
        for message in records(again.poll(1.0)):
            redelivered.append((message.offset(), message.delivery_count()))
            again.acknowledge(message, ACCEPT)
    again.commit_sync(10)
    again.close()
    # 0-4 were accepted by the implicit consumer's next poll: never seen again
    assert redelivered == [(5, 2), (6, 2), (7, 2)]


def test_release_redelivers_until_the_limit_reject_never(broker):
    consumer = share_consumer(broker.bootstrap)
    joined([consumer])
    produce(broker.bootstrap, 3)
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + DEADLINE_S
    # offset 0 is released each time, 1 rejected, 2 accepted; the delivery count limit is 3
    while time.monotonic() < deadline and len(seen) < 5:
        for message in records(consumer.poll(1.0)):
            seen.append((message.offset(), message.delivery_count()))
            kind = {0: RELEASE, 1: REJECT, 2: ACCEPT}[message.offset()]
            consumer.acknowledge(message, kind)
        consumer.commit_sync(10)
    # then nothing more: 0 was archived after its third delivery, 1 at its rejection
    for _ in range(4):
        for message in records(consumer.poll(1.0)):
            seen.append((message.offset(), message.delivery_count()))
    consumer.close()
    assert sorted(seen) == [(0, 1), (0, 2), (0, 3), (1, 1), (2, 1)]


CONSUMER_SCRIPT = textwrap.dedent("""
    import sys, time, confluent_kafka
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": sys.argv[1], "group.id": "workers",
        "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([sys.argv[2]])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = [m.offset() for m in consumer.poll(0.5) or () if m.error() is None]
        if got:
            print(" ".join(map(str, got)), flush=True)
            time.sleep(3600)  # holds them, acknowledges nothing: killed here
        print("polled", flush=True)
""")


def test_a_killed_consumer_s_records_go_to_another_member_once_its_lock_expires(broker):
    child = subprocess.Popen([sys.executable, "-c", CONSUMER_SCRIPT, broker.bootstrap, TOPIC],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "polled"  # joined and fetched once
        produce(broker.bootstrap, 5)
        line = child.stdout.readline().split()
        while line == ["polled"]:
            line = child.stdout.readline().split()
        held = [int(offset) for offset in line]
        assert held
        survivor = share_consumer(broker.bootstrap)
        child.kill()  # SIGKILL: no leave, no session close
        child.wait()
        got: dict[int, int] = {}
        deadline = time.monotonic() + DEADLINE_S
        while not set(held) <= set(got) and time.monotonic() < deadline:
            for message in records(survivor.poll(1.0)):
                got[message.offset()] = message.delivery_count()
                survivor.acknowledge(message, ACCEPT)
        survivor.commit_sync(10)
        survivor.close()
        assert {offset: got.get(offset) for offset in held} == {offset: 2 for offset in held}
    finally:
        child.kill()
        child.wait()


def test_broker_kill_9_midway_loses_no_accept_and_skips_nothing(broker):
    count = 2000
    consumer = share_consumer(broker.bootstrap)
    joined([consumer])
    produce(broker.bootstrap, count)
    confirmed: set[int] = set()  # accepted and confirmed by commit_sync
    delivered: Counter = Counter()
    killed = False
    deadline = time.monotonic() + DEADLINE_S * 2
    while len(confirmed) < count and time.monotonic() < deadline:
        batch = records(consumer.poll(1.0))
        for message in batch:
            assert message.offset() not in confirmed, "an accepted record came back"
            delivered[message.offset()] += 1
            consumer.acknowledge(message, ACCEPT)
        if batch:
            try:
                result = consumer.commit_sync(10)
            except confluent_kafka.KafkaException:
                result = {}  # the broker is restarting: not confirmed, may come back
            if result and all(error is None for error in result.values()):
                confirmed.update(m.offset() for m in batch)
        if not killed and len(confirmed) >= count // 3:
            broker.kill9()
            broker.restart()
            killed = True
    consumer.close()
    assert killed
    assert confirmed == set(range(count))  # nothing skipped


def test_a_classic_group_and_a_share_group_on_one_topic_do_not_disturb_each_other(broker):
    count = 500
    share = share_consumer(broker.bootstrap)
    joined([share])
    classic = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                        "group.id": "readers", "auto.offset.reset": "earliest"})
    classic.subscribe([TOPIC])
    produce(broker.bootstrap, count)
    read, accepted = [], []
    deadline = time.monotonic() + DEADLINE_S
    while (len(read) < count or len(accepted) < count) and time.monotonic() < deadline:
        for message in classic.consume(500, 0.2):
            assert message.error() is None, message.error()
            read.append(message.offset())
        for message in records(share.poll(0.2)):
            accepted.append(message.offset())
            share.acknowledge(message, ACCEPT)
    share.commit_sync(10)
    classic.close()
    share.close()
    assert read == list(range(count))
    assert sorted(accepted) == list(range(count))
