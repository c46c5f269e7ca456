"""Committed offsets and Kafka's expiry rules (offsets.retention.minutes, KIP-211)."""

from __future__ import annotations

from databus.broker.coordinator.group_state import GroupSnapshot, GroupState
from databus.broker.coordinator.offset_store import CommittedOffset, OffsetStore

DAY = 86_400_000


def snap(state, protocol_type="consumer", state_ts=0):
    return GroupSnapshot("g", state, protocol_type, 1, "range", None, state_ts, ())


def test_put_get_and_tombstone():
    store = OffsetStore()
    store.put("g", ("t", 0), CommittedOffset(5, -1, "meta", 1))
    assert store.get("g", ("t", 0)).offset == 5
    store.put("g", ("t", 0), CommittedOffset(9, 2, "", 2))
    assert store.offsets("g") == {("t", 0): CommittedOffset(9, 2, "", 2)}
    store.put("g", ("t", 0), None)
    assert store.get("g", ("t", 0)) is None and not store.has_offsets("g")
    assert store.group_ids() == []


def test_empty_consumer_group_expires_from_when_it_became_empty():
    store = OffsetStore()
    store.put("g", ("t", 0), CommittedOffset(1, -1, "", commit_timestamp_ms=0))
    became_empty = 5 * DAY
    empty = snap(GroupState.EMPTY, state_ts=became_empty)
    assert store.expired("g", empty, None, became_empty + 7 * DAY - 1, 7 * DAY) == []
    assert store.expired("g", empty, None, became_empty + 7 * DAY, 7 * DAY) == [("t", 0)]


def test_stable_group_keeps_offsets_of_subscribed_topics_only():
    store = OffsetStore()
    store.put("g", ("t", 0), CommittedOffset(1, -1, "", 0))
    store.put("g", ("old", 0), CommittedOffset(1, -1, "", 0))
    stable = snap(GroupState.STABLE)
    assert store.expired("g", stable, {"t"}, 30 * DAY, 7 * DAY) == [("old", 0)]


def test_offsets_only_group_expires_per_commit():
    store = OffsetStore()
    store.put("s", ("t", 0), CommittedOffset(1, -1, "", 0))
    store.put("s", ("t", 1), CommittedOffset(1, -1, "", 3 * DAY))
    assert store.expired("s", None, None, 8 * DAY, 7 * DAY) == [("t", 0)]
    simple = snap(GroupState.EMPTY, protocol_type=None, state_ts=0)
    assert store.expired("s", simple, None, 8 * DAY, 7 * DAY) == [("t", 0)]


def test_explicit_expire_timestamp_wins():
    store = OffsetStore()
    store.put("g", ("t", 0), CommittedOffset(1, -1, "", 0, expire_timestamp_ms=100))
    assert store.expired("g", snap(GroupState.STABLE), {"t"}, 100, 7 * DAY) == [("t", 0)]


def test_drop_group_lists_partitions_for_tombstones():
    store = OffsetStore()
    store.put("g", ("t", 0), CommittedOffset(1, -1, "", 0))
    store.put("g", ("t", 1), CommittedOffset(1, -1, "", 0))
    assert sorted(store.drop_group("g")) == [("t", 0), ("t", 1)]
    assert not store.has_offsets("g")
