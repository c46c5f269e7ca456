"""ListOffsets (key 2): earliest (-2), latest (-1) and by-timestamp offsets.

By timestamp: the first record whose timestamp is >= the target (the storage engine's time
index finds the batch, the batch is decoded to find the record), or offset -1 / timestamp -1
when no record is that recent, as in Kafka.
Latest is the log end offset (the high watermark: one node) for read_uncommitted and the
last stable offset (before the oldest open transaction) for read_committed, as in Kafka.
v7 adds MAX_TIMESTAMP (-3, KIP-734): the offset and timestamp of the first record holding the
partition's largest timestamp (-1/-1 for an empty partition).  v8 adds EARLIEST_LOCAL (-4,
KIP-1005): with no tiered storage the local log starts at the log start offset.  v9+
(latest-tiered, KIP-1005's -5) are not advertised.

v0 (Kafka 0.8-0.10.0; Kafka 4.0 dropped it, but old tools such as Burrow 1.2.1 send it
without asking ApiVersions first) answers with an array of offsets per partition, Kafka's
"offsets before" semantics: segment boundaries newest first, up to the request's
max_num_offsets (storage's ``legacy_offsets_before``).  kio has no v0 schema, so it is
parsed and encoded here by hand.
"""

from __future__ import annotations

import datetime
import logging
import struct

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import FramingError, decode_request_header
from databus.storage.acls import Operation, ResourceType

from ..api import RawResponse, RequestContext, handles
from ..errors import error_code_for

log = logging.getLogger(__name__)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


READ_COMMITTED = 1


def _lookup(broker, topic: str, partition: int, timestamp: int, version: int,
            committed: bool = False) -> tuple[ErrorCode, int, int]:
    """(error, offset, timestamp) for one partition; a sentinel the request's version does
    not know is UNSUPPORTED_VERSION."""
    if timestamp < -4 or timestamp == EARLIEST_LOCAL and version < 8 \
            or timestamp == MAX_TIMESTAMP and version < 7:
        return ErrorCode.unsupported_version, -1, -1
    plog = broker.get_log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    if timestamp == LATEST:
        return ErrorCode.none, plog.last_stable_offset if committed else plog.log_end_offset, -1
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ErrorCode.none, plog.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        found = plog.max_timestamp_batch()
        if found is None:
            return ErrorCode.none, -1, -1
        return (ErrorCode.none, *_first_record_at_or_after(plog, found[0], found[1], found[1]))
    try:
        found = plog.offset_for_timestamp(timestamp)
    except Exception as exc:
        code = error_code_for(exc)
        if code is ErrorCode.unknown_server_error:
            log.exception("offset_for_timestamp on %s-%d failed", topic, partition)
        return code, -1, -1
    if found is None:
        return ErrorCode.none, -1, -1
    return (ErrorCode.none, *_first_record_at_or_after(plog, found[0], timestamp, found[1]))


def _first_record_at_or_after(plog, batch_offset: int, timestamp: int, batch_ts: int):
    """Kafka answers with the first *record* whose timestamp is >= the target; the storage
    index finds its batch, and the batch is decoded here (off the produce/fetch hot path)."""
    from databus.protocol.records import decode_records

    data = plog.read(batch_offset, 1)
    if not data:
        return batch_offset, batch_ts
    _header, records = decode_records(data)
    for record in records:
        if record.offset >= batch_offset and record.timestamp >= timestamp:
            return record.offset, record.timestamp
    return batch_offset, batch_ts


@handles(ApiKey.LIST_OFFSETS, 0, 8)
async def list_offsets(ctx: RequestContext, request) -> object:
    if request is None:  # v0: kio has no schema
        return _answer_v0(ctx)
    module = ctx.response_module()
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        partitions = []
        may_describe = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for part in topic.partitions:
            if may_describe:
                code, offset, timestamp = _lookup(
                    ctx.broker, topic.name, part.partition_index, part.timestamp,
                    ctx.api_version, committed,
                )
            else:
                code, offset, timestamp = ErrorCode.topic_authorization_failed, -1, -1
            partitions.append(build(
                module.ListOffsetsPartitionResponse,
                partition_index=part.partition_index, error_code=code, timestamp=timestamp,
                offset=offset, leader_epoch=0 if code is ErrorCode.none else -1,
            ))
        topics.append(build(module.ListOffsetsTopicResponse, name=topic.name,
                            partitions=tuple(partitions)))
    return build(ctx.response_class(), throttle_time=datetime.timedelta(0),
                 topics=tuple(topics))


# -- ListOffsets v0: parsed and answered by hand ------------------------------------------

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_V0_PARTITION = struct.Struct(">iqi")  # partition, timestamp, max_num_offsets


def _parse_v0(frame: bytes) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """[(topic, [(partition, timestamp, max_num_offsets)])] of a v0 request frame."""
    _header, pos = decode_request_header(frame)
    try:
        pos += 4  # replica_id
        (topic_count,) = _I32.unpack_from(frame, pos)
        pos += 4
        topics = []
        for _ in range(max(topic_count, 0)):
            (name_len,) = _I16.unpack_from(frame, pos)
            pos += 2
            if name_len < 0 or pos + name_len > len(frame):
                raise struct.error("topic name outside the frame")
            name = bytes(frame[pos:pos + name_len]).decode()
            pos += name_len
            (partition_count,) = _I32.unpack_from(frame, pos)
            pos += 4
            partitions = []
            for _ in range(max(partition_count, 0)):
                partitions.append(_V0_PARTITION.unpack_from(frame, pos))
                pos += _V0_PARTITION.size
            topics.append((name, partitions))
    except (struct.error, UnicodeDecodeError):
        raise FramingError("malformed ListOffsets v0 request") from None
    return topics


def _offsets_v0(broker, topic: str, partition: int, timestamp: int,
                max_offsets: int) -> tuple[ErrorCode, list[int]]:
    if timestamp < EARLIEST:  # v0 knows latest (-1) and earliest (-2) only
        return ErrorCode.unsupported_version, []
    plog = broker.get_log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, []
    try:
        return ErrorCode.none, plog.legacy_offsets_before(timestamp, max_offsets)
    except Exception as exc:
        code = error_code_for(exc)
        if code is ErrorCode.unknown_server_error:
            log.exception("offsets before %d on %s-%d failed", timestamp, topic, partition)
        return code, []


def _answer_v0(ctx: RequestContext) -> RawResponse:
    out = []
    topics = _parse_v0(ctx.frame)
    out.append(_I32.pack(len(topics)))
    for name, partitions in topics:
        raw = name.encode()
        out.append(_I16.pack(len(raw)) + raw + _I32.pack(len(partitions)))
        may_describe = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)
        for partition, timestamp, max_offsets in partitions:
            if may_describe:
                code, offsets = _offsets_v0(ctx.broker, name, partition, timestamp, max_offsets)
            else:
                code, offsets = ErrorCode.topic_authorization_failed, []
            out.append(struct.pack(f">ihi{len(offsets)}q", partition, code, len(offsets),
                                   *offsets))
    return RawResponse([b"".join(out)])
