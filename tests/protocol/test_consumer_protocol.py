"""Kafka's ConsumerProtocol blobs (JoinGroup metadata, SyncGroup assignments): the one codec
the client, the coordinator and `databus groups` share."""

from __future__ import annotations

import pytest

from databus.protocol.consumer_protocol import (
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from tests.groups.raw import assignment, subscription

# Golden bytes: Subscription v3 / Assignment v0 as Kafka's ConsumerProtocol writes them.
SUBSCRIPTION_V3 = bytes.fromhex(
    "0003"  # version 3
    "00000002" "000161" "000162"  # topics [a, b]
    "ffffffff"  # user_data null
    "00000001" "000161" "00000002" "00000001" "00000002"  # owned [(a, [1, 2])]
    "00000003"  # generation 3
    "ffff"  # rack null
)
ASSIGNMENT_V0 = bytes.fromhex(
    "0000" "00000002" "000161" "00000001" "00000001" "000162" "00000001" "00000002" "ffffffff"
)


def test_subscription_golden_bytes():
    sub = Subscription(("b", "a"), None, (("a", 1), ("a", 2)), 3, None)
    assert encode_subscription(sub) == SUBSCRIPTION_V3
    assert decode_subscription(SUBSCRIPTION_V3) == Subscription(
        ("a", "b"), None, (("a", 1), ("a", 2)), 3, None
    )


def test_subscription_v0_golden():
    data = bytes.fromhex("0000" "00000002" "000161" "00026263" "ffffffff")
    assert data == subscription("a", "bc") == encode_subscription(Subscription(("a", "bc")), 0)
    assert decode_subscription(data) == Subscription(("a", "bc"))


def test_assignment_golden_bytes():
    assert encode_assignment(Assignment((("b", 2), ("a", 1)))) == ASSIGNMENT_V0
    assert decode_assignment(ASSIGNMENT_V0) == Assignment((("a", 1), ("b", 2)))
    data = bytes.fromhex("0000" "00000001" "000174" "00000002" "00000000" "00000003" "ffffffff")
    assert data == assignment("t", [0, 3]) == encode_assignment(Assignment((("t", 0), ("t", 3))))
    assert decode_assignment(data) == Assignment((("t", 0), ("t", 3)))
    assert decode_assignment(b"") == Assignment()  # a member the leader gave nothing


def test_newer_subscription_versions_decode_their_known_prefix():
    future = b"\x00\x09" + SUBSCRIPTION_V3[2:] + b"\x00\x00\x00\x07extra"
    assert decode_subscription(future).topics == ("a", "b")
    v1 = bytes.fromhex("0001" "00000001" "000174" "ffffffff" "00000000")
    assert decode_subscription(v1) == Subscription(("t",))


def test_garbage_is_a_clear_error():
    with pytest.raises(ConsumerProtocolError, match="subscription"):
        decode_subscription(b"\x00\x01\x00\x00\x00\x05ab")
    with pytest.raises(ConsumerProtocolError, match="no version"):
        decode_assignment(b"\x00")
    with pytest.raises(ConsumerProtocolError, match="undecodable assignment"):
        decode_assignment(bytes.fromhex("0000" "00000001" "0005"))
