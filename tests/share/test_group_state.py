"""The share-group membership state machine alone (no broker): joins, epochs, server-side
assignment with shared partitions, session expiry, and the records of
``__share_group_state`` (golden bytes and round trips)."""

from __future__ import annotations

import uuid

from databus.broker.share.group_state import (
    HeartbeatRequest,
    MemberGone,
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareGroupState,
    assign,
)
from databus.broker.share.partition_state import RecordState, StateBatch
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.share_group_state import (
    ConfigKey,
    MembershipKey,
    StateKey,
    StateValue,
    decode_config_value,
    decode_key,
    decode_membership_value,
    decode_state_value,
    encode_config_value,
    encode_key,
    encode_membership_value,
    encode_state_value,
)

TOPICS = {"jobs": 2, "other": 1}


def beat(coordinator, member, epoch, topics=("jobs",), now=0, group="g"):
    return coordinator.heartbeat(now, HeartbeatRequest(group, member, epoch, topics), TOPICS)


def test_assignment_shares_partitions_when_members_outnumber_them():
    assert assign({"a": ("jobs",)}, TOPICS) == {"a": {"jobs": (0, 1)}}
    assert assign({"a": ("jobs",), "b": ("jobs",), "c": ("jobs",)}, TOPICS) == {
        "a": {"jobs": (0,)}, "b": {"jobs": (1,)}, "c": {"jobs": (0,)}}
    assert assign({"a": ("jobs", "other"), "b": ("other",)}, TOPICS) == {
        "a": {"jobs": (0, 1), "other": (0,)}, "b": {"other": (0,)}}
    assert assign({"a": ("missing",)}, TOPICS) == {"a": {}}


def test_join_epochs_and_errors():
    coordinator = ShareGroupCoordinator()
    first = beat(coordinator, "a", 0)
    assert (first.error, first.member_epoch, first.assignment) == (
        ErrorCode.none, 1, {"jobs": (0, 1)})
    assert first.heartbeat_interval_ms == 5000
    # nothing changed: same epoch, no assignment sent
    same = beat(coordinator, "a", 1, topics=None)
    assert (same.member_epoch, same.assignment) == (1, None)
    second = beat(coordinator, "b", 0)
    assert second.member_epoch == 2 and second.assignment == {"jobs": (1,)}
    # a's next heartbeat (with its old epoch) catches up and carries the new assignment
    caught_up = beat(coordinator, "a", 1, topics=None)
    assert (caught_up.member_epoch, caught_up.assignment) == (2, {"jobs": (0,)})
    assert beat(coordinator, "a", 1, topics=None).error == ErrorCode.fenced_member_epoch
    assert beat(coordinator, "z", 4).error == ErrorCode.unknown_member_id
    assert beat(coordinator, "c", 0, topics=None).error == ErrorCode.invalid_request
    assert beat(coordinator, "", 0).error == ErrorCode.invalid_request
    left = beat(coordinator, "b", -1, topics=None)
    assert left.member_epoch == -1
    assert beat(coordinator, "a", 2, topics=None).assignment == {"jobs": (0, 1)}


def test_new_partitions_bump_the_epoch():
    coordinator = ShareGroupCoordinator()
    beat(coordinator, "a", 0)
    grown = coordinator.heartbeat(0, HeartbeatRequest("g", "a", 1), {"jobs": 3})
    assert (grown.member_epoch, grown.assignment) == (2, {"jobs": (0, 1, 2)})


def test_silent_members_expire_and_are_reported():
    coordinator = ShareGroupCoordinator(ShareGroupConfig(session_timeout_ms=100))
    beat(coordinator, "a", 0, now=0)
    beat(coordinator, "b", 0, now=50)
    assert coordinator.next_deadline() == 100
    assert coordinator.advance(99) == []
    assert coordinator.advance(100) == [MemberGone("g", "a")]
    snapshot = coordinator.snapshot("g")
    assert [m.member_id for m in snapshot.members] == ["b"]
    assert coordinator.advance(150) == [MemberGone("g", "b")]
    assert coordinator.snapshot("g").state is ShareGroupState.EMPTY
    assert coordinator.delete_group("g") == ErrorCode.none
    assert coordinator.delete_group("g") == ErrorCode.group_id_not_found


def test_max_size_and_non_empty_delete():
    coordinator = ShareGroupCoordinator(ShareGroupConfig(max_size=1))
    beat(coordinator, "a", 0)
    assert beat(coordinator, "b", 0).error == ErrorCode.group_max_size_reached
    assert coordinator.delete_group("g") == ErrorCode.non_empty_group


def test_per_group_config():
    coordinator = ShareGroupCoordinator(
        group_config=lambda group: ShareGroupConfig(heartbeat_interval_ms=len(group) * 1000))
    assert beat(coordinator, "a", 0, group="abc").heartbeat_interval_ms == 3000


# -- __share_group_state records ---------------------------------------------------------------

TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_state_key_and_value_golden_bytes():
    key = StateKey("g", TOPIC_ID, 3)
    assert encode_key(key) == (
        b"\x00\x00" b"\x00\x01g" + TOPIC_ID.bytes + b"\x00\x00\x00\x03")
    assert decode_key(encode_key(key)) == key
    value = StateValue(10, 0, 1234, (StateBatch(10, 12, RecordState.ARCHIVED, 2),))
    assert encode_state_value(value) == (
        b"\x00\x00"  # version
        b"\x00\x00\x00\x00\x00\x00\x00\x0a"  # start offset 10
        b"\x00\x00\x00\x00"  # state epoch
        b"\x00\x00\x00\x00\x00\x00\x04\xd2"  # write timestamp 1234
        b"\x00\x00\x00\x01"  # one batch
        b"\x00\x00\x00\x00\x00\x00\x00\x0a\x00\x00\x00\x00\x00\x00\x00\x0c\x04\x00\x02"
    )
    assert decode_state_value(encode_state_value(value)) == value


def test_config_records_round_trip():
    assert encode_key(ConfigKey("g")) == b"\x00\x01\x00\x01g"
    assert decode_key(b"\x00\x01\x00\x01g") == ConfigKey("g")
    configs = {"share.auto.offset.reset": "earliest"}
    assert decode_config_value(encode_config_value(configs)) == configs


def test_by_duration_and_group_config_checks():
    import pytest

    from databus.broker.share.service import (
        GroupConfigError,
        ShareConfig,
        check_group_configs,
        parse_by_duration,
    )

    assert parse_by_duration("by_duration:PT1H") == 3_600_000
    assert parse_by_duration("by_duration:P1DT0.5S") == 86_400_500
    for bad in ("by_duration:1h", "by_duration:P", "by_duration:PT", "by_duration:-PT1S"):
        with pytest.raises(ValueError):
            parse_by_duration(bad)
    config = ShareConfig()
    check_group_configs(config, {"share.auto.offset.reset": "by_duration:PT10M",
                                 "share.delivery.count.limit": "10"})
    for bad in ({"share.auto.offset.reset": "newest"},
                {"share.record.lock.duration.ms": "60001"},
                {"share.isolation.level": "dirty"}, {"consumer.session.timeout.ms": "1"}):
        with pytest.raises(GroupConfigError):
            check_group_configs(config, bad)


def test_membership_is_marked_dirty_exported_and_restored():
    """Changes mark the group dirty (idle heartbeats do not); an exported image, through
    its record encoding, restores members with their epochs, assignments and a fresh
    session timer."""
    coordinator = ShareGroupCoordinator()
    beat(coordinator, "a", 0)
    beat(coordinator, "b", 0)
    beat(coordinator, "a", 1, topics=None)
    assert coordinator.dirty == {"g"}
    coordinator.dirty.clear()
    beat(coordinator, "a", 2, topics=None)
    beat(coordinator, "b", 2, topics=None)
    assert coordinator.dirty == set()
    image = coordinator.export("g")
    assert decode_key(encode_key(MembershipKey("g"))) == MembershipKey("g")
    restored_image = decode_membership_value(encode_membership_value(image))
    assert restored_image == image
    after = ShareGroupCoordinator()
    after.restore("g", restored_image, now_ms=100_000)
    assert after.snapshot("g") == coordinator.snapshot("g")
    same = beat(after, "a", 2, topics=None, now=100_000)
    assert (same.error, same.member_epoch, same.assignment) == (ErrorCode.none, 2, None)
    assert after.dirty == set()
    # the session timer starts at the restore: silent members expire from there
    assert after.advance(100_000 + 45_000 - 1) == []
    assert [g.member_id for g in after.advance(100_000 + 45_000 * 2)] == ["a", "b"]
