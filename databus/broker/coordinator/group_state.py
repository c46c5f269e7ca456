"""The consumer-group state machine: THIS module owns it, nothing else changes group state.

Kafka's classic group protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup) as plain,
sans-I/O Python: no trio, no sockets, the clock is passed in as ``now_ms`` on every call.

    Empty ──join──▶ PreparingRebalance ──all joined / timeout──▶ CompletingRebalance
      ▲                  ▲      │ (no member left)                       │ leader's SyncGroup
      │                  │      ▼                                         ▼
      └── last member ───┴── Empty                 Stable ◀──────────────┘
          leaves/expires     join, leave, expiry, metadata change ──▶ PreparingRebalance
    any state ──delete / all offsets expired──▶ Dead

Requests that must wait (JoinGroup until the rebalance completes, SyncGroup until the leader
sends the assignment) are parked under an opaque *waiter* token chosen by the caller.  Every
call returns a list of effects: ``Reply(waiter, result)`` completes a parked or immediate
request, ``Persist(snapshot)`` asks the driver to write the group's metadata record,
``Rebalanced(snapshot)`` reports a new generation (for logs and tests).  Timers
(session expiry, rebalance timeout, initial rebalance delay, KIP-394 pending members, pending
SyncGroups) are deadlines kept here: the driver sleeps until ``next_deadline()`` and then
calls ``advance(now_ms)``.  The invariants the tests hold us to: every parked waiter is
answered exactly once, a generation is bumped exactly once per completed join phase, and no
waiter outlives the member or the phase it waits for.

Semantics follow Kafka's GroupCoordinator (classic protocol): KIP-394 MEMBER_ID_REQUIRED for
JoinGroup v4+, protocol selection by member votes among the protocols every member supports,
the leader alone receives the members' subscriptions, ``group.initial.rebalance.delay.ms``
for a group's first rebalance, members that do not rejoin within the rebalance timeout (or do
not SyncGroup after joining) are dropped.

Static membership (KIP-345): a member that joins with a ``group.instance.id`` skips KIP-394's
MEMBER_ID_REQUIRED round trip; when it comes back with an unknown member id (a restart within
its session timeout: static members send no LeaveGroup) it replaces its old member id and, in
a Stable group whose selected protocol stays the same, gets its old assignment back with no
rebalance (the other members never notice).  Requests that carry the instance id with a
member id that is not the current one (the old process, or a duplicate started with the same
id) get FENCED_INSTANCE_ID.  A static leader that rejoins learns it is the leader only with
JoinGroup v9+ (``skip_assignment``, KIP-814); older versions are told the previous leader id,
so the client acts as a follower and collects its kept assignment, as Kafka does.
"""

from __future__ import annotations

import heapq
import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from databus.protocol import defaults
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.consumer_offsets import (  # noqa: F401 (re-exported)
    GroupSnapshot,
    GroupState,
    MemberSnapshot,
)

# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a brand-new member that never heartbeats is
# dropped after this long even while it waits in a rebalance (KIP-394's safety valve).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


@dataclass(frozen=True)
class CoordinatorConfig:
    """Broker-level group settings (Kafka's names and defaults)."""

    initial_rebalance_delay_ms: int = defaults.GROUP_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = defaults.GROUP_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = defaults.GROUP_MAX_SESSION_TIMEOUT_MS
    max_size: int = 2**31 - 1  # group.max.size


# ---------------------------------------------------------------------------------------------
# Requests in, results and effects out


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int = -1  # -1 (JoinGroup v0): the session timeout is used
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    require_known_member_id: bool = False  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool = False  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinMember, ...] = ()  # only the leader gets them
    skip_assignment: bool = False  # a static leader rejoined a Stable group (v9+)


@dataclass(frozen=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    assignments: tuple[tuple[str, bytes], ...] = ()  # (member_id, assignment), leader only
    protocol_type: str | None = None  # SyncGroup v5+ sends them; checked when present
    protocol_name: str | None = None
    group_instance_id: str | None = None


@dataclass(frozen=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class Reply:
    """Complete the request parked (or just received) under ``waiter`` with ``result``."""

    waiter: Hashable
    result: JoinResult | SyncResult


@dataclass(frozen=True)
class Persist:
    """Write the group's metadata record (GroupMetadataKey/Value) to ``__consumer_offsets``.

    Emitted when the group becomes Stable (assignments known) or Empty, as Kafka does: a
    generation that never got its assignments is not worth restoring after a restart (its
    members get ILLEGAL_GENERATION and rejoin, instead of an empty assignment).
    """

    snapshot: GroupSnapshot


@dataclass(frozen=True)
class Rebalanced:
    """A join phase completed with members: a new generation now awaits its SyncGroups."""

    snapshot: GroupSnapshot


Effect = Reply | Persist | Rebalanced


# ---------------------------------------------------------------------------------------------
# Internal state


@dataclass
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: Hashable | None = None
    sync_waiter: Hashable | None = None
    is_new: bool = False
    last_heartbeat_ms: int = 0

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def vote(self, candidates: set[str]) -> str:
        return next(name for name in self.protocol_names() if name in candidates)

    def update(self, req: JoinRequest) -> None:
        """Take the settings of a (re)join."""
        self.protocols = req.protocols
        self.session_timeout_ms = req.session_timeout_ms
        if req.rebalance_timeout_ms >= 0:
            self.rebalance_timeout_ms = req.rebalance_timeout_ms
        self.client_id = req.client_id or self.client_id
        self.client_host = req.client_host or self.client_host


@dataclass
class _Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)  # join order
    pending_members: set[str] = field(default_factory=set)  # KIP-394: id handed out, not joined
    pending_sync: set[str] = field(default_factory=set)  # joined this generation, no SyncGroup yet
    new_member_added: bool = False
    initial_delay_remaining_ms: int = 0

    def static_member(self, instance_id: str | None) -> _Member | None:
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.group_instance_id == instance_id),
                    None)

    def is_fenced(self, member_id: str, instance_id: str | None) -> bool:
        """KIP-345: the instance id belongs to a member with another member id."""
        static = self.static_member(instance_id)
        return static is not None and static.member_id != member_id

    def transition(self, state: GroupState, now_ms: int) -> None:
        self.state = state
        self.state_timestamp_ms = now_ms

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_members_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_waiter is not None for m in self.members.values()
        )

    def candidate_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        candidates = set(members[0].protocol_names())
        for member in members[1:]:
            candidates &= set(member.protocol_names())
        return candidates

    def supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(names & self.candidate_protocols())

    def select_protocol(self) -> str:
        """Each member votes for its favourite protocol among those all members support."""
        candidates = self.candidate_protocols()
        votes = Counter(member.vote(candidates) for member in self.members.values())
        best = max(votes.values())
        # Ties go to the first member's preference order, so the choice is deterministic.
        first = next(iter(self.members.values()))
        return next(name for name in first.protocol_names() if votes.get(name) == best)

    def snapshot(self) -> GroupSnapshot:
        members = []
        for m in self.members.values():
            subscription = b""
            if self.protocol_name is not None:
                try:
                    subscription = m.metadata_for(self.protocol_name)
                except KeyError:
                    subscription = b""
            members.append(
                MemberSnapshot(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    subscription,
                    m.assignment,
                )
            )
        return GroupSnapshot(
            self.group_id,
            self.state,
            self.protocol_type,
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_timestamp_ms,
            tuple(members),
        )


# Timer kinds; a timer key is (kind, group_id, member_id or "").
_HEARTBEAT, _PENDING_MEMBER, _JOIN, _SYNC = "heartbeat", "pending-member", "join", "sync"


class GroupCoordinator:
    """All groups of this broker.  See the module docstring for the calling convention."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self._groups: dict[str, _Group] = {}
        self._new_member_id = new_member_id or (lambda client_id: f"{client_id}-{uuid.uuid4()}")
        self._timers: dict[tuple[str, str, str], int] = {}
        self._heap: list[tuple[int, int, tuple[str, str, str]]] = []
        self._seq = itertools.count()

    # -- timers -----------------------------------------------------------------------------

    def _set_timer(self, key: tuple[str, str, str], deadline_ms: int) -> None:
        self._timers[key] = deadline_ms
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), key))

    def _cancel_timer(self, key: tuple[str, str, str]) -> None:
        self._timers.pop(key, None)  # its heap entry is skipped lazily

    def next_deadline(self) -> int | None:
        """The earliest pending deadline (ms), or None when no timer is set."""
        while self._heap:
            deadline, _, key = self._heap[0]
            if self._timers.get(key) == deadline:
                return deadline
            heapq.heappop(self._heap)
        return None

    def advance(self, now_ms: int) -> list[Effect]:
        """Fire every timer whose deadline is <= now_ms."""
        effects: list[Effect] = []
        while (deadline := self.next_deadline()) is not None and deadline <= now_ms:
            _, _, key = heapq.heappop(self._heap)
            del self._timers[key]
            kind, group_id, member_id = key
            group = self._groups.get(group_id)
            if group is None:
                continue
            if kind == _HEARTBEAT:
                self._on_heartbeat_expired(group, member_id, now_ms, effects)
            elif kind == _PENDING_MEMBER:
                self._on_pending_member_expired(group, member_id, now_ms, effects)
            elif kind == _JOIN:
                self._on_join_deadline(group, now_ms, effects)
            elif kind == _SYNC:
                self._on_sync_deadline(group, now_ms, effects)
        return effects

    def _schedule_heartbeat(self, group: _Group, member: _Member, now_ms: int) -> None:
        member.last_heartbeat_ms = now_ms
        self._set_timer(
            (_HEARTBEAT, group.group_id, member.member_id), now_ms + member.session_timeout_ms
        )

    # -- queries ----------------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        group = self._groups.get(group_id)
        return None if group is None else group.snapshot()

    def state_of(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def waiters(self) -> set[Hashable]:
        """Every parked waiter (for tests and for shutdown)."""
        out = set()
        for group in self._groups.values():
            for m in group.members.values():
                if m.join_waiter is not None:
                    out.add(m.join_waiter)
                if m.sync_waiter is not None:
                    out.add(m.sync_waiter)
        return out

    def subscribed_topics(self, group_id: str, topics_of: Callable[[bytes], set[str]]) -> set[str]:
        """Topics the members subscribe to, decoded from their metadata by ``topics_of``."""
        group = self._groups.get(group_id)
        if group is None or group.protocol_name is None:
            return set()
        out: set[str] = set()
        for m in group.members.values():
            try:
                out |= topics_of(m.metadata_for(group.protocol_name))
            except (KeyError, ValueError):
                continue
        return out

    # -- JoinGroup --------------------------------------------------------------------------

    def join_group(self, now_ms: int, waiter: Hashable, req: JoinRequest) -> list[Effect]:
        effects: list[Effect] = []

        def fail(error: ErrorCode) -> list[Effect]:
            effects.append(Reply(waiter, JoinResult(error, member_id=req.member_id)))
            return effects

        if not req.group_id:
            return fail(ErrorCode.invalid_group_id)
        if not (
            self.config.min_session_timeout_ms
            <= req.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            return fail(ErrorCode.invalid_session_timeout)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return fail(ErrorCode.unknown_member_id)
            group = self._groups[req.group_id] = _Group(req.group_id, state_timestamp_ms=now_ms)
        if group.state is GroupState.DEAD:
            # A concurrent DeleteGroups won; the client looks the coordinator up again.
            return fail(ErrorCode.coordinator_not_available)
        if not group.supports(req.protocol_type, req.protocols):
            return fail(ErrorCode.inconsistent_group_protocol)
        if not req.member_id:
            if group.static_member(req.group_instance_id) is not None:
                self._rejoin_static_member(group, now_ms, waiter, req, effects)
            else:
                self._join_unknown_member(group, now_ms, waiter, req, effects)
        elif group.is_fenced(req.member_id, req.group_instance_id):
            return fail(ErrorCode.fenced_instance_id)
        else:
            self._join_known_member(group, now_ms, waiter, req, effects)
        return effects

    def _join_unknown_member(self, group, now_ms, waiter, req, effects) -> None:
        if len(group.members) + len(group.pending_members) >= self.config.max_size:
            effects.append(Reply(waiter, JoinResult(ErrorCode.group_max_size_reached)))
            return
        member_id = self._new_member_id(req.client_id)
        if req.require_known_member_id and req.group_instance_id is None:
            # KIP-394: hand out the id and make the client come back with it, so a client
            # that times out and retries does not leave a ghost member behind.
            group.pending_members.add(member_id)
            self._set_timer(
                (_PENDING_MEMBER, group.group_id, member_id), now_ms + req.session_timeout_ms
            )
            effects.append(
                Reply(waiter, JoinResult(ErrorCode.member_id_required, member_id=member_id))
            )
            return
        self._add_member_and_rebalance(group, now_ms, waiter, req, member_id, effects)

    def _join_known_member(self, group, now_ms, waiter, req, effects) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._cancel_timer((_PENDING_MEMBER, group.group_id, member_id))
            self._add_member_and_rebalance(group, now_ms, waiter, req, member_id, effects)
            return
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            effects.append(
                Reply(waiter, JoinResult(ErrorCode.unknown_member_id, member_id=member_id))
            )
            return
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(group, member, req, waiter, effects)
            self._try_complete_join(group, now_ms, effects)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == req.protocols:
                # The join response was lost: send it again, nothing changes.
                effects.append(Reply(waiter, self._join_result(group, member)))
            else:
                self._update_member(group, member, req, waiter, effects)
                self._prepare_rebalance(group, now_ms, effects)
        elif group.state is GroupState.STABLE:
            if member_id == group.leader_id or member.protocols != req.protocols:
                # The leader rejoins to force a rebalance (e.g. partitions were added) and a
                # follower with a new subscription needs a new assignment.
                self._update_member(group, member, req, waiter, effects)
                self._prepare_rebalance(group, now_ms, effects)
            else:
                effects.append(Reply(waiter, self._join_result(group, member)))

    def _rejoin_static_member(self, group, now_ms, waiter, req, effects) -> None:
        """A static member came back with no member id (KIP-345): it takes a new member id,
        the old one is fenced, and in a Stable group it keeps its assignment."""
        member = group.static_member(req.group_instance_id)
        old_leader = group.leader_id
        new_id = self._new_member_id(req.client_id)
        self._replace_member_id(group, member, new_id, effects)
        if group.state is GroupState.STABLE:
            selected = group.protocol_name
            old_protocols = member.protocols
            member.protocols = req.protocols
            if selected not in group.candidate_protocols() or group.select_protocol() != selected:
                member.protocols = old_protocols
                self._update_member(group, member, req, waiter, effects)
                self._prepare_rebalance(group, now_ms, effects)
                return
            member.update(req)
            self._schedule_heartbeat(group, member, now_ms)
            is_leader = group.leader_id == new_id
            skip = is_leader and req.supports_skip_assignment
            result = self._join_result(group, member)
            effects.append(Reply(waiter, JoinResult(
                ErrorCode.none, member_id=new_id, generation_id=group.generation_id,
                protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                leader_id=(group.leader_id if req.supports_skip_assignment else old_leader) or "",
                members=result.members if skip else (), skip_assignment=skip,
            )))
            effects.append(Persist(group.snapshot()))  # the new member id survives a restart
            return
        self._update_member(group, member, req, waiter, effects)
        if group.state is GroupState.COMPLETING_REBALANCE:
            # its old incarnation may never have seen this generation's assignment
            self._prepare_rebalance(group, now_ms, effects)
        else:
            self._try_complete_join(group, now_ms, effects)

    def _replace_member_id(self, group: _Group, member: _Member, new_id: str, effects) -> None:
        """Give a static member a new member id; the old id's parked requests are answered
        FENCED_INSTANCE_ID (that process must not act for the member any more)."""
        old_id = member.member_id
        if member.join_waiter is not None:
            effects.append(Reply(member.join_waiter,
                                 JoinResult(ErrorCode.fenced_instance_id, member_id=old_id)))
            member.join_waiter = None
        if member.sync_waiter is not None:
            effects.append(Reply(member.sync_waiter, SyncResult(ErrorCode.fenced_instance_id)))
            member.sync_waiter = None
        member.member_id = new_id
        group.members = {(new_id if mid == old_id else mid): m for mid, m in group.members.items()}
        if group.leader_id == old_id:
            group.leader_id = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        deadline = self._timers.get((_HEARTBEAT, group.group_id, old_id))
        self._cancel_timer((_HEARTBEAT, group.group_id, old_id))
        if deadline is not None:
            self._set_timer((_HEARTBEAT, group.group_id, new_id), deadline)

    def _add_member_and_rebalance(self, group, now_ms, waiter, req, member_id, effects) -> None:
        rebalance_timeout = (
            req.rebalance_timeout_ms if req.rebalance_timeout_ms >= 0 else req.session_timeout_ms
        )
        member = _Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            join_waiter=waiter,
            is_new=True,
        )
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if group.leader_id is None:
            group.leader_id = member_id
        group.new_member_added = True
        # A new member that vanishes mid-rebalance must not hold the group up forever.
        member.last_heartbeat_ms = now_ms
        self._set_timer(
            (_HEARTBEAT, group.group_id, member_id), now_ms + NEW_MEMBER_JOIN_TIMEOUT_MS
        )
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, effects)
        else:
            self._prepare_rebalance(group, now_ms, effects)

    def _update_member(self, group, member: _Member, req: JoinRequest, waiter, effects) -> None:
        if member.join_waiter is not None and member.join_waiter != waiter:
            # A second JoinGroup for the same member replaces the first: answer the old one
            # rather than leave it hanging.
            effects.append(
                Reply(
                    member.join_waiter,
                    JoinResult(ErrorCode.rebalance_in_progress, member_id=member.member_id),
                )
            )
        member.update(req)
        member.join_waiter = waiter

    def _prepare_rebalance(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._reset_assignments_and_fail_syncs(group, effects)
        self._cancel_timer((_SYNC, group.group_id, ""))
        group.pending_sync.clear()
        was_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        rebalance_timeout = group.max_rebalance_timeout_ms()
        if was_empty and self.config.initial_rebalance_delay_ms > 0:
            # group.initial.rebalance.delay.ms: let a whole fleet of consumers starting
            # together join before the first generation, extended while members keep
            # arriving, never beyond the rebalance timeout.
            delay = min(self.config.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
            group.new_member_added = False
            self._set_timer((_JOIN, group.group_id, "initial"), now_ms + delay)
        else:
            group.initial_delay_remaining_ms = 0
            self._set_timer((_JOIN, group.group_id, ""), now_ms + rebalance_timeout)
            self._try_complete_join(group, now_ms, effects)

    def _reset_assignments_and_fail_syncs(self, group: _Group, effects: list[Effect]) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_waiter is not None:
                effects.append(
                    Reply(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress))
                )
                member.sync_waiter = None

    def _try_complete_join(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if (_JOIN, group.group_id, "initial") in self._timers:
            return  # the initial delay decides, not the member count
        if group.all_members_joined():
            self._cancel_timer((_JOIN, group.group_id, ""))
            self._complete_join(group, now_ms, effects)

    def _on_join_deadline(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and group.initial_delay_remaining_ms > 0:
            delay = min(self.config.initial_rebalance_delay_ms, group.initial_delay_remaining_ms)
            group.initial_delay_remaining_ms = max(group.initial_delay_remaining_ms - delay, 0)
            group.new_member_added = False
            self._set_timer((_JOIN, group.group_id, "initial"), now_ms + delay)
            return
        self._cancel_timer((_JOIN, group.group_id, "initial"))
        self._cancel_timer((_JOIN, group.group_id, ""))
        self._complete_join(group, now_ms, effects)

    def _complete_join(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        # Members that did not rejoin in time are out of the group.
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            self._remove_member(group, member, effects)
        # Pending (KIP-394) members stay pending: their second JoinGroup starts a new
        # rebalance, their own timer drops them if it never comes.
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms)
            effects.append(Persist(group.snapshot()))
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        group.pending_sync = set(group.members)
        self._set_timer((_SYNC, group.group_id, ""), now_ms + group.max_rebalance_timeout_ms())
        effects.append(Rebalanced(group.snapshot()))
        for member in group.members.values():
            effects.append(Reply(member.join_waiter, self._join_result(group, member)))
            member.join_waiter = None
            member.is_new = False
            self._schedule_heartbeat(group, member, now_ms)

    def _join_result(self, group: _Group, member: _Member) -> JoinResult:
        members: tuple[JoinMember, ...] = ()
        if member.member_id == group.leader_id:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResult(
            ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            members=members,
        )

    # -- SyncGroup --------------------------------------------------------------------------

    def sync_group(self, now_ms: int, waiter: Hashable, req: SyncRequest) -> list[Effect]:
        effects: list[Effect] = []

        def reply(error: ErrorCode, assignment: bytes = b"") -> list[Effect]:
            effects.append(
                Reply(
                    waiter,
                    SyncResult(error, group.protocol_type if group else None,
                               group.protocol_name if group else None, assignment),
                )
            )
            return effects

        group = self._groups.get(req.group_id)
        if group is None:
            return reply(ErrorCode.unknown_member_id)
        if group.state is GroupState.DEAD:
            return reply(ErrorCode.coordinator_not_available)
        if group.is_fenced(req.member_id, req.group_instance_id):
            return reply(ErrorCode.fenced_instance_id)
        member = group.members.get(req.member_id)
        if member is None:
            return reply(ErrorCode.unknown_member_id)
        if req.generation_id != group.generation_id:
            return reply(ErrorCode.illegal_generation)
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            return reply(ErrorCode.inconsistent_group_protocol)
        if group.state is GroupState.PREPARING_REBALANCE:
            return reply(ErrorCode.rebalance_in_progress)
        if group.state is GroupState.STABLE:
            self._schedule_heartbeat(group, member, now_ms)
            return reply(ErrorCode.none, member.assignment)
        # CompletingRebalance: park until the leader's assignment arrives.
        if member.sync_waiter is not None and member.sync_waiter != waiter:
            effects.append(Reply(member.sync_waiter, SyncResult(ErrorCode.rebalance_in_progress)))
        member.sync_waiter = waiter
        group.pending_sync.discard(member.member_id)
        self._schedule_heartbeat(group, member, now_ms)
        if member.member_id == group.leader_id:
            assignments = dict(req.assignments)
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._cancel_timer((_SYNC, group.group_id, ""))
            group.pending_sync.clear()
            group.transition(GroupState.STABLE, now_ms)
            for m in group.members.values():
                if m.sync_waiter is not None:
                    effects.append(
                        Reply(
                            m.sync_waiter,
                            SyncResult(
                                ErrorCode.none, group.protocol_type, group.protocol_name,
                                m.assignment,
                            ),
                        )
                    )
                    m.sync_waiter = None
            effects.append(Persist(group.snapshot()))
        return effects

    def _on_sync_deadline(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        # Members that joined but never sent SyncGroup (Kafka 3.2+ "pending sync") are removed
        # and the group rebalances; the rest are told to rejoin.
        if group.state is not GroupState.COMPLETING_REBALANCE:
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member, effects)
        group.pending_sync.clear()
        self._after_member_removed(group, now_ms, effects)

    # -- Heartbeat --------------------------------------------------------------------------

    def heartbeat(
        self, now_ms: int, group_id: str, member_id: str, generation_id: int,
        group_instance_id: str | None = None,
    ) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group.is_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None or group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        self._schedule_heartbeat(group, member, now_ms)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def _on_heartbeat_expired(self, group: _Group, member_id: str, now_ms: int, effects) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        # A member parked in JoinGroup or SyncGroup is alive by definition (its connection is
        # waiting on us), unless it is a new member that has waited far too long.
        if member.sync_waiter is not None or (member.join_waiter is not None and not member.is_new):
            self._schedule_heartbeat(group, member, now_ms)
            return
        self._remove_member(group, member, effects)
        self._after_member_removed(group, now_ms, effects)

    def _on_pending_member_expired(self, group: _Group, member_id: str, now_ms, effects) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._try_complete_join(group, now_ms, effects)

    # -- LeaveGroup -------------------------------------------------------------------------

    def leave_group(
        self, now_ms: int, group_id: str, member_ids: list[str],
        instance_ids: list[str | None] | None = None,
    ) -> tuple[ErrorCode, list[ErrorCode], list[Effect]]:
        """Remove members; returns (group error, one error per member, effects).

        LeaveGroup v3+ names members by (member id, group.instance.id): an instance id alone
        (empty member id) means its current member; one paired with another member id is
        FENCED_INSTANCE_ID (KIP-345)."""
        effects: list[Effect] = []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(member_ids), effects
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, [], effects
        errors = []
        removed = False
        for member_id, instance_id in zip(member_ids, instance_ids or [None] * len(member_ids)):
            static = group.static_member(instance_id)
            if static is not None and not member_id:
                member_id = static.member_id
            if static is not None and static.member_id != member_id:
                errors.append(ErrorCode.fenced_instance_id)
            elif member_id in group.pending_members:
                group.pending_members.discard(member_id)
                self._cancel_timer((_PENDING_MEMBER, group.group_id, member_id))
                errors.append(ErrorCode.none)
                removed = True
            elif (member := group.members.get(member_id)) is not None:
                self._remove_member(group, member, effects)
                errors.append(ErrorCode.none)
                removed = True
            else:
                errors.append(ErrorCode.unknown_member_id)
        if removed:
            self._after_member_removed(group, now_ms, effects)
        return ErrorCode.none, errors, effects

    # -- member removal ---------------------------------------------------------------------

    def _remove_member(self, group: _Group, member: _Member, effects: list[Effect]) -> None:
        """Drop a member; anything it still waits for is answered UNKNOWN_MEMBER_ID."""
        if member.join_waiter is not None:
            effects.append(
                Reply(
                    member.join_waiter,
                    JoinResult(ErrorCode.unknown_member_id, member_id=member.member_id),
                )
            )
        if member.sync_waiter is not None:
            effects.append(Reply(member.sync_waiter, SyncResult(ErrorCode.unknown_member_id)))
        del group.members[member.member_id]
        group.pending_sync.discard(member.member_id)
        self._cancel_timer((_HEARTBEAT, group.group_id, member.member_id))
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)

    def _after_member_removed(self, group: _Group, now_ms: int, effects: list[Effect]) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now_ms, effects)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, now_ms, effects)

    # -- offsets and administration -----------------------------------------------------------

    def validate_offset_commit(self, group_id: str, member_id: str, generation_id: int,
                               group_instance_id: str | None = None) -> ErrorCode:
        """Kafka's validateOffsetCommit for the classic protocol."""
        group = self._groups.get(group_id)
        if group is None:
            # generation < 0: a "simple" consumer that uses the coordinator only for offsets.
            return ErrorCode.none if generation_id < 0 else ErrorCode.illegal_generation
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group.is_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.none
        # Kafka's order (ClassicGroup.validateOffsetCommit): who, then which generation, and
        # only then the group's phase.  A member of the current generation may commit during
        # PreparingRebalance (librdkafka commits on revocation exactly then); while the group
        # awaits SyncGroup the answer is REBALANCE_IN_PROGRESS, but never before a stale
        # member or generation has been told so.
        if generation_id >= 0 or member_id:
            if member_id not in group.members:
                return ErrorCode.unknown_member_id
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def note_offset_commit(self, now_ms: int, group_id: str, member_id: str) -> None:
        """A commit counts as a sign of life; an offsets-only group is created on first use."""
        group = self._groups.get(group_id)
        if group is None:
            self._groups[group_id] = _Group(group_id, state_timestamp_ms=now_ms)
            return
        member = group.members.get(member_id)
        if member is not None and group.state is GroupState.STABLE:
            self._schedule_heartbeat(group, member, now_ms)

    def ensure_group(self, group_id: str, now_ms: int) -> None:
        """Make an (Empty) group known, e.g. when replay finds offsets for it."""
        if group_id not in self._groups:
            self._groups[group_id] = _Group(group_id, state_timestamp_ms=now_ms)

    def delete_group(self, group_id: str, now_ms: int) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY or group.members or group.pending_members:
            return ErrorCode.non_empty_group
        self._drop_group(group, now_ms)
        return ErrorCode.none

    def _drop_group(self, group: _Group, now_ms: int) -> None:
        group.transition(GroupState.DEAD, now_ms)
        for key in [k for k in self._timers if k[1] == group.group_id]:
            self._cancel_timer(key)
        del self._groups[group.group_id]

    def expire_if_empty(self, group_id: str, now_ms: int) -> bool:
        """Drop an Empty group (its offsets are gone); returns whether it was dropped."""
        group = self._groups.get(group_id)
        if group is None or group.state is not GroupState.EMPTY or group.pending_members:
            return False
        self._drop_group(group, now_ms)
        return True

    def load_group(self, snapshot: GroupSnapshot, now_ms: int) -> None:
        """Restore a group from its metadata record at broker start (Kafka's loadGroup).

        Members come back with a fresh session timer, so live clients keep their generation
        and dead ones expire as if the broker had never stopped.
        """
        group = _Group(
            snapshot.group_id,
            state_timestamp_ms=snapshot.state_timestamp_ms if snapshot.state_timestamp_ms >= 0
            else now_ms,
            protocol_type=snapshot.protocol_type,
            protocol_name=snapshot.protocol_name,
            generation_id=snapshot.generation_id,
            leader_id=snapshot.leader_id,
        )
        for m in snapshot.members:
            member = _Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=snapshot.protocol_type or "",
                protocols=((snapshot.protocol_name or "", m.subscription),),
                assignment=m.assignment,
            )
            group.members[m.member_id] = member
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        self._groups[group.group_id] = group
        for member in group.members.values():
            self._schedule_heartbeat(group, member, now_ms)

    def forget_group(self, group_id: str) -> None:
        """Replay found a tombstone for the group's metadata."""
        group = self._groups.get(group_id)
        if group is not None:
            self._drop_group(group, 0)

    def fail_all(self) -> list[Effect]:
        """Answer every parked request (shutdown): clients retry with another coordinator."""
        effects: list[Effect] = []
        for group in self._groups.values():
            for m in group.members.values():
                if m.join_waiter is not None:
                    effects.append(
                        Reply(m.join_waiter, JoinResult(ErrorCode.not_coordinator, m.member_id))
                    )
                    m.join_waiter = None
                if m.sync_waiter is not None:
                    effects.append(Reply(m.sync_waiter, SyncResult(ErrorCode.not_coordinator)))
                    m.sync_waiter = None
        return effects


def describe_state(state: GroupState | None) -> str:
    return GroupState.DEAD.value if state is None else state.value


__all__ = [
    "CoordinatorConfig",
    "Effect",
    "GroupCoordinator",
    "GroupSnapshot",
    "GroupState",
    "JoinMember",
    "JoinRequest",
    "JoinResult",
    "MemberSnapshot",
    "Persist",
    "Rebalanced",
    "Reply",
    "SyncRequest",
    "SyncResult",
    "describe_state",
]
