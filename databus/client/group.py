"""The consumer's group membership on Kafka's classic protocol, and offset commit/fetch.

This module owns the member's state machine: find the coordinator (FindCoordinator), join
(JoinGroup, answering MEMBER_ID_REQUIRED with a second join, KIP-394), let the leader run
the assignor over every member's ConsumerProtocol subscription, sync (SyncGroup), then
heartbeat every ``heartbeat.interval.ms`` until the coordinator signals a rebalance, and
leave (LeaveGroup) on close.

Rebalance protocols: with an eager assignor (range, roundrobin, sticky) every partition is
revoked (after an auto-commit) before rejoining; with cooperative-sticky only partitions
that move are revoked, after the sync, and the member rejoins at once so they can be
handed over (KIP-429).  Callbacks ``on_revoked(partitions)`` / ``on_assigned(partitions)``
may be plain or async functions; they run in the consumer's group task.

Group traffic uses a connection of its own to the coordinator, so heartbeats never queue
behind a long-polling Fetch on the same broker (Kafka's clients do the same).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

import trio

from ..protocol.api_keys import ApiKey
from ..protocol.consumer_protocol import (
    PROTOCOL_TYPE,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from ..protocol.types import TopicPartition
from . import errors
from .assignors import ASSIGNORS, GroupMemberInfo
from .backoff import ExponentialBackoff
from .cluster import Cluster
from .config import ConsumerConfig
from .subscription import SubscriptionState

log = logging.getLogger(__name__)

COORDINATOR_NODE_BASE = 2**31 - 1  # coordinator connections get ids far from broker ids

_COORDINATOR_ERRORS = (
    errors.NotCoordinatorError,
    errors.CoordinatorNotAvailableError,
    errors.KafkaConnectionError,
    errors.RequestTimedOutError,
    errors.NetworkExceptionError,
)


async def call_listener(callback: Callable | None, partitions: list[TopicPartition]) -> None:
    if callback is None:
        return
    try:
        result = callback(sorted(partitions))
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("rebalance listener %r failed", callback)


class CoordinatorClient:
    """The group coordinator of ``self.group_id`` (FindCoordinator), reached over a connection
    of its own (node id ``COORDINATOR_NODE_BASE - broker id``); shared by the classic group
    member and the share-group member (share_consumer.py).  Needs ``self.cluster``,
    ``self.group_id`` and ``self.coordinator`` (None until found)."""

    cluster: Cluster
    group_id: str
    coordinator: int | None

    # -- coordinator ---------------------------------------------------------------------

    async def coordinator_connection(self):
        if self.coordinator is None:
            await self._find_coordinator()
        try:
            return await self.cluster.connection(self.coordinator)
        except errors.KafkaError:
            self.coordinator = None
            raise

    async def _find_coordinator(self) -> None:
        response = await self.cluster.request(
            None, ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0}
        )
        errors.raise_for_code(
            response.error_code, f"FindCoordinator for group {self.group_id!r}"
        )
        node = COORDINATOR_NODE_BASE - int(response.node_id)
        self.cluster.register_address(node, response.host, int(response.port))
        self.coordinator = node

    def coordinator_dead(self, exc: BaseException) -> None:
        log.debug("coordinator of %s lost: %s", self.group_id, exc)
        self.coordinator = None

    async def request(self, api_key: int, fields: dict, *, timeout: float | None = None) -> Any:
        conn = await self.coordinator_connection()
        try:
            return await conn.request(api_key, fields, timeout=timeout)
        except _COORDINATOR_ERRORS as exc:
            self.coordinator_dead(exc)
            raise


class GroupMember(CoordinatorClient):
    def __init__(
        self,
        cluster: Cluster,
        config: ConsumerConfig,
        subscriptions: SubscriptionState,
        *,
        on_assigned: Callable | None = None,
        on_revoked: Callable | None = None,
        before_revoke: Callable | None = None,
    ) -> None:
        self.cluster = cluster
        self.config = config
        self.group_id = config.group_id
        self.subscriptions = subscriptions
        self.assignors = [ASSIGNORS[name]() for name in config.partition_assignment_strategy]
        self.on_assigned = on_assigned
        self.on_revoked = on_revoked
        self.before_revoke = before_revoke  # the consumer's auto-commit
        self.member_id = ""
        self.generation_id = -1
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.coordinator: int | None = None
        self.needs_rejoin = True
        self.joined = trio.Event()
        self.assigned_counts: dict[str, int] = {}  # partition counts the leader assigned from
        self.last_error: BaseException | None = None
        self.last_poll: float | None = None  # trio time of the consumer's last poll
        self.last_heartbeat: float | None = None  # trio time the session was last confirmed
        self.poll_timed_out = False
        self._lock = trio.Lock()

    # -- membership ----------------------------------------------------------------------

    def _assignor(self, name: str):
        for a in self.assignors:
            if a.name == name:
                return a
        raise errors.InconsistentGroupProtocolError(f"coordinator chose unknown assignor {name!r}")

    @property
    def cooperative(self) -> bool:
        assignor = None
        if self.protocol:
            assignor = next((a for a in self.assignors if a.name == self.protocol), None)
        assignor = assignor or self.assignors[0]
        return assignor.rebalance_protocol == "cooperative"

    async def ensure_active(self) -> None:
        """Join (or rejoin) until the member has a current assignment."""
        async with self._lock:
            backoff = ExponentialBackoff(self.config.retry_backoff_ms, self.config.retry_backoff_max_ms)
            failures = 0
            while self.needs_rejoin:
                try:
                    await self._rejoin()
                    self.last_error = None
                except errors.KafkaError as exc:
                    self.last_error = exc
                    if isinstance(exc, (*_COORDINATOR_ERRORS, errors.CoordinatorLoadInProgressError)):
                        self.coordinator_dead(exc)
                    elif not exc.retriable and not isinstance(
                        exc,
                        (errors.UnknownMemberIdError, errors.IllegalGenerationError,
                         errors.RebalanceInProgressError, errors.MemberIdRequiredError),
                    ):
                        raise
                    log.info("group %s: rejoining after %s", self.group_id, exc)
                    await trio.sleep(backoff.backoff_ms(failures) / 1000)
                    failures += 1

    async def _revoke(self, partitions: set[TopicPartition]) -> None:
        if not partitions:
            return
        if self.before_revoke is not None:
            await self.before_revoke(partitions)
        await call_listener(self.on_revoked, list(partitions))
        self.subscriptions.remove(partitions)

    async def _rejoin(self) -> None:
        owned = self.subscriptions.assigned()
        if not self.cooperative and owned:
            await self._revoke(owned)  # eager: give everything back before joining
            owned = set()
        topics = self.subscriptions.topics
        await self.cluster.refresh_metadata(topics)
        subscription = Subscription(
            topics=topics,
            owned_partitions=tuple(sorted(owned)),
            generation_id=self.generation_id,
            rack_id=self.config.client_rack or None,
        )
        metadata = encode_subscription(subscription)
        cfg = self.config
        join_timeout = (cfg.max_poll_interval_ms + 5000) / 1000
        while True:
            response = await self.request(
                ApiKey.JOIN_GROUP,
                {
                    "group_id": self.group_id,
                    "session_timeout": cfg.session_timeout_ms,
                    "rebalance_timeout": cfg.max_poll_interval_ms,
                    "member_id": self.member_id,
                    "group_instance_id": cfg.group_instance_id,
                    "protocol_type": PROTOCOL_TYPE,
                    "protocols": [{"name": a.name, "metadata": metadata} for a in self.assignors],
                    "reason": None,
                },
                timeout=join_timeout,
            )
            code = int(response.error_code)
            if code == errors.MemberIdRequiredError.code:
                self.member_id = response.member_id  # KIP-394: join again with this id
                continue
            if code == errors.UnknownMemberIdError.code:
                self.member_id = ""
            if code:
                raise errors.from_code(code, f"JoinGroup {self.group_id!r}")
            break
        self.generation_id = int(response.generation_id)
        self.member_id = response.member_id
        self.protocol = response.protocol_name
        self.leader_id = response.leader
        assignments: list[dict] = []
        if response.leader == response.member_id:
            assignments = await self._lead(response.members)
        sync = await self.request(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self.generation_id,
                "member_id": self.member_id,
                "group_instance_id": cfg.group_instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": self.protocol,
                "assignments": assignments,
            },
            timeout=join_timeout,
        )
        code = int(sync.error_code)
        if code:
            if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code):
                self.member_id = "" if code == errors.UnknownMemberIdError.code else self.member_id
            raise errors.from_code(code, f"SyncGroup {self.group_id!r}")
        assignment = decode_assignment(sync.assignment)
        new = set(assignment.partitions)
        revoked = owned - new
        added = new - owned
        self.needs_rejoin = False
        self.last_poll = trio.current_time()  # the join may have taken long: count from now
        self.last_heartbeat = self.last_poll  # a completed sync starts the session afresh
        if revoked:
            await self._revoke(revoked)
            self.needs_rejoin = True  # cooperative: the new owners get them next round
        self.subscriptions.add(added)
        if not self.cooperative:
            await call_listener(self.on_assigned, list(new))
        elif added:
            await call_listener(self.on_assigned, list(added))
        self.joined.set()
        log.info(
            "group %s generation %s: member %s assigned %s",
            self.group_id, self.generation_id, self.member_id, sorted(new),
        )

    async def _lead(self, members) -> list[dict]:
        assignor = self._assignor(self.protocol)
        infos = [
            GroupMemberInfo(m.member_id, decode_subscription(m.metadata), getattr(m, "group_instance_id", None))
            for m in members
        ]
        all_topics = sorted({t for info in infos for t in info.subscription.topics})
        await self.cluster.refresh_metadata(all_topics)
        counts = {}
        for topic in all_topics:
            parts = self.cluster.partitions_for(topic)
            if parts:
                counts[topic] = len(parts)
        self.assigned_counts = counts
        plan = assignor.assign(infos, counts)
        return [
            {"member_id": mid, "assignment": encode_assignment(Assignment(tuple(tps)))}
            for mid, tps in plan.items()
        ]

    def metadata_changed(self) -> bool:
        """Leader only: did a subscribed topic appear or change its partition count?"""
        if self.leader_id != self.member_id or not self.assigned_counts:
            return False
        for topic in self.subscriptions.topics:
            parts = self.cluster.partitions_for(topic)
            if (len(parts) if parts else 0) != self.assigned_counts.get(topic, 0):
                return True
        return False

    async def heartbeat_loop(self) -> None:
        """Background: heartbeat while a member; flag a rejoin when the group rebalances;
        drop the partitions when no heartbeat was answered for ``session.timeout.ms``."""
        interval = self.config.heartbeat_interval_ms / 1000
        max_poll_interval = self.config.max_poll_interval_ms / 1000
        while True:
            wait = interval
            if self.last_heartbeat is not None and not self.needs_rejoin and self.generation_id >= 0:
                # Wake up at the session's end if that comes first.  (Not while (re)joining:
                # the coordinator keeps the member for the rebalance timeout then.)
                remaining = self._session_deadline() - trio.current_time()
                if remaining > 0:
                    wait = min(wait, remaining)
            await trio.sleep(wait)
            if self.needs_rejoin or self.generation_id < 0 or self._lock.locked():
                continue
            if self.last_poll is None:
                self.last_poll = trio.current_time()
            if trio.current_time() - self.last_poll > max_poll_interval:
                # As Kafka's consumer: an application that stopped polling must not keep
                # its partitions; leave, and rejoin on the next poll.
                log.warning(
                    "group %s: no poll for max.poll.interval.ms=%d; leaving the group",
                    self.group_id, self.config.max_poll_interval_ms,
                )
                await self.leave(force=True)
                self.needs_rejoin = True
                self.poll_timed_out = True  # rejoin only when the application polls again
                continue
            code = None
            # A heartbeat answered after the session ended cannot save it: wait no longer.
            with trio.move_on_after(max(self._session_deadline() - trio.current_time(), 0)):
                try:
                    response = await self.request(
                        ApiKey.HEARTBEAT,
                        {
                            "group_id": self.group_id,
                            "generation_id": self.generation_id,
                            "member_id": self.member_id,
                            "group_instance_id": self.config.group_instance_id,
                        },
                    )
                    code = int(response.error_code)
                except errors.KafkaError as exc:
                    log.debug("heartbeat failed: %s", exc)
            if code is None:
                if trio.current_time() >= self._session_deadline() and not self._lock.locked():
                    await self._session_lost()
                continue
            if code == 0:
                self.last_heartbeat = trio.current_time()
            elif code == errors.RebalanceInProgressError.code:
                self.needs_rejoin = True
            elif code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code,
                          errors.FencedInstanceIdError.code):
                if code == errors.UnknownMemberIdError.code:
                    self.member_id = ""
                self.generation_id = -1
                self.needs_rejoin = True
            elif code in (errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code):
                self.coordinator_dead(errors.from_code(code))
            if self.metadata_changed():
                self.needs_rejoin = True

    def _session_deadline(self) -> float:
        """When the coordinator expires this member if no heartbeat reaches it before."""
        start = self.last_heartbeat if self.last_heartbeat is not None else trio.current_time()
        return start + self.config.session_timeout_ms / 1000

    async def _session_lost(self) -> None:
        """No heartbeat answered for session.timeout.ms: the coordinator has expired this
        member and given its partitions to others, so keeping them would duplicate their
        work.  Drop them without committing (the generation is gone) and rejoin as a new
        member, as librdkafka does (Java calls these partitions "lost")."""
        log.warning(
            "group %s: no heartbeat answered within session.timeout.ms=%d; dropping the "
            "assignment and rejoining", self.group_id, self.config.session_timeout_ms,
        )
        if self.coordinator is not None:
            # The unanswered heartbeat is still queued on that connection: a new request
            # there would wait behind it, so start afresh (Kafka's clients disconnect too).
            await self.cluster.disconnect(self.coordinator)
        self.coordinator_dead(errors.RequestTimedOutError("session timed out"))
        self.generation_id = -1
        self.member_id = ""
        self.last_heartbeat = None
        self.needs_rejoin = True
        lost = self.subscriptions.assigned()
        if lost:
            await call_listener(self.on_revoked, list(lost))
            self.subscriptions.remove(lost)

    async def leave(self, force: bool = False) -> None:
        """LeaveGroup, so the group rebalances now rather than after session.timeout.ms.
        Static members (group.instance.id) do not leave on close, as in Kafka: they come
        back; ``force`` (poll timeout) makes them leave too."""
        if self.generation_id < 0 or not self.member_id:
            return
        if self.config.group_instance_id and not force:
            return
        try:
            await self.request(
                ApiKey.LEAVE_GROUP,
                {
                    "group_id": self.group_id,
                    "member_id": self.member_id,
                    "members": [
                        {"member_id": self.member_id, "group_instance_id": self.config.group_instance_id,
                         "reason": "consumer closed"}
                    ],
                },
                timeout=5,
            )
        except errors.KafkaError as exc:
            log.debug("LeaveGroup failed: %s", exc)
        self.generation_id = -1
        self.member_id = ""

    # -- offsets -------------------------------------------------------------------------

    async def commit(self, offsets: dict[TopicPartition, tuple[int, str | None]]) -> None:
        """OffsetCommit; raises the first partition error (e.g. RebalanceInProgressError)."""
        if not offsets:
            return
        by_topic: dict[str, list[dict]] = {}
        for (topic, partition), (offset, metadata) in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset,
                 "committed_leader_epoch": -1, "committed_metadata": metadata or "",
                 "commit_timestamp": -1}
            )
        group_mode = self.subscriptions.uses_group_assignment
        response = await self.request(
            ApiKey.OFFSET_COMMIT,
            {
                "group_id": self.group_id,
                "generation_id": self.generation_id if group_mode else -1,
                "generation_id_or_member_epoch": self.generation_id if group_mode else -1,
                "member_id": self.member_id if group_mode else "",
                "group_instance_id": self.config.group_instance_id if group_mode else None,
                "retention_time": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
            },
        )
        for topic in response.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                if code:
                    if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code,
                                errors.RebalanceInProgressError.code):
                        self.needs_rejoin = True
                    if code in (errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code):
                        self.coordinator_dead(errors.from_code(code))
                    raise errors.from_code(code, f"OffsetCommit {topic.name}-{p.partition_index}")

    async def fetch_committed(self, tps) -> dict[TopicPartition, int]:
        """Committed offsets (-1 when none) of ``tps`` via OffsetFetch."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(tps):
            by_topic.setdefault(topic, []).append(partition)
        response = await self.request(
            ApiKey.OFFSET_FETCH,
            {
                "group_id": self.group_id,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                "require_stable": False,
            },
        )
        errors.raise_for_code(getattr(response, "error_code", 0), f"OffsetFetch {self.group_id!r}")
        out = {}
        for topic in response.topics:
            for p in topic.partitions:
                code = int(p.error_code)
                if code and code != errors.UnknownTopicOrPartitionError.code:
                    raise errors.from_code(code, f"OffsetFetch {topic.name}-{p.partition_index}")
                out[(topic.name, int(p.partition_index))] = int(p.committed_offset)
        return out
