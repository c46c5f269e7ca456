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
``max_record_locks`` (``group.share.partition.max.record.locks``).  State is kept per run
of alike offsets (same state, delivery count, owner and lock), as Kafka keeps it per
in-flight batch: a fetch of 500 records is one run, accepting them all turns it final in
one step, and a run is split only where acknowledgements differ (and joined again when its
parts become alike).  So the cost of a fetch, an acknowledgement, a lock expiry or a
snapshot follows the number of runs, not of records.

Offsets the log has no record for (removed by compaction, or between batches) are gaps:
when acquisition skips over them they are ARCHIVED at once; inside an acquired batch the
client acknowledges them with GAP.  Control batches are passed in as gaps by the caller.

``dirty`` says the durable state (``snapshot()``) changed since it was last taken: every
transition but acquisition makes it dirty, so acquisition costs no write and a crash makes
acquired records AVAILABLE again with the delivery count last written (Kafka's rule).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum

from databus.protocol.errors import ErrorCode
from databus.protocol.internal_records.share_batches import RecordState, StateBatch

FINAL_STATES = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (RENEW from v2, KIP-1222)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


_SETTLE_TYPES = frozenset((AcknowledgeType.GAP, AcknowledgeType.ACCEPT,
                           AcknowledgeType.RELEASE, AcknowledgeType.REJECT))
_RENEW_TYPES = _SETTLE_TYPES | {AcknowledgeType.RENEW}

# why records were archived, for a dead-letter topic (share/dlq.py's DeadReason)
DEAD_REJECTED = 0
DEAD_DELIVERY_COUNT = 1

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


def _add_run(runs: list[AcquiredRange], first: int, last: int, count: int) -> None:
    """Append an acquired run, merged into the previous one when contiguous and alike."""
    if runs and runs[-1].last_offset == first - 1 and runs[-1].delivery_count == count:
        runs[-1] = AcquiredRange(runs[-1].first_offset, last, count)
    else:
        runs.append(AcquiredRange(first, last, count))


class _Run:
    """Offsets first..last that are alike: one state, delivery count, owner and lock
    deadline (Kafka's InFlightBatch, split where records come to differ)."""

    __slots__ = ("count", "deadline", "first", "last", "owner", "state")

    def __init__(self, first: int, last: int, state: RecordState, count: int,
                 owner: str | None = None, deadline: int = 0) -> None:
        self.first, self.last, self.state = first, last, state
        self.count, self.owner, self.deadline = count, owner, deadline

    def alike(self, other: _Run) -> bool:
        return (self.state is other.state and self.count == other.count
                and self.owner == other.owner and self.deadline == other.deadline)

    def __repr__(self) -> str:
        return (f"_Run({self.first}-{self.last} {self.state.name} x{self.count} "
                f"{self.owner} {self.deadline})")


def _first_of(run: _Run) -> int:
    return run.first


class SharePartition:
    """The in-flight records of one (share group, topic, partition)."""

    def __init__(self, start_offset: int, config: SharePartitionConfig | None = None,
                 batches: Iterable[StateBatch] = ()) -> None:
        """Start at ``start_offset`` (from ``share.auto.offset.reset`` or the durable state)
        with the persisted in-flight ``batches`` (ACQUIRED ones come back AVAILABLE)."""
        self.config = config or SharePartitionConfig()
        self.start_offset = start_offset
        # runs of alike offsets covering [SPSO, SPEO) in order, without holes
        self._runs: list[_Run] = []
        # heap of (deadline, first, last) per acquired run; entries are checked lazily
        # (the records may have been acknowledged or re-acquired since)
        self._locks: list[tuple[int, int, int]] = []
        self.dirty = False
        # (first, last, delivery count, reason) of records archived by a REJECT or by the
        # delivery count limit, while the group has a dead-letter topic (KIP-1191): the
        # caller takes them with ``take_dead``; None: not collected
        self.dead: list[tuple[int, int, int, int]] | None = None
        for batch in sorted(batches, key=lambda b: b.first_offset):
            if batch.last_offset < self.start_offset:
                continue
            first = max(batch.first_offset, self.start_offset)
            self._extend_to(first, RecordState.AVAILABLE)
            state = RecordState.AVAILABLE if batch.state is RecordState.ACQUIRED else batch.state
            first = max(first, self.end_offset)
            if batch.last_offset >= first:
                self._append(first, batch.last_offset, state, batch.delivery_count)
        self._advance_start()

    # -- offsets ---------------------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        """SPEO: one past the last offset ever acquired (or skipped as a gap)."""
        runs = self._runs
        return runs[-1].last + 1 if runs else self.start_offset

    def next_fetch_offset(self) -> int:
        """Where the next log read should start: the first AVAILABLE in-flight offset, else
        SPEO."""
        for run in self._runs:
            if run.state is RecordState.AVAILABLE:
                return run.first
        return self.end_offset

    def can_acquire_new(self) -> bool:
        """Whether the in-flight window has room for records at SPEO."""
        return self.end_offset - self.start_offset < self.config.max_record_locks

    def has_available(self) -> bool:
        """Whether acquire could return something without new log data."""
        return any(run.state is RecordState.AVAILABLE for run in self._runs)

    def state_of(self, offset: int) -> tuple[RecordState, int, str | None]:
        """(state, delivery count, owner) of ``offset``; below SPSO it reports ARCHIVED-or-
        ACKNOWLEDGED history as ACKNOWLEDGED (done), at or past SPEO AVAILABLE, count 0."""
        if offset < self.start_offset:
            return RecordState.ACKNOWLEDGED, 0, None
        if offset >= self.end_offset:
            return RecordState.AVAILABLE, 0, None
        run = self._runs[self._index(offset)]
        return run.state, run.count, run.owner

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    def done_in_flight(self) -> int:
        """In-flight offsets already acknowledged or archived (above a record not done)."""
        return sum(run.last - run.first + 1 for run in self._runs if run.state in FINAL_STATES)

    def acquired_by(self, member_id: str) -> int:
        return sum(run.last - run.first + 1 for run in self._runs
                   if run.owner == member_id and run.state is RecordState.ACQUIRED)

    # -- runs ------------------------------------------------------------------------------

    def _index(self, offset: int) -> int:
        """Index of the run holding ``offset`` (SPSO <= offset < SPEO)."""
        return bisect.bisect_right(self._runs, offset, key=_first_of) - 1

    def _split(self, offset: int) -> int:
        """Make a run start at ``offset`` (SPSO <= offset <= SPEO); its index."""
        runs = self._runs
        if offset >= self.end_offset:
            return len(runs)
        i = self._index(offset)
        run = runs[i]
        if run.first == offset:
            return i
        runs.insert(i + 1, _Run(offset, run.last, run.state, run.count, run.owner,
                                run.deadline))
        run.last = offset - 1
        return i + 1

    def _span(self, first: int, last: int) -> tuple[int, int]:
        """Split so that runs[i:j] cover exactly first..last (in flight); (i, j)."""
        i = self._split(first)
        return i, self._split(last + 1)

    def _merge(self, lo: int = 0, hi: int | None = None) -> None:
        """Join alike neighbours among runs[lo:hi] and the runs next to them."""
        runs = self._runs
        k = max(lo - 1, 0)
        end = len(runs) if hi is None else min(hi + 1, len(runs))
        while k < end - 1:
            a, b = runs[k], runs[k + 1]
            if a.alike(b):
                a.last = b.last
                del runs[k + 1]
                end -= 1
            else:
                k += 1

    def _append(self, first: int, last: int, state: RecordState, count: int,
                owner: str | None = None, deadline: int = 0) -> None:
        run = _Run(first, last, state, count, owner, deadline)
        runs = self._runs
        if runs and runs[-1].alike(run):
            runs[-1].last = last
        else:
            runs.append(run)

    def _room_for(self, offset: int) -> bool:
        return offset - self.start_offset < self.config.max_record_locks

    def _extend_to(self, offset: int, state: RecordState) -> None:
        end = self.end_offset
        if end < offset:
            self._append(end, offset - 1, state, 0)
            if state is RecordState.ARCHIVED:
                self.dirty = True

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
            # the part already in flight, run by run (released records come back)
            end = self.end_offset
            if not is_gap and first < end:
                taken = self._acquire_in_flight(member_id, first, min(last, end - 1),
                                                deadline, max_records, taken, acquired)
            # the part past SPEO: records never delivered, taken in bulk while the window
            # has room
            end = self.end_offset
            if last >= end and taken < max_records:
                wanted = last + 1 - end
                room = self.config.max_record_locks - (end - self.start_offset)
                n = min(wanted, room, max_records - taken)
                if n > 0:
                    if is_gap:
                        self._append(end, end + n - 1, RecordState.ARCHIVED, 0)
                        self.dirty = True
                    else:
                        self._append(end, end + n - 1, RecordState.ACQUIRED, 1, member_id,
                                     deadline)
                        taken += n
                        _add_run(acquired, end, end + n - 1, 1)
                if n < wanted and n == room:
                    break  # the window is full
        for run in acquired:
            heapq.heappush(self._locks, (deadline, run.first_offset, run.last_offset))
        self._advance_start()
        return acquired

    def _acquire_in_flight(self, member_id: str, first: int, last: int, deadline: int,
                           max_records: int, taken: int, acquired: list[AcquiredRange]) -> int:
        """Acquire the AVAILABLE offsets of first..last (in flight), lowest first, while
        ``taken`` < ``max_records``; the new ``taken``."""
        runs = self._runs
        k = self._index(first)
        lo = k
        pos = first
        while pos <= last and taken < max_records and k < len(runs):
            run = runs[k]
            if run.state is not RecordState.AVAILABLE:
                pos = run.last + 1
                k += 1
                continue
            a = max(run.first, pos)
            b = min(run.last, last, a + max_records - taken - 1)
            i, _ = self._span(a, b)
            run = runs[i]
            run.state, run.owner, run.deadline = RecordState.ACQUIRED, member_id, deadline
            run.count += 1
            taken += b - a + 1
            _add_run(acquired, a, b, run.count)
            pos, k = b + 1, i + 1
        self._merge(lo, k)
        return taken

    # -- acknowledgement -------------------------------------------------------------------

    def acknowledge(self, member_id: str, first: int, last: int,
                    types: Sequence[int], *, now_ms: int = 0,
                    renew: bool = False) -> ErrorCode:
        """Apply one acknowledgement batch of ``member_id``: one type for the whole range or
        one per offset.  All or nothing: if any offset is not ACQUIRED by this member the
        batch is INVALID_RECORD_STATE and changes nothing.  RENEW (KIP-1222, only when
        ``renew`` allows it) keeps the records ACQUIRED by the member with a new lock from
        ``now_ms``, delivery count unchanged."""
        if last < first or not types or len(types) not in (1, last - first + 1):
            return ErrorCode.invalid_request
        allowed = _RENEW_TYPES if renew else _SETTLE_TYPES
        if any(t not in allowed for t in types):
            return ErrorCode.invalid_request
        if first < self.start_offset or last >= self.end_offset:
            return ErrorCode.invalid_record_state
        runs = self._runs
        k = self._index(first)
        pos = first
        while pos <= last:
            run = runs[k]
            if run.state is not RecordState.ACQUIRED or run.owner != member_id:
                return ErrorCode.invalid_record_state
            pos = run.last + 1
            k += 1
        if len(types) == 1:
            self._settle(first, last, types[0], now_ms)
        else:
            # one call per stretch of equal types, so a batch of alike types stays a range
            offset = first
            for kind, group in itertools.groupby(types):
                n = sum(1 for _ in group)
                self._settle(offset, offset + n - 1, kind, now_ms)
                offset += n
        self._advance_start()
        return ErrorCode.none

    def _settle(self, first: int, last: int, kind: int, now_ms: int = 0) -> None:
        i, j = self._span(first, last)
        if kind == AcknowledgeType.RENEW:
            deadline = now_ms + self.config.record_lock_duration_ms
            for run in self._runs[i:j]:
                run.deadline = deadline
            heapq.heappush(self._locks, (deadline, first, last))
            self._merge(i, j)
            return
        for run in self._runs[i:j]:
            if kind == AcknowledgeType.ACCEPT:
                self._finish(run, RecordState.ACKNOWLEDGED)
            elif kind == AcknowledgeType.RELEASE:
                self._release(run)
            else:  # REJECT, GAP
                if kind == AcknowledgeType.REJECT and self.dead is not None:
                    self.dead.append((run.first, run.last, run.count, DEAD_REJECTED))
                self._finish(run, RecordState.ARCHIVED)
        self._merge(i, j)

    def release_member(self, member_id: str) -> int:
        """Every record ``member_id`` holds goes back (its session closed, it left or was
        removed): the number released."""
        released = 0
        for run in self._runs:
            if run.owner == member_id and run.state is RecordState.ACQUIRED:
                self._release(run)
                released += run.last - run.first + 1
        if released:
            self._merge()
        self._advance_start()
        return released

    def _finish(self, run: _Run, state: RecordState) -> None:
        run.state, run.owner, run.deadline = state, None, 0
        self.dirty = True

    def _release(self, run: _Run) -> None:
        """Back to AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if run.count >= self.config.delivery_count_limit:
            if self.dead is not None:
                self.dead.append((run.first, run.last, run.count, DEAD_DELIVERY_COUNT))
            self._finish(run, RecordState.ARCHIVED)
        else:
            self._finish(run, RecordState.AVAILABLE)

    def take_dead(self) -> list[tuple[int, int, int, int]]:
        """The dead letters collected since the last call (see ``dead``)."""
        dead = self.dead
        if not dead:
            return []
        self.dead = []
        return dead

    # -- locks -----------------------------------------------------------------------------

    def _clip(self, first: int, last: int) -> tuple[int, int]:
        return max(first, self.start_offset), min(last, self.end_offset - 1)

    def _locked_runs(self, first: int, last: int, deadline: int):
        """The runs of first..last still held under the lock that ends at ``deadline``."""
        first, last = self._clip(first, last)
        if first > last:
            return
        runs = self._runs
        k = self._index(first)
        while k < len(runs) and runs[k].first <= last:
            run = runs[k]
            if run.state is RecordState.ACQUIRED and run.deadline == deadline:
                yield k, run
            k += 1

    def next_deadline(self) -> int | None:
        """When the earliest acquisition lock may expire (None without locks)."""
        while self._locks:
            deadline, first, last = self._locks[0]
            if next(self._locked_runs(first, last, deadline), None) is not None:
                return deadline
            heapq.heappop(self._locks)
        return None

    def expire_locks(self, now_ms: int) -> int:
        """Release every record whose lock expired by ``now_ms``: the number released."""
        expired = 0
        while self._locks and self._locks[0][0] <= now_ms:
            deadline, first, last = heapq.heappop(self._locks)
            first, last = self._clip(first, last)
            if first > last or next(self._locked_runs(first, last, deadline), None) is None:
                continue
            i, j = self._span(first, last)
            for run in self._runs[i:j]:
                if run.state is RecordState.ACQUIRED and run.deadline == deadline:
                    self._release(run)
                    expired += run.last - run.first + 1
            self._merge(i, j)
        if expired:
            self._advance_start()
        return expired

    # -- start offset ----------------------------------------------------------------------

    def _advance_start(self) -> None:
        runs = self._runs
        n = 0
        while n < len(runs) and runs[n].state in FINAL_STATES:
            n += 1
        if n:
            self.start_offset = runs[n - 1].last + 1
            del runs[:n]
            self.dirty = True

    def move_start(self, offset: int) -> None:
        """The log start moved past SPSO (retention): offsets below ``offset`` are gone,
        the in-flight states above it are kept."""
        if offset <= self.start_offset:
            return
        del self._runs[:self._split(offset)]
        self.start_offset = offset
        self.dirty = True
        self._advance_start()

    def reset_start(self, offset: int) -> None:
        """AlterShareGroupOffsets (a group without members): start afresh at ``offset``,
        every in-flight state and delivery count forgotten."""
        self._runs = []
        self._locks = []
        self.start_offset = offset
        self.dirty = True

    # -- durable state ---------------------------------------------------------------------

    def snapshot(self) -> tuple[int, list[StateBatch]]:
        """(SPSO, runs of in-flight states) as persisted; ACQUIRED is written AVAILABLE, so
        after a crash those records are delivered again with the count written here.
        Clears ``dirty``."""
        out: list[list] = []
        for run in self._runs:
            state = RecordState.AVAILABLE if run.state is RecordState.ACQUIRED else run.state
            if out and out[-1][2] is state and out[-1][3] == run.count:
                out[-1][1] = run.last
            else:
                out.append([run.first, run.last, state, run.count])
        # trailing never-delivered AVAILABLE offsets need no record: past SPEO is the same
        while out and out[-1][2] is RecordState.AVAILABLE and out[-1][3] == 0:
            out.pop()
        self.dirty = False
        return self.start_offset, [StateBatch(*batch) for batch in out]
