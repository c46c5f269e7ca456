"""Metadata (key 3): one node (this broker, also the controller), topics and partitions.

Topics a client names but that do not exist are auto-created when
``auto.create.topics.enable`` is on and the request allows it (v4+), except internal topics
(``__`` prefix), which are created only by the broker itself and listed with
``is_internal=True``.  Every partition's leader, replica and ISR is this node.

Authorization (ACLs on): "all topics" lists only the topics the principal may DESCRIBE; a
named topic it may not is TOPIC_AUTHORIZATION_FAILED (whether it exists or not), and
auto-creation needs CREATE on the cluster or the topic, as in Kafka.
"""

from __future__ import annotations

import datetime
import uuid

from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.storage.acls import CLUSTER_NAME, Operation, ResourceType

from ..api import RequestContext, handles
from ..broker import is_internal_topic
from ..errors import error_code_for
from ..operations import NOT_REQUESTED, authorized_operations

ZERO_UUID = uuid.UUID(int=0)


def _topic_entry(module, broker, name: str, info, operations: int = NOT_REQUESTED) -> object:
    node = broker.node_id
    partitions = tuple(
        build(
            module.MetadataResponsePartition,
            error_code=ErrorCode.none, partition_index=p, leader_id=node, leader_epoch=0,
            replica_nodes=(node,), isr_nodes=(node,), offline_replicas=(),
        )
        for p in range(info.partitions)
    )
    return build(
        module.MetadataResponseTopic,
        error_code=ErrorCode.none, name=name, topic_id=info.topic_id,
        is_internal=is_internal_topic(name), partitions=partitions,
        topic_authorized_operations=operations,
    )


def _error_entry(module, name: str | None, code: ErrorCode, topic_id=ZERO_UUID) -> object:
    return build(
        module.MetadataResponseTopic,
        error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=(),
    )


def _requested(ctx: RequestContext, request) -> list | None:
    """The requested topics, or None for "all topics" (null list; empty list in v0)."""
    if request.topics is None or (ctx.api_version == 0 and not request.topics):
        return None
    return list(request.topics)


@handles(ApiKey.METADATA, 0, 12)
async def metadata(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    module = ctx.response_module()
    topics = broker.log_manager.topics()
    entries = []
    requested = _requested(ctx, request)
    def may(operation, name):
        return ctx.allowed(operation, ResourceType.TOPIC, name)

    want_ops = getattr(request, "include_topic_authorized_operations", False)

    def topic_ops(name: str) -> int:
        return authorized_operations(ctx, ResourceType.TOPIC, name, want_ops)

    if requested is None:
        for name in sorted(topics):
            if may(Operation.DESCRIBE, name):  # the others are not even named
                entries.append(_topic_entry(module, broker, name, topics[name],
                                            topic_ops(name)))
    else:
        by_id = None
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        for wanted in requested:
            name = wanted.name
            if name is None:  # by topic id (v10+)
                if by_id is None:
                    by_id = {info.topic_id: n for n, info in topics.items()}
                name = by_id.get(wanted.topic_id)
                if name is None:
                    entries.append(
                        _error_entry(module, None, ErrorCode.unknown_topic_id, wanted.topic_id)
                    )
                    continue
            if not may(Operation.DESCRIBE, name):
                entries.append(_error_entry(module, name, ErrorCode.topic_authorization_failed))
                continue
            info = topics.get(name)
            if info is None and allow_create and (
                    ctx.cluster_allowed(Operation.CREATE) or may(Operation.CREATE, name)):
                try:
                    info = broker.auto_create(name)
                except Exception as exc:  # invalid name and the like: an error per topic
                    entries.append(_error_entry(module, name, error_code_for(exc)))
                    continue
                if info is not None:
                    topics = broker.log_manager.topics()
            if info is None:
                entries.append(_error_entry(module, name, ErrorCode.unknown_topic_or_partition))
            else:
                entries.append(_topic_entry(module, broker, name, info, topic_ops(name)))
    host, port = broker.advertised_address(ctx.listener_name)
    brokers = (
        build(module.MetadataResponseBroker, node_id=broker.node_id, host=host, port=port,
              rack=None),
    )
    return build(
        ctx.response_class(),
        throttle_time=datetime.timedelta(0), brokers=brokers, cluster_id=broker.cluster_id,
        controller_id=broker.node_id, topics=tuple(entries),
        cluster_authorized_operations=authorized_operations(
            ctx, ResourceType.CLUSTER, CLUSTER_NAME,
            getattr(request, "include_cluster_authorized_operations", False)),
    )
