"""Every advertised version of every group API, spoken on the wire against a real broker.

One member walks a whole group life at each JoinGroup version (join, sync, heartbeat, commit,
fetch, leave), simple (generation -1) commits go through every OffsetCommit/OffsetFetch
version, and the admin APIs are asked at each of theirs.  This is what "advertise only tested
versions" rests on; the real-client tests (test_clients.py) cover behaviour.
"""

from __future__ import annotations

import time

import pytest

from databus.protocol.api_keys import ApiKey
from databus.protocol.consumer_protocol import Assignment, decode_assignment
from databus.protocol.entities import build_request
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import encode_request
from tests.groups.harness import create_topic
from tests.groups.raw import RawClient, assignment, subscription
from tests.helpers.broker import BrokerProcess

TOPIC = "versions"

ADVERTISED = {
    ApiKey.FIND_COORDINATOR: (0, 4), ApiKey.JOIN_GROUP: (0, 9), ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4), ApiKey.LEAVE_GROUP: (0, 5), ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9), ApiKey.LIST_GROUPS: (0, 5), ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2), ApiKey.OFFSET_DELETE: (0, 0),
    # KIP-848: every version spoken in test_consumer_protocol_wire.py
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1), ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    with BrokerProcess(
        tmp_path_factory.mktemp("groups-versions"),
        options={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
                 "group.min.session.timeout.ms": 2000, "group.max.session.timeout.ms": 20000},
    ) as broker:
        create_topic(broker.bootstrap, TOPIC, 2)
        yield broker


@pytest.fixture
def raw(group_broker):
    with RawClient(group_broker.bootstrap) as client:
        yield client


def test_api_versions_lists_exactly_the_tested_ranges(raw):
    response = raw.call(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                 "client_software_version": "1"})
    advertised = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    for key, versions in ADVERTISED.items():
        assert advertised.get(key) == versions, key


@pytest.mark.parametrize("version", range(5))
def test_find_coordinator(raw, group_broker, version):
    fields = {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]}
    response = raw.call(ApiKey.FIND_COORDINATOR, version, fields)
    entries = response.coordinators if version >= 4 else [response]
    assert len(entries) == (2 if version >= 4 else 1)
    for entry in entries:
        assert entry.error_code == ErrorCode.none
        assert (entry.host, entry.port) == ("127.0.0.1", group_broker.port)


@pytest.mark.parametrize("join_version", range(10))
def test_group_life_at_each_version(raw, join_version):
    group = f"life-v{join_version}"
    sync_v, hb_v, leave_v = min(join_version, 5), min(join_version, 4), min(join_version, 5)
    join = {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": "", "protocol_type": "consumer", "reason": "test",
        "protocols": [{"name": "range", "metadata": subscription(TOPIC)}],
    }
    response = raw.call(ApiKey.JOIN_GROUP, join_version, join)
    if join_version >= 4:  # KIP-394: come back with the id we were given
        assert response.error_code == ErrorCode.member_id_required
        assert response.member_id
        response = raw.call(
            ApiKey.JOIN_GROUP, join_version, {**join, "member_id": response.member_id}
        )
    assert response.error_code == ErrorCode.none
    member = response.member_id
    assert response.generation_id == 1
    assert response.leader == member
    assert [m.member_id for m in response.members] == [member]
    assert response.members[0].metadata == subscription(TOPIC)
    assert response.protocol_name == "range"

    mine = assignment(TOPIC, [0, 1])
    sync = raw.call(ApiKey.SYNC_GROUP, sync_v, {
        "group_id": group, "generation_id": 1, "member_id": member,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": mine}],
    })
    assert sync.error_code == ErrorCode.none and sync.assignment == mine
    assert decode_assignment(sync.assignment) == Assignment(((TOPIC, 0), (TOPIC, 1)))

    hb = raw.call(
        ApiKey.HEARTBEAT, hb_v, {"group_id": group, "generation_id": 1, "member_id": member}
    )
    assert hb.error_code == ErrorCode.none
    hb = raw.call(
        ApiKey.HEARTBEAT, hb_v, {"group_id": group, "generation_id": 7, "member_id": member}
    )
    assert hb.error_code == ErrorCode.illegal_generation

    commit_v = max(2, min(join_version, 9))
    commit = raw.call(ApiKey.OFFSET_COMMIT, commit_v, {
        "group_id": group, "generation_id_or_member_epoch": 1, "member_id": member,
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": "meta"}]}],
    })
    assert commit.topics[0].partitions[0].error_code == ErrorCode.none

    described = raw.call(
        ApiKey.DESCRIBE_GROUPS, min(join_version, 5), {"groups": [group]}
    ).groups[0]
    assert described.group_state == "Stable"
    assert described.protocol_data == "range"
    assert [m.member_id for m in described.members] == [member]
    assert described.members[0].member_assignment == mine

    if leave_v >= 3:
        leave = raw.call(ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "members": [
            {"member_id": member, "group_instance_id": None, "reason": "bye"},
            {"member_id": "ghost", "group_instance_id": None, "reason": "bye"}]})
        assert leave.error_code == ErrorCode.none
        assert [m.error_code for m in leave.members] == [ErrorCode.none,
                                                          ErrorCode.unknown_member_id]
    else:
        leave = raw.call(ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "member_id": member})
        assert leave.error_code == ErrorCode.none
        again = raw.call(ApiKey.LEAVE_GROUP, leave_v, {"group_id": group, "member_id": member})
        assert again.error_code == ErrorCode.unknown_member_id
    described = raw.call(
        ApiKey.DESCRIBE_GROUPS, min(join_version, 5), {"groups": [group]}
    ).groups[0]
    assert described.group_state == "Empty" and described.members == ()


@pytest.mark.parametrize("commit_version", range(2, 10))
def test_simple_commits_at_each_offset_commit_version(raw, commit_version):
    group = f"simple-c{commit_version}"
    response = raw.call(ApiKey.OFFSET_COMMIT, commit_version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "retention_time": -1 if commit_version % 2 else 3_600_000,
        "topics": [
            {"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 100 + commit_version,
                 "committed_leader_epoch": 3, "committed_metadata": f"m{commit_version}"}]},
            {"name": "no-such-topic", "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}]},
        ],
    })
    errors = {t.name: t.partitions[0].error_code for t in response.topics}
    assert errors == {TOPIC: ErrorCode.none, "no-such-topic": ErrorCode.unknown_topic_or_partition}
    fetched = raw.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    (topic,) = fetched.topics
    assert topic.partitions[0].committed_offset == 100 + commit_version
    assert topic.partitions[0].metadata == f"m{commit_version}"
    assert topic.partitions[0].committed_leader_epoch == (3 if commit_version >= 6 else -1)


@pytest.mark.parametrize("fetch_version", range(1, 10))
def test_offset_fetch_at_each_version(raw, fetch_version):
    group = f"fetch-v{fetch_version}"
    raw.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 1, "committed_offset": 7, "committed_leader_epoch": 2,
             "committed_metadata": "x"}]}],
    })
    wanted = [{"name": TOPIC, "partition_indexes": [0, 1]}]
    if fetch_version >= 8:
        response = raw.call(ApiKey.OFFSET_FETCH, fetch_version, {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": wanted},
            {"group_id": "nobody", "member_id": None, "member_epoch": -1, "topics": wanted},
        ], "require_stable": False})
        assert [g.group_id for g in response.groups] == [group, "nobody"]
        topics = response.groups[0].topics
        unknown = response.groups[1].topics
        assert [p.committed_offset for p in unknown[0].partitions] == [-1, -1]
    else:
        response = raw.call(
            ApiKey.OFFSET_FETCH, fetch_version, {"group_id": group, "topics": wanted}
        )
        topics = response.topics
    by_partition = {p.partition_index: p for p in topics[0].partitions}
    assert by_partition[0].committed_offset == -1
    assert by_partition[1].committed_offset == 7
    assert by_partition[1].metadata == "x"
    if fetch_version >= 5:
        assert by_partition[1].committed_leader_epoch == 2


@pytest.mark.parametrize("version", range(6))
def test_list_groups(raw, version):
    raw.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": "listed", "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}],
    })
    response = raw.call(
        ApiKey.LIST_GROUPS, version, {"states_filter": ["Empty"], "types_filter": ["classic"]}
    )
    assert response.error_code == ErrorCode.none
    listed = {g.group_id: g for g in response.groups}
    assert "listed" in listed
    if version >= 4:
        assert listed["listed"].group_state == "Empty"
        none = raw.call(
            ApiKey.LIST_GROUPS, version, {"states_filter": ["Stable"], "types_filter": []}
        )
        assert "listed" not in {g.group_id for g in none.groups}


@pytest.mark.parametrize("version", range(6))
def test_describe_unknown_group_is_dead(raw, version):
    (group,) = raw.call(ApiKey.DESCRIBE_GROUPS, version, {"groups": ["never-seen"]}).groups
    assert group.error_code == ErrorCode.none and group.group_state == "Dead"


@pytest.mark.parametrize("version", range(3))
def test_delete_groups(raw, version):
    group = f"doomed-v{version}"
    raw.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}]}],
    })
    response = raw.call(ApiKey.DELETE_GROUPS, version, {"groups_names": [group, "no-such-group"]})
    assert {r.group_id: r.error_code for r in response.results} == {
        group: ErrorCode.none, "no-such-group": ErrorCode.group_id_not_found,
    }
    fetched = raw.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    assert fetched.topics == ()


def test_delete_groups_refuses_a_group_with_members(raw):
    join = {"group_id": "busy", "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(TOPIC)}]}
    assert raw.call(ApiKey.JOIN_GROUP, 3, join).error_code == ErrorCode.none
    (result,) = raw.call(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["busy"]}).results
    assert result.error_code == ErrorCode.non_empty_group


def test_offset_delete(raw, group_broker):
    group = "offdel"
    member = raw.call(ApiKey.JOIN_GROUP, 3, {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(TOPIC)}]}).member_id
    raw.call(ApiKey.SYNC_GROUP, 3, {"group_id": group, "generation_id": 1, "member_id": member,
                       "assignments": [{"member_id": member, "assignment": b""}]})
    create_topic_name = "offdel-other"
    create_topic(group_broker.bootstrap, create_topic_name, 1)
    raw.call(ApiKey.OFFSET_COMMIT, 9, {
        "group_id": group, "generation_id_or_member_epoch": 1, "member_id": member,
        "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 3,
                                            "committed_metadata": ""}]},
            {"name": create_topic_name, "partitions": [{"partition_index": 0,
                                                        "committed_offset": 4,
                                                        "committed_metadata": ""}]},
        ],
    })
    response = raw.call(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0}]},
        {"name": create_topic_name, "partitions": [{"partition_index": 0}]},
    ]})
    assert response.error_code == ErrorCode.none
    errors = {t.name: t.partitions[0].error_code for t in response.topics}
    assert errors == {TOPIC: ErrorCode.group_subscribed_to_topic,
                      create_topic_name: ErrorCode.none}
    fetched = raw.call(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "topics": None})
    assert {t.name for t in fetched.topics} == {TOPIC}
    missing = raw.call(ApiKey.OFFSET_DELETE, 0, {"group_id": "no-such", "topics": []})
    assert missing.error_code == ErrorCode.group_id_not_found


@pytest.mark.parametrize("session_timeout", [1999, 20001])
def test_session_timeout_outside_the_configured_range_is_refused(raw, session_timeout):
    # group.min/max.session.timeout.ms come from -o (2000 and 20000 in this module's broker)
    response = raw.call(ApiKey.JOIN_GROUP, 5, {
        "group_id": f"bounds-{session_timeout}", "session_timeout": session_timeout,
        "rebalance_timeout": 10_000, "member_id": "", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": subscription(TOPIC)}],
    })
    assert response.error_code == ErrorCode.invalid_session_timeout


def test_offset_commit_checks_member_then_generation_then_phase(raw, group_broker):
    """Kafka's order: UNKNOWN_MEMBER_ID, then ILLEGAL_GENERATION, and only then
    REBALANCE_IN_PROGRESS while the group awaits SyncGroup (it used to answer that first,
    whoever asked); the current generation commits during PreparingRebalance."""
    group = "commit-order"
    join = {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
        "member_id": "", "protocol_type": "consumer", "reason": "test",
        "protocols": [{"name": "range", "metadata": subscription(TOPIC)}],
    }
    member = raw.call(ApiKey.JOIN_GROUP, 9, join).member_id
    joined = raw.call(ApiKey.JOIN_GROUP, 9, {**join, "member_id": member})
    assert (joined.error_code, joined.generation_id) == (ErrorCode.none, 1)

    def commit(member_id: str, generation: int) -> ErrorCode:
        response = raw.call(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": generation,
            "member_id": member_id, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}],
        })
        return response.topics[0].partitions[0].error_code

    # CompletingRebalance (joined, not synced)
    assert commit("ghost", 1) == ErrorCode.unknown_member_id
    assert commit(member, 0) == ErrorCode.illegal_generation
    assert commit(member, 1) == ErrorCode.rebalance_in_progress
    raw.call(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": 1, "member_id": member,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member, "assignment": assignment(TOPIC, [0])}],
    })
    assert commit(member, 1) == ErrorCode.none
    # PreparingRebalance: a second member's join (left parked, unanswered) opens the next
    # generation; the current one may still commit, as consumers do on revocation
    with RawClient(group_broker.bootstrap) as other:
        other.sock.sendall(encode_request(build_request(ApiKey.JOIN_GROUP, 3, {
            **join, "member_id": ""}), 1, "other"))
        for _ in range(500):  # the other connection's join lands when it lands
            state = raw.call(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group]}).groups[0].group_state
            if state != "Stable":
                break
            time.sleep(0.01)
        assert state == "PreparingRebalance"
        assert commit(member, 1) == ErrorCode.none
        assert commit("ghost", 1) == ErrorCode.unknown_member_id
        assert commit(member, 2) == ErrorCode.illegal_generation
