"""The group coordinator service: the trio side of consumer groups in a running broker.

It wires the sans-I/O parts to the broker:
- group_state.GroupCoordinator (the state machine): requests go in, effects come out; a
  parked JoinGroup/SyncGroup waits on a trio.Event until a ``Reply`` effect fills it, one
  timer task sleeps until the machine's next deadline (session expiry, rebalance timeout,
  initial rebalance delay) and calls ``advance``;
- offset_store.OffsetStore (committed offsets), rebuilt at start by replaying
  ``__consumer_offsets`` and updated after each commit is fsynced;
- ``__consumer_offsets`` itself (records from protocol/internal_records/consumer_offsets.py): commits, group metadata and
  tombstones are appended through ``broker.append`` / ``broker.append_durably``, the same path
  Produce uses, so an acknowledged commit survives kill -9;
- consumer_group.ConsumerGroupCoordinator (KIP-848 consumer groups, ConsumerGroupHeartbeat):
  its state changes come out as ``__consumer_offsets`` records (protocol/internal_records/consumer_groups.py), appended
  durably before the heartbeat is answered and replayed at start; a group id is either a
  classic or a consumer group (an empty one of either kind is taken over by the other
  protocol, as in Kafka; a non-empty one is refused);
- transactional offset commits (TxnOffsetCommit): appended as a transactional batch with the
  producer's id and epoch, held aside per producer id and applied when the transaction
  coordinator writes the COMMIT marker to the partition (``complete_txn``), dropped on
  ABORT; the replay does the same from the batches and markers it reads.

Handlers (handlers/groups.py, handlers/offsets.py) translate kio messages to the calls here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import trio

from databus.protocol import consumer_protocol, defaults
from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records import consumer_groups as consumer_records
from databus.protocol.internal_records.consumer_offsets import (
    OFFSETS_TOPIC,
    GroupKey,
    OffsetKey,
    OffsetsRecordError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from databus.protocol.records import CONTROL_COMMIT, build_batch, control_record_type
from databus.storage.errors import KafkaStorageError

from .consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    ConsumerGroupSnapshot,
    HeartbeatRequest,
    HeartbeatResult,
    TopicImage,
)
from .group_state import (
    CoordinatorConfig,
    Effect,
    GroupCoordinator,
    GroupSnapshot,
    GroupState,
    JoinRequest,
    JoinResult,
    Persist,
    Rebalanced,
    Reply,
    SyncRequest,
    SyncResult,
)
from .offset_store import CommittedOffset, OffsetStore, TopicPartition
from .replay import log_batches

log = logging.getLogger(__name__)

# Kafka's offsets.topic.segment.bytes: small segments so compaction has something to clean.
OFFSETS_TOPIC_SEGMENT_BYTES = 104_857_600
# Kafka's offset.metadata.max.bytes.
OFFSET_METADATA_MAX_BYTES = 4096
# A parked request outliving every timeout the state machine knows means a bug: answer it
# anyway rather than hang the client (and say so in the log).
_PARK_SAFETY_MARGIN_S = 30.0


def _subscribed_topics(metadata: bytes) -> set[str]:
    """The topics of a member's JoinGroup metadata (ConsumerProtocolError if it is not one)."""
    return set(consumer_protocol.decode_subscription(metadata).topics)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class _Waiter:
    __slots__ = ("event", "result")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.result: JoinResult | SyncResult | None = None


@dataclass(frozen=True)
class OffsetCommitEntry:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True)
class FetchedOffset:
    offset: int
    leader_epoch: int
    metadata: str


class GroupService:
    """Consumer groups of one broker.  ``await nursery.start(service.run)``."""

    def __init__(
        self,
        broker,
        config: CoordinatorConfig,
        *,
        num_partitions: int = defaults.OFFSETS_TOPIC_NUM_PARTITIONS,
        retention_ms: int = defaults.OFFSETS_RETENTION_MINUTES * 60_000,
        retention_check_interval_ms: int = defaults.OFFSETS_RETENTION_CHECK_INTERVAL_MS,
        metadata_max_bytes: int = OFFSET_METADATA_MAX_BYTES,
        clock: Callable[[], int] = wall_clock_ms,
        consumer_config: ConsumerGroupConfig | None = None,
    ) -> None:
        self.broker = broker
        self.config = config
        self.num_partitions = num_partitions
        self.retention_ms = retention_ms
        self.retention_check_interval_ms = retention_check_interval_ms
        self.metadata_max_bytes = metadata_max_bytes
        self.clock = clock
        self.coordinator = GroupCoordinator(config)
        self.consumers = ConsumerGroupCoordinator(consumer_config)
        self.offsets = OffsetStore()
        self.loaded = False
        self._rearm = trio.Event()
        # (group, topic, partition) -> log offset of the record that set the stored value, so
        # commits that finish their fsync out of order cannot regress the store.
        self._applied_at: dict[tuple[str, str, int], int] = {}
        self._partition_cache: dict[str, int] = {}
        # producer id -> offset commits of its open transaction:
        # [(group, topic-partition, value, log offset)]
        self._txn_offsets: dict[int, list[tuple[str, TopicPartition, CommittedOffset, int]]] = {}

    # -- lifecycle --------------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Create/replay ``__consumer_offsets``, then drive timers until cancelled."""
        try:
            self._ensure_offsets_topic()
            self.replay()
            self.loaded = True
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._timer_loop)
                nursery.start_soon(self._expiry_loop)
                task_status.started(self)
        finally:
            self._apply(self.coordinator.fail_all())

    def _ensure_offsets_topic(self) -> None:
        info = self.broker.topic(OFFSETS_TOPIC)
        if info is None:
            info = self.broker.create_topic(
                OFFSETS_TOPIC,
                self.num_partitions,
                {"cleanup.policy": "compact", "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES)},
            )
        elif info.partitions != self.num_partitions:
            # Kafka keeps the topic's real partition count; so do we, or groups would move.
            log.warning(
                "%s has %d partitions, offsets.topic.num.partitions=%d is ignored",
                OFFSETS_TOPIC, info.partitions, self.num_partitions,
            )
        self.num_partitions = info.partitions
        self._partition_cache.clear()

    def partition_of(self, group_id: str) -> int:
        partition = self._partition_cache.get(group_id)
        if partition is None:
            partition = self._partition_cache[group_id] = partition_for(
                group_id, self.num_partitions
            )
        return partition

    # -- replay -----------------------------------------------------------------------------

    def replay(self) -> None:
        """Rebuild offsets and groups from ``__consumer_offsets`` (Kafka's loadGroupsAndOffsets)."""
        groups: dict[str, GroupSnapshot | None] = {}
        consumer_groups: dict[str, dict[bytes, bytes]] = {}
        records = 0
        for partition in range(self.num_partitions):
            plog = self.broker.get_log(OFFSETS_TOPIC, partition)
            if plog is None:
                continue
            for header, batch in log_batches(plog, f"{OFFSETS_TOPIC}-{partition}"):
                if header.is_control:
                    if batch:
                        self._settle_txn(partition, header.producer_id,
                                         control_record_type(batch[0].key) == CONTROL_COMMIT)
                    continue
                for record in batch:
                    records += 1
                    if header.is_transactional:
                        self._replay_txn_record(header.producer_id, record)
                    else:
                        self._replay_record(record.key, record.value, record.offset, groups,
                                            consumer_groups)
        now = self.clock()
        for group_id, group_records in consumer_groups.items():
            if group_records:
                try:
                    self.consumers.load(group_id, group_records, now)
                except OffsetsRecordError as exc:
                    log.error("%s: consumer group %r not loaded: %s", OFFSETS_TOPIC, group_id,
                              exc)
        for snapshot in groups.values():
            if snapshot is not None and not self.consumers.has_group(snapshot.group_id):
                self.coordinator.load_group(snapshot, now)
        for group_id in self.offsets.group_ids():
            if not self.consumers.has_group(group_id):
                self.coordinator.ensure_group(group_id, now)
        log.info(
            "loaded %d classic and %d consumer groups and %d committed offsets from %d "
            "records of %s",
            len(self.coordinator.group_ids()), len(self.consumers.group_ids()),
            sum(len(self.offsets.offsets(g)) for g in self.offsets.group_ids()),
            records, OFFSETS_TOPIC,
        )

    def _replay_record(self, key: bytes | None, value: bytes | None, log_offset: int,
                       groups: dict[str, GroupSnapshot | None],
                       consumer_groups: dict[str, dict[bytes, bytes]]) -> None:
        if key is None:
            return
        try:
            decoded = decode_key(key)
            if decoded is None:  # a consumer-group (KIP-848) record: the newest per key wins
                ckey = consumer_records.decode_key(key)
                kept = consumer_groups.setdefault(ckey.group_id, {})
                if value is None:
                    kept.pop(bytes(key), None)
                else:
                    kept[bytes(key)] = bytes(value)
                return
            if isinstance(decoded, OffsetKey):
                committed = (
                    None if value is None else CommittedOffset.from_value(decode_offset_value(value))
                )
                tp = (decoded.topic, decoded.partition)
                self.offsets.put(decoded.group_id, tp, committed)
                self._applied_at[(decoded.group_id, *tp)] = log_offset
            elif isinstance(decoded, GroupKey):
                groups[decoded.group_id] = (
                    None if value is None else decode_group_value(decoded.group_id, value)
                )
        except OffsetsRecordError as exc:
            # One bad record must not cost every other group its offsets.
            log.error("%s: skipping record at offset %d: %s", OFFSETS_TOPIC, log_offset, exc)

    def _replay_txn_record(self, producer_id: int, record) -> None:
        try:
            decoded = decode_key(record.key) if record.key is not None else None
            if isinstance(decoded, OffsetKey) and record.value is not None:
                value = CommittedOffset.from_value(decode_offset_value(record.value))
                self._txn_offsets.setdefault(producer_id, []).append(
                    (decoded.group_id, (decoded.topic, decoded.partition), value, record.offset))
        except OffsetsRecordError as exc:
            log.error("%s: skipping record at offset %d: %s", OFFSETS_TOPIC, record.offset, exc)

    def _checked_entries(
        self, entries: list[OffsetCommitEntry]
    ) -> tuple[list[ErrorCode], list[tuple[int, OffsetCommitEntry]]]:
        """Each entry's error (unknown partition, metadata too large) and the accepted ones
        with their index: what every kind of offset commit checks first."""
        errors: list[ErrorCode] = []
        accepted: list[tuple[int, OffsetCommitEntry]] = []
        for entry in entries:
            info = self.broker.topic(entry.topic)
            if info is None or not 0 <= entry.partition < info.partitions:
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif entry.metadata is not None and len(entry.metadata.encode()) > (
                self.metadata_max_bytes
            ):
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                errors.append(ErrorCode.none)
                accepted.append((len(errors) - 1, entry))
        return errors, accepted

    # -- transactional offset commits -------------------------------------------------------


    async def commit_txn_offsets(
        self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
        generation_id: int, entries: list[OffsetCommitEntry],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: validate like OffsetCommit, append durably as part of the
        producer's transaction; visible to OffsetFetch once the transaction commits."""
        if not group_id:
            return [ErrorCode.invalid_group_id] * len(entries)
        if self.consumers.has_group(group_id):  # the generation field is the member epoch
            error = self.consumers.validate_offset_commit(group_id, member_id, generation_id,
                                                          -1, transactional=True)
            if error != ErrorCode.none:
                return [error] * len(entries)
        elif member_id or generation_id >= 0:
            error = self.coordinator.validate_offset_commit(group_id, member_id, generation_id)
            if error != ErrorCode.none:
                return [error] * len(entries)
        errors, accepted = self._checked_entries(entries)
        if not accepted:
            return errors
        now = self.clock()
        values = [CommittedOffset(e.offset, e.leader_epoch, e.metadata or "", now, -1)
                  for _, e in accepted]
        records = [
            (encode_offset_key(OffsetKey(group_id, e.topic, e.partition)),
             encode_offset_value(v.to_value()), (), now)
            for (_, e), v in zip(accepted, values)
        ]
        batch = build_batch(records, producer_id=producer_id, producer_epoch=producer_epoch,
                            transactional=True)
        try:
            info = await self.broker.append_durably(OFFSETS_TOPIC, self.partition_of(group_id),
                                                    batch)
        except Exception as exc:
            code = _append_error_code(exc)
            log.warning("transactional offset commit of group %r failed: %s", group_id, exc)
            for index, _ in accepted:
                errors[index] = code
            return errors
        pending = self._txn_offsets.setdefault(producer_id, [])
        for i, ((_, entry), value) in enumerate(zip(accepted, values)):
            pending.append((group_id, (entry.topic, entry.partition), value,
                            info.first_offset + i))
        return errors

    def complete_txn(self, partition: int, producer_id: int, commit: bool,
                     marker_offset: int) -> None:
        """The transaction coordinator wrote a marker to ``__consumer_offsets-partition``."""
        self._settle_txn(partition, producer_id, commit)

    def _settle_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        pending = self._txn_offsets.get(producer_id)
        if not pending:
            return
        kept = []
        for group_id, tp, value, log_offset in pending:
            if self.partition_of(group_id) != partition:
                kept.append((group_id, tp, value, log_offset))
            elif commit:
                # the log order decides against plain commits of the same partition (Kafka)
                self._store(group_id, tp, value, log_offset)
        if kept:
            self._txn_offsets[producer_id] = kept
        else:
            del self._txn_offsets[producer_id]

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of the group with an offset commit in an open transaction (OffsetFetch
        with require_stable answers them UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        return {tp for entries in self._txn_offsets.values()
                for g, tp, *_ in entries if g == group_id}

    # -- effects and timers -----------------------------------------------------------------

    def _apply(self, effects: Iterable[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                waiter = effect.waiter
                if isinstance(waiter, _Waiter) and waiter.result is None:
                    waiter.result = effect.result
                    waiter.event.set()
            elif isinstance(effect, Persist):
                self._persist_group(effect.snapshot)
            elif isinstance(effect, Rebalanced):
                snap = effect.snapshot
                log.info("group %s: generation %d, protocol %s, leader %s, %d member(s)",
                         snap.group_id, snap.generation_id, snap.protocol_name, snap.leader_id,
                         len(snap.members))
        self._rearm.set()

    def _persist_group(self, snapshot: GroupSnapshot) -> None:
        value = encode_group_value(snapshot)
        self._append_nowait(snapshot.group_id, [(encode_group_key(GroupKey(snapshot.group_id)),
                                                 value)])

    def _append_nowait(self, group_id: str, kvs: list[tuple[bytes, bytes | None]]) -> None:
        """Append group records without waiting for the fsync (the next flush covers them)."""
        try:
            self.broker.append(OFFSETS_TOPIC, self.partition_of(group_id), self._batch(kvs))
        except KafkaStorageError as exc:  # a full or failing disk: storage health says so
            log.warning("could not write group metadata of %r: %s", group_id, exc)
        except Exception:
            log.exception("could not write group metadata of %r", group_id)

    def _batch(self, kvs: list[tuple[bytes, bytes | None]]) -> bytes:
        now = self.clock()
        return build_batch([(k, v, (), now) for k, v in kvs])

    async def _timer_loop(self) -> None:
        while True:
            self._rearm = trio.Event()
            deadlines = [d for d in (self.coordinator.next_deadline(),
                                     self.consumers.next_deadline()) if d is not None]
            deadline = min(deadlines, default=None)
            if deadline is None:
                await self._rearm.wait()
                continue
            delay_s = (deadline - self.clock()) / 1000
            if delay_s > 0:
                with trio.move_on_after(delay_s):
                    await self._rearm.wait()
                continue
            now = self.clock()
            self._apply(self.coordinator.advance(now))
            gone, records = self.consumers.advance(now)
            for group_id, member_id in gone:
                log.info("consumer group %s: member %s removed (session or rebalance timeout)",
                         group_id, member_id)
            self._append_consumer_records(gone, records)

    async def _park(self, waiter: _Waiter, effects: list[Effect], bound_ms: int, timeout_result):
        self._apply(effects)
        with trio.move_on_after(bound_ms / 1000 + _PARK_SAFETY_MARGIN_S):
            await waiter.event.wait()
        if waiter.result is None:
            log.error("a parked group request outlived every timeout; answering it anyway")
            waiter.result = timeout_result
        return waiter.result

    # -- group membership -------------------------------------------------------------------

    async def join(self, request: JoinRequest) -> JoinResult:
        waiter = _Waiter()
        effects = self.coordinator.join_group(self.clock(), waiter, request)
        bound = max(request.rebalance_timeout_ms, request.session_timeout_ms,
                    self.config.initial_rebalance_delay_ms) * 2
        return await self._park(
            waiter, effects, bound, JoinResult(ErrorCode.rebalance_in_progress, request.member_id)
        )

    async def sync(self, request: SyncRequest) -> SyncResult:
        waiter = _Waiter()
        effects = self.coordinator.sync_group(self.clock(), waiter, request)
        snapshot = self.coordinator.snapshot(request.group_id)
        bound = max(
            [m.rebalance_timeout_ms for m in snapshot.members] if snapshot else [0], default=0
        ) + max([m.session_timeout_ms for m in snapshot.members] if snapshot else [0], default=0)
        return await self._park(waiter, effects, bound, SyncResult(ErrorCode.rebalance_in_progress))

    def heartbeat(self, group_id: str, member_id: str, generation_id: int,
                  group_instance_id: str | None = None) -> ErrorCode:
        error = self.coordinator.heartbeat(self.clock(), group_id, member_id, generation_id,
                                           group_instance_id)
        self._rearm.set()
        return error

    def leave(self, group_id: str, member_ids: list[str],
              instance_ids: list[str | None] | None = None) -> tuple[ErrorCode, list[ErrorCode]]:
        top, errors, effects = self.coordinator.leave_group(self.clock(), group_id, member_ids,
                                                            instance_ids)
        self._apply(effects)
        return top, errors

    # -- consumer groups (KIP-848) ----------------------------------------------------------

    def topic_images(self) -> dict[str, TopicImage]:
        return {name: TopicImage(info.topic_id, info.partitions)
                for name, info in self.broker.log_manager.topics().items()}

    def is_consumer_group(self, group_id: str) -> bool:
        return self.consumers.has_group(group_id)

    async def consumer_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        """ConsumerGroupHeartbeat: the state change is durable before it is answered."""
        group_id = request.group_id
        snapshot = self.coordinator.snapshot(group_id)
        if snapshot is not None and not self.consumers.has_group(group_id):
            if snapshot.members:
                # Kafka's answer with group.consumer.migration.policy=disabled: no online
                # upgrade of a live classic group
                return HeartbeatResult(
                    ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group")
            if request.member_epoch == 0:
                # an empty classic group (offsets only) becomes a consumer group, as in Kafka
                self.coordinator.delete_group(group_id, self.clock())
                self._append_nowait(group_id, [(encode_group_key(GroupKey(group_id)), None)])
        result, records = self.consumers.heartbeat(self.clock(), request, self.topic_images())
        self._rearm.set()
        if records:
            try:
                await self.broker.append_durably(OFFSETS_TOPIC, self.partition_of(group_id),
                                                 self._batch(records))
            except Exception as exc:
                log.warning("consumer group %r: state not written: %s", group_id, exc)
                return HeartbeatResult(_append_error_code(exc), str(exc))
        return result

    def _append_consumer_records(self, gone, records) -> None:
        by_group: dict[str, list] = {}
        for key, value in records:
            by_group.setdefault(consumer_records.decode_key(key).group_id, []).append(
                (key, value))
        for group_id, kvs in by_group.items():
            self._append_nowait(group_id, kvs)

    def claim_for_classic(self, group_id: str) -> bool:
        """A classic JoinGroup for ``group_id``: False if a non-empty consumer group has it;
        an empty one is dropped (Kafka converts an empty consumer group to a classic one)."""
        if not self.consumers.has_group(group_id):
            return True
        if not self.consumers.is_empty(group_id):
            return False
        self._append_nowait(group_id, self.consumers.delete_records(group_id))
        return True

    def describe_consumer_group(self, group_id: str) -> ConsumerGroupSnapshot | None:
        return self.consumers.snapshot(group_id)

    def validate_offset_fetch(self, group_id: str, member_id: str | None,
                              member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member of a consumer group: its epoch must be current."""
        if not self.consumers.has_group(group_id):
            return ErrorCode.none
        return self.consumers.validate_offset_fetch(group_id, member_id, member_epoch)

    # -- offsets ----------------------------------------------------------------------------

    async def commit_offsets(
        self, group_id: str, member_id: str, generation_id: int,
        entries: list[OffsetCommitEntry], *, retention_ms: int = -1,
        group_instance_id: str | None = None, api_version: int = 9,
    ) -> list[ErrorCode]:
        """Validate, append durably, then apply; one error per entry, in order.

        ``retention_ms`` (OffsetCommit v2-v4's retention time, -1 = broker default) gives
        the offsets an explicit expire timestamp.
        """
        if not group_id:
            return [ErrorCode.invalid_group_id] * len(entries)
        consumer_group = self.consumers.has_group(group_id)
        if consumer_group:  # the generation field carries the member epoch (v9+)
            error = self.consumers.validate_offset_commit(group_id, member_id, generation_id,
                                                          api_version)
        else:
            error = self.coordinator.validate_offset_commit(group_id, member_id, generation_id,
                                                            group_instance_id)
        if error != ErrorCode.none:
            return [error] * len(entries)
        now = self.clock()
        errors, accepted = self._checked_entries(entries)
        if not accepted:
            return errors
        expire = now + retention_ms if retention_ms >= 0 else -1
        values = [
            CommittedOffset(e.offset, e.leader_epoch, e.metadata or "", now, expire)
            for _, e in accepted
        ]
        kvs = [
            (encode_offset_key(OffsetKey(group_id, e.topic, e.partition)),
             encode_offset_value(v.to_value()))
            for (_, e), v in zip(accepted, values)
        ]
        try:
            info = await self.broker.append_durably(
                OFFSETS_TOPIC, self.partition_of(group_id), self._batch(kvs)
            )
        except Exception as exc:
            code = _append_error_code(exc)
            log.warning("offset commit of group %r failed: %s", group_id, exc)
            for index, _ in accepted:
                errors[index] = code
            return errors
        if not consumer_group:
            self.coordinator.note_offset_commit(self.clock(), group_id, member_id)
        self._rearm.set()
        for i, ((_, entry), value) in enumerate(zip(accepted, values)):
            self._store(group_id, (entry.topic, entry.partition), value, info.first_offset + i)
        return errors

    def _store(self, group_id: str, tp: TopicPartition, value: CommittedOffset | None,
               log_offset: int) -> None:
        key = (group_id, *tp)
        if self._applied_at.get(key, -1) > log_offset:
            return  # a newer record for this partition was already applied
        self._applied_at[key] = log_offset
        self.offsets.put(group_id, tp, value)

    def fetch_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> dict[TopicPartition, FetchedOffset]:
        """Committed offsets; partitions=None means every partition the group committed."""
        stored = self.offsets.offsets(group_id)
        wanted = sorted(stored) if partitions is None else partitions
        out = {}
        for tp in wanted:
            committed = stored.get(tp)
            if committed is None:
                out[tp] = FetchedOffset(-1, -1, "")
            else:
                out[tp] = FetchedOffset(
                    committed.offset, committed.leader_epoch, committed.metadata
                )
        return out

    # -- administration ---------------------------------------------------------------------

    def group_ids(self) -> list[str]:
        return sorted(set(self.coordinator.group_ids()) | set(self.offsets.group_ids())
                      | set(self.consumers.group_ids()))

    def describe(self, group_id: str) -> GroupSnapshot | None:
        return self.coordinator.snapshot(group_id)

    async def delete_group(self, group_id: str) -> ErrorCode:
        tombstones: list[tuple[bytes, bytes | None]] = []
        if self.consumers.has_group(group_id):
            error, tombstones = self.consumers.delete_group(group_id)
        else:
            error = self.coordinator.delete_group(group_id, self.clock())
        if error == ErrorCode.group_id_not_found and self.offsets.has_offsets(group_id):
            error = ErrorCode.none  # offsets without a group (replayed from an old log)
        if error != ErrorCode.none:
            return error
        self._rearm.set()
        partitions = self.offsets.drop_group(group_id)
        kvs: list[tuple[bytes, bytes | None]] = [
            (encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in partitions
        ]
        kvs.append((encode_group_key(GroupKey(group_id)), None))
        kvs += tombstones
        try:
            await self.broker.append_durably(
                OFFSETS_TOPIC, self.partition_of(group_id), self._batch(kvs)
            )
        except Exception as exc:
            log.warning("tombstones of deleted group %r not written: %s", group_id, exc)
            return _append_error_code(exc)
        return ErrorCode.none

    async def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """OffsetDelete: only for an empty group or topics no member subscribes to."""
        snapshot = self.coordinator.snapshot(group_id)
        if (snapshot is None and not self.offsets.has_offsets(group_id)
                and not self.consumers.has_group(group_id)):
            return ErrorCode.group_id_not_found, {}
        results: dict[TopicPartition, ErrorCode] = {}
        subscribed: set[str] = set()
        if snapshot is not None and snapshot.members:
            if snapshot.protocol_type != consumer_protocol.PROTOCOL_TYPE:
                return ErrorCode.non_empty_group, {}
            subscribed = self.coordinator.subscribed_topics(group_id, _subscribed_topics)
        elif not self.consumers.is_empty(group_id):
            subscribed = self.consumers.subscribed_topics(group_id)
        deletable = []
        for tp in partitions:
            if tp[0] in subscribed:
                results[tp] = ErrorCode.group_subscribed_to_topic
            else:
                results[tp] = ErrorCode.none
                if self.offsets.get(group_id, tp) is not None:
                    deletable.append(tp)
        if deletable:
            kvs = [(encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in deletable]
            try:
                info = await self.broker.append_durably(
                    OFFSETS_TOPIC, self.partition_of(group_id), self._batch(kvs)
                )
            except Exception as exc:
                return _append_error_code(exc), {}
            for i, tp in enumerate(deletable):
                self._store(group_id, tp, None, info.first_offset + i)
        return ErrorCode.none, results

    # -- expiry -----------------------------------------------------------------------------

    async def _expiry_loop(self) -> None:
        while True:
            await trio.sleep(self.retention_check_interval_ms / 1000)
            try:
                self.expire_offsets(self.clock())
            except Exception:
                log.exception("offset expiration failed; will retry next interval")

    def expire_offsets(self, now_ms: int) -> tuple[int, int]:
        """Drop expired offsets and forgotten empty groups; returns (offsets, groups) removed.

        Tombstones are appended without waiting for the fsync: losing one in a crash only
        means the offset expires again after restart.
        """
        removed_offsets = removed_groups = 0
        for group_id in self.group_ids():
            if self.consumers.has_group(group_id):
                if not self.consumers.is_empty(group_id):
                    continue  # a live consumer group keeps its offsets
                snapshot = None
            else:
                snapshot = self.coordinator.snapshot(group_id)
            subscribed = None
            if snapshot is not None and snapshot.state is GroupState.STABLE:
                subscribed = self.coordinator.subscribed_topics(group_id, _subscribed_topics)
            expired = self.offsets.expired(group_id, snapshot, subscribed, now_ms,
                                           self.retention_ms)
            kvs: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(OffsetKey(group_id, t, p)), None) for t, p in expired
            ]
            for tp in expired:
                self.offsets.put(group_id, tp, None)
                self._applied_at.pop((group_id, *tp), None)
            removed_offsets += len(expired)
            if not self.offsets.has_offsets(group_id) and self.consumers.has_group(group_id):
                kvs += self.consumers.delete_records(group_id)
                removed_groups += 1
            elif not self.offsets.has_offsets(group_id) and (
                snapshot is None or self.coordinator.expire_if_empty(group_id, now_ms)
            ):
                kvs.append((encode_group_key(GroupKey(group_id)), None))
                removed_groups += 1
            if kvs:
                self._append_nowait(group_id, kvs)
        if removed_offsets or removed_groups:
            log.info("removed %d expired offsets and %d empty groups", removed_offsets,
                     removed_groups)
        self._rearm.set()
        return removed_offsets, removed_groups


def _append_error_code(exc: BaseException) -> ErrorCode:
    """Kafka's mapping of a failed __consumer_offsets write to a commit error."""
    from databus.broker.errors import error_code_for

    try:
        code = error_code_for(exc)
    except Exception:
        return ErrorCode.unknown_server_error
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.invalid_commit_offset_size
    if code == ErrorCode.unknown_topic_or_partition:
        return ErrorCode.coordinator_not_available
    return code
