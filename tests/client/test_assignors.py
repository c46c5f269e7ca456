"""Assignors to the letter of Kafka's (the ConsumerProtocol bytes: tests/protocol)."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from databus.client.assignors import (
    ASSIGNORS,
    CooperativeStickyAssignor,
    GroupMemberInfo,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from databus.protocol.consumer_protocol import Subscription


def members(n, topics=("t",), owned=None):
    owned = owned or {}
    return [
        GroupMemberInfo(f"m{i}", Subscription(tuple(topics), owned_partitions=tuple(owned.get(f"m{i}", ()))))
        for i in range(n)
    ]


def test_range_10_over_3_is_4_3_3():
    got = RangeAssignor().assign(members(3), {"t": 10})
    assert got == {
        "m0": [("t", p) for p in (0, 1, 2, 3)],
        "m1": [("t", p) for p in (4, 5, 6)],
        "m2": [("t", p) for p in (7, 8, 9)],
    }


def test_range_is_per_topic():
    got = RangeAssignor().assign(members(2, ("a", "b")), {"a": 3, "b": 3})
    assert got["m0"] == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    assert got["m1"] == [("a", 2), ("b", 2)]


def test_range_orders_static_members_first():
    ms = [
        GroupMemberInfo("a-dynamic", Subscription(("t",))),
        GroupMemberInfo("z-static", Subscription(("t",)), group_instance_id="inst"),
    ]
    got = RangeAssignor().assign(ms, {"t": 3})
    assert got["z-static"] == [("t", 0), ("t", 1)]


def test_roundrobin_deals_sorted_partitions_in_turn():
    got = RoundRobinAssignor().assign(members(3, ("a", "b")), {"a": 2, "b": 3})
    # a0 a1 b0 b1 b2 dealt to m0 m1 m2 m0 m1
    assert got == {
        "m0": [("a", 0), ("b", 1)],
        "m1": [("a", 1), ("b", 2)],
        "m2": [("b", 0)],
    }


def test_roundrobin_skips_unsubscribed_members():
    ms = [
        GroupMemberInfo("m0", Subscription(("a",))),
        GroupMemberInfo("m1", Subscription(("a", "b"))),
    ]
    got = RoundRobinAssignor().assign(ms, {"a": 1, "b": 2})
    # a0 -> m0; b0 -> m1 (next in turn); b1 -> m0 is skipped (not subscribed to b) -> m1
    assert got == {"m0": [("a", 0)], "m1": [("b", 0), ("b", 1)]}


def test_sticky_keeps_owned_partitions_when_a_member_leaves():
    before = StickyAssignor().assign(members(3), {"t": 9})
    survivors = {k: v for k, v in before.items() if k != "m2"}
    after = StickyAssignor().assign(members(2, owned=survivors), {"t": 9})
    for mid, tps in survivors.items():
        assert set(tps) <= set(after[mid])  # nothing moved away from a survivor
    assert sorted(after["m0"] + after["m1"]) == [("t", p) for p in range(9)]
    assert {len(v) for v in after.values()} == {4, 5}


def test_cooperative_withholds_partitions_that_change_owner():
    owned = {"m0": [("t", p) for p in range(6)]}
    got = CooperativeStickyAssignor().assign(members(2, owned=owned), {"t": 6})
    # m1 would take 3 of m0's partitions, but m0 must revoke them first
    assert got["m1"] == []
    assert len(got["m0"]) == 3
    # next round: m0 owns only its 3
    owned = {"m0": got["m0"]}
    got2 = CooperativeStickyAssignor().assign(members(2, owned=owned), {"t": 6})
    assert got2["m0"] == got["m0"] and len(got2["m1"]) == 3


@settings(max_examples=60, deadline=None)
@given(
    n_members=st.integers(1, 6),
    counts=st.dictionaries(st.sampled_from("abc"), st.integers(0, 12), min_size=1),
    name=st.sampled_from(sorted(ASSIGNORS)),
)
def test_every_partition_assigned_once_and_balanced(n_members, counts, name):
    ms = members(n_members, tuple(counts))
    got = ASSIGNORS[name]().assign(ms, counts)
    flat = [tp for tps in got.values() for tp in tps]
    assert Counter(flat) == Counter((t, p) for t, n in counts.items() for p in range(n))
    if name != "range":  # range balances per topic, not overall
        sizes = [len(v) for v in got.values()]
        assert max(sizes) - min(sizes) <= 1
