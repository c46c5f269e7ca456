"""The share-partition state machine: THIS module owns the delivery state of the records of
one share group on one topic-partition (KIP-932); nothing else changes it.

Sans-I/O: no trio, no sockets, no log reads.  The clock is passed in as ``now_ms``; the
caller reads batches from the log and hands their offset ranges to ``acquire``.

    SPSO                                      SPEO
     │ ACK ARCH ACQ AVAIL ACQ ACK ...          │ not yet delivered (all AVAILABLE)
     └──────────── in flight ──────────────────┘

Every offset below the share-partition start offset (SPSO) is done.  Offsets in
[SPSO, SPEO) are *in flight*, each in one of four states:

    AVAILABLE ──acquire (delivery count +1, lock starts)──▶ ACQUIRED
    ACQUIRED ──ACCEPT──▶ ACKNOWLEDGED                       (final)
    ACQUIRED ──REJECT / GAP──▶ ARCHIVED                     (final)
    ACQUIRED ──RELEASE / lock expiry / member gone──▶ AVAILABLE,
                      or ARCHIVED once the delivery count reached the limit

SPSO moves over the leading run of final states; acquiring a record at or past SPEO moves
SPEO.  New records are acquired only while SPEO - SPSO stays within
``max_record_locks`` (``group.share.partition.max.record.locks``), which bounds this
module's memory: state is kept per offset over that window (Kafka keeps it per batch and
splits batches when acknowledgements differ; with the window bounded, per-offset arrays are
simpler and as small).

Offsets the log has no record for (removed by compaction, or between batches) are gaps:
when acquisition skips over them they are ARCHIVED at once; inside an acquired batch the
client acknowledges them with GAP.  Control batches are passed in as gaps by the caller.

``dirty`` says the durable state (``snapshot()``) changed since it was last taken: every
transition but acquisition makes it dirty, so acquisition costs no write and a crash makes
acquired records AVAILABLE again with the delivery count last written (Kafka's rule).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from databus.protocol.errors import ErrorCode


class RecordState(IntEnum):
    """Kafka's RecordState ids (the numbers persisted in share state batches)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


FINAL_STATES = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (RENEW is v2, not served)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


# Kafka's group.share.* broker defaults (GroupCoordinatorConfig / ShareGroupConfig).
DEFAULT_RECORD_LOCK_DURATION_MS = 30_000
DEFAULT_DELIVERY_COUNT_LIMIT = 5
DEFAULT_MAX_RECORD_LOCKS = 2000


@dataclass(frozen=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = DEFAULT_RECORD_LOCK_DURATION_MS
    delivery_count_limit: int = DEFAULT_DELIVERY_COUNT_LIMIT
    max_record_locks: int = DEFAULT_MAX_RECORD_LOCKS


@dataclass(frozen=True)
class AcquiredRange:
    """Records acquired by one fetch: ShareFetch's ``acquired_records`` entry."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class StateBatch:
    """A run of in-flight offsets in one state with one delivery count: what is persisted."""

    first_offset: int
    last_offset: int
    state: RecordState
    delivery_count: int


def _add_run(runs: list[AcquiredRange], first: int, last: int, count: int) -> None:
    """Append an acquired run, merged into the previous one when contiguous and alike."""
    if runs and runs[-1].last_offset == first - 1 and runs[-1].delivery_count == count:
        runs[-1] = AcquiredRange(runs[-1].first_offset, last, count)
    else:
        runs.append(AcquiredRange(first, last, count))


class SharePartition:
    """The in-flight records of one (share group, topic, partition)."""

    def __init__(self, start_offset: int, config: SharePartitionConfig | None = None,
                 batches: Iterable[StateBatch] = ()) -> None:
        """Start at ``start_offset`` (from ``share.auto.offset.reset`` or the durable state)
        with the persisted in-flight ``batches`` (ACQUIRED ones come back AVAILABLE)."""
        self.config = config or SharePartitionConfig()
        self.start_offset = start_offset
        # parallel arrays indexed by offset - start_offset, covering [SPSO, SPEO)
        self._state: list[RecordState] = []
        self._count: list[int] = []
        self._owner: list[str | None] = []
        self._deadline: list[int] = []
        # heap of (deadline, first, last) per acquired run; entries are checked lazily
        # (the records may have been acknowledged or re-acquired since)
        self._locks: list[tuple[int, int, int]] = []
        self.dirty = False
        for batch in sorted(batches, key=lambda b: b.first_offset):
            if batch.last_offset < self.start_offset:
                continue
            first = max(batch.first_offset, self.start_offset)
            self._extend_to(first, RecordState.AVAILABLE)
            state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
            for _ in range(max(first, self.end_offset), batch.last_offset + 1):
                self._append(state, batch.delivery_count)
        self._advance_start()

    # -- offsets ---------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: one past the last offset ever acquired (or skipped as a gap)."""
        return self.start_offset + len(self._state)

    def next_fetch_offset(self) -> int:
        """Where the next log read should start: the first AVAILABLE in-flight offset, else
        SPEO."""
        for i, state in enumerate(self._state):
            if state is RecordState.AVAILABLE:
                return self.start_offset + i
        return self.end_offset

    def can_acquire_new(self) -> bool:
        """Whether the in-flight window has room for records at SPEO."""
        return len(self._state) < self.config.max_record_locks

    def has_available(self) -> bool:
        """Whether acquire could return something without new log data."""
        return RecordState.AVAILABLE in self._state

    def state_of(self, offset: int) -> tuple[RecordState, int, str | None]:
        """(state, delivery count, owner) of ``offset``; below SPSO it reports ARCHIVED-or-
        ACKNOWLEDGED history as ACKNOWLEDGED (done), at or past SPEO AVAILABLE, count 0."""
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED, 0, None
        i = offset - self.start_offset
        if i >= len(self._state):
            return RecordState.AVAILABLE, 0, None
        return self._state[i], self._count[i], self._owner[i]

    def in_flight(self) -> int:
        return len(self._state)

    def done_in_flight(self) -> int:
        """In-flight offsets already acknowledged or archived (above a record not done)."""
        return sum(1 for state in self._state if state in FINAL_STATES)

    def acquired_by(self, member_id: str) -> int:
        return sum(1 for owner in self._owner if owner == member_id)

    # -- acquisition -----------------------------------------------------------------------

    def acquire(self, member_id: str, batches: Sequence[tuple[int, int]], now_ms: int,
                max_records: int, gaps: Sequence[tuple[int, int]] = ()) -> list[AcquiredRange]:
        """Acquire for ``member_id`` up to ``max_records`` AVAILABLE offsets among the
        ``batches`` (first, last) read from the log in order, lowest first.

        ``max_records`` is a hard limit, even inside a batch (Kafka's ``record_limit``
        acquire mode; the client delivers only the acquired ranges of a returned batch).
        Kafka's default acquires whole batches, but librdkafka producers write batches of
        up to 1 MB: one member would take a whole window of records and leave the others
        idle, where a share group is meant to spread them.

        Offsets at or past SPEO that no batch covers, up to the first offset acquired past
        SPEO, are gaps and are ARCHIVED; so are the ranges in ``gaps`` (control batches).
        Returns the acquired runs, each with one delivery count.
        """
        gap_set = sorted(gaps)
        acquired: list[AcquiredRange] = []
        taken = 0
        deadline = now_ms + self.config.record_lock_duration_ms
        for first, last in sorted(batches):
            if taken >= max_records:
                break
            if last < self.start_offset:
                continue
            first = max(first, self.start_offset)
            if first > self.end_offset:
                if not self._room_for(first):
                    break
                self._extend_to(first, RecordState.ARCHIVED)  # nothing in the log there
            is_gap = any(g_first <= first and last <= g_last for g_first, g_last in gap_set)
            # the part already in flight, offset by offset (released records come back)
            if not is_gap:
                for offset in range(first, min(last + 1, self.end_offset)):
                    i = offset - self.start_offset
                    if taken >= max_records:
                        break
                    if self._state[i] is RecordState.AVAILABLE:
                        self._state[i] = RecordState.ACQUIRED
                        self._count[i] += 1
                        self._owner[i] = member_id
                        self._deadline[i] = deadline
                        taken += 1
                        _add_run(acquired, offset, offset, self._count[i])
            # the part past SPEO: records never delivered, taken in bulk while the window
            # has room
            if last >= self.end_offset and taken < max_records:
                wanted = last + 1 - self.end_offset
                room = self.config.max_record_locks - len(self._state)
                n = min(wanted, room, max_records - taken)
                if n > 0:
                    new_first = self.end_offset
                    if is_gap:
                        self._extend(n, RecordState.ARCHIVED, 0, None, 0)
                        self.dirty = True
                    else:
                        self._extend(n, RecordState.ACQUIRED, 1, member_id, deadline)
                        taken += n
                        _add_run(acquired, new_first, new_first + n - 1, 1)
                if n < wanted and n == room:
                    break  # the window is full
        for run in acquired:
            heapq.heappush(self._locks, (deadline, run.first_offset, run.last_offset))
        self._advance_start()
        return acquired

    def _extend(self, n: int, state: RecordState, count: int, owner: str | None,
                deadline: int) -> None:
        self._state.extend([state] * n)
        self._count.extend([count] * n)
        self._owner.extend([owner] * n)
        self._deadline.extend([deadline] * n)

    def _room_for(self, offset: int) -> bool:
        return offset - self.start_offset < self.config.max_record_locks

    def _append(self, state: RecordState, count: int) -> None:
        self._state.append(state)
        self._count.append(count)
        self._owner.append(None)
        self._deadline.append(0)

    def _extend_to(self, offset: int, state: RecordState) -> None:
        while self.end_offset < offset:
            self._append(state, 0)
            if state is RecordState.ARCHIVED:
                self.dirty = True

    # -- acknowledgement -------------------------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int,
                    types: Sequence[int]) -> ErrorCode:
        """Apply one acknowledgement batch of ``member_id``: one type for the whole range or
        one per offset.  All or nothing: if any offset is not ACQUIRED by this member the
        batch is INVALID_RECORD_STATE and changes nothing."""
        if last < first or not types or len(types) not in (1, last - first + 1):
            return ErrorCode.invalid_request
        if any(t not in (AcknowledgeType.GAP, AcknowledgeType.ACCEPT,
                         AcknowledgeType.RELEASE, AcknowledgeType.REJECT) for t in types):
            return ErrorCode.invalid_request
        if first < self.start_offset or last >= self.end_offset:
            return ErrorCode.invalid_record_state
        base, end = first - self.start_offset, last - self.start_offset + 1
        n = end - base
        if self._state[base:end].count(RecordState.ACQUIRED) != n or (
            self._owner[base:end].count(member_id) != n
        ):
            return ErrorCode.invalid_record_state
        if len(types) == 1 and types[0] != AcknowledgeType.RELEASE:
            # one final state for the whole range: in bulk
            final = (RecordState.ACKNOWLEDGED if types[0] == AcknowledgeType.ACCEPT
                     else RecordState.ARCHIVED)
            self._state[base:end] = [final] * n
            self._owner[base:end] = [None] * n
            self.dirty = True
        else:
            for k, i in enumerate(range(base, end)):
                kind = types[0] if len(types) == 1 else types[k]
                if kind == AcknowledgeType.ACCEPT:
                    self._finish(i, RecordState.ACKNOWLEDGED)
                elif kind == AcknowledgeType.RELEASE:
                    self._release(i)
                else:  # REJECT, GAP
                    self._finish(i, RecordState.ARCHIVED)
        self._advance_start()
        return ErrorCode.none

    def release_member(self, member_id: str) -> int:
        """Every record ``member_id`` holds goes back (its session closed, it left or was
        removed): the number released."""
        released = 0
        for i, owner in enumerate(self._owner):
            if owner == member_id and self._state[i] is RecordState.ACQUIRED:
                self._release(i)
                released += 1
        self._advance_start()
        return released

    def _finish(self, i: int, state: RecordState) -> None:
        self._state[i] = state
        self._owner[i] = None
        self.dirty = True

    def _release(self, i: int) -> None:
        """Back to AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if self._count[i] >= self.config.delivery_count_limit:
            self._finish(i, RecordState.ARCHIVED)
        else:
            self._finish(i, RecordState.AVAILABLE)

    # -- locks -----------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        """When the earliest acquisition lock may expire (None without locks)."""
        while self._locks:
            deadline, first, last = self._locks[0]
            if any(self._locked(i, deadline) for i in self._indexes(first, last)):
                return deadline
            heapq.heappop(self._locks)
        return None

    def _indexes(self, first: int, last: int) -> range:
        return range(max(first - self.start_offset, 0),
                     min(last - self.start_offset + 1, len(self._state)))

    def _locked(self, i: int, deadline: int) -> bool:
        return self._state[i] is RecordState.ACQUIRED and self._deadline[i] == deadline

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock expired by ``now_ms``: the number released."""
        expired = 0
        while self._locks and self._locks[0][0] <= now_ms:
            deadline, first, last = heapq.heappop(self._locks)
            for i in self._indexes(first, last):
                if self._locked(i, deadline):
                    self._release(i)
                    expired += 1
        if expired:
            self._advance_start()
        return expired

    # -- start offset ----------------------------------------------------------------------

    def _advance_start(self) -> None:
        n = 0
        states = self._state
        while n < len(states) and (states[n] is RecordState.ACKNOWLEDGED
                                   or states[n] is RecordState.ARCHIVED):
            n += 1
        if n:
            del self._state[:n], self._count[:n], self._owner[:n], self._deadline[:n]
            self.start_offset += n
            self.dirty = True

    def move_start(self, offset: int) -> None:
        """The log start moved past SPSO (retention): offsets below ``offset`` are gone,
        the in-flight states above it are kept."""
        if offset <= self.start_offset:
            return
        drop = min(offset - self.start_offset, len(self._state))
        del self._state[:drop], self._count[:drop], self._owner[:drop], self._deadline[:drop]
        self.start_offset = offset
        self.dirty = True
        self._advance_start()

    def reset_start(self, offset: int) -> None:
        """AlterShareGroupOffsets (a group without members): start afresh at ``offset``,
        every in-flight state and delivery count forgotten."""
        self._state, self._count, self._owner, self._deadline = [], [], [], []
        self._locks = []
        self.start_offset = offset
        self.dirty = True

    # -- durable state ---------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """(SPSO, runs of in-flight states) as persisted; ACQUIRED is written AVAILABLE, so
        after a crash those records are delivered again with the count written here.
        Clears ``dirty``."""
        runs: list[StateBatch] = []
        offset = self.start_offset
        written = (RecordState.AVAILABLE if state is RecordState.ACQUIRED else state
                   for state in self._state)
        for (state, count), run in itertools.groupby(zip(written, self._count)):
            n = sum(1 for _ in run)
            runs.append(StateBatch(offset, offset + n - 1, state, count))
            offset += n
        # trailing never-delivered AVAILABLE offsets need no record: past SPEO is the same
        while runs and runs[-1].state is RecordState.AVAILABLE and runs[-1].delivery_count == 0:
            runs.pop()
        self.dirty = False
        return self.start_offset, runs
