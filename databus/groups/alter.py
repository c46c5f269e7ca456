"""Changing groups: offset resets as kafka-consumer-groups.sh (and kafka-share-groups.sh for
a share group's start offsets) computes them — a plan first, committed only when asked —
and deletes (DeleteGroups; a share group's state of whole topics)."""

from __future__ import annotations

from dataclasses import dataclass, field

from databus.protocol.api_keys import ApiKey
from databus.protocol.types import TopicPartition

from .describe import GroupView, is_share_group, load_group, load_share_offsets
from .session import INACTIVE_STATES, GroupsError, Session, check


@dataclass
class ResetRequest:
    """Where to move a group's offsets: reset-offsets' options (the console's reset form
    fills the same fields).  Exactly one target is set; ``timestamp`` (epoch ms) stands for
    both --to-datetime and --by-duration."""

    topic_partitions: list[tuple[str, list[int] | None]] = field(default_factory=list)
    all_topics: bool = False
    to_earliest: bool = False
    to_latest: bool = False
    to_current: bool = False
    to_offset: int | None = None
    timestamp: int | None = None
    shift_by: int | None = None


async def reset_partitions(session: Session, request: ResetRequest,
                           view: GroupView) -> list[TopicPartition]:
    """The partitions to reset: --topic's (checked against the cluster) or, with
    --all-topics, those the group has committed offsets for."""
    cluster = session.cluster
    wanted: list[tuple[str, list[int] | None]] = (
        [(t, None) for t in sorted({t for t, _ in view.committed})]
        if request.all_topics else request.topic_partitions)
    await cluster.refresh_metadata({t for t, _ in wanted}, allow_auto_create=False)
    partitions: list[TopicPartition] = []
    for topic, chosen in wanted:
        existing = cluster.partitions_for(topic)
        if not existing:
            raise GroupsError(f"topic {topic!r} does not exist")
        missing = sorted(set(chosen or ()) - set(existing))
        if missing:
            raise GroupsError(f"topic {topic!r} has no partition {missing}")
        partitions += [TopicPartition(topic, p) for p in (chosen or sorted(existing))]
    return partitions


async def plan_reset(session: Session, request: ResetRequest, view: GroupView,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """(topic, partition) -> new offset, as kafka-consumer-groups.sh computes it: every
    target but --to-earliest/--to-latest is kept within the partition's earliest..latest."""
    from databus.client import EARLIEST, LATEST, list_offsets

    cluster = session.cluster
    earliest = await list_offsets(cluster, {tp: EARLIEST for tp in partitions},
                                  timeout=session.timeout)
    latest = await list_offsets(cluster, {tp: LATEST for tp in partitions},
                                timeout=session.timeout)
    low = {tp: o for tp, (o, _) in earliest.items()}
    high = {tp: o for tp, (o, _) in latest.items()}

    def clamp(tp: TopicPartition, offset: int) -> int:
        return min(max(offset, low[tp]), high[tp])

    if request.to_earliest:
        return dict(low)
    if request.to_latest:
        return dict(high)
    if request.to_current:
        return {tp: view.committed.get(tp, high[tp]) for tp in partitions}
    if request.to_offset is not None:
        return {tp: clamp(tp, request.to_offset) for tp in partitions}
    if request.timestamp is not None:
        found = await list_offsets(cluster, {tp: request.timestamp for tp in partitions},
                                   timeout=session.timeout)
        return {tp: (o if o >= 0 else high[tp]) for tp, (o, _) in found.items()}
    shift = request.shift_by or 0
    return {tp: clamp(tp, view.committed.get(tp, high[tp]) + shift) for tp in partitions}


async def plan_group_reset(session: Session, group: str, request: ResetRequest):
    """(view, partitions, new offsets, is a share group) of resetting ``group`` as
    ``request`` says.  Refuses a group with members: the offsets of a live group belong to
    its consumers."""
    share = await is_share_group(session, group)
    if share:
        if request.shift_by is not None or request.to_offset is not None or request.to_current:
            raise GroupsError(
                "--shift-by, --to-offset and --to-current are not for share groups "
                "(kafka-share-groups.sh has --to-earliest, --to-latest and --to-datetime)")
        view = await load_share_offsets(session, group)
    else:
        view = await load_group(session, group)
    if view.state not in INACTIVE_STATES:
        raise GroupsError(
            f"offsets can only be reset when group {group!r} is inactive (no members), "
            f"but it is {view.state}"
        )
    partitions = await reset_partitions(session, request, view)
    return view, partitions, await plan_reset(session, request, view, partitions), share


async def execute_group_reset(session: Session, group: str, new: dict[TopicPartition, int],
                              share: bool) -> None:
    """Commit a plan of plan_group_reset (share groups: their start offsets)."""
    if share:
        await _alter_share_offsets(session, group, new)
    else:
        await _commit(session, group, new)


async def _commit(session: Session, group: str, new: dict[TopicPartition, int]) -> None:
    by_topic: dict[str, list] = {}
    for (topic, p), offset in new.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": p, "committed_offset": offset, "committed_leader_epoch": -1,
            "committed_metadata": "",
        })
    node = await session.coordinator(group)
    response = await session.request(node, ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time": -1,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    })
    for t in response.topics:
        for p in t.partitions:
            check(p.error_code, f"committing {t.name}-{p.partition_index}")


async def _alter_share_offsets(session: Session, group: str,
                               new: dict[TopicPartition, int]) -> None:
    by_topic: dict[str, list] = {}
    for (topic, p), offset in new.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "start_offset": offset})
    node = await session.coordinator(group)
    response = await session.request_up_to(node, ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {
        "group_id": group,
        "topics": [{"topic_name": t, "partitions": ps} for t, ps in by_topic.items()]})
    check(response.error_code, f"altering the offsets of share group {group!r}")
    for t in response.responses:
        for p in t.partitions:
            check(p.error_code, f"altering {t.topic_name}-{p.partition_index}")


async def delete_group(session: Session, group: str) -> None:
    """DeleteGroups: an empty group and its committed offsets."""
    node = await session.coordinator(group)
    response = await session.request(node, ApiKey.DELETE_GROUPS, {"groups_names": [group]})
    (result,) = response.results
    check(result.error_code, f"deleting group {group!r}")


async def delete_share_offsets(session: Session, group: str, topics: list[str]) -> None:
    """DeleteShareGroupOffsets: forget a share group's state of whole topics."""
    if not await is_share_group(session, group):
        raise GroupsError(f"{group!r} is not a share group (delete-offsets forgets "
                          "a share group's state of whole topics)")
    node = await session.coordinator(group)
    response = await session.request_up_to(node, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
        "group_id": group, "topics": [{"topic_name": t} for t in topics]})
    check(response.error_code, f"deleting the offsets of share group {group!r}")
    for t in response.responses:
        check(t.error_code, f"deleting the offsets of {t.topic_name}")
