"""Share-group APIs (KIP-932, "Queues for Kafka"): ShareGroupHeartbeat (76),
ShareGroupDescribe (77), ShareFetch (78), ShareAcknowledge (79), DescribeShareGroupOffsets
(90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92).

Thin translations between kio messages and share/service.py (the broker's ``shares``);
membership logic lives in share/group_state.py, record states in share/partition_state.py.

Versions: 76-77 at v1, what Kafka 4.1+ and librdkafka 2.15 (confluent-kafka 2.16's
``ShareConsumer``) speak (v0 was Kafka 4.0's early access); ShareFetch and ShareAcknowledge
at v1-v2: v2 adds the RENEW acknowledgement (KIP-1222: the records stay the member's with a
new lock; a request with ``is_renew_ack`` acquires nothing) and ``share_acquire_mode``
(KIP-1206: 0 batch_optimized, 1 record_limit; this broker keeps ``max_records`` strictly in
both, which batch_optimized allows).  90-92 at v0 (v1 of 90 only adds a lag field: not
served).

ShareFetch: acknowledgements piggy-backed on the request are applied, and their write to
``__share_group_state`` is started; meanwhile the session's partitions are read and records
acquired (waiting up to ``max_wait`` for an append or for records released by others); the
answer goes out once the write is fsynced, so a response never confirms an acknowledgement
that a crash could lose.  Partitions are answered when records
were acquired, when they were named in the request, or with an error.
"""

from __future__ import annotations

import uuid

import trio

from databus.broker.share.group_state import HeartbeatRequest
from databus.broker.share.service import (
    FINAL_EPOCH,
    OPEN_EPOCH,
    AckBatch,
    PartitionFetch,
    SessionError,
    ShareService,
)
from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build, ms
from databus.protocol.errors import ErrorCode
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
from ..authorizer import partition_errors
from ..operations import NOT_REQUESTED, authorized_operations

ZERO_UUID = uuid.UUID(int=0)


def shares_of(ctx: RequestContext) -> ShareService | None:
    """The broker's share-group service, or None until it has replayed its state."""
    service = ctx.broker.shares
    return service if service.loaded else None


def _response(ctx: RequestContext, **values):
    values.setdefault("throttle_time", 0)
    return build(ctx.response_class(), values)


def _classic_group(ctx: RequestContext, group_id: str) -> bool:
    groups = ctx.broker.groups
    return groups.loaded and group_id in groups.group_ids()


def _not_share_group(group_id: str) -> str:
    return f"Group {group_id} is not a share group."


# -- ShareGroupHeartbeat ----------------------------------------------------------------------


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
async def share_group_heartbeat(ctx: RequestContext, request):
    # Kafka: a subscription naming a topic the caller may not DESCRIBE is refused whole
    # (a member must not learn, through its assignment, of topics it may not see)
    unauthorized = sorted(t for t in set(request.subscribed_topic_names or ())
                          if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, t))
    if unauthorized:
        return _response(ctx, error_code=ErrorCode.topic_authorization_failed,
                         error_message=f"Not authorized to access topics: {unauthorized}")
    service = shares_of(ctx)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress)
    if _classic_group(ctx, request.group_id):
        return _response(ctx, error_code=ErrorCode.group_id_not_found,
                         error_message=_not_share_group(request.group_id))
    result = service.heartbeat(HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        subscribed_topic_names=(tuple(request.subscribed_topic_names)
                                if request.subscribed_topic_names is not None else None),
        rack_id=request.rack_id,
        client_id=ctx.client_id or "",
        client_host="/" + ctx.client_host if ctx.client_host else "",
    ))
    if service.membership_changed:
        # the new epochs and assignment are durable before the member hears of them
        error = await service.persist()
        if error != ErrorCode.none:
            return _response(ctx, error_code=error)
    assignment = None
    if result.assignment is not None:
        topics = ctx.broker.log_manager.topics()
        assignment = {"topic_partitions": [
            {"topic_id": topics[name].topic_id, "partitions": list(parts)}
            for name, parts in sorted(result.assignment.items()) if name in topics
        ]}
    ok = result.error == ErrorCode.none
    return _response(
        ctx, error_code=result.error, error_message=result.message,
        member_id=request.member_id if ok else None,
        member_epoch=result.member_epoch, heartbeat_interval=result.heartbeat_interval_ms,
        assignment=assignment,
    )


# -- ShareGroupDescribe -----------------------------------------------------------------------


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
async def share_group_describe(ctx: RequestContext, request):
    service = shares_of(ctx)
    topics = ctx.broker.log_manager.topics()
    described = []
    for group_id in request.group_ids:
        entry = {"group_id": group_id, "group_state": "", "group_epoch": -1,
                 "assignment_epoch": -1, "assignor_name": "", "members": [],
                 "authorized_operations": NOT_REQUESTED}
        snapshot = service.describe(group_id) if service is not None else None
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
        elif service is None:
            entry["error_code"] = ErrorCode.coordinator_load_in_progress
        elif snapshot is None:
            entry["error_code"] = ErrorCode.group_id_not_found
            entry["error_message"] = (_not_share_group(group_id) if _classic_group(ctx, group_id)
                                      else f"Group {group_id} not found.")
        else:
            entry.update(
                error_code=ErrorCode.none, group_state=snapshot.state.value,
                group_epoch=snapshot.group_epoch, assignment_epoch=snapshot.assignment_epoch,
                assignor_name="simple",
                authorized_operations=authorized_operations(
                    ctx, ResourceType.GROUP, group_id,
                    getattr(request, "include_authorized_operations", False)),
                members=[{
                    "member_id": m.member_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "assignment": {"topic_partitions": [
                        {"topic_id": topics[name].topic_id, "topic_name": name,
                         "partitions": list(parts)}
                        for name, parts in sorted(m.assignment.items()) if name in topics
                    ]},
                } for m in snapshot.members],
            )
        described.append(entry)
    return _response(ctx, groups=described)


# -- ShareFetch / ShareAcknowledge ------------------------------------------------------------


def _ack_batches(partition) -> list[AckBatch]:
    return [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            for b in partition.acknowledgement_batches]


def _refused(ctx: RequestContext, service: ShareService,
             keys) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """Kafka's READ on each TOPIC of a ShareFetch/ShareAcknowledge: {(topic id, partition):
    TOPIC_AUTHORIZATION_FAILED} for those of ``keys`` the caller may not read (ids of no
    topic are left to the UNKNOWN_TOPIC_ID answer)."""
    names = service.topic_names_by_id()
    by_name = {(names[t], p): (t, p) for t, p in keys if t in names}
    return {by_name[key]: code
            for key, code in partition_errors(ctx, by_name, Operation.READ).items()}


def _apply_acks(service: ShareService, group_id: str, member_id: str, topics,
                refused: dict, *, renew: bool) -> dict[tuple[uuid.UUID, int], ErrorCode]:
    """(topic id, partition) -> acknowledge error, for every partition carrying batches;
    those of ``refused`` get its error and are not applied."""
    results = {}
    for topic in topics:
        for partition in topic.partitions:
            batches = _ack_batches(partition)
            key = (topic.topic_id, partition.partition_index)
            if not batches:
                continue
            if key in refused:
                results[key] = refused[key]
            else:
                results[key] = service.acknowledge(
                    group_id, member_id, topic.topic_id, partition.partition_index, batches,
                    renew=renew)
    return results


async def _persist_acks(service: ShareService,
                        acks: dict[tuple[uuid.UUID, int], ErrorCode], pending=None) -> None:
    """Wait for the fsync of the applied acknowledgements (``pending``: the write round
    asked for earlier); a failed write becomes their error (the client retries or the
    records are delivered again: never lost)."""
    if not acks:
        return
    error = await service.wait_written(pending or service.persist_soon())
    if error != ErrorCode.none:
        for key, code in acks.items():
            if code == ErrorCode.none:
                acks[key] = error


def _leader(ctx: RequestContext) -> dict:
    return {"leader_id": ctx.broker.node_id, "leader_epoch": 0}


# KIP-1206's acquire modes (ShareFetch v2)
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1


@handles(ApiKey.SHARE_FETCH, 1, 2)
async def share_fetch(ctx: RequestContext, request):
    service = shares_of(ctx)
    group_id, member_id = request.group_id or "", request.member_id or ""

    def top_error(code: ErrorCode, message: str | None = None):
        return _response(ctx, error_code=code, error_message=message,
                         acquisition_lock_timeout=0, responses=[], node_endpoints=[])

    if service is None:
        return top_error(ErrorCode.coordinator_load_in_progress)
    epoch = request.share_session_epoch
    renew_only = bool(getattr(request, "is_renew_ack", False))
    if getattr(request, "share_acquire_mode", BATCH_OPTIMIZED) not in (BATCH_OPTIMIZED,
                                                                        RECORD_LIMIT):
        return top_error(ErrorCode.invalid_request,
                         f"unknown share_acquire_mode {request.share_acquire_mode}")
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    if epoch == OPEN_EPOCH and has_acks:
        return top_error(ErrorCode.invalid_request,
                         "a ShareFetch opening a share session carries no acknowledgements")
    try:
        session = service.session_for(group_id, member_id, epoch, may_open=True)
    except SessionError as exc:
        return top_error(exc.code, str(exc))
    if epoch != FINAL_EPOCH:
        for topic in request.topics:
            for p in topic.partitions:
                session.partitions.add((topic.topic_id, p.partition_index))
        for forgotten in request.forgotten_topics_data:
            for index in forgotten.partitions:
                session.partitions.discard((forgotten.topic_id, index))

    named = {(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions}
    # checked on every request over the whole session: an ACL removed since the session
    # opened stops its topic at once
    refused = _refused(ctx, service, named | session.partitions)
    acks = _apply_acks(service, group_id, member_id, request.topics, refused,
                       renew=ctx.api_version >= 2)
    # the write of the acknowledgements starts now; records are acquired meanwhile and the
    # answer waits for both (it must not confirm an acknowledgement before its fsync)
    pending = service.persist_soon() if acks else None

    results: list[PartitionFetch] = []
    if epoch == FINAL_EPOCH:
        await _persist_acks(service, acks, pending)
        service.close_session(session)
    elif renew_only:
        # KIP-1222: a request that renews locks acquires nothing (the member is still
        # working on what it holds)
        await _persist_acks(service, acks, pending)
    else:
        created = service.created
        deadline = trio.current_time() + ms(request.max_wait) / 1000
        max_records = request.max_records if request.max_records > 0 else 500
        max_bytes = min(request.max_bytes, ctx.broker.config.fetch_max_bytes)
        while True:
            # records once acquired are answered at once, whatever min_bytes says: a second
            # pass would acquire more while the first ones wait in no response
            results = service.acquire(session, max_records, max_bytes, named, refused)
            got = any(r.acquired for r in results)
            # a refused partition stays refused: answering at once would make the client
            # ask again at once; it waits for records from the others like an empty one
            errors = any(r.error != ErrorCode.none and (r.topic_id, r.partition) not in refused
                         for r in results)
            if got or errors or not session.partitions:
                break
            if trio.current_time() >= deadline:
                break
            await service.wait_for_records(session, deadline)
            if (group_id, member_id) not in service.sessions:
                break  # the member left or was removed while waiting
        if any(r.acquired for r in results):
            service.wake_timers()
        if service.created != created:
            # a start offset chosen by auto reset must be durable before records from it
            # are handed out: a later round covers it (and the acknowledgements)
            pending = service.persist_soon()
            if not acks:
                await service.wait_written(pending)
        await _persist_acks(service, acks, pending)

    by_key = {(r.topic_id, r.partition): r for r in results}
    for key, code in acks.items():
        by_key.setdefault(key, PartitionFetch(*key)).ack_error = code
    topics: dict[uuid.UUID, list[dict]] = {}
    for (topic_id, index), r in by_key.items():
        topics.setdefault(topic_id, []).append({
            "partition_index": index, "error_code": r.error,
            "acknowledge_error_code": r.ack_error, "current_leader": _leader(ctx),
            "records": r.records,
            "acquired_records": [
                {"first_offset": a.first_offset, "last_offset": a.last_offset,
                 "delivery_count": a.delivery_count} for a in r.acquired],
        })
    return _response(
        ctx, error_code=ErrorCode.none,
        acquisition_lock_timeout=service.lock_duration_ms(group_id),
        responses=[{"topic_id": t, "partitions": parts} for t, parts in topics.items()],
        node_endpoints=[],
    )


@handles(ApiKey.SHARE_ACKNOWLEDGE, 1, 2)
async def share_acknowledge(ctx: RequestContext, request):
    service = shares_of(ctx)
    group_id, member_id = request.group_id or "", request.member_id or ""

    def top_error(code: ErrorCode, message: str | None = None):
        return _response(ctx, error_code=code, error_message=message, responses=[],
                         node_endpoints=[])

    if service is None:
        return top_error(ErrorCode.coordinator_load_in_progress)
    try:
        session = service.session_for(group_id, member_id, request.share_session_epoch,
                                      may_open=False)
    except SessionError as exc:
        return top_error(exc.code, str(exc))
    named = {(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions}
    acks = _apply_acks(service, group_id, member_id, request.topics,
                       _refused(ctx, service, named), renew=ctx.api_version >= 2)
    await _persist_acks(service, acks)
    if request.share_session_epoch == FINAL_EPOCH:
        service.close_session(session)
    topics: dict[uuid.UUID, list[dict]] = {}
    for (topic_id, index), code in acks.items():
        topics.setdefault(topic_id, []).append(
            {"partition_index": index, "error_code": code, "current_leader": _leader(ctx)})
    return _response(
        ctx, error_code=ErrorCode.none,
        responses=[{"topic_id": t, "partitions": parts} for t, parts in topics.items()],
        node_endpoints=[], **({"acquisition_lock_timeout": service.lock_duration_ms(group_id)}
                              if ctx.api_version >= 2 else {}),
    )


# -- DescribeShareGroupOffsets / AlterShareGroupOffsets / DeleteShareGroupOffsets -------------


def _unknown_group(ctx: RequestContext, service: ShareService | None,
                   group_id: str) -> tuple[ErrorCode, str | None]:
    """Whether ``group_id`` can be administered as a share group: (error, message)."""
    if service is None:
        return ErrorCode.coordinator_load_in_progress, None
    if _classic_group(ctx, group_id):
        return ErrorCode.group_id_not_found, _not_share_group(group_id)
    if not service.is_share_group(group_id):
        return ErrorCode.group_id_not_found, f"Group {group_id} not found."
    return ErrorCode.none, None


@handles(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, 1)
async def describe_share_group_offsets(ctx: RequestContext, request):
    service = shares_of(ctx)
    topics = ctx.broker.log_manager.topics()
    groups = []
    for group in request.groups:
        error, message = _unknown_group(ctx, service, group.group_id)
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group.group_id):
            error, message = ErrorCode.group_authorization_failed, None
        if error != ErrorCode.none:
            groups.append({"group_id": group.group_id, "topics": [], "error_code": error,
                           "error_message": message})
            continue
        known = service.start_offsets(group.group_id)
        if group.topics is None:
            wanted: dict[str, list[int]] = {}
            for topic, partition in sorted(known):
                wanted.setdefault(topic, []).append(partition)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in group.topics}
        described = []
        for name, partitions in wanted.items():
            info = topics.get(name)
            entries = []
            for index in partitions:
                if info is None or not 0 <= index < info.partitions:
                    entries.append({"partition_index": index, "start_offset": -1,
                                    "leader_epoch": -1, "lag": -1,
                                    "error_code": ErrorCode.unknown_topic_or_partition})
                    continue
                start, lag = known.get((name, index), (-1, -1))
                entries.append({"partition_index": index, "start_offset": start,
                                "leader_epoch": 0 if start >= 0 else -1, "lag": lag,
                                "error_code": ErrorCode.none})
            described.append({"topic_name": name,
                              "topic_id": info.topic_id if info else ZERO_UUID,
                              "partitions": entries})
        groups.append({"group_id": group.group_id, "topics": described,
                       "error_code": ErrorCode.none})
    return _response(ctx, groups=groups)


@handles(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 0)
async def alter_share_group_offsets(ctx: RequestContext, request):
    service = shares_of(ctx)
    topics = ctx.broker.log_manager.topics()
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress, responses=[])
    if _classic_group(ctx, request.group_id):
        return _response(ctx, error_code=ErrorCode.group_id_not_found,
                         error_message=_not_share_group(request.group_id), responses=[])
    offsets = {(t.topic_name, p.partition_index): p.start_offset
               for t in request.topics for p in t.partitions}
    results = await service.alter_start_offsets(request.group_id, offsets)
    by_topic: dict[str, list[dict]] = {}
    for (topic, index), code in results.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    top = ErrorCode.none
    if results and all(code == ErrorCode.non_empty_group for code in results.values()):
        top = ErrorCode.non_empty_group  # Kafka: a group with members is refused as a whole
    return _response(ctx, error_code=top, responses=[
        {"topic_name": topic, "topic_id": topics[topic].topic_id if topic in topics else ZERO_UUID,
         "partitions": parts} for topic, parts in by_topic.items()])


@handles(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, 0)
async def delete_share_group_offsets(ctx: RequestContext, request):
    service = shares_of(ctx)
    topics = ctx.broker.log_manager.topics()
    error, message = _unknown_group(ctx, service, request.group_id)
    if error != ErrorCode.none:
        return _response(ctx, error_code=error, error_message=message, responses=[])
    results = await service.delete_state(request.group_id, [t.topic_name for t in request.topics])
    if any(code == ErrorCode.non_empty_group for code in results.values()):
        return _response(ctx, error_code=ErrorCode.non_empty_group,
                         error_message="the share group has members", responses=[])
    return _response(ctx, error_code=ErrorCode.none, responses=[
        {"topic_name": topic, "topic_id": topics[topic].topic_id if topic in topics else ZERO_UUID,
         "error_code": code} for topic, code in results.items()])
