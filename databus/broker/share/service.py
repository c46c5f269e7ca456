"""The share-group service: the trio side of share groups (KIP-932) in a running broker.

It wires the sans-I/O parts to the broker:
- group_state.ShareGroupCoordinator (membership): heartbeats go in; a member removed for
  silence comes out as ``MemberGone``: its records are released, its share session closed;
- partition_state.SharePartition (one per group × topic-partition, created on first fetch
  from the durable state or ``share.auto.offset.reset``): the handler reads batches from the
  log, the partition decides which records the member acquires;
- share sessions (per member): the partitions a member fetches and the epoch its next
  ShareFetch/ShareAcknowledge must carry;
- ``__share_group_state`` (records from protocol/internal_records/share_group_state.py), replayed at start: a writer task
  takes the snapshot of every share-partition changed since its last round, appends them
  (one batch per state-topic partition) through ``broker.append`` and waits for the group
  commit's fsync.  Acknowledgements wait for the round that covers them before they are
  answered, so one fsync serves every acknowledgement that arrived meanwhile; acquisition
  alone writes nothing;
- one timer task: member session expiry and acquisition-lock expiry.

Handlers (handlers/share.py) translate kio messages to the calls here.
"""

from __future__ import annotations

import datetime
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import trio

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records import partition_for
from databus.protocol.internal_records.share_group_state import (
    SHARE_STATE_TOPIC,
    ConfigKey,
    MembershipKey,
    ShareStateRecordError,
    StateKey,
    StateValue,
    decode_config_value,
    decode_key,
    decode_membership_value,
    decode_state_value,
    encode_config_value,
    encode_key,
    encode_membership_value,
    encode_state_value,
)
from databus.protocol.records import build_batch, iter_headers

from ..coordinator.replay import log_records
from .dlq import (
    DLQ_COPY_CONFIG,
    DLQ_TOPIC_CONFIG,
    DeadLetter,
    DeadLetterWriter,
    DeadReason,
    check_topic_name,
)
from .group_state import (
    HeartbeatRequest,
    HeartbeatResult,
    MemberGone,
    ShareGroupConfig,
    ShareGroupCoordinator,
    ShareGroupSnapshot,
)
from .partition_state import (
    FINAL_STATES,
    AcknowledgeType,
    AcquiredRange,
    SharePartition,
    SharePartitionConfig,
)

log = logging.getLogger(__name__)

FINAL_EPOCH = -1
OPEN_EPOCH = 0
STATE_TOPIC_SEGMENT_BYTES = 104_857_600
# ShareFetch reads the log this much at a time, until it has acquired max_records
READ_CHUNK_BYTES = 256 * 1024

PartitionKey = tuple[str, uuid.UUID, int]  # (group, topic id, partition)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def next_epoch(epoch: int) -> int:
    """Share session epochs wrap from 2^31-1 to 1 (0 opens, -1 closes)."""
    return 1 if epoch >= 2**31 - 1 else epoch + 1


# -- configs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShareConfig:
    """The broker's ``group.share.*`` settings (Kafka's names and defaults)."""

    record_lock_duration_ms: int = 30_000
    min_record_lock_duration_ms: int = 15_000
    max_record_lock_duration_ms: int = 60_000
    delivery_count_limit: int = 5
    partition_max_record_locks: int = 2000
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    max_share_sessions: int = 2000
    state_topic_num_partitions: int = 50
    share_version: int = 2  # the share.version feature's level: 2 has DLQs (KIP-1191)
    dlq_topic_prefix: str = "dlq."  # errors.deadletterqueue.topic.name.prefix
    dlq_auto_create: bool = True  # errors.deadletterqueue.auto.create.topics.enable


_DURATION = re.compile(
    r"^P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_by_duration(text: str) -> int:
    """Milliseconds of ``by_duration:<ISO-8601 duration>`` (PnDTnHnMn.nS); ValueError if not."""
    match = _DURATION.match(text.removeprefix("by_duration:"))
    if not match or text.endswith(("P", "T")):
        raise ValueError(f"{text!r} is not by_duration:PnDTnHnMn.nS")
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return int(datetime.timedelta(days=parts.get("d", 0), hours=parts.get("h", 0),
                                  minutes=parts.get("m", 0),
                                  seconds=parts.get("s", 0)).total_seconds() * 1000)


def _check_reset(value: str) -> None:
    if value not in ("latest", "earliest") and not value.startswith("by_duration:"):
        raise ValueError("must be latest, earliest or by_duration:PnDTnHnMn.nS")
    if value.startswith("by_duration:"):
        parse_by_duration(value)


def _bounded(low: int, high: int) -> Callable[[str], None]:
    def check(value: str) -> None:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"must be between {low} and {high} (the broker's bounds)")
    return check


def _one_of(*allowed: str) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
    return check


def group_config_checks(config: ShareConfig) -> dict[str, Callable[[str], None]]:
    """The share-group configs settable per group (IncrementalAlterConfigs on GROUP) and how
    each value is checked against the broker's bounds (Kafka's GroupConfig)."""
    return {
        "share.auto.offset.reset": _check_reset,
        "share.isolation.level": _one_of("read_committed", "read_uncommitted"),
        "share.record.lock.duration.ms": _bounded(config.min_record_lock_duration_ms,
                                                  config.max_record_lock_duration_ms),
        "share.delivery.count.limit": _bounded(2, 10),
        "share.partition.max.record.locks": _bounded(100, 10_000),
        "share.session.timeout.ms": _bounded(1, 2**31 - 1),
        "share.heartbeat.interval.ms": _bounded(1, 2**31 - 1),
        "share.renew.acknowledge.enable": _one_of("true", "false"),
        DLQ_TOPIC_CONFIG: lambda value: _dlq_topic_check(config, value),
        DLQ_COPY_CONFIG: _one_of("true", "false"),
    }


def _dlq_topic_check(config: ShareConfig, value: str) -> None:
    if value and config.share_version < 2:
        raise ValueError("share-group dead-letter topics (KIP-1191) need share.version 2; "
                         f"this cluster's is {config.share_version}")
    check_topic_name(value, config.dlq_topic_prefix)


class GroupConfigError(ValueError):
    """A group config name or value the broker refuses (Kafka's INVALID_CONFIG)."""


def check_group_configs(config: ShareConfig, overrides: dict[str, str]) -> None:
    """Raise GroupConfigError naming the first unknown name or bad value."""
    checks = group_config_checks(config)
    for name, value in sorted(overrides.items()):
        check = checks.get(name)
        if check is None:
            raise GroupConfigError(
                f"Unknown group config name: {name} (share groups take "
                f"{', '.join(sorted(checks))})")
        try:
            check(value)
        except ValueError as exc:
            raise GroupConfigError(f"Invalid value {value} for configuration {name}: "
                                   f"{exc}") from exc


def group_config_defaults(config: ShareConfig) -> dict[str, str]:
    return {
        "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted",
        "share.record.lock.duration.ms": str(config.record_lock_duration_ms),
        "share.delivery.count.limit": str(config.delivery_count_limit),
        "share.partition.max.record.locks": str(config.partition_max_record_locks),
        "share.session.timeout.ms": str(config.session_timeout_ms),
        "share.heartbeat.interval.ms": str(config.heartbeat_interval_ms),
        "share.renew.acknowledge.enable": "true",
        DLQ_TOPIC_CONFIG: "",
        DLQ_COPY_CONFIG: "false",
    }


# -- requests and results ---------------------------------------------------------------------


@dataclass(frozen=True)
class AckBatch:
    first_offset: int
    last_offset: int
    types: tuple[int, ...]


@dataclass
class PartitionFetch:
    """One partition of a ShareFetch answer."""

    topic_id: uuid.UUID
    partition: int
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode = ErrorCode.none
    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: set[tuple[uuid.UUID, int]] = field(default_factory=set)


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Round:
    """One write of ``__share_group_state``: callers waiting for it, and how it ended."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.error: ErrorCode = ErrorCode.none


class ShareService:
    """Share groups of one broker.  ``await nursery.start(service.run)``."""

    def __init__(self, broker, config: ShareConfig | None = None, *,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        self.broker = broker
        self.config = config or ShareConfig()
        self.clock = clock
        self.coordinator = ShareGroupCoordinator(
            ShareGroupConfig(self.config.session_timeout_ms, self.config.heartbeat_interval_ms,
                             self.config.max_size),
            group_config=self._membership_config,
        )
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.durable: dict[PartitionKey, StateValue] = {}  # replayed, not yet in use
        self.group_configs: dict[str, dict[str, str]] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.num_partitions = self.config.state_topic_num_partitions
        self.loaded = False
        self.writes = 0  # rounds written (for tests and the bench)
        self.created = 0  # share-partitions initialised by auto offset reset
        self.restored_members = 0  # members kept across the last restart
        self._rearm = trio.Event()
        self._write_wanted = trio.Event()
        self._next_round = _Round()
        self._changed = trio.Event()  # records became available (release, expiry)
        self.dead_letters = DeadLetterWriter(broker, self.dlq_target,
                                             prefix=self.config.dlq_topic_prefix,
                                             auto_create=self.config.dlq_auto_create)

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Create/replay ``__share_group_state``, then drive timers and writes."""
        try:
            self._ensure_state_topic()
            self.replay()
            self.loaded = True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._writer_loop)
                nursery.start_soon(self.dead_letters.run)
                task_status.started(self)
        finally:
            for gone in self.coordinator.fail_all():
                self._member_gone(gone)

    def _ensure_state_topic(self) -> None:
        info = self.broker.topic(SHARE_STATE_TOPIC)
        if info is None:
            info = self.broker.create_topic(
                SHARE_STATE_TOPIC, self.num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(STATE_TOPIC_SEGMENT_BYTES)},
            )
        self.num_partitions = info.partitions

    def replay(self) -> None:
        records = 0
        memberships = {}
        for partition in range(self.num_partitions):
            plog = self.broker.get_log(SHARE_STATE_TOPIC, partition)
            if plog is None:
                continue
            for offset, key, value in log_records(plog, f"{SHARE_STATE_TOPIC}-{partition}"):
                records += 1
                if key is None:
                    continue
                try:
                    decoded = decode_key(key)
                    if isinstance(decoded, StateKey):
                        pkey = (decoded.group_id, decoded.topic_id, decoded.partition)
                        if value is None:
                            self.durable.pop(pkey, None)
                        else:
                            self.durable[pkey] = decode_state_value(value)
                    elif isinstance(decoded, MembershipKey):
                        if value is None:
                            memberships.pop(decoded.group_id, None)
                        else:
                            memberships[decoded.group_id] = decode_membership_value(value)
                    elif value is None:
                        self.group_configs.pop(decoded.group_id, None)
                    else:
                        self.group_configs[decoded.group_id] = decode_config_value(value)
                except ShareStateRecordError as exc:
                    log.error("%s: skipping record at offset %d: %s", SHARE_STATE_TOPIC,
                              offset, exc)
        for group_id, _, _ in self.durable:
            self.coordinator.ensure_group(group_id)
        for group_id in self.group_configs:
            self.coordinator.ensure_group(group_id)
        now = self.clock()
        for group_id, image in memberships.items():
            self.coordinator.restore(group_id, image, now)
        self.coordinator.dirty.clear()
        self.restored_members = sum(len(image.members) for image in memberships.values())
        log.info("loaded the state of %d share-partitions from %d records of %s",
                 len(self.durable), records, SHARE_STATE_TOPIC)

    # -- group configs ----------------------------------------------------------------------

    def group_config(self, group_id: str) -> dict[str, str]:
        """Effective share configs of the group: its overrides over the broker's."""
        return {**group_config_defaults(self.config), **self.group_configs.get(group_id, {})}

    def _membership_config(self, group_id: str) -> ShareGroupConfig:
        configs = self.group_config(group_id)
        return ShareGroupConfig(int(configs["share.session.timeout.ms"]),
                                int(configs["share.heartbeat.interval.ms"]),
                                self.config.max_size)

    def partition_config(self, group_id: str) -> SharePartitionConfig:
        configs = self.group_config(group_id)
        return SharePartitionConfig(int(configs["share.record.lock.duration.ms"]),
                                    int(configs["share.delivery.count.limit"]),
                                    int(configs["share.partition.max.record.locks"]))

    async def set_group_configs(self, group_id: str, overrides: dict[str, str]) -> None:
        """Replace the group's overrides (validated by the caller), durably."""
        self.group_configs[group_id] = dict(overrides)
        self.coordinator.ensure_group(group_id)
        value = encode_config_value(overrides) if overrides else None
        await self._append_durably(group_id, [(encode_key(ConfigKey(group_id)), value)])
        new = self.partition_config(group_id)
        collect = self.dlq_target(group_id) is not None
        for (group, _, _), sp in self.partitions.items():
            if group == group_id:
                sp.config = new
                sp.dead = (sp.dead or []) if collect else None

    def dlq_target(self, group_id: str) -> tuple[str, bool] | None:
        """(dead-letter topic, copy the records?) of the group, None without one."""
        configs = self.group_configs.get(group_id)
        if not configs or not configs.get(DLQ_TOPIC_CONFIG):
            return None
        return configs[DLQ_TOPIC_CONFIG], configs.get(DLQ_COPY_CONFIG, "false") == "true"

    def _send_dead(self, key: PartitionKey, sp: SharePartition) -> None:
        """Hand the records ``sp`` archived for the dead-letter topic to its writer."""
        dead = sp.take_dead()
        if not dead:
            return
        group_id, topic_id, partition = key
        topic = self.topic_names_by_id().get(topic_id)
        if topic is None:
            return
        self.dead_letters.offer([
            DeadLetter(group_id, topic, partition, first, last, count, DeadReason(reason))
            for first, last, count, reason in dead])

    # -- membership -------------------------------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """One heartbeat; if it changed the group's membership, ``membership_changed`` and
        the caller waits for ``persist`` before answering (a member must not be told an
        epoch that a crash could take back)."""
        topics = {name: info.partitions for name, info in self.broker.log_manager.topics().items()}
        result = self.coordinator.heartbeat(self.clock(), request, topics)
        self._rearm.set()
        return result

    @property
    def membership_changed(self) -> bool:
        return bool(self.coordinator.dirty)

    def _member_gone(self, gone: MemberGone) -> None:
        """Release what the member holds and close its session."""
        self.sessions.pop((gone.group_id, gone.member_id), None)
        released = 0
        for key, sp in self.partitions.items():
            if key[0] == gone.group_id:
                released += sp.release_member(gone.member_id)
                self._send_dead(key, sp)
        if released:
            log.info("share group %s: member %s gone, %d records released", gone.group_id,
                     gone.member_id, released)
            self._records_changed()

    def describe(self, group_id: str) -> ShareGroupSnapshot | None:
        return self.coordinator.snapshot(group_id)

    def group_ids(self) -> list[str]:
        return self.coordinator.group_ids()

    def is_share_group(self, group_id: str) -> bool:
        return self.coordinator.has_group(group_id)

    # -- share-partitions -------------------------------------------------------------------

    def topic_names_by_id(self) -> dict[uuid.UUID, str]:
        return {info.topic_id: name for name, info in self.broker.log_manager.topics().items()}

    def share_partition(self, group_id: str, topic_id: uuid.UUID, partition: int,
                        topic: str) -> SharePartition:
        """The share-partition, created from its durable state or by auto offset reset."""
        key = (group_id, topic_id, partition)
        sp = self.partitions.get(key)
        if sp is not None:
            return sp
        config = self.partition_config(group_id)
        state = self.durable.pop(key, None)
        if state is not None:
            sp = SharePartition(state.start_offset, config, state.batches)
            sp.dirty = False
        else:
            sp = SharePartition(self._reset_offset(group_id, topic, partition), config)
            sp.dirty = True  # the start offset chosen now must survive a crash
            self.created += 1
        if self.dlq_target(group_id) is not None:
            sp.dead = []
        self.partitions[key] = sp
        return sp

    def _reset_offset(self, group_id: str, topic: str, partition: int) -> int:
        plog = self.broker.get_log(topic, partition)
        reset = self.group_config(group_id)["share.auto.offset.reset"]
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            found = plog.offset_for_timestamp(self.clock() - parse_by_duration(reset))
            return found[0] if found else plog.log_end_offset
        return plog.log_end_offset

    def _records_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
        self._write_wanted.set()

    # -- sessions ---------------------------------------------------------------------------

    def session_for(self, group_id: str, member_id: str, epoch: int, *,
                     may_open: bool) -> ShareSession:
        """The member's session after checking the request's epoch (SessionError if bad)."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            if not may_open:
                raise SessionError(ErrorCode.invalid_share_session_epoch,
                                   "only ShareFetch may open a share session")
            if not self.coordinator.is_member(group_id, member_id):
                raise SessionError(ErrorCode.unknown_member_id,
                                   f"member {member_id} is not in share group {group_id}")
            if key in self.sessions:
                # the client started over: what its old session held goes back
                self._release_member_records(group_id, member_id)
            elif len(self.sessions) >= self.config.max_share_sessions:
                raise SessionError(ErrorCode.share_session_limit_reached,
                                   "group.share.max.share.sessions reached")
            session = self.sessions[key] = ShareSession(group_id, member_id, 1)
            return session
        session = self.sessions.get(key)
        if session is None:
            raise SessionError(ErrorCode.share_session_not_found,
                               f"no share session for member {member_id}")
        if epoch == FINAL_EPOCH:
            return session
        if epoch != session.epoch:
            raise SessionError(ErrorCode.invalid_share_session_epoch,
                               f"share session epoch {epoch}, expected {session.epoch}")
        session.epoch = next_epoch(epoch)
        return session

    def _release_member_records(self, group_id: str, member_id: str) -> None:
        released = 0
        for key, sp in self.partitions.items():
            if key[0] == group_id:
                released += sp.release_member(member_id)
                self._send_dead(key, sp)
        if released:
            self._records_changed()

    def close_session(self, session: ShareSession) -> None:
        self.sessions.pop((session.group_id, session.member_id), None)
        self._release_member_records(session.group_id, session.member_id)

    # -- acknowledgements -------------------------------------------------------------------

    def acknowledge(self, group_id: str, member_id: str, topic_id: uuid.UUID, partition: int,
                    batches: Iterable[AckBatch], *, renew: bool = False) -> ErrorCode:
        """Apply one partition's acknowledgement batches (in memory; ``persist`` makes them
        durable).  The first failing batch's error is the partition's.  ``renew``: the
        request's version knows RENEW (v2, KIP-1222); the group's
        ``share.renew.acknowledge.enable`` may still refuse it (INVALID_REQUEST)."""
        renew = renew and self.group_config(group_id)["share.renew.acknowledge.enable"] == "true"
        now = self.clock()
        names = self.topic_names_by_id()
        topic = names.get(topic_id)
        if topic is None:
            return ErrorCode.unknown_topic_id
        sp = self.partitions.get((group_id, topic_id, partition))
        if sp is None:
            return ErrorCode.invalid_record_state
        error = ErrorCode.none
        released = False
        start = sp.start_offset
        for batch in batches:
            code = sp.acknowledge(member_id, batch.first_offset, batch.last_offset, batch.types,
                                  now_ms=now, renew=renew)
            if code != ErrorCode.none and error == ErrorCode.none:
                error = code
            released = released or (
                code == ErrorCode.none and AcknowledgeType.RELEASE in batch.types)
        if sp.dead:
            self._send_dead((group_id, topic_id, partition), sp)
        if released or sp.start_offset != start:
            # records to redeliver, or room in the window for new ones: fetchers waiting
            # on this partition may acquire now
            self._records_changed()
        return error

    def persist_soon(self) -> _Round:
        """Ask for the write of every change made so far; ``wait_written`` on the returned
        round (meanwhile the caller may do other work, e.g. acquire records)."""
        self._write_wanted.set()
        return self._next_round

    @staticmethod
    async def wait_written(round_: _Round) -> ErrorCode:
        await round_.done.wait()
        return round_.error

    async def persist(self) -> ErrorCode:
        """Wait until every change made so far is in ``__share_group_state`` and fsynced."""
        return await self.wait_written(self.persist_soon())

    async def _writer_loop(self) -> None:
        while True:
            await self._write_wanted.wait()
            self._write_wanted = trio.Event()
            round_, self._next_round = self._next_round, _Round()
            try:
                await self._write_dirty()
            except Exception as exc:  # noqa: BLE001 - the waiters get the error, the loop lives
                from ..errors import error_code_for

                log.warning("writing %s failed: %s", SHARE_STATE_TOPIC, exc)
                try:
                    round_.error = error_code_for(exc)
                except Exception:  # noqa: BLE001
                    round_.error = ErrorCode.unknown_server_error
            round_.done.set()

    async def _write_dirty(self) -> None:
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        now = self.clock()
        dirty, self.coordinator.dirty = self.coordinator.dirty, set()
        for group_id in sorted(dirty):
            image = self.coordinator.export(group_id)
            value = encode_membership_value(image) if image is not None else None
            by_partition.setdefault(self._state_partition(group_id), []).append(
                (encode_key(MembershipKey(group_id)), value))
        for (group_id, topic_id, partition), sp in self.partitions.items():
            if not sp.dirty:
                continue
            start, batches = sp.snapshot()
            value = encode_state_value(StateValue(start, 0, now, tuple(batches)))
            key = encode_key(StateKey(group_id, topic_id, partition))
            by_partition.setdefault(self._state_partition(group_id), []).append((key, value))
        if not by_partition:
            return
        appended = []
        for partition, kvs in by_partition.items():
            info = self.broker.append(SHARE_STATE_TOPIC, partition, self._batch(kvs))
            appended.append((partition, info.last_offset))
        for partition, last_offset in appended:
            await self.broker.wait_durable(SHARE_STATE_TOPIC, partition, last_offset)
        self.writes += 1

    def _state_partition(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def _batch(self, kvs: list[tuple[bytes, bytes | None]]) -> bytes:
        now = self.clock()
        return build_batch([(k, v, (), now) for k, v in kvs])

    async def _append_durably(self, group_id: str, kvs: list[tuple[bytes, bytes | None]]):
        return await self.broker.append_durably(SHARE_STATE_TOPIC,
                                                self._state_partition(group_id),
                                                self._batch(kvs))

    # -- fetching ---------------------------------------------------------------------------

    def acquire(self, session: ShareSession, max_records: int, max_bytes: int,
                wanted: set[tuple[uuid.UUID, int]],
                refused: dict[tuple[uuid.UUID, int], ErrorCode] | None = None,
                ) -> list[PartitionFetch]:
        """One pass over the session's partitions: acquire what is available now.

        Partitions in ``wanted`` (named by the request) are answered even when empty;
        those in ``refused`` (the caller may not read them) are answered with their error,
        nothing acquired.

        Kafka's rules for what one ShareFetch may take (DelayedShareFetch, ShareFetchUtils):
        - the partitions are visited from a point that rotates with the session epoch
          (round robin), so one busy partition does not always come first;
        - ``max_bytes`` is split evenly over the partitions read (the uniform
          PartitionMaxBytesStrategy) and bounds the answer: only the answer's first batch
          may exceed it (a log read gives at least one batch, then stops at the limit);
        - ``max_records`` is shared by all partitions of the request;
        - a share-partition is initialised asynchronously by its first fetch (its state
          read from the share coordinator), and the fetch completes as soon as a partition
          that is ready has records: so a share-partition that this very fetch initialises
          is read only while nothing has been acquired yet (the first ShareFetch of a
          member with two fresh partitions gets one partition's records, as from Kafka).
        """
        names = self.topic_names_by_id()
        now = self.clock()
        results = []
        ordered = sorted(session.partitions, key=lambda k: (str(k[0]), k[1]))
        if ordered:
            turn = (session.epoch - 1) % len(ordered)  # the request's epoch: 0 opens
            ordered = ordered[turn:] + ordered[:turn]
        readable = [k for k in ordered if not (refused and k in refused)]
        per_partition = max(max_bytes // max(len(readable), 1), 1)
        budget = max_bytes
        acquired_any = False
        for topic_id, partition in ordered:
            result = PartitionFetch(topic_id, partition)
            if refused and (topic_id, partition) in refused:
                result.error = refused[(topic_id, partition)]
                results.append(result)
                continue
            topic = names.get(topic_id)
            info = self.broker.topic(topic) if topic else None
            if info is None or not 0 <= partition < info.partitions:
                result.error = (ErrorCode.unknown_topic_id if info is None
                                else ErrorCode.unknown_topic_or_partition)
                results.append(result)
                continue
            fresh = (session.group_id, topic_id, partition) not in self.partitions
            sp = self.share_partition(session.group_id, topic_id, partition, topic)
            if fresh and acquired_any:
                pass  # initialised now, read from the next fetch on (see above)
            elif max_records > 0 and budget > 0:
                limit = min(per_partition, budget)
                taken = self._acquire_partition(session, sp, topic, partition, now,
                                                max_records, limit, result,
                                                may_exceed=not acquired_any)
                max_records -= taken
                budget -= len(result.records)
                acquired_any = acquired_any or taken > 0
            if result.acquired or (topic_id, partition) in wanted:
                results.append(result)
        return results

    def _acquire_partition(self, session: ShareSession, sp: SharePartition, topic: str,
                           partition: int, now: int, max_records: int, limit: int,
                           result: PartitionFetch, *, may_exceed: bool) -> int:
        """Acquire from one share-partition into ``result``: batches up to ``limit`` bytes
        (the first one of the answer whatever its size when ``may_exceed``); the number of
        records acquired.  Under ``share.isolation.level=read_committed`` the log is read
        only below its last stable offset and aborted transactions' batches are archived
        as gaps, never acquired (Kafka's rule)."""
        plog = self.broker.get_log(topic, partition)
        if plog.log_start_offset > sp.start_offset:
            sp.move_start(plog.log_start_offset)  # retention removed what was not done
        committed = (self.group_config(session.group_id)["share.isolation.level"]
                     == "read_committed")
        upper = plog.last_stable_offset if committed else plog.log_end_offset
        offset = sp.next_fetch_offset()
        taken, used = 0, 0
        parts: list = []
        # read a chunk at a time until enough is acquired: the fetch's max_bytes (50 MB from
        # librdkafka) is a bound, not a read size
        while taken < max_records and offset < upper:
            room = limit - used
            first_of_answer = may_exceed and not parts
            if room <= 0 and not first_of_answer:
                break
            if offset >= sp.end_offset and not sp.can_acquire_new():
                break  # the window is full and nothing before it is available
            data = plog.read(offset, max(min(READ_CHUNK_BYTES, room), 1),
                             max_offset=upper if committed else None)
            headers = list(iter_headers(data))
            if not headers:
                break
            # offer only the batches that fit what is left (the first of the answer always)
            offered, size = [], 0
            for pos, h in headers:
                if size + h.size > room and not (first_of_answer and not offered):
                    break
                offered.append((pos, h))
                size += h.size
            if not offered:
                break
            batches = [(h.base_offset, h.last_offset) for _, h in offered]
            gaps = [(h.base_offset, h.last_offset) for _, h in offered if h.is_control]
            if committed:
                gaps += self._aborted_batches(plog, offered)
            acquired = sp.acquire(session.member_id, batches, now, max_records - taken,
                                  gaps=gaps)
            if acquired:
                # only the batches holding acquired records go back (the client delivers
                # nothing outside the acquired ranges; sending less saves the bytes)
                view = memoryview(data)
                for pos, h in offered:
                    if any(r.first_offset <= h.last_offset and h.base_offset <= r.last_offset
                           for r in acquired):
                        parts.append(view[pos:pos + h.size])
                        used += h.size
                result.acquired.extend(acquired)
                taken += sum(r.last_offset - r.first_offset + 1 for r in acquired)
            offset = max(offered[-1][1].next_offset, sp.start_offset)
        result.records = b"".join(parts)
        return taken

    @staticmethod
    def _aborted_batches(plog, offered) -> list[tuple[int, int]]:
        """(first, last) of the offered transactional batches that belong to an aborted
        transaction (read_committed: archived like gaps, as Kafka archives them)."""
        first = offered[0][1].base_offset
        last = offered[-1][1].next_offset
        aborted = plog.aborted_transactions(first, last)
        if not aborted:
            return []
        out = []
        for _, h in offered:
            if h.is_transactional and not h.is_control and any(
                    a.producer_id == h.producer_id and a.first_offset <= h.base_offset
                    <= a.last_offset for a in aborted):
                out.append((h.base_offset, h.last_offset))
        return out

    async def wait_for_records(self, session: ShareSession, deadline: float) -> None:
        """Sleep until an append to one of the session's partitions, records becoming
        available again (release, lock expiry), or ``deadline`` (trio time)."""
        names = self.topic_names_by_id()
        keys = [(names[t], p) for t, p in session.partitions if t in names]
        changed = self._changed
        async with trio.open_nursery() as nursery:
            async def on_append():
                await self.broker.notifier.wait_any(keys, deadline)
                nursery.cancel_scope.cancel()

            async def on_release():
                with trio.move_on_at(deadline):
                    await changed.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(on_append)
            nursery.start_soon(on_release)

    def lock_duration_ms(self, group_id: str) -> int:
        return int(self.group_config(group_id)["share.record.lock.duration.ms"])

    # -- timers -----------------------------------------------------------------------------

    def _next_deadline(self) -> int | None:
        deadlines = [d for d in (sp.next_deadline() for sp in self.partitions.values())
                     if d is not None]
        member = self.coordinator.next_deadline()
        if member is not None:
            deadlines.append(member)
        return min(deadlines, default=None)

    async def _timer_loop(self) -> None:
        while True:
            self._rearm = trio.Event()
            deadline = self._next_deadline()
            if deadline is None:
                await self._rearm.wait()
                continue
            delay_s = (deadline - self.clock()) / 1000
            if delay_s > 0:
                with trio.move_on_after(min(delay_s, 1.0)):
                    await self._rearm.wait()
                continue
            self.advance(self.clock())

    def advance(self, now_ms: int) -> None:
        for gone in self.coordinator.advance(now_ms):
            log.info("share group %s: member %s session timed out", gone.group_id,
                     gone.member_id)
            self._member_gone(gone)
        if self.coordinator.dirty:
            self._write_wanted.set()
        expired = 0
        for key, sp in self.partitions.items():
            expired += sp.expire_locks(now_ms)
            if sp.dead:
                self._send_dead(key, sp)
        if expired:
            log.info("%d acquisition locks expired", expired)
            self._records_changed()

    def wake_timers(self) -> None:
        """Fetches acquired records: their locks may be the next deadline."""
        self._rearm.set()

    # -- administration ---------------------------------------------------------------------

    def start_offsets(self, group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic, partition) -> (share-partition start offset, lag) of every share-partition
        of the group, in memory or only durable.  Lag: records at or past the start offset
        not yet acknowledged or archived (Kafka's share-partition lag)."""
        names = self.topic_names_by_id()
        out = {}
        for (group, topic_id, partition), state in self.durable.items():
            if group == group_id and topic_id in names:
                done = sum(b.last_offset - b.first_offset + 1 for b in state.batches
                           if b.state in FINAL_STATES)
                out[(names[topic_id], partition)] = (state.start_offset, done)
        for (group, topic_id, partition), sp in self.partitions.items():
            if group == group_id and topic_id in names:
                out[(names[topic_id], partition)] = (sp.start_offset, sp.done_in_flight())
        result = {}
        for (topic, partition), (start, done) in out.items():
            plog = self.broker.get_log(topic, partition)
            end_offset = plog.log_end_offset if plog is not None else start
            result[(topic, partition)] = (start, max(end_offset - start - done, 0))
        return result

    async def alter_start_offsets(self, group_id: str,
                                  offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int],
                                                                                 ErrorCode]:
        """AlterShareGroupOffsets: only for a group without members."""
        snapshot = self.coordinator.snapshot(group_id)
        if snapshot is not None and snapshot.members:
            return {tp: ErrorCode.non_empty_group for tp in offsets}
        results = {}
        topics = self.broker.log_manager.topics()
        for (topic, partition), offset in offsets.items():
            info = topics.get(topic)
            if info is None or not 0 <= partition < info.partitions:
                results[(topic, partition)] = ErrorCode.unknown_topic_or_partition
                continue
            plog = self.broker.get_log(topic, partition)
            offset = min(max(offset, plog.log_start_offset), plog.log_end_offset)
            sp = self.share_partition(group_id, info.topic_id, partition, topic)
            sp.reset_start(offset)
            results[(topic, partition)] = ErrorCode.none
        self.coordinator.ensure_group(group_id)
        error = await self.persist()
        if error != ErrorCode.none:
            return {tp: error for tp in results}
        return results

    async def delete_state(self, group_id: str,
                           topics: list[str] | None) -> dict[str, ErrorCode]:
        """DeleteShareGroupOffsets (``topics``) or DeleteGroups (None: everything, configs
        too): drop the share-partitions' state with tombstones.  The group must have no
        members; per topic, UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist."""
        snapshot = self.coordinator.snapshot(group_id)
        if snapshot is not None and snapshot.members:
            return {topic: ErrorCode.non_empty_group for topic in topics or [""]}
        ids = {name: tid for tid, name in self.topic_names_by_id().items()}
        keys = {k for k in list(self.partitions) + list(self.durable) if k[0] == group_id}
        results: dict[str, ErrorCode] = {}
        if topics is not None:
            wanted = set()
            for topic in topics:
                results[topic] = (ErrorCode.none if topic in ids
                                  else ErrorCode.unknown_topic_or_partition)
                wanted.add(ids.get(topic))
            keys = {k for k in keys if k[1] in wanted}
        kvs: list[tuple[bytes, bytes | None]] = [
            (encode_key(StateKey(*key)), None) for key in sorted(keys, key=str)]
        if topics is None:
            kvs.append((encode_key(ConfigKey(group_id)), None))
            kvs.append((encode_key(MembershipKey(group_id)), None))
        for key in keys:
            self.partitions.pop(key, None)
            self.durable.pop(key, None)
        if kvs:
            await self._append_durably(group_id, kvs)
        return results

    async def delete_group(self, group_id: str) -> ErrorCode:
        if not self.coordinator.has_group(group_id):
            return ErrorCode.group_id_not_found
        error = self.coordinator.delete_group(group_id)
        if error != ErrorCode.none:
            return error
        await self.delete_state(group_id, None)
        self.group_configs.pop(group_id, None)
        return ErrorCode.none
