"""The consumer group protocol of KIP-848 at the wire, request by request against a
``databus broker`` process: the exact bytes of ConsumerGroupHeartbeat and
ConsumerGroupDescribe answers, incremental reconciliation (a partition reaches its new owner
only after the old owner's heartbeat no longer lists it), static members (leave with epoch
-2, rejoin under a new member id), Kafka's error codes, offsets committed and fetched with
the member epoch (OffsetCommit/OffsetFetch v9), a silent member removed after the session
timeout, and the classic-or-consumer rule (an empty classic group is taken over, a live one
is not; DeleteGroups).
"""

from __future__ import annotations

import contextlib
import struct
import time

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build_request
from databus.protocol.errors import ErrorCode
from tests.broker.wire import WireClient
from tests.groups.harness import create_topic
from tests.groups.raw import RawClient
from tests.helpers.broker import BrokerProcess

HB, DESCRIBE = ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE


def join(client, group: str, member: str, topics=None, *, regex=None, instance=None,
         assignor=None, version: int = 1):
    return client.call(HB, version, {
        "group_id": group, "member_id": member, "member_epoch": 0, "instance_id": instance,
        "rebalance_timeout": 10_000, "subscribed_topic_names": topics,
        "subscribed_topic_regex": regex, "server_assignor": assignor, "topic_partitions": [],
    })


def beat(client, group: str, member: str, epoch: int, owned=None, instance=None):
    """A heartbeat with only the changed fields; ``owned``: [(topic id, [partitions])]."""
    return client.call(HB, 1, {
        "group_id": group, "member_id": member, "member_epoch": epoch, "instance_id": instance,
        "topic_partitions": None if owned is None else [
            {"topic_id": t, "partitions": ps} for t, ps in owned],
    })


@contextlib.contextmanager
def bounded_wait(seconds: float):
    """A bound on a wait for the broker (not a timing assertion): call the yielded check
    in the loop."""
    deadline = time.monotonic() + seconds

    def check() -> None:
        assert time.monotonic() < deadline, "the broker did not get there"

    yield check


def parts(response) -> list[int]:
    return sorted(p for tp in response.assignment.topic_partitions for p in tp.partitions)


def raw_body(bootstrap: str, api_key: int, version: int, fields: dict) -> bytes:
    """The response body's bytes (after correlation id and the empty header tag section)."""
    with WireClient(bootstrap) as wire:
        correlation = wire.send(build_request(api_key, version, fields))
        frame = wire.read_frame()
    assert struct.unpack(">i", frame[:4])[0] == correlation and frame[4] == 0
    return frame[5:]


def s(text: str) -> str:
    """A compact string in hex."""
    return f"{len(text) + 1:02x}" + text.encode().hex()


def test_heartbeat_and_describe_golden_bytes(broker):
    create_topic(broker.bootstrap, "gold", 2)
    body = raw_body(broker.bootstrap, HB, 1, {
        "group_id": "gold-g", "member_id": "m1", "member_epoch": 0,
        "rebalance_timeout": 10_000, "subscribed_topic_names": ["gold"],
        "topic_partitions": []})
    with RawClient(broker.bootstrap) as client:
        described = client.call(DESCRIBE, 1, {"group_ids": ["gold-g"]})
    topic_id = described.groups[0].members[0].assignment.topic_partitions[0].topic_id.bytes.hex()
    assert body.hex() == (
        "00000000" "0000" "00" + s("m1") + "00000001" "00001388"   # epoch 1, 5 s interval
        "01" "02" + topic_id + "03" "00000000" "00000001" "00"     # assignment: gold [0, 1]
        "00" "00")
    body = raw_body(broker.bootstrap, DESCRIBE, 1, {"group_ids": ["gold-g"],
                                                     "include_authorized_operations": False})
    assignment = "02" + topic_id + s("gold") + "03" "00000000" "00000001" "00" "00"
    assert body.hex() == (
        "00000000" "02" "0000" "00" + s("gold-g") + s("Stable") + "00000001" "00000001"
        + s("uniform") + "02" + s("m1") + "00" "00" "00000001" + s("wire-test")
        + s("/127.0.0.1") + "02" + s("gold") + "00" + assignment + assignment
        + "01" "00" "80000000" "00" "00")
    # an error answer: Kafka's code and message, no member id, epoch and interval 0
    body = raw_body(broker.bootstrap, HB, 1, {
        "group_id": "no-such-group", "member_id": "m1", "member_epoch": 3,
        "topic_partitions": None})
    assert body.hex() == ("00000000" "0045" + s("Consumer group no-such-group not found.")
                          + "00" "00000000" "00000000" "ff" "00")


def test_a_partition_moves_only_after_its_owner_revoked_it(broker):
    create_topic(broker.bootstrap, "moves", 4)
    with RawClient(broker.bootstrap) as client:
        a = join(client, "moves-g", "a", ["moves"])
        assert (a.error_code, a.member_epoch, parts(a)) == (ErrorCode.none, 1, [0, 1, 2, 3])
        topic_id = a.assignment.topic_partitions[0].topic_id
        b = join(client, "moves-g", "b", ["moves"])
        # b is at the new epoch, but its partitions are still a's: it gets none yet
        assert (b.member_epoch, parts(b)) == (2, [])
        a = beat(client, "moves-g", "a", 1, owned=[(topic_id, [0, 1, 2, 3])])
        assert (a.member_epoch, parts(a)) == (1, [0, 1])  # keep 0-1, give 2-3 up
        b = beat(client, "moves-g", "b", 2)
        assert b.assignment is None  # still nothing for b: a has not confirmed
        group = client.call(DESCRIBE, 1, {"group_ids": ["moves-g"]}).groups[0]
        assert group.group_state == "Reconciling"
        assert {m.member_id: [tp.partitions for tp in m.target_assignment.topic_partitions]
                for m in group.members} == {"a": [(0, 1)], "b": [(2, 3)]}
        a = beat(client, "moves-g", "a", 1, owned=[(topic_id, [0, 1])])
        assert (a.member_epoch, a.assignment) == (2, None)
        b = beat(client, "moves-g", "b", 2)
        assert (b.member_epoch, parts(b)) == (2, [2, 3])
        group = client.call(DESCRIBE, 1, {"group_ids": ["moves-g"]}).groups[0]
        assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 2, 2)
        # a lost answer: the previous epoch with partitions the member still has is accepted
        again = beat(client, "moves-g", "a", 1, owned=[(topic_id, [0])])
        assert (again.error_code, again.member_epoch) == (ErrorCode.none, 2)
        assert beat(client, "moves-g", "a", 1, owned=[(topic_id, [2])]).error_code == (
            ErrorCode.fenced_member_epoch)
        assert beat(client, "moves-g", "b", 3).error_code == ErrorCode.fenced_member_epoch
        # b leaves: a gets everything back at the next epoch
        left = beat(client, "moves-g", "b", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        a = beat(client, "moves-g", "a", 2)
        assert (a.member_epoch, parts(a)) == (3, [0, 1, 2, 3])
        assert beat(client, "moves-g", "b", 2).error_code == ErrorCode.unknown_member_id


def test_static_member_rejoins_with_its_partitions(broker):
    create_topic(broker.bootstrap, "static-cg", 2)
    with RawClient(broker.bootstrap) as client:
        first = join(client, "static-g", "m-1", ["static-cg"], instance="i-1")
        other = join(client, "static-g", "m-2", ["static-cg"], instance="i-2")
        assert other.member_epoch == 2
        first = beat(client, "static-g", "m-1", 1, owned=[
            (first.assignment.topic_partitions[0].topic_id, [0, 1])])
        kept = parts(first)
        assert len(kept) == 1
        # the same instance id while m-1 is still in the group
        taken = join(client, "static-g", "m-3", ["static-cg"], instance="i-1")
        assert taken.error_code == ErrorCode.unreleased_instance_id
        wrong = beat(client, "static-g", "m-2", -2, instance="i-1")
        assert wrong.error_code == ErrorCode.fenced_instance_id
        # m-1 restarts: it leaves with -2 and comes back as m-3 with its partition (and,
        # owning nothing it must give up, at the group's epoch)
        assert beat(client, "static-g", "m-1", -2, instance="i-1").member_epoch == -2
        back = join(client, "static-g", "m-3", ["static-cg"], instance="i-1")
        assert (back.error_code, back.member_epoch, parts(back)) == (ErrorCode.none, 2, kept)
        group = client.call(DESCRIBE, 1, {"group_ids": ["static-g"]}).groups[0]
        assert group.group_epoch == 2  # no rebalance
        assert sorted((m.member_id, m.instance_id) for m in group.members) == [
            ("m-2", "i-2"), ("m-3", "i-1")]


def test_heartbeat_errors(broker):
    create_topic(broker.bootstrap, "errs", 1)
    with RawClient(broker.bootstrap) as client:
        assert join(client, "errs-g", "m", ["errs"], assignor="sticky").error_code == (
            ErrorCode.unsupported_assignor)
        assert join(client, "errs-g", "m", regex="(").error_code == (
            ErrorCode.invalid_regular_expression)
        missing = client.call(HB, 1, {"group_id": "errs-g", "member_id": "m", "member_epoch": 0,
                                      "rebalance_timeout": 1000, "topic_partitions": []})
        assert missing.error_code == ErrorCode.invalid_request
        assert "SubscribedTopicNames" in missing.error_message
        assert join(client, "errs-g", "", ["errs"]).error_code == ErrorCode.invalid_request
        # v0: the coordinator names a member that comes without an id
        named = join(client, "errs-g", "", ["errs"], version=0)
        assert named.error_code == ErrorCode.none and len(named.member_id) == 22
        # a regex subscription (v1) matches existing topics, internal ones excluded
        by_regex = join(client, "errs-g", "r", regex="err.*")
        assert by_regex.error_code == ErrorCode.none
        assert beat(client, "errs-g", "stranger", 1).error_code == ErrorCode.unknown_member_id
        assert beat(client, "errs-g", "r", -1).error_code == ErrorCode.none
        # a classic JoinGroup for a consumer group that has members
        joined = client.call(ApiKey.JOIN_GROUP, 5, {
            "group_id": "errs-g", "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        assert joined.error_code == ErrorCode.inconsistent_group_protocol
        # r left: the group epoch moved, the new target comes with the next heartbeat
        described = client.call(DESCRIBE, 0, {"group_ids": ["errs-g", "no-such-group"]})
        assert [(g.error_code, g.group_state) for g in described.groups] == [
            (ErrorCode.none, "Assigning"), (ErrorCode.group_id_not_found, "")]
        listed = client.call(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                     "types_filter": ["consumer"]})
        assert ("errs-g", "consumer") in [(g.group_id, g.group_type) for g in listed.groups]


def test_offsets_carry_the_member_epoch(broker):
    create_topic(broker.bootstrap, "epochs", 1)
    with RawClient(broker.bootstrap) as client:
        member = join(client, "epochs-g", "m", ["epochs"])
        epoch = member.member_epoch

        def commit(version: int, member_epoch: int):
            response = client.call(ApiKey.OFFSET_COMMIT, version, {
                "group_id": "epochs-g", "generation_id_or_member_epoch": member_epoch,
                "member_id": "m", "group_instance_id": None, "retention_time": -1,
                "topics": [{"name": "epochs", "partitions": [
                    {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                     "committed_metadata": ""}]}]})
            return response.topics[0].partitions[0].error_code

        def fetch(member_epoch: int):
            return client.call(ApiKey.OFFSET_FETCH, 9, {"groups": [{
                "group_id": "epochs-g", "member_id": "m", "member_epoch": member_epoch,
                "topics": [{"name": "epochs", "partition_indexes": [0]}]}],
                "require_stable": False}).groups[0]

        assert commit(9, epoch + 1) == ErrorCode.stale_member_epoch
        assert commit(8, epoch) == ErrorCode.unsupported_version
        assert commit(9, epoch) == ErrorCode.none
        assert fetch(epoch + 1).error_code == ErrorCode.stale_member_epoch
        fetched = fetch(epoch)
        assert fetched.error_code == ErrorCode.none
        assert fetched.topics[0].partitions[0].committed_offset == 7


def test_an_empty_classic_group_is_taken_over_and_deleted(broker):
    create_topic(broker.bootstrap, "takeover", 1)
    with RawClient(broker.bootstrap) as client:
        committed = client.call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": "takeover-g", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "takeover", "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert committed.topics[0].partitions[0].error_code == ErrorCode.none
        # offsets only (an Empty classic group): a consumer-protocol member takes it over
        joined = join(client, "takeover-g", "m", ["takeover"])
        assert (joined.error_code, parts(joined)) == (ErrorCode.none, [0])
        fetched = client.call(ApiKey.OFFSET_FETCH, 9, {"groups": [{
            "group_id": "takeover-g", "member_id": "m", "member_epoch": joined.member_epoch,
            "topics": [{"name": "takeover", "partition_indexes": [0]}]}]}).groups[0]
        assert fetched.topics[0].partitions[0].committed_offset == 3

        def delete():
            return client.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["takeover-g"]}
                               ).results[0].error_code

        assert delete() == ErrorCode.non_empty_group
        assert beat(client, "takeover-g", "m", -1).error_code == ErrorCode.none
        assert delete() == ErrorCode.none
        gone = client.call(DESCRIBE, 1, {"group_ids": ["takeover-g"]}).groups[0]
        assert gone.error_code == ErrorCode.group_id_not_found


def test_a_silent_member_expires_and_a_live_classic_group_stays_classic(tmp_path):
    options = {"group.consumer.session.timeout.ms": 1000,
               "group.consumer.heartbeat.interval.ms": 300, "group.initial.rebalance.delay.ms": 0}
    with BrokerProcess(tmp_path, options=options) as broker:
        create_topic(broker.bootstrap, "silent", 2)
        with RawClient(broker.bootstrap) as client:
            a = join(client, "silent-g", "a", ["silent"])
            topic_id = a.assignment.topic_partitions[0].topic_id
            join(client, "silent-g", "b", ["silent"])  # then never heard from again
            owned, epoch = [0, 1], a.member_epoch
            with bounded_wait(20) as expired:
                while owned != [0, 1] or epoch < 3:
                    expired()
                    a = beat(client, "silent-g", "a", epoch, owned=[(topic_id, owned)])
                    assert a.error_code == ErrorCode.none
                    epoch = a.member_epoch
                    owned = parts(a) if a.assignment is not None else owned
                    time.sleep(0.2)
            group = client.call(DESCRIBE, 1, {"group_ids": ["silent-g"]}).groups[0]
            assert [m.member_id for m in group.members] == ["a"]
            # a classic group with a member is not a consumer group
            classic = client.call(ApiKey.JOIN_GROUP, 0, {
                "group_id": "classic-g", "session_timeout": 10_000, "member_id": "",
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
            assert classic.error_code == ErrorCode.none
            refused = join(client, "classic-g", "m", ["silent"])
            assert refused.error_code == ErrorCode.group_id_not_found
            assert refused.error_message == "Group classic-g is not a consumer group"
