"""Produce v0-2, which kio has no schema for: the request read by hand and every partition
answered with an error (protocol/legacy_produce.py), byte for byte Kafka's layouts."""

from __future__ import annotations

import struct

import pytest

from databus.protocol.errors import ErrorCode
from databus.protocol.framing import FramingError
from databus.protocol.legacy_produce import (
    LegacyProduce,
    legacy_produce_error_body,
    parse_legacy_produce,
)


def request(version: int, acks: int = 1) -> bytes:
    head = struct.pack(">hhih", 0, version, 7, 3) + b"cli"
    body = struct.pack(">hii", acks, 5000, 2)
    body += struct.pack(">h", 1) + b"a" + struct.pack(">i", 2)
    body += struct.pack(">ii", 0, 3) + b"xyz" + struct.pack(">ii", 4, 0)
    body += struct.pack(">h", 2) + b"bb" + struct.pack(">i", 1) + struct.pack(">ii", 1, -1)
    return head + body


def test_a_request_is_read_to_its_partitions():
    assert parse_legacy_produce(request(2, acks=0)) == LegacyProduce(
        0, [(b"a", [0, 4]), (b"bb", [1])])


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_partition_gets_the_error_in_the_versions_layout(version):
    body = legacy_produce_error_body(version, parse_legacy_produce(request(version)))

    def partition(i):
        return (struct.pack(">ihq", i, ErrorCode.unsupported_version, -1)
                + (struct.pack(">q", -1) if version >= 2 else b""))

    assert body == (struct.pack(">i", 2)
                    + struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + partition(0)
                    + partition(4)
                    + struct.pack(">h", 2) + b"bb" + struct.pack(">i", 1) + partition(1)
                    + (struct.pack(">i", 0) if version >= 1 else b""))


@pytest.mark.parametrize("cut", [2, 9, 20, 30])
def test_a_cut_request_is_a_framing_error(cut):
    frame = request(1)
    with pytest.raises(FramingError, match="malformed produce v1 request"):
        parse_legacy_produce(frame[: len(frame) - cut])
