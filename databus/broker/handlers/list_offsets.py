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
"""

from __future__ import annotations

import datetime
import logging

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
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


@handles(ApiKey.LIST_OFFSETS, 1, 8)
async def list_offsets(ctx: RequestContext, request) -> object:
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
