"""Zigzag varints as Kafka writes them inside records (ByteUtils.writeVarint/writeVarlong)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from databus.protocol.varint import VarintError, decode_zigzag, encode_zigzag, zigzag_size

GOLDEN = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (300, "d804"),
    (8191, "fe7f"),
    (8192, "808001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize("value, hex_bytes", GOLDEN)
def test_golden_encodings(value, hex_bytes):
    assert encode_zigzag(value).hex() == hex_bytes
    assert zigzag_size(value) == len(hex_bytes) // 2
    assert decode_zigzag(bytes.fromhex("aa" + hex_bytes + "bb"), 1) == (
        value,
        1 + len(hex_bytes) // 2,
    )


@given(st.integers(-(2**63), 2**63 - 1))
def test_round_trip(value):
    data = encode_zigzag(value)
    assert len(data) == zigzag_size(value)
    assert decode_zigzag(data, 0) == (value, len(data))


def test_out_of_range_and_malformed():
    with pytest.raises(OverflowError):
        encode_zigzag(2**63)
    with pytest.raises(VarintError, match="past the end"):
        decode_zigzag(b"\x80\x80", 0)
    with pytest.raises(VarintError, match="past the end"):
        decode_zigzag(b"", 0)
    with pytest.raises(VarintError, match="longer than 10 bytes"):
        decode_zigzag(b"\xff" * 11 + b"\x01", 0)
    with pytest.raises(VarintError, match="exceeds 64 bits"):
        decode_zigzag(b"\xff" * 9 + b"\x7f", 0)
