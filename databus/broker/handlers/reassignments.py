"""AlterPartitionReassignments (45) and ListPartitionReassignments (46) on one node.

Kafka serves both on a single broker too, and tools (kafka-reassign-partitions, KafkaJS,
admin UIs) call them.  Here every partition's only replica is this node, so no reassignment
is ever in progress: List answers none; Alter validates each partition as Kafka's controller
does (UNKNOWN_TOPIC_OR_PARTITION for a topic or partition that does not exist,
INVALID_REPLICA_ASSIGNMENT for an empty or repeated replica list or a node other than this
one, NO_REASSIGNMENT_IN_PROGRESS to cancel one) and a reassignment to this node, the
partition's current assignment, completes at once.  Both need the cluster permission Kafka
asks (ALTER, DESCRIBE: authorizer.py).
"""

from __future__ import annotations

import logging

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode

from ..api import RequestContext, handles

log = logging.getLogger(__name__)


def _reassignment_error(broker, topic: str, partition) -> tuple[ErrorCode, str | None]:
    info = broker.topic(topic)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    index = partition.partition_index
    if not 0 <= index < info.partitions:
        return (ErrorCode.unknown_topic_or_partition,
                f"Unable to find partition {topic}:{index}.")
    replicas = partition.replicas
    if replicas is None:  # a cancellation
        return (ErrorCode.no_reassignment_in_progress,
                "No partition reassignment is in progress for this topic partition.")
    if not replicas:
        return (ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.")
    for node in sorted(replicas):
        if node != broker.node_id:
            return (ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {node}, but no such "
                    f"broker is registered.")
    if len(replicas) > 1:
        return (ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker.node_id} more "
                "than once.")
    return ErrorCode.none, None  # the current assignment: nothing to move


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def alter_partition_reassignments(ctx: RequestContext, request) -> object:
    module = ctx.response_module()
    responses = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            code, message = _reassignment_error(ctx.broker, topic.name, partition)
            if code:
                log.info("unable to alter the reassignment of %s-%d: %s", topic.name,
                         partition.partition_index, message)
            partitions.append(build(module.ReassignablePartitionResponse,
                                    partition_index=partition.partition_index,
                                    error_code=code, error_message=message))
        responses.append(build(module.ReassignableTopicResponse, name=topic.name,
                               partitions=partitions))
    return build(ctx.response_class(), throttle_time=0, error_code=ErrorCode.none,
                 error_message=None, responses=responses)


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def list_partition_reassignments(ctx: RequestContext, request) -> object:
    # One replica per partition, always this node: nothing is ever being reassigned.
    return build(ctx.response_class(), throttle_time=0, error_code=ErrorCode.none,
                 error_message=None, topics=[])
