"""Share groups at the wire, against a ``databus broker`` process: Kafka's error codes for bad
input (stale epochs, unknown members, records not held, share session epochs) and the
durable share state across kill -9, spoken request by request with a raw client so every
step is visible.
"""

from __future__ import annotations

import confluent_kafka
import confluent_kafka.admin as kadmin
import pytest

from databus.broker.process import BrokerProcess
from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from tests.groups.raw import RawClient

from .member import ACCEPT, REJECT, RELEASE, TOPIC, Member, acquired, partition_of, produce


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path, options={"num.partitions": 1}) as process:
        yield process


def test_heartbeat_errors_unknown_member_and_stale_epoch(broker):
    produce(broker.bootstrap, 1)
    with RawClient(broker.bootstrap) as client:
        member = Member(client)
        joined = member.heartbeat()
        assert joined.error_code == ErrorCode.none and joined.member_epoch >= 1
        assert joined.heartbeat_interval.total_seconds() == 5
        assert [p.partitions for p in joined.assignment.topic_partitions] == [(0,)]
        # a second member: the group epoch moves on; the first member's epoch is now stale
        other = Member(client)
        other.heartbeat()
        assert member.heartbeat(epoch=member.epoch + 5).error_code == (
            ErrorCode.fenced_member_epoch)
        assert member.heartbeat(topics=None).member_epoch == other.epoch
        stranger = Member(client, member_id="never-joined")
        assert stranger.heartbeat(epoch=3).error_code == ErrorCode.unknown_member_id
        assert Member(client).heartbeat(topics=()).error_code == ErrorCode.invalid_request
        # both members are assigned the one partition: shared, not divided
        described = client.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g"]})
        group = described.groups[0]
        assert group.group_state == "Stable"
        assert sorted(m.member_id for m in group.members) == sorted(
            [member.member_id, other.member_id])
        assert all(m.assignment.topic_partitions[0].partitions == (0,) for m in group.members)
        assert member.heartbeat(epoch=-1).member_epoch == -1
        assert len(client.call(ApiKey.SHARE_GROUP_DESCRIBE, 1,
                               {"group_ids": ["g"]}).groups[0].members) == 1


def test_a_classic_group_id_is_not_a_share_group(broker):
    produce(broker.bootstrap, 1)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "classic", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    while consumer.poll(1.0) is None:
        pass
    try:
        with RawClient(broker.bootstrap) as client:
            response = Member(client, group="classic").heartbeat()
            assert response.error_code == ErrorCode.group_id_not_found
            assert "not a share group" in response.error_message
    finally:
        consumer.close()


def test_share_fetch_sessions_and_acknowledgement_errors(broker):
    produce(broker.bootstrap, 1)  # creates the topic; the group starts at its end
    with RawClient(broker.bootstrap) as client:
        member = Member(client)
        member.heartbeat()
        assert partition_of(member.fetch(max_wait_ms=0)).error_code == ErrorCode.none
        produce(broker.bootstrap, 10)
        got = member.fetch()
        assert acquired(got) == [(1, 10, 1)]
        assert got.acquisition_lock_timeout.total_seconds() == 30
        assert partition_of(got).records  # the batches holding them
        # acknowledging what this member does not hold: INVALID_RECORD_STATE, nothing changes
        response = member.acknowledge([(0, 0, ACCEPT)])
        assert partition_of(response).error_code == ErrorCode.invalid_record_state
        response = member.acknowledge([(1, 3, ACCEPT), (4, 4, RELEASE), (5, 5, REJECT)])
        assert partition_of(response).error_code == ErrorCode.none
        response = member.acknowledge([(1, 1, ACCEPT)])
        assert partition_of(response).error_code == ErrorCode.invalid_record_state
        # session epochs: a skipped epoch, a stranger, a ShareAcknowledge opening a session
        assert member.fetch(epoch=member.session_epoch + 1).error_code == (
            ErrorCode.invalid_share_session_epoch)
        assert Member(client, member_id=member.member_id + "x").acknowledge(
            [(6, 6, ACCEPT)], epoch=1).error_code == ErrorCode.share_session_not_found
        assert member.acknowledge([(6, 6, ACCEPT)], epoch=0).error_code == (
            ErrorCode.invalid_share_session_epoch)
        stranger = Member(client, member_id="not-a-member")
        stranger.topic_id = member.topic_id
        assert stranger.fetch().error_code == ErrorCode.unknown_member_id
        # released offset 4 comes back to another member with delivery count 2; 5 never does
        other = Member(client)
        other.heartbeat()
        other.topic_id = member.topic_id
        assert acquired(other.fetch()) == [(4, 4, 2)]
        # closing the session (epoch -1) releases what the member still holds
        closed = member.acknowledge([(6, 6, ACCEPT)], epoch=-1)
        assert partition_of(closed).error_code == ErrorCode.none
        assert acquired(other.fetch()) == [(7, 10, 2)]


def test_share_state_survives_kill_9(broker):
    produce(broker.bootstrap, 10)  # the topic exists; the group will start at 10
    with RawClient(broker.bootstrap) as client:
        member = Member(client)
        member.heartbeat()
        member.fetch(max_wait_ms=0)
        produce(broker.bootstrap, 10)
        assert acquired(member.fetch()) == [(10, 19, 1)]
        response = member.acknowledge([(10, 12, ACCEPT), (13, 13, REJECT), (14, 14, RELEASE)])
        assert partition_of(response).error_code == ErrorCode.none
        assert acquired(member.fetch()) == [(14, 14, 2)]  # acquired again, not written
    broker.kill9()
    broker.restart()
    with RawClient(broker.bootstrap) as client:
        member = Member(client)
        member.heartbeat()
        # accepted 10-12 and rejected 13 stay done; 14-19 come back with the delivery count
        # last written (14 was released once: 1; 15-19 were in flight at the ack: 1)
        assert acquired(member.fetch()) == [(14, 19, 2)]


def test_a_silent_member_is_removed_and_its_records_go_to_others(broker):
    produce(broker.bootstrap, 1)
    with RawClient(broker.bootstrap) as client:
        # the group's own session timeout: 1 s instead of 45 (share.session.timeout.ms)
        response = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 32, "resource_name": "g", "configs": [{
                "name": "share.session.timeout.ms", "config_operation": 0,
                "value": "1000"}]}], "validate_only": False})
        assert response.responses[0].error_code == ErrorCode.none
        silent, other = Member(client), Member(client)
        silent.heartbeat()
        other.heartbeat()
        other.topic_id = silent.topic_id
        silent.fetch(max_wait_ms=0)
        produce(broker.bootstrap, 3)
        assert acquired(silent.fetch()) == [(1, 3, 1)]
        assert acquired(other.fetch(max_wait_ms=0)) == []
        # silent stops heartbeating; other keeps going and, within its lock of 30 s, gets
        # the records back once silent's session has timed out
        got = []
        for _ in range(100):
            other.heartbeat(topics=None)
            got = acquired(other.fetch(max_wait_ms=200))
            if got:
                break
        assert got == [(1, 3, 2)]
        assert silent.fetch().error_code == ErrorCode.share_session_not_found
        assert silent.heartbeat(topics=None).error_code == ErrorCode.unknown_member_id


def test_auto_offset_reset_by_duration_starts_at_the_first_recent_record(broker):
    import time

    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    hour_ago = int(time.time() * 1000) - 3_600_000
    for i in range(3):
        producer.produce(TOPIC, value=b"old-%d" % i, timestamp=hour_ago)
    assert producer.flush(30) == 0
    for i in range(2):
        producer.produce(TOPIC, value=b"new-%d" % i)
    assert producer.flush(30) == 0
    with RawClient(broker.bootstrap) as client:
        response = client.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
            "resource_type": 32, "resource_name": "g", "configs": [{
                "name": "share.auto.offset.reset", "config_operation": 0,
                "value": "by_duration:PT10M"}]}], "validate_only": False})
        assert response.responses[0].error_code == ErrorCode.none
        member = Member(client)
        member.heartbeat()
        assert acquired(member.fetch()) == [(3, 4, 1)]


def test_membership_and_epochs_survive_kill_9(broker):
    """Members keep their member epochs and assignments across a broker kill -9: each goes
    on heartbeating with the epoch it had (no UNKNOWN_MEMBER_ID, no re-join), the group
    epoch does not move, and a member that left before the crash stays gone."""
    admin = kadmin.AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([kadmin.NewTopic("two", 2)])["two"].result()
    with RawClient(broker.bootstrap) as client:
        a, b, left = Member(client), Member(client), Member(client)
        for member in (a, b, left):
            member.heartbeat(topics=("two",))
        left.heartbeat(epoch=-1)
        for member in (a, b):
            member.heartbeat(topics=None)  # catch up with the group epoch
        before = client.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g"]}).groups[0]
    broker.kill9()
    broker.restart()
    with RawClient(broker.bootstrap) as client:
        for member in (a, b, left):
            member.client = client
        for member in (a, b):
            epoch = member.epoch
            response = member.heartbeat(topics=None)
            assert response.error_code == ErrorCode.none, response
            assert response.member_epoch == epoch
        after = client.call(ApiKey.SHARE_GROUP_DESCRIBE, 1, {"group_ids": ["g"]}).groups[0]
        assert after.group_epoch == before.group_epoch
        assert after.assignment_epoch == before.assignment_epoch

        def assignments(group):
            return {m.member_id: (m.member_epoch, sorted(
                p for tp in m.assignment.topic_partitions for p in tp.partitions))
                for m in group.members}

        assert assignments(after) == assignments(before)
        assert sorted(assignments(after)) == sorted([a.member_id, b.member_id])
        assert sorted(p for _, ps in assignments(after).values() for p in ps) == [0, 1]
        # the one that left cannot come back with its old epoch
        assert left.heartbeat(epoch=1, topics=None).error_code == ErrorCode.unknown_member_id
