"""The sans-I/O parts of KIP-848 consumer groups: the server-side assignors, the
``__consumer_offsets`` record layouts (golden bytes), session and revocation timeouts, and a
group rebuilt from its own records equal to the group that wrote them."""

from __future__ import annotations

import uuid

import pydantic
import pytest

from databus.broker.config import BrokerConfig
from databus.broker.coordinator.assignors import parse_assignors, range_, uniform
from databus.broker.coordinator.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    TopicImage,
)
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records import consumer_groups as rec

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def counts(assignment) -> dict[str, int]:
    return {m: sum(len(ps) for ps in a.values()) for m, a in assignment.items()}


def test_uniform_is_balanced_and_sticky():
    subs = {m: frozenset({T1}) for m in ("a", "b")}
    first = uniform(subs, {T1: 4}, {})
    assert counts(first) == {"a": 2, "b": 2}
    subs["c"] = frozenset({T1})
    second = uniform(subs, {T1: 4}, first)
    assert sorted(counts(second).values()) == [1, 1, 2]
    # only one partition moved: each old member keeps at least one of its own
    moved = sum(len(first[m][T1] - second[m].get(T1, frozenset())) for m in ("a", "b"))
    assert moved == 1
    # a whole topic from one member to ten: each keeps its quota, only the surplus moves
    alone = uniform({"m0": frozenset({T1})}, {T1: 1000}, {})
    ten = uniform({f"m{i}": frozenset({T1}) for i in range(10)}, {T1: 1000}, alone)
    assert set(counts(ten).values()) == {100}
    assert ten["m0"][T1] <= alone["m0"][T1]
    # heterogeneous: b alone takes T2, a and b share T1 as evenly as possible
    mixed = uniform({"a": frozenset({T1}), "b": frozenset({T1, T2})}, {T1: 2, T2: 2}, {})
    assert mixed["a"] == {T1: frozenset({0, 1})} and mixed["b"] == {T2: frozenset({0, 1})}


def test_range_gives_contiguous_ranges_first_members_one_more():
    out = range_({"b": frozenset({T1}), "a": frozenset({T1})}, {T1: 5}, {})
    assert out == {"a": {T1: frozenset({0, 1, 2})}, "b": {T1: frozenset({3, 4})}}


def test_assignor_names():
    assert parse_assignors("range, org.apache.kafka.coordinator.group.assignor."
                           "UniformAssignor") == ("range", "uniform")
    try:
        parse_assignors("sticky")
    except ValueError as exc:
        assert "sticky" in str(exc)
    else:
        raise AssertionError("an unknown assignor was accepted")


def test_record_golden_bytes():
    key = rec.encode_key(rec.RecordKey(rec.CURRENT_MEMBER, "g", "m"))
    assert key.hex() == "0008" "000167" "00016d"
    assert rec.decode_key(key) == rec.RecordKey(rec.CURRENT_MEMBER, "g", "m")
    value = rec.encode_current_member(rec.CurrentAssignment(
        3, 2, 2, {T1: frozenset({0, 1})}, {}))
    assert value.hex() == (
        "0000" "00000003" "00000002" "02"                      # epoch, previous, STABLE
        "02" + T1.bytes.hex() + "03" "00000000" "00000001" "00"  # assigned: T1 [0, 1]
        "01" "00")                                             # none pending; no tags
    meta = rec.MemberMetadata("i", None, "c", "/h", ("t",), None, "range", 1000)
    assert rec.encode_member_metadata(meta).hex() == (
        "0000" "0269" "00" "0263" "032f68" "02" "0274" "00" "0672616e6765" "000003e8" "00")
    assert rec.decode_member_metadata(rec.encode_member_metadata(meta)) == meta
    assert rec.encode_epoch(7).hex() == "0000" "00000007" "00"


def _join(coordinator, member, now=0, topics=None):
    return coordinator.heartbeat(now, HeartbeatRequest(
        "g", member, 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}),
        topics or {"t": TopicImage(T1, 2)})


def test_session_and_revocation_timeouts_remove_members():
    coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(session_timeout_ms=10_000))
    _join(coordinator, "a")
    _join(coordinator, "b", now=100)  # a must now give up a partition within 1000 ms
    assert coordinator.heartbeat(200, HeartbeatRequest(
        "g", "a", 1, owned={T1: frozenset({0, 1})}), {"t": TopicImage(T1, 2)})[0].error == (
        ErrorCode.none)
    assert coordinator.next_deadline() == 1200
    gone, records = coordinator.advance(1200)
    assert gone == [("g", "a")]
    # the member's three records become tombstones; the group epoch record moves on
    tombstones = [rec.decode_key(k) for k, v in records if v is None]
    assert sorted(k.record_type for k in tombstones) == [5, 7, 8]
    gone, _ = coordinator.advance(10_100)
    assert gone == [("g", "b")]
    assert coordinator.snapshot("g").state.value == "Empty"


def test_a_group_rebuilt_from_its_records_is_the_same_group():
    coordinator = ConsumerGroupCoordinator()
    log: dict[bytes, bytes] = {}
    for member in ("a", "b"):
        for key, value in _join(coordinator, member)[1]:
            if value is None:
                log.pop(key, None)
            else:
                log[key] = value
    reloaded = ConsumerGroupCoordinator()
    reloaded.load("g", log, now_ms=0)
    assert reloaded.snapshot("g") == coordinator.snapshot("g")
    # a heartbeat that changes nothing writes nothing (steady groups cost no appends)
    (b,) = [m for m in coordinator.snapshot("g").members if m.member_id == "b"]
    result, records = coordinator.heartbeat(5, HeartbeatRequest("g", "b", b.member_epoch),
                                            {"t": TopicImage(T1, 2)})
    assert (result.error, records) == (ErrorCode.none, [])


def test_broker_options_of_consumer_groups():
    config = BrokerConfig(**{"log.dirs": "/nonexistent",
                             "group.consumer.assignors": "range,uniform"})
    assert config.group_consumer_assignors == "range,uniform"
    assert (config.group_consumer_heartbeat_interval_ms,
            config.group_consumer_session_timeout_ms) == (5000, 45000)  # Kafka's defaults
    with pytest.raises(pydantic.ValidationError, match="unknown assignor 'sticky'"):
        BrokerConfig(**{"log.dirs": "/nonexistent", "group.consumer.assignors": "sticky"})
    with pytest.raises(ValueError, match="must be lower than group.consumer.session.timeout"):
        BrokerConfig(**{"log.dirs": "/nonexistent",
                        "group.consumer.heartbeat.interval.ms": 45000})
