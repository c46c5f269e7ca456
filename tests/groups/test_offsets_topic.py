"""__consumer_offsets records: Kafka's partition mapping and binary layouts, pinned."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from databus.broker.coordinator.group_state import GroupSnapshot, GroupState, MemberSnapshot
from databus.protocol.internal_records import java_string_hashcode, partition_for
from databus.protocol.internal_records.consumer_offsets import (
    GroupKey,
    OffsetKey,
    OffsetsRecordError,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", 0),
        ("a", 97),
        ("Aa", 2112),
        ("BB", 2112),  # the classic Java collision
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),  # hashes to Integer.MIN_VALUE
        ("\U0001F600", 0xD83D * 31 + 0xDE00),  # UTF-16 surrogate pair, as Java sees it
    ],
)
def test_java_string_hashcode(text, expected):
    assert java_string_hashcode(text) == expected


@pytest.mark.parametrize(
    "group, expected",
    [
        ("hello", 99162322 % 50),
        ("Hello World", 862545276 % 50),
        # Utils.abs(Integer.MIN_VALUE) is 0 (Math.abs would stay negative).
        ("polygenelubricants", 0),
        ("", 0),
    ],
)
def test_partition_for_matches_kafka(group, expected):
    assert partition_for(group, 50) == expected


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_is_in_range(group, n):
    assert 0 <= partition_for(group, n) < n


def test_offset_commit_key_golden():
    key = OffsetKey("g", "t", 3)
    data = encode_offset_key(key)
    assert data == bytes.fromhex("0001" "000167" "000174" "00000003")
    assert decode_key(data) == key
    # version 0 keys (older brokers) have the same fields
    assert decode_key(bytes.fromhex("0000" "000167" "000174" "00000003")) == key


def test_group_metadata_key_golden():
    assert encode_group_key(GroupKey("grp")) == bytes.fromhex("0002" "0003677270")
    assert decode_key(bytes.fromhex("0002" "0003677270")) == GroupKey("grp")


def test_offset_commit_value_v3_golden():
    value = OffsetValue(offset=42, leader_epoch=-1, metadata="m", commit_timestamp_ms=1000)
    data = encode_offset_value(value)
    assert data == bytes.fromhex(
        "0003" "000000000000002a" "ffffffff" "00016d" "00000000000003e8"
    )
    assert decode_offset_value(data) == value


def test_offset_commit_value_v1_has_expire_timestamp():
    data = bytes.fromhex("0001" "0000000000000007" "0000" "0000000000000001" "0000000000000009")
    assert decode_offset_value(data) == OffsetValue(7, -1, "", 1, 9)
    # A commit with an explicit retention is written as v1, the only version with the field.
    assert encode_offset_value(OffsetValue(7, -1, "", 1, 9)) == data


def test_group_metadata_value_v3_golden():
    snap = GroupSnapshot(
        "grp", GroupState.STABLE, "consumer", 5, "range", "m1", 77,
        (MemberSnapshot("m1", None, "c", "/h", 300, 100, b"S", b"A"),),
    )
    data = encode_group_value(snap)
    assert data == bytes.fromhex(
        "0003"
        "0008" + b"consumer".hex() + "00000005" "0005" + b"range".hex() + "0002" + b"m1".hex()
        + "000000000000004d" "00000001"
        "0002" + b"m1".hex() + "ffff" "000163" "00022f68" "0000012c" "00000064"
        "0000000153" "0000000141"
    )
    assert decode_group_value("grp", data) == snap


def test_empty_group_value_round_trips_with_null_protocol_and_leader():
    snap = GroupSnapshot("g", GroupState.EMPTY, "consumer", 9, None, None, 5, ())
    assert decode_group_value("g", encode_group_value(snap)) == snap


@pytest.mark.parametrize(
    "data, message",
    [
        (b"\x00", "truncated"),
        (bytes.fromhex("0001" "0001"), "truncated"),
        (bytes.fromhex("ffff"), "unknown version"),
        (bytes.fromhex("0002" "000167" "00"), "trailing"),
    ],
)
def test_bad_keys_are_named(data, message):
    with pytest.raises(OffsetsRecordError, match=message):
        decode_key(data)


def test_newer_record_types_are_skipped():
    assert decode_key(bytes.fromhex("0003" "000167")) is None


@given(
    st.text(max_size=20), st.text(max_size=20), st.integers(0, 2**31 - 1),
    st.integers(-1, 2**62), st.integers(-1, 2**31 - 1), st.text(max_size=50),
    st.integers(0, 2**62),
)
def test_offset_records_round_trip(group, topic, partition, offset, epoch, metadata, ts):
    key = OffsetKey(group, topic, partition)
    assert decode_key(encode_offset_key(key)) == key
    value = OffsetValue(offset, epoch, metadata, ts)
    assert decode_offset_value(encode_offset_value(value)) == value
