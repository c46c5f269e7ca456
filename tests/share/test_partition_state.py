"""The share-partition state machine alone: examples of each rule, then hypothesis driving it
and a deliberately naive model (one dict entry per offset of the whole log, no window, no
start offset) with random fetches, acknowledgements, lock expiries, member departures and
crash/restore from the persisted snapshot, comparing every record's state after each step.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from databus.broker.share.partition_state import (
    AcknowledgeType,
    AcquiredRange,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
)
from databus.protocol.errors import ErrorCode

ACCEPT, RELEASE, REJECT, GAP = (AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE,
                                AcknowledgeType.REJECT, AcknowledgeType.GAP)
LOCK = 1000


def partition(start=0, **config) -> SharePartition:
    config.setdefault("record_lock_duration_ms", LOCK)
    return SharePartition(start, SharePartitionConfig(**config))


def test_acquire_accept_moves_the_start_offset():
    sp = partition()
    got = sp.acquire("a", [(0, 9)], now_ms=0, max_records=100)
    assert got == [AcquiredRange(0, 9, 1)]
    assert sp.end_offset == 10 and sp.start_offset == 0
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) == ErrorCode.none
    assert sp.start_offset == 5
    assert sp.dirty


def test_two_members_get_different_records_of_one_partition():
    sp = partition()
    assert sp.acquire("a", [(0, 3), (4, 9)], 0, max_records=4) == [AcquiredRange(0, 3, 1)]
    assert sp.next_fetch_offset() == 4
    assert sp.acquire("b", [(0, 3), (4, 9)], 0, max_records=100) == [AcquiredRange(4, 9, 1)]
    assert sp.acknowledge("b", 0, 0, [ACCEPT]) == ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 3, [ACCEPT]) == ErrorCode.none


def test_release_redelivers_with_a_higher_count_until_the_limit_archives():
    sp = partition(delivery_count_limit=3)
    for attempt in (1, 2, 3):
        assert sp.acquire("a", [(0, 0)], 0, 10) == [AcquiredRange(0, 0, attempt)]
        assert sp.acknowledge("a", 0, 0, [RELEASE]) == ErrorCode.none
    # the third delivery was the last: released, it is archived and the start moves on
    assert sp.start_offset == 1
    assert sp.acquire("a", [(0, 0)], 0, 10) == []


def test_reject_is_final_and_never_redelivered():
    sp = partition()
    sp.acquire("a", [(0, 2)], 0, 10)
    assert sp.acknowledge("a", 0, 2, [ACCEPT, REJECT, RELEASE]) == ErrorCode.none
    assert sp.start_offset == 2  # 0 accepted, 1 rejected: both done
    assert sp.acquire("b", [(0, 2)], 0, 10) == [AcquiredRange(2, 2, 2)]


def test_acknowledging_what_is_not_held_changes_nothing():
    sp = partition()
    sp.acquire("a", [(0, 3)], 0, 10)
    # offset 4 was never acquired: the whole batch is refused, 0..3 stay acquired
    assert sp.acknowledge("a", 0, 4, [ACCEPT]) == ErrorCode.invalid_record_state
    assert [sp.state_of(o)[0] for o in range(4)] == [RecordState.ACQUIRED] * 4
    assert sp.acknowledge("a", 0, 3, [ACCEPT, ACCEPT]) == ErrorCode.invalid_request
    assert sp.acknowledge("a", 0, 3, [9]) == ErrorCode.invalid_request
    assert sp.acknowledge("a", 0, 3, [ACCEPT]) == ErrorCode.none
    assert sp.acknowledge("a", 0, 3, [ACCEPT]) == ErrorCode.invalid_record_state


def test_lock_expiry_makes_records_available_again():
    sp = partition()
    sp.acquire("a", [(0, 4)], now_ms=100, max_records=10)
    sp.acknowledge("a", 0, 0, [ACCEPT])
    assert sp.next_deadline() == 100 + LOCK
    assert sp.expire_locks(100 + LOCK - 1) == 0
    assert sp.expire_locks(100 + LOCK) == 4
    assert sp.next_deadline() is None
    assert sp.acquire("b", [(0, 4)], 2000, 10) == [AcquiredRange(1, 4, 2)]
    assert sp.acknowledge("a", 1, 1, [ACCEPT]) == ErrorCode.invalid_record_state


def test_gaps_between_batches_are_archived_and_gap_acks_archive():
    sp = partition()
    got = sp.acquire("a", [(0, 1), (5, 6)], 0, 10)
    assert got == [AcquiredRange(0, 1, 1), AcquiredRange(5, 6, 1)]
    assert [sp.state_of(o)[0] for o in (2, 3, 4)] == [RecordState.ARCHIVED] * 3
    assert sp.acknowledge("a", 0, 1, [ACCEPT, GAP]) == ErrorCode.none
    assert sp.start_offset == 5
    # a control batch is passed as a gap: archived, never acquired
    assert sp.acquire("a", [(7, 7), (8, 9)], 0, 10, gaps=[(7, 7)]) == [AcquiredRange(8, 9, 1)]
    assert sp.state_of(7)[0] is RecordState.ARCHIVED


def test_max_record_locks_bounds_the_window_but_not_redelivery():
    sp = partition(max_record_locks=5)
    assert sp.acquire("a", [(0, 99)], 0, 100) == [AcquiredRange(0, 4, 1)]
    assert not sp.can_acquire_new()
    assert sp.acquire("b", [(0, 99)], 0, 100) == []
    sp.acknowledge("a", 0, 1, [ACCEPT])
    sp.acknowledge("a", 2, 2, [RELEASE])
    assert sp.acquire("b", [(0, 99)], 0, 100) == [AcquiredRange(2, 2, 2),
                                                  AcquiredRange(5, 6, 1)]


def test_max_records_limits_one_fetch_even_inside_a_batch():
    sp = partition()
    assert sp.acquire("a", [(0, 9), (10, 19)], 0, 3) == [AcquiredRange(0, 2, 1)]
    assert sp.acquire("b", [(0, 9), (10, 19)], 0, 10) == [AcquiredRange(3, 12, 1)]


def test_member_release_returns_only_its_records():
    sp = partition()
    sp.acquire("a", [(0, 4), (5, 9)], 0, 5)
    sp.acquire("b", [(0, 4), (5, 9)], 0, 5)
    assert sp.release_member("a") == 5
    assert sp.acquired_by("b") == 5
    assert sp.acquire("c", [(0, 9)], 0, 10) == [AcquiredRange(0, 4, 2)]


def test_snapshot_restores_final_states_and_makes_acquired_available_with_its_count():
    sp = partition(start=10)
    sp.acquire("a", [(10, 19)], 0, 100)
    sp.acknowledge("a", 10, 11, [ACCEPT])
    sp.acknowledge("a", 12, 12, [RELEASE])
    sp.acknowledge("a", 13, 13, [REJECT])
    start, batches = sp.snapshot()
    assert not sp.dirty
    assert start == 12
    assert batches == [
        StateBatch(12, 12, RecordState.AVAILABLE, 1),
        StateBatch(13, 13, RecordState.ARCHIVED, 1),
        StateBatch(14, 19, RecordState.AVAILABLE, 1),
    ]
    restored = SharePartition(start, sp.config, batches)
    assert restored.acquire("b", [(10, 29)], 0, 100) == [
        AcquiredRange(12, 12, 2), AcquiredRange(14, 19, 2), AcquiredRange(20, 29, 1)]


def test_move_start_keeps_the_states_above_reset_forgets_everything():
    sp = partition()
    sp.acquire("a", [(0, 9)], 0, 100)
    sp.acknowledge("a", 5, 5, [RELEASE])
    sp.move_start(3)  # retention removed 0-2
    assert sp.start_offset == 3 and sp.state_of(3)[0] is RecordState.ACQUIRED
    assert sp.state_of(5)[:2] == (RecordState.AVAILABLE, 1)
    sp.move_start(1)  # never backwards
    assert sp.start_offset == 3
    sp.reset_start(0)  # an admin reset starts afresh
    assert (sp.start_offset, sp.end_offset, sp.next_deadline()) == (0, 0, None)
    assert sp.acquire("b", [(0, 9)], 0, 100) == [AcquiredRange(0, 9, 1)]


# -- the model --------------------------------------------------------------------------------


class Model:
    """Every offset of the log with its (state, count, owner, deadline); no window."""

    def __init__(self, records: set[int], limit: int):
        self.records = records
        self.limit = limit
        self.state: dict[int, list] = {}

    def get(self, offset):
        return self.state.setdefault(offset, [RecordState.AVAILABLE, 0, None, 0])

    def acquire(self, member, batches, now, max_records):
        got = []
        for first, last in batches:
            for offset in range(first, last + 1):
                entry = self.get(offset)
                if entry[0] is RecordState.AVAILABLE and len(got) < max_records:
                    entry[:] = [RecordState.ACQUIRED, entry[1] + 1, member, now + LOCK]
                    got.append((offset, entry[1]))
        return got

    def release(self, entry):
        final = entry[1] >= self.limit
        entry[:] = [RecordState.ARCHIVED if final else RecordState.AVAILABLE, entry[1], None, 0]

    def acknowledge(self, member, first, last, kind):
        entries = [self.get(o) for o in range(first, last + 1)]
        if any(e[0] is not RecordState.ACQUIRED or e[2] != member for e in entries):
            return ErrorCode.invalid_record_state
        for e in entries:
            if kind == ACCEPT:
                e[:] = [RecordState.ACKNOWLEDGED, e[1], None, 0]
            elif kind == RELEASE:
                self.release(e)
            else:
                e[:] = [RecordState.ARCHIVED, e[1], None, 0]
        return ErrorCode.none

    def expire(self, now):
        for e in self.state.values():
            if e[0] is RecordState.ACQUIRED and e[3] <= now:
                self.release(e)

    def release_member(self, member):
        for e in self.state.values():
            if e[0] is RecordState.ACQUIRED and e[2] == member:
                self.release(e)

    def crash(self):
        for e in self.state.values():
            if e[0] is RecordState.ACQUIRED:
                e[:] = [RecordState.AVAILABLE, e[1], None, 0]


MEMBERS = st.sampled_from(["a", "b", "c"])


class SharePartitionMachine(RuleBasedStateMachine):
    @initialize(
        sizes=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=8),
        limit=st.integers(2, 4),
    )
    def setup(self, sizes, limit):
        # batches of the log: (gap before, batch length)
        self.batches = []
        offset = 0
        for gap, length in sizes:
            offset += gap
            self.batches.append((offset, offset + length - 1))
            offset += length
        self.log_end = offset
        in_batches = {o for f, l_ in self.batches for o in range(f, l_ + 1)}
        self.model = Model(in_batches, limit)
        self.config = SharePartitionConfig(record_lock_duration_ms=LOCK,
                                           delivery_count_limit=limit, max_record_locks=10_000)
        self.real = SharePartition(0, self.config)
        self.now = 0

    def read(self, count: int):
        """What the handler does: the log's batches from the next fetch offset on."""
        start = self.real.next_fetch_offset()
        return [b for b in self.batches if b[1] >= start][:count]

    @rule(member=MEMBERS, batches=st.integers(1, 4), max_records=st.integers(1, 12))
    def fetch(self, member, batches, max_records):
        read = self.read(batches)
        got = self.real.acquire(member, read, self.now, max_records)
        expected = self.model.acquire(
            member, [(max(f, self.real.start_offset), last) for f, last in read],
            self.now, max_records)
        flat = [(o, r.delivery_count) for r in got
                for o in range(r.first_offset, r.last_offset + 1)]
        assert flat == expected

    @rule(member=MEMBERS, first=st.integers(0, 30), length=st.integers(1, 4),
          kind=st.sampled_from([ACCEPT, RELEASE, REJECT]))
    def acknowledge(self, member, first, length, kind):
        last = first + length - 1
        error = self.real.acknowledge(member, first, last, [kind])
        assert error == self.model.acknowledge(member, first, last, kind)

    @rule(ms=st.sampled_from([0, 1, LOCK // 3, LOCK - 1, LOCK]))
    def tick(self, ms):
        self.now += ms
        self.real.expire_locks(self.now)
        self.model.expire(self.now)

    @rule(member=MEMBERS)
    def member_leaves(self, member):
        self.real.release_member(member)
        self.model.release_member(member)

    @rule()
    def crash_and_restore(self):
        start, batches = self.real.snapshot()
        self.real = SharePartition(start, self.config, batches)
        self.model.crash()

    @invariant()
    def same_states(self):
        if not hasattr(self, "real"):
            return
        real = self.real
        for offset in range(self.log_end):
            state, count, owner = real.state_of(offset)
            m_state, m_count, m_owner, _ = self.model.get(offset)
            if offset < real.start_offset:
                assert m_state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED) or (
                    offset not in self.model.records), offset
            elif offset >= real.end_offset:
                assert m_state is RecordState.AVAILABLE and m_count == 0, offset
            elif offset in self.model.records:
                assert (state, count, owner) == (m_state, m_count, m_owner), offset
            else:  # a gap the real machine has passed: archived
                assert state is RecordState.ARCHIVED, offset
        assert real.start_offset <= real.end_offset
        if real.in_flight():
            assert real.state_of(real.start_offset)[0] not in (
                RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestSharePartitionModel = SharePartitionMachine.TestCase
