"""Produce v0-2 (message format v0/v1), which kio has no schema for: read just enough of the
request to answer it, and write the answer, by hand.

The broker stores only record format v2 (Produce v3+) but advertises Produce from v0
(librdkafka before 2.11.1 stops compressing when a broker's minimum is 3), so a v0-2 request
is answered with an error for each of its partitions rather than dropped.  The layouts are
Kafka's ProduceRequest/ProduceResponse v0-2 (classic encoding):

    request   acks int16, timeout int32,
              topics [name string, partitions [index int32, message set bytes]]
    response  topics [name string, partitions [index int32, error int16, base offset int64,
              [v2] log append time int64]], [v1+] throttle time int32
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from .errors import ErrorCode
from .framing import FramingError, decode_request_header

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True)
class LegacyProduce:
    """What the answer needs of a v0-2 Produce request: its acks and, per topic (its name as
    sent), the partition indexes."""

    acks: int
    topics: list[tuple[bytes, list[int]]]


def parse_legacy_produce(frame: bytes) -> LegacyProduce:
    """The request in ``frame`` (header included); FramingError when it is cut short."""
    header, pos = decode_request_header(frame)
    try:
        (acks,) = _I16.unpack_from(frame, pos)
        pos += 2 + 4  # acks, timeout
        (topic_count,) = _I32.unpack_from(frame, pos)
        pos += 4
        topics = []
        for _ in range(max(topic_count, 0)):
            (name_len,) = _I16.unpack_from(frame, pos)
            pos += 2
            name = bytes(frame[pos:pos + name_len])
            pos += name_len
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
            partitions = []
            for _ in range(max(partition_count, 0)):
                index, size = struct.unpack_from(">ii", frame, pos)
                pos += 8 + max(size, 0)
                partitions.append(index)
            topics.append((name, partitions))
        if pos > len(frame):
            raise struct.error("truncated")
    except struct.error:
        raise FramingError(f"malformed produce v{header.api_version} request") from None
    return LegacyProduce(acks, topics)


def legacy_produce_error_body(version: int, request: LegacyProduce,
                              code: ErrorCode = ErrorCode.unsupported_version) -> bytes:
    """The response body (no header) answering every partition of ``request`` with ``code``
    and no offset."""
    out = [_I32.pack(len(request.topics))]
    for name, partitions in request.topics:
        out.append(_I16.pack(len(name)) + name + _I32.pack(len(partitions)))
        for index in partitions:
            out.append(struct.pack(">ihq", index, code, -1))
            if version >= 2:
                out.append(struct.pack(">q", -1))  # log_append_time
    if version >= 1:
        out.append(_I32.pack(0))  # throttle_time_ms
    return b"".join(out)
