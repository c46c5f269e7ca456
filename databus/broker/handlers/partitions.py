"""Per-partition state APIs of Kafka 3.x/4.x clients and tools: OffsetForLeaderEpoch (23),
DescribeProducers (61), DescribeTopicPartitions (75).

One node and one leader epoch: every partition's leader is this node at epoch 0 (what
Metadata reports), so OffsetForLeaderEpoch (KIP-320 truncation detection) answers epoch 0
with the log end offset; an epoch the broker has not reached is UNDEFINED (-1/-1), a
``current_leader_epoch`` newer than 0 is UNKNOWN_LEADER_EPOCH (the client knows a leader we
do not) and -1 skips that check, as in Kafka (no epoch is older than 0, so
FENCED_LEADER_EPOCH cannot happen).  DescribeProducers lists the idempotent
producers the partition remembers (storage's producer state: id, epoch, last sequence and
timestamp; no transactions, so coordinator epoch and transaction start are -1).
DescribeTopicPartitions (KIP-966) is Metadata's topic part paged by
``response_partition_limit`` with a cursor, as kafka-topics.sh --describe of Kafka 3.7+ asks.
"""

from __future__ import annotations

import datetime

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
from ..broker import is_internal_topic
from ..operations import NOT_REQUESTED, authorized_operations

LEADER_EPOCH = 0  # the only leader epoch of a single node (Metadata says the same)
NO_THROTTLE = datetime.timedelta(0)


def _epoch_end(broker, topic: str, partition: int, current: int, asked: int):
    """(error, leader epoch, end offset) of one OffsetForLeaderEpoch partition."""
    plog = broker.get_log(topic, partition)
    if plog is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1
    if current > LEADER_EPOCH:
        return ErrorCode.unknown_leader_epoch, -1, -1
    if asked > LEADER_EPOCH or asked < 0:
        return ErrorCode.none, -1, -1  # UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET
    return ErrorCode.none, LEADER_EPOCH, plog.log_end_offset


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4)
async def offset_for_leader_epoch(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    topics = []
    for topic in request.topics:
        partitions = []
        may_describe = ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.topic)
        for p in topic.partitions:
            code, epoch, end = (_epoch_end(ctx.broker, topic.topic, p.partition,
                                           p.current_leader_epoch, p.leader_epoch)
                                if may_describe else
                                (ErrorCode.topic_authorization_failed, -1, -1))
            partitions.append(build(module.EpochEndOffset, error_code=code,
                                    partition=p.partition, leader_epoch=epoch, end_offset=end))
        topics.append(build(module.OffsetForLeaderTopicResult, topic=topic.topic,
                            partitions=tuple(partitions)))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, topics=tuple(topics))


@handles(ApiKey.DESCRIBE_PRODUCERS, 0, 0)
async def describe_producers(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    topics = []
    for topic in request.topics:
        partitions = []
        may_read = ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            plog = ctx.broker.get_log(topic.name, index)
            if not may_read:
                partitions.append(build(
                    module.PartitionResponse, partition_index=index,
                    error_code=ErrorCode.topic_authorization_failed, error_message=None,
                    active_producers=()))
                continue
            if plog is None:
                partitions.append(build(
                    module.PartitionResponse, partition_index=index,
                    error_code=ErrorCode.unknown_topic_or_partition,
                    error_message=f"{topic.name}-{index} does not exist", active_producers=()))
                continue
            active = tuple(
                build(module.ProducerState, producer_id=pid, producer_epoch=entry.epoch,
                      last_sequence=entry.last_seq, last_timestamp=entry.last_timestamp,
                      coordinator_epoch=-1, current_txn_start_offset=-1)
                for pid, entry in sorted(plog.producer_state.producers.items())
            )
            partitions.append(build(module.PartitionResponse, partition_index=index,
                                    error_code=ErrorCode.none, error_message=None,
                                    active_producers=active))
        topics.append(build(module.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, topics=tuple(topics))


@handles(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def describe_topic_partitions(ctx: RequestContext, request) -> object:
    """Topics in name order (the named ones, or all when none is named), from the cursor on,
    at most ``response_partition_limit`` partitions; ``next_cursor`` where the next page
    starts (null when this page holds the rest)."""
    broker = ctx.broker
    module = ctx.response_module()
    known = broker.log_manager.topics()
    # As Metadata: all topics means those the principal may DESCRIBE; a named one it may
    # not is TOPIC_AUTHORIZATION_FAILED.
    names = sorted({t.name for t in request.topics} if request.topics else
                   (n for n in known
                    if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)))
    want_ops = getattr(request, "include_topic_authorized_operations", False)
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    limit = max(request.response_partition_limit, 1)
    node = broker.node_id
    topics, next_cursor, used = [], None, 0
    for name in names:
        info = known.get(name)
        refused = not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name)
        if info is None or refused:
            topics.append(build(
                module.DescribeTopicPartitionsResponseTopic,
                error_code=(ErrorCode.topic_authorization_failed if refused
                            else ErrorCode.unknown_topic_or_partition),
                name=name, topic_id=None, is_internal=False, partitions=(),
                topic_authorized_operations=NOT_REQUESTED))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if used == limit:
            next_cursor = build(module.Cursor, topic_name=name, partition_index=first)
            break
        last = min(info.partitions, first + limit - used)
        partitions = tuple(
            build(module.DescribeTopicPartitionsResponsePartition, error_code=ErrorCode.none,
                  partition_index=p, leader_id=node, leader_epoch=LEADER_EPOCH,
                  replica_nodes=(node,), isr_nodes=(node,), eligible_leader_replicas=(),
                  last_known_elr=(), offline_replicas=())
            for p in range(first, last))
        used += len(partitions)
        topics.append(build(
            module.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none, name=name,
            topic_id=info.topic_id, is_internal=is_internal_topic(name), partitions=partitions,
            topic_authorized_operations=authorized_operations(
                ctx, ResourceType.TOPIC, name, want_ops)))
        if last < info.partitions:
            next_cursor = build(module.Cursor, topic_name=name, partition_index=last)
            break
    return build(ctx.response_class(), throttle_time=NO_THROTTLE, topics=tuple(topics),
                 next_cursor=next_cursor)
