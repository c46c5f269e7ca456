"""The share-group membership state machine: THIS module owns share-group membership (KIP-932
ShareGroupHeartbeat); nothing else changes it.

Sans-I/O like the consumer-group coordinator (coordinator/group_state.py): no trio, no
sockets, the clock comes in as ``now_ms``, the topics' partition counts come in with each
heartbeat, and ``advance`` returns the members removed for silence (``MemberGone``: the
driver releases the records they hold and closes their share sessions).  A member leaving
by heartbeat (epoch -1) is not ``MemberGone``: the client closes its share session right
after, acknowledging what it still holds (librdkafka's order), and the close releases the
rest.

    (no group) ──member joins (epoch 0)──▶ Stable ──last member leaves / expires──▶ Empty
                                             ▲                                        │
                                             └────────────member joins────────────────┘

Membership is by heartbeat alone.  The client picks its member id (a UUID, kept for its
lifetime) and joins with member epoch 0; each change of membership, subscriptions or the
subscribed topics' partition counts bumps the group epoch and recomputes the target
assignment on the server.  A member's epoch catches up with the group epoch on its next
heartbeat, which then carries its new assignment.  Unlike consumer groups there is no
revocation: several members may hold the same partition at once (records, not partitions,
are what is handed out), so a new assignment takes effect at once.

Errors (Kafka's): UNKNOWN_MEMBER_ID for a member epoch > 0 from a member the group does not
know, FENCED_MEMBER_EPOCH for an epoch other than the one last given to the member,
INVALID_REQUEST for a join without member id or subscription, GROUP_MAX_SIZE_REACHED past
``group.share.max.size``.  A member not heard from within ``group.share.session.timeout.ms``
is removed (``advance``).

Durable membership: every change of a group's epochs, members or assignments marks the group
in ``dirty``; the driver writes ``export(group)`` (``MembershipImage``) to
``__share_group_state`` and ``restore``s it after a restart, so members keep their member
epochs and assignments and go on heartbeating (their session timers start again at the
restart), as Kafka keeps them in ``__consumer_offsets``.  Heartbeats that change nothing
write nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.share_group_state import MemberImage, MembershipImage

from ..coordinator.heartbeat_groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    JOIN_EPOCH,
    LEAVE_EPOCH,
)

# Kafka's group.share.max.size default (GroupCoordinatorConfig); the session timeout and
# heartbeat interval defaults are the consumer groups' too (heartbeat_groups.py).
DEFAULT_MAX_SIZE = 200


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ShareGroupConfig:
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    max_size: int = DEFAULT_MAX_SIZE


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""


Assignment = dict[str, tuple[int, ...]]  # topic name -> partitions


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: unchanged since the last answer
    message: str | None = None


@dataclass(frozen=True)
class MemberGone:
    """The member was removed (session timeout): its records go back, its sessions close."""

    group_id: str
    member_id: str


@dataclass
class _Member:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...]
    rack_id: str | None
    client_id: str
    client_host: str
    deadline: int
    assignment: Assignment = field(default_factory=dict)


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    member_epoch: int
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: Assignment


@dataclass(frozen=True)
class ShareGroupSnapshot:
    group_id: str
    state: ShareGroupState
    group_epoch: int
    assignment_epoch: int
    members: tuple[MemberSnapshot, ...]


@dataclass
class _Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topics_seen: tuple[tuple[str, int], ...] = ()


def assign(members: Mapping[str, tuple[str, ...]], partitions: Mapping[str, int]) -> dict[
        str, Assignment]:
    """Server-side assignment, topic by topic among the members subscribed to it: with at
    least as many members as partitions each member gets one partition and a partition is
    shared by several members; otherwise each partition goes to one member, round robin."""
    result: dict[str, Assignment] = {member: {} for member in members}
    for topic in sorted({t for subscribed in members.values() for t in subscribed}):
        count = partitions.get(topic, 0)
        if count <= 0:
            continue
        subscribers = sorted(m for m, subscribed in members.items() if topic in subscribed)
        owned: dict[str, list[int]] = {m: [] for m in subscribers}
        if len(subscribers) >= count:
            for i, member in enumerate(subscribers):
                owned[member].append(i % count)
        else:
            for p in range(count):
                owned[subscribers[p % len(subscribers)]].append(p)
        for member, parts in owned.items():
            if parts:
                result[member][topic] = tuple(sorted(parts))
    return result


class ShareGroupCoordinator:
    """Every share group of the broker."""

    def __init__(self, config: ShareGroupConfig | None = None, *,
                 group_config: Callable[[str], ShareGroupConfig] | None = None) -> None:
        """``group_config(group_id)``: the group's own session timeout and heartbeat
        interval (its ``share.*`` overrides); the broker's ``config`` otherwise."""
        self.config = config or ShareGroupConfig()
        self._group_config = group_config or (lambda _group_id: self.config)
        self._groups: dict[str, _Group] = {}
        self.dirty: set[str] = set()  # groups whose membership changed since written

    # -- heartbeat -------------------------------------------------------------------------

    def heartbeat(self, now_ms: int, request: HeartbeatRequest,
                  partitions: Mapping[str, int]) -> HeartbeatResult:
        """One ShareGroupHeartbeat.  ``partitions``: partition count of each existing topic
        the group may subscribe to (missing = the topic does not exist)."""
        config = self._group_config(request.group_id)
        if not request.group_id:
            return HeartbeatResult(ErrorCode.invalid_group_id, message="group id is empty")
        if not request.member_id:
            return HeartbeatResult(ErrorCode.invalid_request,
                                   message="MemberId can't be empty.")
        group = self._groups.get(request.group_id)
        member = group.members.get(request.member_id) if group else None
        epoch = request.member_epoch

        if epoch == LEAVE_EPOCH:
            if group is not None and member is not None:
                self._remove(group, member.member_id, partitions)
            return HeartbeatResult(ErrorCode.none, LEAVE_EPOCH,
                                   config.heartbeat_interval_ms)

        if epoch == JOIN_EPOCH:
            if not request.subscribed_topic_names:
                return HeartbeatResult(
                    ErrorCode.invalid_request,
                    message="SubscribedTopicNames must be set in first request.",
                )
            if group is None:
                group = self._groups[request.group_id] = _Group(request.group_id)
            if member is None and len(group.members) >= config.max_size:
                return HeartbeatResult(
                    ErrorCode.group_max_size_reached,
                    message=f"the share group has reached its maximum size ({config.max_size})",
                )
            member = group.members[request.member_id] = _Member(
                request.member_id, JOIN_EPOCH, tuple(request.subscribed_topic_names),
                request.rack_id, request.client_id, request.client_host,
                now_ms + config.session_timeout_ms,
            )
            group.epoch += 1
            self.dirty.add(group.group_id)
        else:
            if member is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    message=f"member {request.member_id} is not in group {request.group_id}",
                )
            if epoch != member.epoch:
                return HeartbeatResult(
                    ErrorCode.fenced_member_epoch,
                    message=f"member epoch {epoch} is not the current {member.epoch}",
                )
            member.deadline = now_ms + config.session_timeout_ms
            if request.rack_id is not None:
                member.rack_id = request.rack_id
            subscribed = request.subscribed_topic_names
            if subscribed is not None and tuple(subscribed) != member.subscribed:
                member.subscribed = tuple(subscribed)
                group.epoch += 1
                self.dirty.add(group.group_id)

        self._refresh_target(group, partitions)
        changed = member.epoch != group.assignment_epoch or epoch == JOIN_EPOCH
        if changed:
            member.epoch = group.assignment_epoch
            member.assignment = group.target.get(member.member_id, {})
            self.dirty.add(group.group_id)
        full = changed or request.subscribed_topic_names is not None
        return HeartbeatResult(
            ErrorCode.none, member.epoch, config.heartbeat_interval_ms,
            dict(member.assignment) if full else None,
        )

    def _refresh_target(self, group: _Group, partitions: Mapping[str, int]) -> None:
        """Recompute the target assignment if the group epoch or the subscribed topics'
        partition counts changed since it was computed."""
        subscribed = sorted({t for m in group.members.values() for t in m.subscribed})
        topics_seen = tuple((t, partitions.get(t, 0)) for t in subscribed)
        if topics_seen != group.topics_seen:
            group.topics_seen = topics_seen
            if group.assignment_epoch == group.epoch:
                group.epoch += 1  # metadata changed: a new target at a new epoch
        if group.assignment_epoch != group.epoch:
            group.target = assign({m.member_id: m.subscribed for m in group.members.values()},
                                  dict(topics_seen))
            group.assignment_epoch = group.epoch
            self.dirty.add(group.group_id)

    def _remove(self, group: _Group, member_id: str, partitions: Mapping[str, int] | None):
        del group.members[member_id]
        group.epoch += 1
        self.dirty.add(group.group_id)
        if partitions is not None:
            self._refresh_target(group, partitions)

    # -- timers ----------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        deadlines = [m.deadline for g in self._groups.values() for m in g.members.values()]
        return min(deadlines, default=None)

    def advance(self, now_ms: int) -> list[MemberGone]:
        """Remove members whose session timed out."""
        gone = []
        for group in self._groups.values():
            for member in [m for m in group.members.values() if m.deadline <= now_ms]:
                self._remove(group, member.member_id, None)  # target: at the next heartbeat
                gone.append(MemberGone(group.group_id, member.member_id))
        return gone

    # -- queries and administration --------------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def ensure_group(self, group_id: str) -> None:
        """A group known from its durable share state (after a restart): Empty."""
        self._groups.setdefault(group_id, _Group(group_id))

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def is_member(self, group_id: str, member_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and member_id in group.members

    def snapshot(self, group_id: str) -> ShareGroupSnapshot | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        return ShareGroupSnapshot(
            group.group_id,
            ShareGroupState.STABLE if group.members else ShareGroupState.EMPTY,
            group.epoch, group.assignment_epoch,
            tuple(
                MemberSnapshot(m.member_id, m.epoch, m.rack_id, m.client_id, m.client_host,
                               m.subscribed, dict(m.assignment))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ),
        )

    def export(self, group_id: str) -> MembershipImage | None:
        """The group's membership as persisted (None: no such group)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return MembershipImage(group.epoch, group.assignment_epoch, tuple(
            MemberImage(m.member_id, m.epoch, m.rack_id, m.client_id, m.client_host,
                        m.subscribed, tuple(sorted(m.assignment.items())))
            for m in sorted(group.members.values(), key=lambda m: m.member_id)),
            group.topics_seen)

    def restore(self, group_id: str, image: MembershipImage, now_ms: int) -> None:
        """A group's persisted membership after a restart: members keep their epochs and
        assignments; each one's session timer starts now.  The target assignment is
        recomputed at the next heartbeat if the topics changed meanwhile."""
        config = self._group_config(group_id)
        group = self._groups[group_id] = _Group(group_id, image.group_epoch,
                                                image.assignment_epoch)
        for m in image.members:
            member = _Member(m.member_id, m.member_epoch, m.subscribed_topic_names, m.rack_id,
                             m.client_id, m.client_host, now_ms + config.session_timeout_ms,
                             dict(m.assignment))
            group.members[m.member_id] = member
        group.topics_seen = image.topics_seen
        if image.assignment_epoch == image.group_epoch:
            # members that lagged the epoch get the target recomputed from the same inputs
            group.target = assign({m.member_id: m.subscribed
                                   for m in group.members.values()}, dict(image.topics_seen))

    def delete_group(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self._groups[group_id]
        return ErrorCode.none

    def fail_all(self) -> list[MemberGone]:
        """Shutdown: every member is gone."""
        gone = [MemberGone(g.group_id, m) for g in self._groups.values() for m in g.members]
        for group in self._groups.values():
            group.members.clear()
        return gone
