"""Our trio ``ShareConsumer`` (databus.client) against a ``databus broker`` process, alone,
two together, and beside confluent-kafka's ShareConsumer in one share group.

One broker for the module (short locks, delivery count limit 3); each test has its own
topic and group, whose ``share.auto.offset.reset`` is set to ``earliest`` so records can be
produced before the consumers start.  Completion is read from the broker: the group's start
offset (DescribeShareGroupOffsets) reaches the end of the log once every record is accepted
or archived.  No timing assertions: every wait is "until this happens", under a deadline.
"""

from __future__ import annotations

import itertools
from collections import Counter

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest
import trio

from databus.broker.process import BrokerProcess
from databus.client import AcknowledgeType, ShareConsumer, errors
from tests.groups.raw import share_start_offset

DEADLINE_S = 60
ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # short locks (the floor lowered to allow them) so a lost consumer's records come back
    # soon; a delivery count limit of 3 so the archive case is short
    with BrokerProcess(tmp_path_factory.mktemp("share-client"), options={
        "num.partitions": 1, "group.share.record.lock.duration.ms": 3000,
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.delivery.count.limit": 3,
    }) as process:
        yield process


@pytest.fixture
def work(broker):
    """(topic, group): a new one-partition topic and a share group reading it from the
    earliest offset."""
    n = next(_names)
    topic, group = f"jobs-{n}", f"workers-{n}"
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([kadmin.NewTopic(topic, 1)])[topic].result()
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
        kadmin.ConfigEntry("share.auto.offset.reset", "earliest",
                           incremental_operation=kadmin.AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result()
    return topic, group


def produce(bootstrap: str, topic: str, count: int) -> None:
    # linger 0 and small batches: records spread over several batches, so that members
    # sharing a partition get records of the same batch too
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                                         "batch.num.messages": 7})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i)
        producer.poll(0)
    assert producer.flush(30) == 0


def consumer(broker, group: str, mode: str = "explicit", **config) -> ShareConsumer:
    return ShareConsumer(broker.bootstrap, {"group.id": group,
                                            "share.acknowledgement.mode": mode, **config})


async def until_done(broker, group: str, topic: str, end: int) -> None:
    """Until the group's start offset reaches ``end`` (every record settled)."""
    while await trio.to_thread.run_sync(share_start_offset, broker.bootstrap, group, topic) < end:
        await trio.sleep(0.2)


def test_two_share_consumers_on_one_partition_each_record_accepted_once(broker, work):
    topic, group = work
    total = 300
    produce(broker.bootstrap, topic, total)
    received: dict[int, list[int]] = {0: [], 1: []}

    async def member(index: int, done: trio.Event) -> None:
        async with consumer(broker, group, **{"max.poll.records": 10}) as sc:
            sc.subscribe([topic])
            while not done.is_set():
                for record in await sc.poll(0.2):
                    assert record.delivery_count == 1
                    received[index].append(record.offset)
                    sc.acknowledge(record, ACCEPT)
                    await trio.sleep(0)  # the other member gets its turn on the broker
            assert all(error is None for error in (await sc.commit()).values())

    async def main() -> None:
        done = trio.Event()
        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(member, 0, done)
                nursery.start_soon(member, 1, done)
                await until_done(broker, group, topic, total)
                done.set()

    trio.run(main)
    assert received[0] and received[1], "both members receive records"
    delivered = Counter(received[0] + received[1])
    assert sorted(delivered) == list(range(total))
    assert set(delivered.values()) == {1}  # each record accepted exactly once


def test_release_redelivers_reject_does_not_the_limit_archives(broker, work):
    topic, group = work
    produce(broker.bootstrap, topic, 3)
    seen: list[tuple[int, int]] = []  # (offset, delivery count) in delivery order

    async def main() -> None:
        with trio.fail_after(DEADLINE_S):
            async with consumer(broker, group) as sc:
                sc.subscribe([topic])
                while await trio.to_thread.run_sync(
                        share_start_offset, broker.bootstrap, group, topic) < 3:
                    for record in await sc.poll(0.5):
                        seen.append((record.offset, record.delivery_count))
                        # 0 is accepted on its second delivery, 1 rejected at once, 2
                        # released every time until the limit (3) archives it
                        kind = {0: RELEASE if record.delivery_count == 1 else ACCEPT,
                                1: REJECT, 2: RELEASE}[record.offset]
                        sc.acknowledge(record, kind)
                    await sc.commit()

    trio.run(main)
    assert sorted(seen) == [(0, 1), (0, 2), (1, 1), (2, 1), (2, 2), (2, 3)]


def test_a_consumer_closed_without_acknowledging_hands_its_records_to_another(broker, work):
    topic, group = work
    produce(broker.bootstrap, topic, 5)

    async def main() -> list:
        with trio.fail_after(DEADLINE_S):
            async with consumer(broker, group) as first:
                first.subscribe([topic])
                held = []
                while len(held) < 5:
                    held += await first.poll(0.5)
            # closed holding 5 records it never acknowledged: the broker releases them
            async with consumer(broker, group) as second:
                second.subscribe([topic])
                got = []
                while len(got) < 5:
                    for record in await second.poll(0.5):
                        got.append(record)
                        second.acknowledge(record)
                assert all(error is None for error in (await second.commit()).values())
            return got

    got = trio.run(main)
    assert sorted((r.offset, r.delivery_count) for r in got) == [(i, 2) for i in range(5)]
    assert [r.value for r in sorted(got)] == [b"%d" % i for i in range(5)]
    assert share_start_offset(broker.bootstrap, group, topic) == 5


def test_implicit_mode_accepts_the_previous_poll_on_the_next(broker, work):
    topic, group = work
    produce(broker.bootstrap, topic, 4)

    async def main() -> None:
        with trio.fail_after(DEADLINE_S):
            async with consumer(broker, group, mode="implicit") as sc:
                sc.subscribe([topic])
                got = []
                while len(got) < 4:
                    got += await sc.poll(0.5)
                with pytest.raises(errors.IllegalStateError, match="explicit"):
                    sc.acknowledge(got[0], ACCEPT)
                assert await sc.poll(0) == []  # accepts the 4, sends them with a fetch
                await until_done(broker, group, topic, 4)

    trio.run(main)


def test_explicit_mode_refuses_a_record_it_did_not_hand_out(broker, work):
    topic, group = work
    produce(broker.bootstrap, topic, 1)

    async def main() -> None:
        with trio.fail_after(DEADLINE_S):
            async with consumer(broker, group) as sc:
                sc.subscribe([topic])
                got = []
                while not got:
                    got = await sc.poll(0.5)
                sc.acknowledge(got[0], ACCEPT)
                with pytest.raises(errors.IllegalStateError, match=f"{topic}-0@0"):
                    sc.acknowledge(got[0], REJECT)  # settled already
                with pytest.raises(ValueError, match="RELEASE"):
                    sc.acknowledge(got[0], 7)
                assert await sc.commit() == {(topic, 0): None}

    trio.run(main)
    assert share_start_offset(broker.bootstrap, group, topic) == 1


def test_ours_and_confluent_kafkas_share_consumer_in_one_group(broker, work):
    topic, group = work
    total = 200
    produce(broker.bootstrap, topic, total)
    ours: list[int] = []
    theirs: list[int] = []

    def librdkafka_member(done) -> None:
        other = confluent_kafka.ShareConsumer({
            "bootstrap.servers": broker.bootstrap, "group.id": group,
            "share.acknowledgement.mode": "explicit", "max.poll.records": 10})
        try:
            other.subscribe([topic])
            while not done.is_set():
                for message in other.poll(0.2) or ():
                    assert message.error() is None, message.error()
                    theirs.append(message.offset())
                    other.acknowledge(message, confluent_kafka.AcknowledgeType.ACCEPT)
            other.commit_sync(30)
        finally:
            other.close()

    async def main() -> None:
        import threading

        done = threading.Event()
        with trio.fail_after(DEADLINE_S):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, librdkafka_member, done)
                async with consumer(broker, group, **{"max.poll.records": 10}) as sc:
                    sc.subscribe([topic])
                    while await trio.to_thread.run_sync(
                            share_start_offset, broker.bootstrap, group, topic) < total:
                        for record in await sc.poll(0.2):
                            ours.append(record.offset)
                            sc.acknowledge(record)
                        await trio.sleep(0.05)  # leave the other member records to take
                    await sc.commit()
                done.set()

    trio.run(main)
    assert ours and theirs, "both clients receive records"
    delivered = Counter(ours + theirs)
    assert sorted(delivered) == list(range(total)) and set(delivered.values()) == {1}


def test_databus_consume_share_group_settles_what_it_prints(broker, work, capsysbinary):
    from databus.cli import main

    topic, group = work
    produce(broker.bootstrap, topic, 3)
    base = ["consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
            "--share-group", group, "--max-messages", "3", "--timeout-ms", "30000",
            "--property", "print.offset=true", "--property", "print.delivery=true"]
    assert main([*base, "--release"]) == 0
    released = capsysbinary.readouterr()
    assert released.out.splitlines() == [b"Offset:%d\tDeliveryCount:1\t%d" % (i, i)
                                         for i in range(3)]
    assert b"Processed a total of 3 messages" in released.err
    assert share_start_offset(broker.bootstrap, group, topic) == 0  # nothing settled for good
    assert main(base) == 0  # accepts
    accepted = capsysbinary.readouterr().out.splitlines()
    assert [line.split(b"\t")[0] for line in accepted] == [b"Offset:%d" % i for i in range(3)]
    assert all(int(line.split(b"\t")[1].split(b":")[1]) >= 2 for line in accepted)
    assert share_start_offset(broker.bootstrap, group, topic) == 3
    # options of the classic consumer are refused by name
    assert main([*base, "--from-beginning"]) == 2
    assert b"--from-beginning" in capsysbinary.readouterr().err
    assert main(["consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 "--reject"]) == 2
    assert b"--reject needs --share-group" in capsysbinary.readouterr().err


def test_sync_share_consumer(broker, work):
    from databus.client import SyncShareConsumer

    topic, group = work
    produce(broker.bootstrap, topic, 2)
    with SyncShareConsumer(broker.bootstrap, {"group.id": group,
                                              "share.acknowledgement.mode": "explicit"}) as sc:
        sc.subscribe([topic])
        got = []
        for _ in range(100):
            got += sc.poll(0.5)
            if len(got) == 2:
                break
        got.sort(key=lambda r: r.offset)
        # The first acknowledgement rides the ShareFetch this poll starts (or commit()
        # sends it), the second goes by commit(): either way commit() reports every
        # acknowledgement answered since the previous commit, fetch-borne ones too.
        sc.acknowledge(got[0], REJECT)
        assert sc.poll(0.2) == []
        assert sc.commit() == {(topic, 0): None}
        sc.acknowledge(got[1], REJECT)
        assert sc.commit() == {(topic, 0): None}
        assert sc.commit() == {}  # nothing acknowledged since
    assert [r.offset for r in got] == [0, 1]
    assert share_start_offset(broker.bootstrap, group, topic) == 2


def test_a_broker_kill_9_is_survived_membership_and_session_renewed(tmp_path):
    """Share sessions live in memory (membership is persisted): after a kill -9 and restart
    the consumer meets SHARE_SESSION_NOT_FOUND and opens a session again by itself, and
    what it accepted before (commit returned) is not delivered again."""
    with BrokerProcess(tmp_path, options={"num.partitions": 1}) as process:
        topic, group = "jobs", "workers"
        admin = kadmin.AdminClient({"bootstrap.servers": process.bootstrap})
        admin.create_topics([kadmin.NewTopic(topic, 1)])[topic].result()
        resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
            kadmin.ConfigEntry("share.auto.offset.reset", "earliest",
                               incremental_operation=kadmin.AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result()
        produce(process.bootstrap, topic, 3)

        async def take(sc, count: int) -> list:
            got = []
            while len(got) < count:
                for record in await sc.poll(0.5):
                    got.append(record)
                    sc.acknowledge(record)
            assert all(error is None for error in (await sc.commit()).values())
            return got

        async def main() -> tuple[list, list]:
            with trio.fail_after(DEADLINE_S):
                async with consumer(process, group) as sc:
                    sc.subscribe([topic])
                    before = await take(sc, 3)
                    process.kill9()
                    await trio.to_thread.run_sync(process.restart)
                    await trio.to_thread.run_sync(produce, process.bootstrap, topic, 2)
                    after = await take(sc, 2)
            return before, after

        before, after = trio.run(main)
        assert [r.offset for r in before] == [0, 1, 2]
        assert sorted((r.offset, r.delivery_count) for r in after) == [(3, 1), (4, 1)]
        assert share_start_offset(process.bootstrap, group, topic) == 5
