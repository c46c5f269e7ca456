"""Committed-offset APIs: OffsetCommit, OffsetFetch, OffsetDelete.

Authorization (ACLs on) as in Kafka: committing needs READ on the group and on each topic,
fetching DESCRIBE on both (partitions of topics the principal may not describe are left
out of an "all topics" fetch), deleting DELETE on the group.

Translations between kio messages and coordinator/service.py, which validates commits
against the group's generation, appends them to ``__consumer_offsets`` and waits for the
fsync before they are acknowledged (so an acknowledged commit survives kill -9).
OffsetFetch with ``require_stable`` (v7+, KIP-447) answers a partition whose offset is part
of an open transaction with UNSTABLE_OFFSET_COMMIT (retriable) instead of the old offset.
"""

from __future__ import annotations

from databus.broker.coordinator.service import OffsetCommitEntry
from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build, ms
from databus.protocol.errors import ErrorCode
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
from .groups import groups_of


def _response(ctx: RequestContext, **values):
    values.setdefault("throttle_time", 0)
    return build(ctx.response_class(), values)


@handles(ApiKey.OFFSET_COMMIT, 2, 9)
async def offset_commit(ctx: RequestContext, request):
    entries = [
        OffsetCommitEntry(
            topic=topic.name,
            partition=p.partition_index,
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
        )
        for topic in request.topics
        for p in topic.partitions
    ]
    service = groups_of(ctx)
    # Kafka's order: READ on the group for all, then READ on each topic
    refused = {e.topic for e in entries
               if not ctx.allowed(Operation.READ, ResourceType.TOPIC, e.topic)}
    allowed = [e for e in entries if e.topic not in refused]
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        errors = [ErrorCode.group_authorization_failed] * len(entries)
    elif service is None:
        errors = [ErrorCode.coordinator_load_in_progress] * len(entries)
    else:
        done = iter(await service.commit_offsets(
            request.group_id, request.member_id, request.generation_id_or_member_epoch,
            allowed, retention_ms=ms(getattr(request, "retention_time", -1)),
            group_instance_id=getattr(request, "group_instance_id", None),
            api_version=ctx.api_version,
        ) if allowed else [])
        errors = [ErrorCode.topic_authorization_failed if e.topic in refused else next(done)
                  for e in entries]
    topics: dict[str, list] = {}
    for entry, error in zip(entries, errors):
        topics.setdefault(entry.topic, []).append(
            {"partition_index": entry.partition, "error_code": error}
        )
    return _response(
        ctx, topics=[{"name": name, "partitions": parts} for name, parts in topics.items()]
    )


def _fetch_group(ctx, service, group_id: str, topics,
                 require_stable: bool = False) -> tuple[list[dict], ErrorCode]:
    """The response topics of one group (topics None = every committed partition the
    principal may DESCRIBE)."""
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
        return [], ErrorCode.group_authorization_failed
    if service is None:
        return [], ErrorCode.coordinator_load_in_progress
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    fetched = service.fetch_offsets(group_id, wanted)
    unstable = service.pending_txn_partitions(group_id) if require_stable else set()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), committed in fetched.items():
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic):
            if wanted is not None:
                by_topic.setdefault(topic, []).append({
                    "partition_index": partition, "committed_offset": -1,
                    "error_code": ErrorCode.topic_authorization_failed})
            continue
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": committed.offset,
            "committed_leader_epoch": committed.leader_epoch,
            "metadata": committed.metadata,
            "error_code": (ErrorCode.unstable_offset_commit if (topic, partition) in unstable
                           else ErrorCode.none),
        })
    return [{"name": t, "partitions": parts} for t, parts in by_topic.items()], ErrorCode.none


@handles(ApiKey.OFFSET_FETCH, 1, 9)
async def offset_fetch(ctx: RequestContext, request):
    service = groups_of(ctx)
    stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for group in request.groups:
            # v9+: a consumer-group member (KIP-848) fetches with its member id and epoch
            error = ErrorCode.none
            if service is not None and (getattr(group, "member_epoch", -1) >= 0
                                        or getattr(group, "member_id", None)):
                error = service.validate_offset_fetch(group.group_id, group.member_id,
                                                      group.member_epoch)
            if error != ErrorCode.none:
                groups.append({"group_id": group.group_id, "topics": [], "error_code": error})
                continue
            topics, error = _fetch_group(ctx, service, group.group_id, group.topics, stable)
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        return _response(ctx, groups=groups)
    topics, error = _fetch_group(ctx, service, request.group_id, request.topics, stable)
    return _response(ctx, topics=topics, error_code=error)


@handles(ApiKey.OFFSET_DELETE, 0, 0)
async def offset_delete(ctx: RequestContext, request):
    service = groups_of(ctx)
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return _response(ctx, error_code=ErrorCode.group_authorization_failed, topics=[])
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress, topics=[])
    top, results = await service.delete_offsets(request.group_id, partitions)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), error in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return _response(
        ctx, error_code=top,
        topics=[{"name": t, "partitions": parts} for t, parts in by_topic.items()],
    )
