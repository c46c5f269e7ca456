"""Kafka's zigzag varints (protobuf-style, signed), as used inside RecordBatch v2 records.

A signed value n is mapped to an unsigned one with zigzag ((n << 1) ^ (n >> 63), so small
negative numbers stay short) and written 7 bits at a time, least significant group first,
with the high bit set on every byte but the last.  Kafka uses 32-bit varints for lengths,
offset deltas and counts and 64-bit varlongs for timestamp deltas; both share this encoding.

This module owns the encoding and the tables that make it cheap in pure Python: record
encoding and decoding run per record on the producer and consumer hot paths, so the common
small values are looked up rather than computed.
"""

from __future__ import annotations

__all__ = [
    "ZIGZAG_BYTES",
    "ZIGZAG_ONE_BYTE",
    "ZIGZAG_TABLE_SIZE",
    "ZIGZAG_TWO_BYTES",
    "VarintError",
    "decode_zigzag",
    "encode_zigzag",
    "zigzag_size",
]

# Longest legal encoding of a 64-bit value: ceil(64 / 7) bytes.
MAX_VARLONG_BYTES = 10

# Precomputed encodings for 0 <= n < ZIGZAG_TABLE_SIZE: record lengths, offset deltas and
# timestamp deltas inside a producer batch are almost always in this range.
ZIGZAG_TABLE_SIZE = 1 << 14


class VarintError(ValueError):
    """A varint that runs past the end of its buffer or past 64 bits."""


def _encode_zigzag_slow(n: int) -> bytes:
    if not -(1 << 63) <= n < (1 << 63):
        raise OverflowError(f"{n} does not fit a signed 64-bit varlong")
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


ZIGZAG_BYTES: tuple[bytes, ...] = tuple(_encode_zigzag_slow(n) for n in range(ZIGZAG_TABLE_SIZE))

# Decoded value of every single-byte encoding (high bit clear), indexed by the byte.
ZIGZAG_ONE_BYTE: tuple[int, ...] = tuple((b >> 1) ^ -(b & 1) for b in range(0x80))

# Decoded value of every two-byte encoding, indexed by (second byte << 7) | (first & 0x7f).
ZIGZAG_TWO_BYTES: tuple[int, ...] = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 14))


def encode_zigzag(n: int) -> bytes:
    """The zigzag varint bytes of signed ``n`` (64-bit range)."""
    if 0 <= n < ZIGZAG_TABLE_SIZE:
        return ZIGZAG_BYTES[n]
    return _encode_zigzag_slow(n)


def zigzag_size(n: int) -> int:
    """How many bytes ``encode_zigzag(n)`` takes."""
    if 0 <= n < ZIGZAG_TABLE_SIZE:
        return len(ZIGZAG_BYTES[n])
    u = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    return max(1, (u.bit_length() + 6) // 7)


def decode_zigzag(buf, pos: int) -> tuple[int, int]:
    """Read one zigzag varint at ``pos``; return (value, position after it).

    Raises VarintError when the buffer ends inside the varint or it is longer than a
    64-bit value allows.
    """
    try:
        b = buf[pos]
    except IndexError:
        raise VarintError(f"varint at byte {pos} runs past the end of the buffer") from None
    if b < 0x80:
        return ZIGZAG_ONE_BYTE[b], pos + 1
    start = pos
    u = b & 0x7F
    shift = 7
    pos += 1
    end = len(buf)
    while True:
        if pos >= end:
            raise VarintError(f"varint at byte {start} runs past the end of the buffer")
        b = buf[pos]
        pos += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 7 * MAX_VARLONG_BYTES:
            raise VarintError(f"varint at byte {start} is longer than {MAX_VARLONG_BYTES} bytes")
    if u >> 64:
        raise VarintError(f"varint at byte {start} exceeds 64 bits")
    return (u >> 1) ^ -(u & 1), pos
