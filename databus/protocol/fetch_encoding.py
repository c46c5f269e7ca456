"""Fetch response encoding by hand, so stored record bytes go to the socket uncopied.

kio would copy every partition's records into its encoder buffer (and the frame once more);
for multi-megabyte fetches that copy is the broker's main cost.  Here the response is a list
of buffers: small encoded pieces between the stored records, which the server sends as they
are.  Only the fields of the versions we advertise (4-16) are written; a test checks the
bytes equal kio's encoding of the same response for every version, and golden bytes pin the
error and empty cases.

Records are never null.  The schema lets them be, but Kafka always sends records, empty
(MemoryRecords.EMPTY) for a partition with an error, and librdkafka cannot parse a null
("invalid MessageSetSize -1"): it then never sees the partition's error, so a consumer whose
position fell out of range (retention deleted its segment) would refetch forever instead of
resetting.  A partition with an error carries Kafka's values: watermarks and log start -1,
aborted transactions null, preferred read replica -1, empty records.

    FetchResponse v4-v16 (v12+ flexible: compact arrays/strings/bytes, tagged fields):
      [v7+] throttle_time_ms int32 ... (v1+), [v7+] error_code int16, [v7+] session_id int32,
      responses [topic string (v13+: topic_id uuid), partitions [partition_index int32,
        error_code int16,
        high_watermark int64, last_stable_offset int64, [v5+] log_start_offset int64,
        aborted_transactions nullable [producer_id int64, first_offset int64],
        [v11+] preferred_read_replica int32, records bytes (nullable, but never null here)]]
    v14 (tiered storage) and v15 (replica state, a request field) change nothing here; v16's
    node endpoints and current leader (KIP-951) are tagged fields sent only with a
    NOT_LEADER error, which a single node never has, so they are never written.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from .api_keys import ApiKey
from .error_downgrades import downgrade

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # index, error, high watermark, last stable offset
_I64 = struct.Struct(">q")

MIN_VERSION = 4
MAX_VERSION = 16


@dataclass(slots=True)
class PartitionResult:
    """One partition of the response; ``PartitionResult(index, code)`` is what Kafka sends
    for a partition with an error."""

    index: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: tuple | None = None  # (producer_id, first_offset) pairs
    records: bytes | bytearray | memoryview | None = b""  # never None (module docstring)


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_fetch_body(
    version: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[PartitionResult]]],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_time_ms: int = 0,
) -> list:
    """The response body (after the response header) as a list of buffers.  Topics are
    named by name up to v12, by topic id (a UUID) from v13."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"fetch v{version} is not encoded here")
    flexible = version >= 12
    parts: list = []
    head = bytearray(_I32.pack(throttle_time_ms))
    if version >= 7:
        head += _I16.pack(downgrade(ApiKey.FETCH, version, error_code)) + _I32.pack(session_id)

    def array_len(n: int) -> bytes:
        return _uvarint(n + 1) if flexible else _I32.pack(n)

    def string(text: str) -> bytes:
        raw = text.encode()
        return (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw

    head += array_len(len(topics))
    for name, partitions in topics:
        # v13+ name topics by id (a UUID), older versions by name (a str)
        head += name.bytes if isinstance(name, uuid.UUID) else string(name)
        head += array_len(len(partitions))
        for p in partitions:
            code = downgrade(ApiKey.FETCH, version, p.error_code) if p.error_code else 0
            head += _PARTITION_HEAD.pack(p.index, code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                head += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                head += b"\0" if flexible else b"\xff\xff\xff\xff"
            else:
                head += array_len(len(aborted))
                for producer_id, first_offset in aborted:
                    head += struct.pack(">qq", producer_id, first_offset)
                    if flexible:
                        head += b"\0"
            if version >= 11:
                head += _I32.pack(-1)  # preferred_read_replica
            records = p.records
            if records is None:
                raise ValueError(
                    f"fetch partition {p.index}: records must not be null (send b'' as Kafka does)"
                )
            size = len(records)
            head += _uvarint(size + 1) if flexible else _I32.pack(size)
            if size:
                parts.append(bytes(head))
                parts.append(records)
                head = bytearray()
            if flexible:
                head += b"\0"  # partition tagged fields
        if flexible:
            head += b"\0"  # topic tagged fields
    if flexible:
        head += b"\0"  # response tagged fields
    parts.append(bytes(head))
    return parts
