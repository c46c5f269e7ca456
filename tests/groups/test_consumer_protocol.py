"""The consumer protocol blobs the coordinator and `databus groups` look into."""

from __future__ import annotations

import pytest

from databus.broker.coordinator.consumer_protocol import (
    BinaryFormatError,
    assignment_partitions,
    subscription_topics,
)
from tests.groups.raw import assignment, subscription


def test_subscription_v0_golden():
    data = bytes.fromhex("0000" "00000002" "000161" "00026263" "ffffffff")
    assert data == subscription("a", "bc")
    assert subscription_topics(data) == {"a", "bc"}


def test_newer_subscription_versions_share_the_prefix():
    # v1+ append owned partitions (and more) after user data: only the prefix is read.
    v1 = bytes.fromhex("0001" "00000001" "000174" "ffffffff" "00000000")
    assert subscription_topics(v1) == {"t"}


def test_assignment_golden():
    data = bytes.fromhex("0000" "00000001" "000174" "00000002" "00000000" "00000003" "ffffffff")
    assert data == assignment("t", [0, 3])
    assert assignment_partitions(data) == {"t": [0, 3]}
    assert assignment_partitions(b"") == {}


def test_truncated_blob_is_named():
    with pytest.raises(BinaryFormatError, match="consumer assignment: truncated"):
        assignment_partitions(bytes.fromhex("0000" "00000001" "0005"))
