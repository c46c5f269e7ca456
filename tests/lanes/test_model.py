"""The lane registry's pure core (databus.lanes.model), the SDK's lane header and the
command's durations: plain data, no sockets."""

from __future__ import annotations

import re

import pytest

from databus.lanes import model
from databus.lanes.command import parse_duration_ms
from databus.sdk.client import with_lane

T = "{topic}.lane.{lane}"


def lane(name, created=1000, ttl=10_000):
    return model.Lane(name, "me", created, ttl, created + ttl)


def put(reg, key, record, offset):
    reg.apply(key, None if record is None else model.encode(record), offset)


def test_records_fold_into_state_and_tombstones_remove_them():
    reg = model.Registry()
    put(reg, model.lane_key("a"), lane("a"), 0)
    put(reg, model.consumer_key("a", "c1"), model.LaneConsumer("a", "c1", 2000, 1000), 1)
    assert reg.live_lane("a", 5000) == lane("a")
    assert reg.live_lane("a", 11_000) is None  # past created + ttl
    assert [c.id for c in reg.live_consumers("a", 4999)] == ["c1"]
    assert reg.live_consumers("a", 5000) == []  # three heartbeat intervals without one
    put(reg, model.consumer_key("a", "c1"), None, 2)
    put(reg, model.lane_key("a"), None, 3)
    assert reg.lanes == {} and reg.consumers == {}


def test_a_record_that_does_not_parse_is_skipped_not_fatal():
    reg = model.Registry()
    reg.apply(b"lane/x", b"{not json", 7)
    reg.apply(b"what/x", b"{}", 8)
    put(reg, model.lane_key("a"), lane("a"), 9)
    assert [offset for offset, _ in reg.skipped] == [7, 8]
    assert list(reg.lanes) == ["a"]


def test_the_first_claim_in_the_log_wins_for_every_reader():
    reg = model.Registry()
    put(reg, model.lane_key("a"), lane("a"), 0)
    expired = lane("a")
    assert reg.expired(20_000) == [expired]
    assert reg.claim_winner(expired, 20_000) is None
    put(reg, model.claim_key("a", 1000, "s2"), model.Claim("a", 1000, "s2", 20_000), 5)
    put(reg, model.claim_key("a", 1000, "s1"), model.Claim("a", 1000, "s1", 20_001), 6)
    assert reg.claim_winner(expired, 20_002).claimant == "s2"
    # after compaction only the claims survive, with their offsets: the same winner
    compacted = model.Registry()
    put(compacted, model.lane_key("a"), lane("a"), 0)
    put(compacted, model.claim_key("a", 1000, "s1"), model.Claim("a", 1000, "s1", 20_001), 6)
    put(compacted, model.claim_key("a", 1000, "s2"), model.Claim("a", 1000, "s2", 20_000), 5)
    assert compacted.claim_winner(expired, 20_002).claimant == "s2"
    # a winner that died: its claim times out and the next fresh claim wins
    later = 20_000 + model.CLAIM_TIMEOUT_MS
    assert reg.claim_winner(expired, later).claimant == "s1"
    # the lane deleted: the claims are stale (their tombstones are due)
    put(reg, model.lane_key("a"), None, 7)
    assert {c.claimant for c in reg.stale_claims()} == {"s1", "s2"}


def test_claims_of_an_earlier_lane_of_the_same_name_do_not_count():
    reg = model.Registry()
    put(reg, model.claim_key("a", 1000, "s1"), model.Claim("a", 1000, "s1", 20_000), 1)
    put(reg, model.lane_key("a"), lane("a", created=30_000), 2)
    assert reg.claim_winner(lane("a", created=30_000), 50_000) is None


def test_lane_topics_split_back_into_topic_and_lane():
    assert model.lane_topic(T, "orders.eu", "fx-1") == "orders.eu.lane.fx-1"
    assert model.parse_lane_topic(T, "orders.eu.lane.fx-1") == ("orders.eu", "fx-1")
    assert model.parse_lane_topic(T, "orders") is None
    assert model.parse_lane_topic("lane-{lane}-{topic}", "lane-a-b.c") == ("b.c", "a")
    with pytest.raises(ValueError, match="needs {topic} and {lane}"):
        model.check_template("{topic}.x")
    with pytest.raises(ValueError, match="invalid lane name 'a.b'"):
        model.check_lane_name("a.b")


def test_subscriptions_of_lane_and_main_consumers():
    reg = model.Registry()
    put(reg, model.lane_key("a"), lane("a"), 0)
    put(reg, model.lane_key("b"), lane("b"), 1)
    put(reg, model.consumer_key("b", "c"), model.LaneConsumer("b", "c", 2000, 1000), 2)
    existing = {"t", "t.lane.a", "t.lane.b"}

    def sub(now=3000, **kw):
        args = {"lane": None, "consume_main": False, "consume_orphans": False, **kw}
        return model.subscription(reg, ["t"], T, now, existing=existing, **args)

    assert sub() == ["t"]
    assert sub(lane="a") == ["t.lane.a"]
    assert sub(lane="a", consume_main=True) == ["t.lane.a", "t"]
    # a has no consumer: an orphan; b has one: never taken
    assert sub(consume_orphans=True) == ["t", "t.lane.a"]
    # b's consumer went quiet: b is an orphan too
    assert sub(now=6000, consume_orphans=True) == ["t", "t.lane.a", "t.lane.b"]
    # expired: nobody reads the lane's topics (they are about to be deleted)
    assert sub(now=12_000, consume_orphans=True) == ["t"]
    assert sub(now=12_000, lane="a", consume_main=True) == ["t"]


def test_readers_that_are_not_lane_consumers_select_lanes_by_policy():
    """Sinks and indexes (`lanes:`): main only by default, one lane, or all; a regex for
    the main lane never matches a lane topic (docs/lanes.md)."""
    names = ["orders", "orders.lane.fx", "orders.lane.other", "orders2", "orders2.lane.fx",
             "pay", "pay.lane.fx", "orders.lane.fx.lane.y"]

    def matched(pattern):
        return [n for n in names if re.fullmatch(pattern, n)]

    select = model.reader_selection
    assert select(["orders", "pay"], None, "main", T) == (["orders", "pay"], None)
    assert select(["orders", "pay"], None, "fx", T) == (["orders.lane.fx", "pay.lane.fx"], None)
    _, main = select([], "orders.*", "main", T)
    assert matched(main) == ["orders", "orders2"]
    _, lane_fx = select([], "orders.*", "fx", T)
    assert matched(lane_fx) == ["orders.lane.fx", "orders2.lane.fx"]
    _, every = select(["orders"], None, "all", T)
    assert matched(every) == ["orders", "orders.lane.fx", "orders.lane.other"]
    _, other_template = select(["orders"], None, "all", "lane-{lane}-{topic}")
    assert re.fullmatch(other_template, "lane-fx-orders") and not re.fullmatch(
        other_template, "orders.lane.fx")
    assert model.check_reader_lanes("all") == "all"
    with pytest.raises(ValueError, match="`main`, `all` or a lane name, got 'a.b'"):
        model.check_reader_lanes("a.b")


def test_the_sdk_sets_the_lane_header_once():
    forwarded = [("trace", b"1"), ("databus-lane", b"old")]
    assert with_lane(forwarded, "new", "databus-lane") == [
        ("trace", b"1"), ("databus-lane", b"new")]
    assert with_lane(None, "x", "h") == [("h", b"x")]
    assert with_lane({"a": b"1"}, "x", "h") == [("a", b"1"), ("h", b"x")]
    with pytest.raises(ValueError, match="lane must be a non-empty str"):
        with_lane(None, "", "h")


def test_durations():
    assert parse_duration_ms("2h") == 7_200_000
    assert parse_duration_ms("1h30m") == 5_400_000
    assert parse_duration_ms("500ms") == 500
    assert parse_duration_ms("1500") == 1500
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration_ms("2 hours")
