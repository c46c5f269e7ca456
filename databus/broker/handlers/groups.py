"""Group membership APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups, DeleteGroups, and the consumer group protocol of KIP-848:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), v0-1 (v1 adds the subscribed
topic regex; from v1 the member id is the client's, v0 lets the coordinator pick one).

A group id is a classic group or a consumer group: JoinGroup to a non-empty consumer group
is INCONSISTENT_GROUP_PROTOCOL and ConsumerGroupHeartbeat to a non-empty classic group is
GROUP_ID_NOT_FOUND (Kafka with ``group.consumer.migration.policy=disabled``: no online
upgrade or downgrade); an empty group of either kind is taken over by the other protocol.
ListGroups v5 lists consumer groups with type ``consumer``; DescribeGroups describes them
as Dead (Kafka's answer before DescribeGroups v6), ConsumerGroupDescribe in full.

Share groups (handlers/share.py) share the group id space: ListGroups v5 lists them with
type ``share``, DeleteGroups deletes them (and their durable share state), and JoinGroup
with a share group's id is INCONSISTENT_GROUP_PROTOCOL, as in Kafka.

Thin translations between kio messages (every advertised version) and
coordinator/service.py (the broker's ``groups``, built and started by the Broker); all group
logic lives in coordinator/group_state.py.  This broker is
the coordinator of every group and every transactional id (one node), so FindCoordinator
always names itself, for key type 0 (group) and 1 (transaction).
"""

from __future__ import annotations

import base64
import uuid

from databus.broker.coordinator.consumer_group import HeartbeatRequest as ConsumerHeartbeat
from databus.broker.coordinator.group_state import (
    GroupState,
    JoinRequest,
    SyncRequest,
)
from databus.broker.coordinator.service import GroupService
from databus.protocol.api_keys import ApiKey
from databus.protocol.entities import build, ms
from databus.protocol.errors import ErrorCode
from databus.storage.acls import Operation, ResourceType

from ..api import RequestContext, handles
from ..operations import NOT_REQUESTED, authorized_operations

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


def groups_of(ctx: RequestContext) -> GroupService | None:
    """The broker's coordinator, or None until it has replayed ``__consumer_offsets``."""
    service = ctx.broker.groups
    return service if service.loaded else None


def _response(ctx: RequestContext, **values):
    values.setdefault("throttle_time", 0)
    return build(ctx.response_class(), values)


# -- FindCoordinator ------------------------------------------------------------------------


@handles(ApiKey.FIND_COORDINATOR, 0, 4)
async def find_coordinator(ctx: RequestContext, request):
    broker = ctx.broker
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    if key_type == KEY_TYPE_TRANSACTION:
        loaded = broker.transactions.loaded
        error = ErrorCode.none if loaded else ErrorCode.coordinator_load_in_progress
        message = None
    elif key_type != KEY_TYPE_GROUP:
        error, message = ErrorCode.invalid_request, f"unknown coordinator key type {key_type}"
    elif groups_of(ctx) is None:
        error, message = ErrorCode.coordinator_load_in_progress, None
    else:
        error, message = ErrorCode.none, None
    host, port = broker.advertised_address(ctx.listener_name)

    resource, refused = ((ResourceType.TRANSACTIONAL_ID,
                          ErrorCode.transactional_id_authorization_failed)
                         if key_type == KEY_TYPE_TRANSACTION
                         else (ResourceType.GROUP, ErrorCode.group_authorization_failed))

    def entry(key: str) -> dict:
        code = error
        if code == ErrorCode.none and not ctx.allowed(Operation.DESCRIBE, resource, key):
            code = refused
        ok = code == ErrorCode.none
        return {"node_id": broker.node_id if ok else -1, "host": host if ok else "",
                "port": port if ok else -1, "error_code": code,
                "error_message": message if code == error else None}

    if ctx.api_version >= 4:
        keys = list(request.coordinator_keys)
        return _response(ctx, coordinators=[{"key": k, **entry(k)} for k in keys])
    return _response(ctx, **entry(request.key))


# -- JoinGroup ------------------------------------------------------------------------------


@handles(ApiKey.JOIN_GROUP, 0, 9)
async def join_group(ctx: RequestContext, request):
    service = groups_of(ctx)
    if service is None:
        return _join_error(ctx, request, ErrorCode.coordinator_load_in_progress)
    if ctx.broker.shares.is_share_group(request.group_id) or not service.claim_for_classic(
            request.group_id):
        return _join_error(ctx, request, ErrorCode.inconsistent_group_protocol)
    result = await service.join(
        JoinRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
            session_timeout_ms=ms(request.session_timeout),
            # JoinGroup v0 has no rebalance timeout: the session timeout serves as one.
            rebalance_timeout_ms=ms(getattr(request, "rebalance_timeout", -1)),
            group_instance_id=getattr(request, "group_instance_id", None),
            client_id=ctx.client_id or "",
            client_host="/" + ctx.client_host if ctx.client_host else "",
            require_known_member_id=ctx.api_version >= 4,
            supports_skip_assignment=ctx.api_version >= 9,
        )
    )
    protocol_name = result.protocol_name
    if protocol_name is None and ctx.api_version < 7:
        protocol_name = ""  # nullable only from v7
    return _response(
        ctx,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "metadata": m.metadata}
            for m in result.members
        ],
    )


def _join_error(ctx: RequestContext, request, error: ErrorCode):
    return _response(
        ctx, error_code=error, generation_id=-1, protocol_type=None,
        protocol_name=None if ctx.api_version >= 7 else "", leader="", skip_assignment=False,
        member_id=request.member_id, members=[],
    )


# -- SyncGroup ------------------------------------------------------------------------------


@handles(ApiKey.SYNC_GROUP, 0, 5)
async def sync_group(ctx: RequestContext, request):
    service = groups_of(ctx)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress, assignment=b"",
                         protocol_type=None, protocol_name=None)
    result = await service.sync(
        SyncRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            generation_id=request.generation_id,
            assignments=tuple((a.member_id, bytes(a.assignment)) for a in request.assignments),
            protocol_type=getattr(request, "protocol_type", None),
            protocol_name=getattr(request, "protocol_name", None),
            group_instance_id=getattr(request, "group_instance_id", None),
        )
    )
    return _response(
        ctx, error_code=result.error, protocol_type=result.protocol_type,
        protocol_name=result.protocol_name, assignment=result.assignment,
    )


# -- Heartbeat ------------------------------------------------------------------------------


@handles(ApiKey.HEARTBEAT, 0, 4)
async def heartbeat(ctx: RequestContext, request):
    service = groups_of(ctx)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress)
    error = service.heartbeat(request.group_id, request.member_id, request.generation_id,
                              getattr(request, "group_instance_id", None))
    return _response(ctx, error_code=error)


# -- LeaveGroup -----------------------------------------------------------------------------


@handles(ApiKey.LEAVE_GROUP, 0, 5)
async def leave_group(ctx: RequestContext, request):
    service = groups_of(ctx)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress, members=[])
    if ctx.api_version < 3:
        _, errors = service.leave(request.group_id, [request.member_id])
        return _response(ctx, error_code=errors[0] if errors else ErrorCode.none)
    identities = [(m.member_id, m.group_instance_id) for m in request.members]
    top, errors = service.leave(request.group_id, [mid for mid, _ in identities],
                                [iid for _, iid in identities])
    return _response(
        ctx,
        error_code=top,
        members=[
            {"member_id": mid, "group_instance_id": iid, "error_code": err}
            for (mid, iid), err in zip(identities, errors or [top] * len(identities))
        ],
    )


# -- ListGroups / DescribeGroups / DeleteGroups ---------------------------------------------


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(ctx: RequestContext, request):
    service = groups_of(ctx)
    shares = ctx.broker.shares
    if service is None or not shares.loaded:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress, groups=[])
    # Kafka: DESCRIBE on the cluster lists every group, else the groups one may DESCRIBE
    everything = ctx.cluster_allowed(Operation.DESCRIBE)

    def may_describe(group_id: str) -> bool:
        return everything or ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id)

    states = {s.lower() for s in getattr(request, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    listed = []
    for group_id in service.group_ids():
        if not may_describe(group_id):
            continue
        consumer = service.describe_consumer_group(group_id)
        if consumer is not None:
            listed.append({"group_id": group_id, "protocol_type": "consumer",
                           "group_state": consumer.state.value, "group_type": "consumer"})
            continue
        snapshot = service.describe(group_id)
        state = snapshot.state.value if snapshot else GroupState.EMPTY.value
        listed.append({
            "group_id": group_id,
            "protocol_type": (snapshot.protocol_type if snapshot else None) or "",
            "group_state": state,
            "group_type": "classic",
        })
    # share groups (KIP-932): listed by ListGroups v5's type "share", protocol type "share"
    for group_id in shares.group_ids():
        if not may_describe(group_id):
            continue
        snapshot = shares.describe(group_id)
        listed.append({"group_id": group_id, "protocol_type": "share",
                       "group_state": snapshot.state.value if snapshot else "Empty",
                       "group_type": "share"})
    listed = [g for g in listed
              if (not states or g["group_state"].lower() in states)
              and (not types or g["group_type"] in types)]
    if ctx.api_version < 5:
        # clients before v5 know no group types; Kafka lists consumer groups to them too
        listed = [g for g in listed if g["group_type"] != "share"]
    return _response(ctx, error_code=ErrorCode.none, groups=listed)


@handles(ApiKey.DESCRIBE_GROUPS, 0, 5)
async def describe_groups(ctx: RequestContext, request):
    service = groups_of(ctx)
    described = []
    for group_id in request.groups:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            described.append(_described(group_id, ErrorCode.group_authorization_failed,
                                        NOT_REQUESTED))
            continue
        operations = authorized_operations(
            ctx, ResourceType.GROUP, group_id,
            getattr(request, "include_authorized_operations", False))
        if service is None:
            described.append(_described(group_id, ErrorCode.coordinator_load_in_progress,
                                        operations))
            continue
        snapshot = service.describe(group_id)
        if snapshot is None:
            # Kafka describes an unknown group as Dead, without an error.
            described.append(_described(group_id, ErrorCode.none, operations))
            continue
        stable = snapshot.state is GroupState.STABLE
        described.append({
            "error_code": ErrorCode.none,
            "error_message": None,
            "group_id": group_id,
            "group_state": snapshot.state.value,
            "protocol_type": snapshot.protocol_type or "",
            # Kafka reports the protocol and member metadata only once the group is Stable.
            "protocol_data": (snapshot.protocol_name or "") if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.subscription if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in snapshot.members
            ],
            "authorized_operations": operations,
        })
    return _response(ctx, groups=described)


def _described(group_id: str, error: ErrorCode, operations: int) -> dict:
    return {
        "error_code": error, "error_message": None, "group_id": group_id,
        "group_state": GroupState.DEAD.value, "protocol_type": "", "protocol_data": "",
        "members": [], "authorized_operations": operations,
    }


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(ctx: RequestContext, request):
    service = groups_of(ctx)
    results = []
    for group_id in request.groups_names:
        if not ctx.allowed(Operation.DELETE, ResourceType.GROUP, group_id):
            error = ErrorCode.group_authorization_failed
        elif service is None:
            error = ErrorCode.coordinator_load_in_progress
        elif not group_id:
            error = ErrorCode.invalid_group_id
        elif ctx.broker.shares.is_share_group(group_id):
            error = await ctx.broker.shares.delete_group(group_id)
        else:
            error = await service.delete_group(group_id)
        results.append({"group_id": group_id, "error_code": error})
    return _response(ctx, results=results)


# -- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) ---------------------------------


def _assignment_by_id(topic_partitions) -> dict[uuid.UUID, frozenset[int]] | None:
    if topic_partitions is None:
        return None
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions}


def _new_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): url-safe base64 of 16 random bytes."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
async def consumer_group_heartbeat(ctx: RequestContext, request):
    service = groups_of(ctx)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, error_code=ErrorCode.group_authorization_failed, member_epoch=0,
                         heartbeat_interval=0)
    if service is None:
        return _response(ctx, error_code=ErrorCode.coordinator_load_in_progress,
                         member_epoch=0, heartbeat_interval=0)
    member_id = request.member_id
    if ctx.api_version == 0 and not member_id and request.member_epoch == 0:
        member_id = _new_member_id()  # v0: the coordinator names new members
    if ctx.broker.shares.is_share_group(request.group_id):
        return _response(ctx, error_code=ErrorCode.group_id_not_found,
                         error_message=f"Group {request.group_id} is not a consumer group",
                         member_epoch=0, heartbeat_interval=0)
    names = request.subscribed_topic_names
    result = await service.consumer_heartbeat(ConsumerHeartbeat(
        group_id=request.group_id,
        member_id=member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=ms(request.rebalance_timeout),
        subscribed_topic_names=tuple(names) if names is not None else None,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=_assignment_by_id(request.topic_partitions),
        client_id=ctx.client_id or "",
        client_host="/" + ctx.client_host if ctx.client_host else "",
    ))
    assignment = None
    if result.assignment is not None:
        assignment = {"topic_partitions": [
            {"topic_id": topic_id, "partitions": sorted(parts)}
            for topic_id, parts in sorted(result.assignment.items(), key=lambda kv: str(kv[0]))
        ]}
    return _response(
        ctx, error_code=result.error, error_message=result.message,
        member_id=result.member_id, member_epoch=result.member_epoch,
        heartbeat_interval=result.heartbeat_interval_ms, assignment=assignment,
    )


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
async def consumer_group_describe(ctx: RequestContext, request):
    service = groups_of(ctx)
    names = {info.topic_id: name for name, info in ctx.broker.log_manager.topics().items()}
    want_operations = getattr(request, "include_authorized_operations", False)

    def described(assignment) -> dict:
        return {"topic_partitions": [
            {"topic_id": topic_id, "topic_name": names[topic_id], "partitions": sorted(parts)}
            for topic_id, parts in sorted(assignment.items(), key=lambda kv: names.get(kv[0], ""))
            if topic_id in names
        ]}

    groups = []
    for group_id in request.group_ids:
        entry = {"group_id": group_id, "group_state": "", "group_epoch": -1,
                 "assignment_epoch": -1, "assignor_name": "", "members": [],
                 "authorized_operations": NOT_REQUESTED, "error_message": None}
        snapshot = service.describe_consumer_group(group_id) if service is not None else None
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
        elif service is None:
            entry["error_code"] = ErrorCode.coordinator_load_in_progress
        elif snapshot is None:
            entry["error_code"] = ErrorCode.group_id_not_found
            known = group_id in service.group_ids() or ctx.broker.shares.is_share_group(group_id)
            entry["error_message"] = (f"Group {group_id} is not a consumer group" if known
                                      else f"Group {group_id} not found.")
        else:
            entry.update(
                error_code=ErrorCode.none, group_state=snapshot.state.value,
                group_epoch=snapshot.group_epoch, assignment_epoch=snapshot.assignment_epoch,
                assignor_name=snapshot.assignor_name,
                authorized_operations=authorized_operations(
                    ctx, ResourceType.GROUP, group_id, want_operations),
                members=[{
                    "member_id": m.member_id, "instance_id": m.instance_id,
                    "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed_topic_names),
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": described(m.assignment),
                    "target_assignment": described(m.target_assignment),
                    "member_type": 1,  # a consumer-protocol member (v1)
                } for m in snapshot.members],
            )
        groups.append(entry)
    return _response(ctx, groups=groups)
