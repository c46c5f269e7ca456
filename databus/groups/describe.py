"""Reading groups: the list (ListGroups, with group types), a consumer group's state,
members, owners and committed offsets (DescribeGroups, or ConsumerGroupDescribe for a
KIP-848 group; OffsetFetch), the document ``databus groups describe --json`` prints (fields
documented in docs/cli.md), and a share group's description and start offsets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from databus.protocol.api_keys import ApiKey
from databus.protocol.errors import ErrorCode
from databus.protocol.share_dlq import DLQ_COPY_CONFIG, DLQ_TOPIC_CONFIG
from databus.protocol.types import TopicPartition

from .session import Session, check

LIST_GROUPS_TYPES = 5  # the ListGroups version with group types (share groups)
RESOURCE_GROUP = 32


async def list_group_states(session: Session,
                            kind: str | None = None) -> list[tuple[str, str, str, str]]:
    """(group id, state, protocol type, group type) of every group (of type ``kind``),
    sorted by id."""
    response = await session.request_up_to(None, ApiKey.LIST_GROUPS, LIST_GROUPS_TYPES, {
        "states_filter": [], "types_filter": [kind] if kind else []})
    check(response.error_code, "listing groups")
    states = {g.group_id: getattr(g, "group_state", "") for g in response.groups}
    unknown = [group for group, state in states.items() if not state]
    if unknown:
        # ListGroups < v4 carries no state: ask DescribeGroups instead.
        described = await session.request(None, ApiKey.DESCRIBE_GROUPS, {
            "groups": unknown, "include_authorized_operations": False})
        states.update({g.group_id: g.group_state for g in described.groups})
    return [(g.group_id, states.get(g.group_id) or "?", g.protocol_type or "-",
             getattr(g, "group_type", "") or "-")
            for g in sorted(response.groups, key=lambda g: g.group_id)]


async def is_share_group(session: Session, group: str) -> bool:
    """Whether ListGroups (v5, type filter ``share``) names ``group`` as a share group."""
    response = await session.request_up_to(None, ApiKey.LIST_GROUPS, LIST_GROUPS_TYPES, {
        "states_filter": [], "types_filter": ["share"]})
    check(response.error_code, "listing groups")
    return any(g.group_id == group and getattr(g, "group_type", "") == "share"
               for g in response.groups)


@dataclass
class GroupView:
    state: str
    protocol_type: str
    protocol: str
    members: list  # kio DescribedGroupMember, or ProtocolMember
    owners: dict[TopicPartition, Any]  # -> the member (either shape)
    committed: dict[TopicPartition, int]
    coordinator: int = -1
    epochs: tuple[int, int] | None = None  # consumer protocol: group, assignment epoch


@dataclass(frozen=True)
class ProtocolMember:
    """A member of a consumer-protocol group (KIP-848) in DescribeGroups' member shape."""

    member_id: str
    group_instance_id: str | None
    client_host: str
    client_id: str
    member_epoch: int


async def _consumer_protocol_group(session: Session, node: int, group: str):
    """ConsumerGroupDescribe's answer for ``group``, or None when the broker does not serve
    the API or ``group`` is not a consumer-protocol group."""
    conn = await session.cluster.connection(node)
    if int(ApiKey.CONSUMER_GROUP_DESCRIBE) not in conn.broker_versions:
        return None
    (described,) = (await session.request_up_to(node, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    if described.error_code == ErrorCode.group_id_not_found:
        return None
    check(described.error_code, f"describing {group!r}")
    return described


async def load_group(session: Session, group: str) -> GroupView:
    from databus.protocol.consumer_protocol import ConsumerProtocolError, decode_assignment

    node = await session.coordinator(group)
    (described,) = (await session.request(node, ApiKey.DESCRIBE_GROUPS,
                                          {"groups": [group],
                                           "include_authorized_operations": False})).groups
    if described.group_state == "Dead" or described.error_code == 69:  # GROUP_ID_NOT_FOUND
        # not a classic group (Kafka 4's DescribeGroups v6 says so with an error): maybe a
        # consumer-protocol one
        consumer = await _consumer_protocol_group(session, node, group)
        if consumer is not None:
            return await _consumer_protocol_view(session, node, group, consumer)
    check(described.error_code, f"describing {group!r}")
    owners: dict[TopicPartition, Any] = {}
    if described.protocol_type == "consumer":
        for member in described.members:
            try:
                assigned = decode_assignment(bytes(member.member_assignment))
            except ConsumerProtocolError:
                continue
            for tp in assigned.partitions:
                owners[tp] = member
    return GroupView(described.group_state, described.protocol_type, described.protocol_data,
                     list(described.members), owners, await _committed(session, node, group),
                     node)


async def _committed(session: Session, node: int, group: str) -> dict[TopicPartition, int]:
    fetched = await session.request(node, ApiKey.OFFSET_FETCH, {"group_id": group, "topics": None,
                                                         "require_stable": False})
    check(getattr(fetched, "error_code", 0), f"fetching the offsets of {group!r}")
    return {
        TopicPartition(t.name, p.partition_index): p.committed_offset
        for t in fetched.topics for p in t.partitions if p.committed_offset >= 0
    }


async def _consumer_protocol_view(session: Session, node: int, group: str,
                                  described) -> GroupView:
    members: list[ProtocolMember] = []
    owners: dict[TopicPartition, Any] = {}
    for m in described.members:
        member = ProtocolMember(m.member_id, m.instance_id, m.client_host, m.client_id,
                                m.member_epoch)
        members.append(member)
        for tp in m.assignment.topic_partitions:
            for p in tp.partitions:
                owners[TopicPartition(tp.topic_name, p)] = member
    return GroupView(described.group_state, "consumer", described.assignor_name, members,
                     owners, await _committed(session, node, group), node,
                     (described.group_epoch, described.assignment_epoch))


async def _log_end_offsets(session: Session,
                           partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    from databus.client import LATEST, list_offsets

    if not partitions:
        return {}
    await session.cluster.refresh_metadata({t for t, _ in partitions}, allow_auto_create=False)
    known = [tp for tp in partitions if session.cluster.partitions_for(tp[0])]
    result = await list_offsets(session.cluster, {tp: LATEST for tp in known},
                                timeout=session.timeout)
    return {tp: offset for tp, (offset, _ts) in result.items()}


async def group_document(session: Session, group: str, view: GroupView) -> dict:
    """A group as ``describe --json`` prints it (fields documented in docs/cli.md)."""
    partitions = sorted(set(view.owners) | set(view.committed))
    ends = await _log_end_offsets(session, partitions)
    offsets = []
    for tp in partitions:
        current, end = view.committed.get(tp), ends.get(tp)
        owner = view.owners.get(tp)
        offsets.append({
            "topic": tp[0], "partition": tp[1], "current_offset": current,
            "log_end_offset": end,
            "lag": end - current if current is not None and end is not None else None,
            "consumer_id": owner.member_id if owner else None,
            "host": owner.client_host if owner else None,
            "client_id": owner.client_id if owner else None,
        })
    members = [{
        "consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
        "host": m.client_host, "client_id": m.client_id,
        "assignment": [{"topic": t, "partition": p}
                       for (t, p), o in sorted(view.owners.items()) if o is m],
        **({"member_epoch": m.member_epoch} if view.epochs else {}),
    } for m in view.members]
    doc: dict[str, Any] = {"group": group, "state": view.state, "protocol_type": view.protocol_type,
           "assignment_strategy": view.protocol,
           "coordinator": {"id": view.coordinator,
                           "address": session.addresses.get(view.coordinator)},
           "members": members, "offsets": offsets}
    if view.epochs:  # a consumer-protocol group (KIP-848): Kafka's GROUP-EPOCH columns
        doc.update(type="consumer", group_epoch=view.epochs[0],
                   assignment_epoch=view.epochs[1])
    return doc


# -- share groups ----------------------------------------------------------------------------


async def describe_share_group(session: Session, group: str):
    """(coordinator node id, ShareGroupDescribe's answer for ``group``)."""
    node = await session.coordinator(group)
    (described,) = (await session.request_up_to(node, ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": [group], "include_authorized_operations": False})).groups
    check(described.error_code, f"describing share group {group!r}")
    return node, described


async def load_share_offsets(session: Session, group: str) -> GroupView:
    """A share group as GroupView: state and members from ShareGroupDescribe, the
    share-partition start offsets as ``committed`` (what reset-offsets moves)."""
    node, described = await describe_share_group(session, group)
    offsets = await share_offsets(session, node, group)
    return GroupView(described.group_state, "share", "", list(described.members), {},
                     {tp: start for tp, (start, _lag) in offsets.items() if start >= 0})


async def share_offsets(session: Session, node: int,
                        group: str) -> dict[TopicPartition, tuple[int, int]]:
    """(topic, partition) -> (share-partition start offset, lag), -1 where unknown."""
    response = await session.request_up_to(node, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 1, {
        "groups": [{"group_id": group, "topics": None}]})
    (result,) = response.groups
    check(result.error_code, f"describing the offsets of share group {group!r}")
    return {TopicPartition(t.topic_name, p.partition_index):
            (p.start_offset, getattr(p, "lag", -1))
            for t in result.topics for p in t.partitions}


async def share_dlq(session: Session, node: int, group: str) -> tuple[str, str] | None:
    """(dead-letter topic, copy.record.enable) of a share group (its GROUP configs), None
    when it has none or the broker knows no such configs (before Kafka 4.4)."""
    response = await session.request_up_to(node, ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": RESOURCE_GROUP, "resource_name": group,
                       "configuration_keys": [DLQ_TOPIC_CONFIG, DLQ_COPY_CONFIG]}],
        "include_synonyms": False, "include_documentation": False})
    (result,) = response.results
    if result.error_code != ErrorCode.none:
        return None
    values = {c.name: c.value for c in result.configs}
    if not values.get(DLQ_TOPIC_CONFIG):
        return None
    return values[DLQ_TOPIC_CONFIG], values.get(DLQ_COPY_CONFIG) or "false"
