"""The consumer-group protocol of KIP-848 (``group.protocol=consumer``): THIS module owns the
membership and assignment of consumer groups (ConsumerGroupHeartbeat); classic groups live
in group_state.py, share groups in share/group_state.py.

Sans-I/O like its cousins: the clock comes in as ``now_ms``, the broker's topics (name ->
id and partition count) come in with each heartbeat, and every change of state comes out as
``__consumer_offsets`` records (protocol/internal_records/consumer_groups.py) that the service appends durably before
it answers.  ``load`` rebuilds a group from those records after a restart.

Epochs.  Each change of membership, of a member's subscription or assignor, or of the
subscribed topics' partition counts bumps the *group epoch*; the next heartbeat then
computes the *target assignment* with the group's server-side assignor (assignors.py) and
stamps it with the group epoch (the *assignment epoch*).  Each member reconciles towards
its target one heartbeat at a time (Kafka's CurrentAssignmentBuilder):

- partitions it holds that its target no longer has are *revoked* first: the member keeps
  its epoch, keeps only the partitions it may keep, and is asked to give the others up
  (state ``UNREVOKED_PARTITIONS``) until a heartbeat reports them gone from its owned
  partitions;
- then it moves to the assignment epoch and is given the target partitions that are free;
  a partition still held (assigned or pending revocation) by another member is not given
  (state ``UNRELEASED_PARTITIONS``) until that member has released it.  So a partition
  never has two owners.

Errors (Kafka's): UNKNOWN_MEMBER_ID for a member the group does not know, FENCED_MEMBER_EPOCH
for an epoch ahead of the member's, or behind it unless it is the previous epoch with owned
partitions the member still has (its last answer was lost), GROUP_ID_NOT_FOUND for a
heartbeat (epoch > 0) or leave to a group that does not exist, UNRELEASED_INSTANCE_ID when
a static member joins with the instance id of a member that has not left,
FENCED_INSTANCE_ID when the instance id belongs to another member id, UNSUPPORTED_ASSIGNOR,
INVALID_REGULAR_EXPRESSION, INVALID_REQUEST for malformed joins, GROUP_MAX_SIZE_REACHED.

Leaving: epoch -1 removes the member (its partitions are free at once); epoch -2 (a static
member, KIP-345 for this protocol) keeps the member and its partitions until the session
timeout, so the same ``group.instance.id`` rejoining with a new member id takes them over
with no rebalance.  A member not heard from within the session timeout, or that holds
partitions to revoke past its rebalance timeout, is removed.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records import consumer_groups as rec

from .assignors import ASSIGNORS, DEFAULT_ASSIGNORS, Assignment
from .heartbeat_groups import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
)

DEFAULT_MAX_SIZE = 2**31 - 1

Records = list[tuple[bytes, bytes | None]]


class MemberState(Enum):
    """Kafka's MemberState, with its byte in the CurrentMemberAssignment record."""

    UNREVOKED_PARTITIONS = 0
    UNRELEASED_PARTITIONS = 1
    STABLE = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    max_size: int = DEFAULT_MAX_SIZE


@dataclass(frozen=True)
class TopicImage:
    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Assignment | None = None  # None: unchanged since the last heartbeat
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None  # None: not sent (unchanged)


@dataclass
class _Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_names: tuple[str, ...] = ()
    regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    session_deadline: int = 0
    revocation_deadline: int | None = None

    def metadata(self) -> rec.MemberMetadata:
        return rec.MemberMetadata(self.instance_id, self.rack_id, self.client_id,
                                  self.client_host, self.subscribed_names, self.regex,
                                  self.server_assignor, self.rebalance_timeout_ms)

    def current(self) -> rec.CurrentAssignment:
        return rec.CurrentAssignment(self.epoch, self.previous_epoch, self.state.value,
                                     self.assigned, self.pending_revocation)


@dataclass
class _Group:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, _Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    topics: tuple[rec.TopicMetadata, ...] = ()  # the subscribed topics when last assigned
    persisted: dict[bytes, bytes] = field(default_factory=dict)  # key -> value last written

    def static_member(self, instance_id: str | None) -> _Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def owner_of(self, topic_id: uuid.UUID, partition: int) -> str | None:
        for member in self.members.values():
            if (partition in member.assigned.get(topic_id, ())
                    or partition in member.pending_revocation.get(topic_id, ())):
                return member.member_id
        return None

    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values() if m.epoch != STATIC_LEAVE_EPOCH):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Assignment
    target_assignment: Assignment


@dataclass(frozen=True)
class ConsumerGroupSnapshot:
    group_id: str
    state: ConsumerGroupState
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[MemberSnapshot, ...]


def _minus(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps - b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    out = {t: ps & b.get(t, frozenset()) for t, ps in a.items()}
    return {t: ps for t, ps in out.items() if ps}


def _union(a: Assignment, b: Assignment) -> Assignment:
    return {t: a.get(t, frozenset()) | b.get(t, frozenset()) for t in set(a) | set(b)}


def _is_subset(a: Assignment, b: Assignment) -> bool:
    return not _minus(a, b)


def _invalid(message: str) -> HeartbeatResult:
    return HeartbeatResult(ErrorCode.invalid_request, message)


class ConsumerGroupCoordinator:
    """Every consumer group (KIP-848) of the broker."""

    def __init__(self, config: ConsumerGroupConfig | None = None) -> None:
        self.config = config or ConsumerGroupConfig()
        self._groups: dict[str, _Group] = {}

    # -- heartbeat ---------------------------------------------------------------------------

    def heartbeat(self, now_ms: int, req: HeartbeatRequest,
                  topics: Mapping[str, TopicImage]) -> tuple[HeartbeatResult, Records]:
        """One ConsumerGroupHeartbeat; the records to append before answering."""
        error = self._check_request(req)
        if error is not None:
            return error, []
        group = self._groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if group is None:
                return HeartbeatResult(ErrorCode.group_id_not_found,
                                       f"Group {req.group_id} not found."), []
            result = self._leave(now_ms, group, req, topics)
            return result, self._records(group)
        if group is None:
            if req.member_epoch != JOIN_EPOCH:
                return HeartbeatResult(ErrorCode.group_id_not_found,
                                       f"Consumer group {req.group_id} not found."), []
            group = self._groups[req.group_id] = _Group(req.group_id)
        result = self._heartbeat(now_ms, group, req, topics)
        if not group.members and result.error != ErrorCode.none and not group.persisted:
            del self._groups[group.group_id]  # a failed first join leaves no trace
            return result, []
        return result, self._records(group)

    def _check_request(self, req: HeartbeatRequest) -> HeartbeatResult | None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        if not req.group_id:
            return _invalid("GroupId can't be empty.")
        if not req.member_id:
            return _invalid("MemberId can't be empty.")
        if req.rack_id is not None and not req.rack_id:
            return _invalid("RackId can't be empty.")
        if req.instance_id is not None and not req.instance_id:
            return _invalid("InstanceId can't be empty.")
        if req.member_epoch < STATIC_LEAVE_EPOCH:
            return _invalid(f"MemberEpoch is invalid: {req.member_epoch}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None:
            return _invalid("InstanceId can't be null when leaving with epoch -2.")
        if req.member_epoch == JOIN_EPOCH:
            if req.rebalance_timeout_ms == -1:
                return _invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned:
                return _invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                return _invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in "
                                "first request.")
        if req.server_assignor is not None and req.server_assignor not in self.config.assignors:
            return HeartbeatResult(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.")
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as exc:
                return HeartbeatResult(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex {req.subscribed_topic_regex} is invalid: {exc}.")
        return None

    def _heartbeat(self, now_ms: int, group: _Group, req: HeartbeatRequest,
                   topics: Mapping[str, TopicImage]) -> HeartbeatResult:
        epoch_before = group.epoch
        member, error = self._member_for(now_ms, group, req)
        if error is not None:
            return error
        assert member is not None
        assigned_before = member.assigned
        changed = self._update_member(member, req)
        member.session_deadline = now_ms + self.config.session_timeout_ms
        self._refresh_metadata(group, topics)
        if changed or group.epoch != epoch_before:  # one bump per heartbeat, as in Kafka
            group.epoch = epoch_before + 1
        self._refresh_target(group)
        self._reconcile(now_ms, group, member, req.owned)
        full = req.member_epoch == JOIN_EPOCH or (
            req.rebalance_timeout_ms != -1 and req.owned is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None))
        return HeartbeatResult(
            ErrorCode.none, None, member.member_id, member.epoch,
            self.config.heartbeat_interval_ms,
            dict(member.assigned) if full or member.assigned != assigned_before else None,
        )

    def _member_for(self, now_ms: int, group: _Group,
                    req: HeartbeatRequest) -> tuple[_Member | None, HeartbeatResult | None]:
        """The member the heartbeat is from (created or taken over on join), or the error."""
        member = group.members.get(req.member_id)
        if req.member_epoch != JOIN_EPOCH:
            if member is None:
                return None, HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {group.group_id}.")
            if req.instance_id is not None and member.instance_id != req.instance_id:
                return None, HeartbeatResult(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {req.instance_id} does not belong to member {req.member_id}.")
            error = self._check_epoch(member, req)
            return (None, error) if error else (member, None)
        static = group.static_member(req.instance_id)
        if static is not None and (static.member_id != req.member_id
                                   or static.epoch == STATIC_LEAVE_EPOCH):
            if static.epoch != STATIC_LEAVE_EPOCH:
                return None, HeartbeatResult(
                    ErrorCode.unreleased_instance_id,
                    f"Static member {static.member_id} with instance id {req.instance_id} is "
                    "not released yet.")
            # the static member is back under a new member id: it takes over the old
            # member's partitions and target, no new group epoch (Kafka's static member
            # replacement); it reconciles from epoch 0 in this same heartbeat
            del group.members[static.member_id]
            group.target[req.member_id] = group.target.pop(static.member_id, {})
            static.member_id = req.member_id
            static.epoch = static.previous_epoch = 0  # Kafka: the new member starts at 0
            group.members[req.member_id] = static
            return static, None
        if member is None:
            if len(group.members) >= self.config.max_size:
                return None, HeartbeatResult(
                    ErrorCode.group_max_size_reached,
                    f"The consumer group has reached its maximum capacity of "
                    f"{self.config.max_size} members.")
            member = group.members[req.member_id] = _Member(req.member_id)
            group.epoch += 1  # a new member: the group epoch moves (once, see _heartbeat)
            return member, None
        # a known member rejoining with epoch 0 lost its partitions (it says it owns none):
        # accepted as a fresh join (where Kafka's epoch check fences it unless its previous
        # epoch was 0), so a client that was fenced and rejoins under its id gets back in
        member.assigned, member.pending_revocation = {}, {}
        member.state = MemberState.STABLE
        member.epoch = 0
        member.revocation_deadline = None
        return member, None

    @staticmethod
    def _check_epoch(member: _Member, req: HeartbeatRequest) -> HeartbeatResult | None:
        """Kafka's throwIfMemberEpochIsInvalid."""
        epoch = req.member_epoch
        if epoch > member.epoch or (epoch < member.epoch and not (
                epoch == member.previous_epoch and req.owned is not None
                and _is_subset(req.owned, member.assigned))):
            return HeartbeatResult(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a member epoch ({epoch}) which is not the "
                f"current one ({member.epoch}).")
        return None

    def _update_member(self, member: _Member, req: HeartbeatRequest) -> bool:
        """Apply the request's non-null fields; True if the group epoch must move."""
        before = (member.subscribed_names, member.regex, member.server_assignor)
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            member.subscribed_names = tuple(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            member.regex = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        member.client_id = req.client_id
        member.client_host = req.client_host
        return (member.subscribed_names, member.regex, member.server_assignor) != before

    # -- target assignment and reconciliation ------------------------------------------------

    @staticmethod
    def _subscribed(member: _Member, topics: Mapping[str, TopicImage]) -> set[str]:
        names = {n for n in member.subscribed_names if n in topics}
        if member.regex:
            pattern = re.compile(member.regex)
            names |= {n for n in topics if not n.startswith("__") and pattern.fullmatch(n)}
        return names

    def _refresh_metadata(self, group: _Group, topics: Mapping[str, TopicImage]) -> None:
        """Bump the group epoch if the subscribed topics (or their partitions) changed."""
        names = set()
        for member in group.members.values():
            names |= self._subscribed(member, topics)
        image = tuple(rec.TopicMetadata(topics[n].topic_id, n, topics[n].partitions)
                      for n in sorted(names))
        if image != group.topics:
            group.topics = image
            if group.epoch == group.assignment_epoch:
                group.epoch += 1

    def assignor_of(self, group: _Group) -> str:
        """The members' most chosen server assignor, else the first configured (Kafka)."""
        chosen = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
        if not chosen:
            return self.config.assignors[0]
        best = max(chosen.values())
        return next(a for a in self.config.assignors if chosen.get(a) == best)

    def _refresh_target(self, group: _Group) -> None:
        if group.assignment_epoch == group.epoch:
            return
        ids = {t.name: t for t in group.topics}
        topics = {t.name: TopicImage(t.topic_id, t.partitions) for t in group.topics}
        subscriptions = {
            m.member_id: frozenset(ids[n].topic_id for n in self._subscribed(m, topics))
            for m in group.members.values()
        }
        assignor = ASSIGNORS[self.assignor_of(group)]
        group.target = assignor(subscriptions, {t.topic_id: t.partitions for t in group.topics},
                                group.target)
        group.assignment_epoch = group.epoch

    def _reconcile(self, now_ms: int, group: _Group, member: _Member,
                   owned: Assignment | None) -> None:
        """One step of Kafka's CurrentAssignmentBuilder for ``member``."""
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            still_owned = owned is None or _intersect(member.pending_revocation, owned)
            if still_owned:
                return  # waiting for the member to give them up
            member.pending_revocation = {}
            member.revocation_deadline = None
        elif (member.state is MemberState.STABLE and member.epoch == group.assignment_epoch):
            return
        target = group.target.get(member.member_id, {})
        keep = _intersect(member.assigned, target)
        revoke = _minus(member.assigned, target)
        if revoke and (owned is None or _intersect(revoke, owned)):
            member.assigned = keep
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            if member.rebalance_timeout_ms > 0:
                member.revocation_deadline = now_ms + member.rebalance_timeout_ms
            return
        unreleased = False
        gained: dict[uuid.UUID, set[int]] = {}
        for topic_id, parts in _minus(target, keep).items():
            for p in parts:
                owner = group.owner_of(topic_id, p)
                if owner is None or owner == member.member_id:
                    gained.setdefault(topic_id, set()).add(p)
                else:
                    unreleased = True
        member.assigned = _union(keep, {t: frozenset(ps) for t, ps in gained.items()})
        member.pending_revocation = {}
        member.revocation_deadline = None
        if member.epoch != group.assignment_epoch:
            member.previous_epoch = member.epoch
            member.epoch = group.assignment_epoch
        member.state = (MemberState.UNRELEASED_PARTITIONS if unreleased
                        else MemberState.STABLE)

    # -- leaving and expiry ------------------------------------------------------------------

    def _leave(self, now_ms: int, group: _Group, req: HeartbeatRequest,
               topics: Mapping[str, TopicImage]) -> HeartbeatResult:
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                return HeartbeatResult(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                return HeartbeatResult(ErrorCode.unknown_member_id,
                                       f"Instance id {req.instance_id} is unknown.")
            if member.member_id != req.member_id:
                return HeartbeatResult(
                    ErrorCode.fenced_instance_id,
                    f"Instance id {req.instance_id} belongs to member {member.member_id}.")
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            # kept, with its partitions, until the session timeout: a restart rejoins
            if member.epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch = member.epoch
                member.epoch = STATIC_LEAVE_EPOCH
            member.session_deadline = now_ms + self.config.session_timeout_ms
        else:
            self._remove(group, member.member_id)
        return HeartbeatResult(ErrorCode.none, None, req.member_id, req.member_epoch,
                               self.config.heartbeat_interval_ms)

    def _remove(self, group: _Group, member_id: str) -> None:
        del group.members[member_id]
        group.target.pop(member_id, None)
        group.epoch += 1

    def next_deadline(self) -> int | None:
        deadlines = [d for g in self._groups.values() for m in g.members.values()
                     for d in (m.session_deadline, m.revocation_deadline) if d is not None]
        return min(deadlines, default=None)

    def advance(self, now_ms: int) -> tuple[list[tuple[str, str]], Records]:
        """Remove members past their session timeout or revocation deadline; returns the
        (group, member) removed and the records to append."""
        gone: list[tuple[str, str]] = []
        records: Records = []
        for group in self._groups.values():
            expired = [m for m in group.members.values()
                       if m.session_deadline <= now_ms
                       or (m.revocation_deadline is not None and m.revocation_deadline <= now_ms)]
            for member in expired:
                self._remove(group, member.member_id)
                gone.append((group.group_id, member.member_id))
            if expired:
                records += self._records(group)
        return gone, records

    # -- records -----------------------------------------------------------------------------

    def _desired(self, group: _Group) -> dict[bytes, bytes]:
        gid = group.group_id
        out = {
            rec.encode_key(rec.RecordKey(rec.GROUP_METADATA, gid)): rec.encode_epoch(group.epoch),
            rec.encode_key(rec.RecordKey(rec.PARTITION_METADATA, gid)):
                rec.encode_partition_metadata(group.topics),
            rec.encode_key(rec.RecordKey(rec.TARGET_METADATA, gid)):
                rec.encode_epoch(group.assignment_epoch),
        }
        for m in group.members.values():
            out[rec.encode_key(rec.RecordKey(rec.MEMBER_METADATA, gid, m.member_id))] = (
                rec.encode_member_metadata(m.metadata()))
            out[rec.encode_key(rec.RecordKey(rec.TARGET_MEMBER, gid, m.member_id))] = (
                rec.encode_target_member(group.target.get(m.member_id, {})))
            out[rec.encode_key(rec.RecordKey(rec.CURRENT_MEMBER, gid, m.member_id))] = (
                rec.encode_current_member(m.current()))
        return out

    def _records(self, group: _Group) -> Records:
        """What changed since the group's last records: new values and tombstones."""
        desired = self._desired(group)
        out: Records = [(k, v) for k, v in desired.items() if group.persisted.get(k) != v]
        out += [(k, None) for k in group.persisted if k not in desired]
        group.persisted = desired
        return out

    def delete_records(self, group_id: str) -> Records:
        """Tombstones for every record of the group (DeleteGroups, or a classic takeover)."""
        group = self._groups.pop(group_id, None)
        return [(k, None) for k in group.persisted] if group else []

    def load(self, group_id: str, records: Mapping[bytes, bytes], now_ms: int) -> None:
        """Rebuild a group from its surviving records (replay); members get a fresh session
        timeout, as after Kafka's coordinator failover."""
        group = _Group(group_id)
        members: dict[str, _Member] = {}
        for key, value in records.items():
            k = rec.decode_key(key)
            if k.record_type == rec.GROUP_METADATA:
                group.epoch = rec.decode_epoch(value)
            elif k.record_type == rec.PARTITION_METADATA:
                group.topics = rec.decode_partition_metadata(value)
            elif k.record_type == rec.TARGET_METADATA:
                group.assignment_epoch = rec.decode_epoch(value)
            elif k.record_type == rec.TARGET_MEMBER:
                group.target[k.member_id] = rec.decode_target_member(value)
            else:
                member = members.setdefault(k.member_id, _Member(k.member_id))
                if k.record_type == rec.MEMBER_METADATA:
                    meta = rec.decode_member_metadata(value)
                    member.instance_id, member.rack_id = meta.instance_id, meta.rack_id
                    member.client_id, member.client_host = meta.client_id, meta.client_host
                    member.subscribed_names = meta.subscribed_topic_names
                    member.regex, member.server_assignor = (meta.subscribed_topic_regex,
                                                            meta.server_assignor)
                    member.rebalance_timeout_ms = meta.rebalance_timeout_ms
                else:
                    current = rec.decode_current_member(value)
                    member.epoch, member.previous_epoch = (current.member_epoch,
                                                           current.previous_member_epoch)
                    member.state = MemberState(current.state)
                    member.assigned = current.assigned
                    member.pending_revocation = current.pending_revocation
        for member in members.values():
            member.session_deadline = now_ms + self.config.session_timeout_ms
            if member.state is MemberState.UNREVOKED_PARTITIONS and member.rebalance_timeout_ms > 0:
                member.revocation_deadline = now_ms + member.rebalance_timeout_ms
        group.members = members
        group.target = {m: a for m, a in group.target.items() if m in members}
        group.persisted = dict(records)
        self._groups[group_id] = group

    # -- offsets (OffsetCommit v9+ / OffsetFetch v9+ carry the member epoch) -----------------

    def validate_offset_commit(self, group_id: str, member_id: str, member_epoch: int,
                               api_version: int, *, transactional: bool = False) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetCommit (TxnOffsetCommit: a stale epoch is
        ILLEGAL_GENERATION there, the code transactional clients know)."""
        group = self._groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.none  # the admin client, or a consumer without group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if not transactional and api_version < 9:
            return ErrorCode.unsupported_version  # the member epoch needs OffsetCommit v9+
        if member_epoch != member.epoch:
            return (ErrorCode.illegal_generation if transactional
                    else ErrorCode.stale_member_epoch)
        return ErrorCode.none

    def validate_offset_fetch(self, group_id: str, member_id: str | None,
                              member_epoch: int) -> ErrorCode:
        """Kafka's ConsumerGroup.validateOffsetFetch (member epoch -1: not a member)."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.none
        member = self._groups[group_id].members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    # -- queries and administration ------------------------------------------------------------

    def has_group(self, group_id: str) -> bool:
        return group_id in self._groups

    def is_empty(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is None or not group.members

    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        return {t.name for t in group.topics} if group else set()

    def snapshot(self, group_id: str) -> ConsumerGroupSnapshot | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        return ConsumerGroupSnapshot(
            group.group_id, group.state(), group.epoch, group.assignment_epoch,
            self.assignor_of(group),
            tuple(
                MemberSnapshot(m.member_id, m.instance_id, m.rack_id, m.epoch, m.client_id,
                               m.client_host, m.subscribed_names, m.regex, dict(m.assigned),
                               dict(group.target.get(m.member_id, {})))
                for m in sorted(group.members.values(), key=lambda m: m.member_id)
            ),
        )

    def delete_group(self, group_id: str) -> tuple[ErrorCode, Records]:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, []
        if group.members:
            return ErrorCode.non_empty_group, []
        return ErrorCode.none, self.delete_records(group_id)
