"""RENEW acknowledgements (KIP-1222) and ``share_acquire_mode`` (KIP-1206), ShareFetch and
ShareAcknowledge v2, spoken by hand: a member renewing its lock keeps a slow record past
the lock duration while another member finds nothing; without renewing, the other member
gets it.  One broker for the module; locks of 2 s (the floor lowered to 1 s)."""

from __future__ import annotations

import itertools
import time

import confluent_kafka.admin as kadmin
import pytest

from databus.broker.process import BrokerProcess
from databus.protocol.errors import ErrorCode
from tests.groups.raw import RawClient

from .member import ACCEPT, Member, acquired, partition_of, produce

RENEW = 4
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("share-renew"), options={
        "num.partitions": 1, "group.share.min.record.lock.duration.ms": 1000,
    }) as process:
        yield process


def new_group(broker, **configs: str) -> tuple[str, str]:
    n = next(_names)
    topic, group = f"renew-{n}", f"renew-group-{n}"
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([kadmin.NewTopic(topic, 1)])[topic].result()
    resource = kadmin.ConfigResource(kadmin.ResourceType.GROUP, group, incremental_configs=[
        kadmin.ConfigEntry(k, v, incremental_operation=kadmin.AlterConfigOpType.SET)
        for k, v in {"share.auto.offset.reset": "earliest",
                     "share.record.lock.duration.ms": "2000", **configs}.items()])
    admin.incremental_alter_configs([resource])[resource].result()
    produce(broker.bootstrap, 1, topic)
    return topic, group


def joined(client, group: str, topic: str) -> Member:
    member = Member(client, group)
    member.heartbeat(topics=(topic,))
    return member


def test_renew_keeps_a_slow_record_and_without_it_another_member_gets_it(broker):
    topic, group = new_group(broker)
    with RawClient(broker.bootstrap) as client:
        slow, other = joined(client, group, topic), joined(client, group, topic)
        other.topic_id = slow.topic_id
        assert acquired(slow.fetch(version=2)) == [(0, 0, 1)]
        assert acquired(other.fetch(max_wait_ms=0, version=2)) == []
        # 3 s of renewals every 0.5 s: past the 2 s lock, and the record is still slow's
        until = time.monotonic() + 3
        while time.monotonic() < until:
            response = slow.acknowledge([(0, 0, RENEW)], version=2, is_renew_ack=True)
            assert partition_of(response).error_code == ErrorCode.none
            assert response.acquisition_lock_timeout.total_seconds() == 2
            time.sleep(0.5)
        assert acquired(other.fetch(max_wait_ms=0, version=2)) == []
        # then it stops renewing: the lock expires and the other member gets the record
        deadline = time.monotonic() + 30
        got: list = []
        while not got and time.monotonic() < deadline:
            got = acquired(other.fetch(max_wait_ms=500, version=2))
        assert got == [(0, 0, 2)]
        # and slow's late ACCEPT is refused: the record is no longer its
        assert partition_of(slow.acknowledge([(0, 0, ACCEPT)], version=2)).error_code == (
            ErrorCode.invalid_record_state)


def test_renew_then_accept_settles_with_delivery_count_one(broker):
    topic, group = new_group(broker)
    with RawClient(broker.bootstrap) as client:
        member = joined(client, group, topic)
        assert acquired(member.fetch(version=2)) == [(0, 0, 1)]
        produce(broker.bootstrap, 1, topic)
        # a ShareFetch carrying a RENEW with is_renew_ack acquires nothing, though offset 1
        # is there to take
        renewed = member.fetch([(0, 0, RENEW)], version=2, is_renew_ack=True)
        assert partition_of(renewed).acknowledge_error_code == ErrorCode.none
        assert acquired(renewed) == []
        response = member.fetch([(0, 0, ACCEPT)], version=2)
        assert partition_of(response).acknowledge_error_code == ErrorCode.none
        assert acquired(response) == [(1, 1, 1)]


def test_renew_is_refused_in_v1_and_when_the_group_disables_it(broker):
    topic, group = new_group(broker)
    with RawClient(broker.bootstrap) as client:
        member = joined(client, group, topic)
        assert acquired(member.fetch(version=1)) == [(0, 0, 1)]
        assert partition_of(member.acknowledge([(0, 0, RENEW)])).error_code == (
            ErrorCode.invalid_request)
    topic, group = new_group(broker, **{"share.renew.acknowledge.enable": "false"})
    with RawClient(broker.bootstrap) as client:
        member = joined(client, group, topic)
        assert acquired(member.fetch(version=2)) == [(0, 0, 1)]
        response = member.acknowledge([(0, 0, RENEW)], version=2, is_renew_ack=True)
        assert partition_of(response).error_code == ErrorCode.invalid_request


def test_record_limit_mode_takes_max_records_and_an_unknown_mode_is_refused(broker):
    topic, group = new_group(broker)
    produce(broker.bootstrap, 9, topic)  # 10 records, in one or few batches
    with RawClient(broker.bootstrap) as client:
        member = joined(client, group, topic)
        assert member.fetch(version=2, share_acquire_mode=7).error_code == (
            ErrorCode.invalid_request)
        member.session_epoch = 0
        assert acquired(member.fetch(version=2, max_records=3, share_acquire_mode=1)) == [
            (0, 2, 1)]


def test_our_share_consumer_renews_a_slow_record_then_accepts_it(broker):
    import trio

    from databus.client import AcknowledgeType, ShareConsumer

    topic, group = new_group(broker)

    async def main() -> tuple[list, dict, list]:
        others: list = []
        with trio.fail_after(30):
            async with ShareConsumer(broker.bootstrap, {
                    "group.id": group, "share.acknowledgement.mode": "explicit",
                    "share.acquire.mode": "record_limit"}) as sc:
                sc.subscribe([topic])
                records: list = []
                while not records:
                    records = await sc.poll(0.5)
                with RawClient(broker.bootstrap) as client:
                    other = joined(client, group, topic)
                    # 3 s of work on the record, renewing every 0.5 s: past the 2 s lock
                    for _ in range(6):
                        sc.acknowledge(records[0], AcknowledgeType.RENEW)
                        assert all(e is None for e in (await sc.commit()).values())
                        await trio.sleep(0.5)
                        others += acquired(other.fetch(max_wait_ms=0, version=2))
                sc.acknowledge(records[0], AcknowledgeType.ACCEPT)
                results = await sc.commit()
        return records, results, others

    records, results, others = trio.run(main)
    assert [(r.offset, r.delivery_count) for r in records] == [(0, 1)]
    assert others == [], "the renewed record went to another member"
    assert list(results.values()) == [None]
