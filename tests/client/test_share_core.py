"""The share consumer's sans-I/O core (databus/client/share.py): acknowledgement batches as
ranges, records filtered to acquired ranges (GAP for offsets without a record), share
session epochs and incremental partitions."""

from __future__ import annotations

import uuid

from databus.client.share import (
    GAP,
    AcknowledgeType,
    PartitionAcks,
    ShareSession,
    acquired_records,
    next_epoch,
)
from databus.protocol.records import build_batch

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
TOPIC_ID = uuid.UUID(int=7)


def batch(base: int, offsets: list[int], last: int) -> bytes:
    """One record batch from ``base`` to ``last`` whose records sit at ``offsets`` (the
    others compacted away)."""
    return build_batch([(None, b"v%d" % o, (), 1000 + o, o) for o in offsets],
                       base_offset=base, last_offset_delta=last - base)


def test_acknowledgements_become_one_batch_per_run_of_one_type():
    acks = PartitionAcks(TOPIC_ID, node=1)
    for offset in (5, 3, 4, 6, 9, 10, 8):
        acks.delivered[offset] = 1
    for offset, kind in ((5, ACCEPT), (3, ACCEPT), (4, ACCEPT), (6, RELEASE), (9, REJECT),
                         (10, REJECT), (8, ACCEPT)):
        assert acks.acknowledge(offset, kind) is True
    acks.add_gaps([(7, 7)])
    batches, offsets = acks.take_batches()
    assert batches == [
        {"first_offset": 3, "last_offset": 5, "acknowledge_types": [ACCEPT]},
        {"first_offset": 6, "last_offset": 6, "acknowledge_types": [RELEASE]},
        {"first_offset": 7, "last_offset": 7, "acknowledge_types": [GAP]},
        {"first_offset": 8, "last_offset": 8, "acknowledge_types": [ACCEPT]},
        {"first_offset": 9, "last_offset": 10, "acknowledge_types": [REJECT]},
    ]
    assert offsets == [3, 4, 5, 6, 7, 8, 9, 10]
    assert acks.take_batches() == ([], [])


def test_a_record_is_settled_once_and_a_lost_session_makes_acknowledging_a_no_op():
    acks = PartitionAcks(TOPIC_ID, node=1)
    acks.delivered.update({0: 1, 1: 1})
    assert acks.acknowledge(0, ACCEPT) is True
    assert acks.acknowledge(0, ACCEPT) is False  # settled already
    assert acks.acknowledge(2, ACCEPT) is False  # never handed out
    acks.forget()  # the session is gone: the broker released record 1
    assert acks.acknowledge(1, ACCEPT) is None
    assert acks.take_batches() == ([], [])


def test_implicit_mode_accepts_everything_handed_out():
    acks = PartitionAcks(TOPIC_ID, node=1)
    acks.delivered.update({0: 1, 1: 2, 2: 1})
    acks.accept_delivered()
    assert acks.take_batches()[0] == [
        {"first_offset": 0, "last_offset": 2, "acknowledge_types": [ACCEPT]}]


def test_only_acquired_records_are_delivered_with_their_count_and_holes_are_gaps():
    # batch 10..19 with records at 10..14 and 17..19 (15, 16 compacted away); the member
    # acquired 12..14 (first delivery) and 18..19 (second); 10, 11, 17 are others'
    data = batch(10, [10, 11, 12, 13, 14, 17, 18, 19], 19)
    records, gaps = acquired_records("t", 0, data, [(18, 19, 2), (12, 14, 1)])
    assert [(r.offset, r.delivery_count, r.value) for r in records] == [
        (12, 1, b"v12"), (13, 1, b"v13"), (14, 1, b"v14"), (18, 2, b"v18"), (19, 2, b"v19")]
    assert gaps == []
    records, gaps = acquired_records("t", 0, data, [(13, 17, 1)])
    assert [r.offset for r in records] == [13, 14, 17]
    assert gaps == [(15, 16)]  # acquired offsets the log has no record for
    records, gaps = acquired_records("t", 0, batch(20, [21], 23), [(20, 23, 1)])
    assert [r.offset for r in records] == [21] and gaps == [(20, 20), (22, 23)]


def test_share_records_stay_8_tuples_with_a_delivery_count():
    import pickle

    from databus.client import ConsumerRecord

    classic = ConsumerRecord("t", 0, 1, 2, 0, None, b"v", ())
    assert classic.delivery_count is None
    records, _ = acquired_records("t", 0, batch(0, [0, 1], 1), [(0, 0, 1), (1, 1, 3)])
    first, second = records
    assert (first.delivery_count, second.delivery_count) == (1, 3)
    # code written for ConsumerRecord keeps working: 8 fields, unpacking, zip, equality
    assert isinstance(second, ConsumerRecord) and len(second) == 8
    _t, _p, offsets, _ts, _tt, _k, values, _h = zip(*records)
    assert offsets == (0, 1) and values == (b"v0", b"v1")
    assert second == ("t", 0, 1, 1001, 0, None, b"v1", ())
    assert second._replace(value=b"x").delivery_count == 3
    assert "delivery_count=3" in repr(second)
    copy = pickle.loads(pickle.dumps(second))
    assert copy == second and copy.delivery_count == 3


def test_session_epochs_and_incremental_partitions():
    a, b, c = (TOPIC_ID, 0), (TOPIC_ID, 1), (TOPIC_ID, 2)
    session = ShareSession()
    assert not session.is_open
    assert session.plan({a, b}) == ([a, b], [])
    assert session.sent({a, b}) == 0  # opens
    assert session.is_open and session.epoch == 1
    assert session.plan({b, c}) == ([c], [a])  # name only what changes
    assert session.sent({b, c}) == 1
    session.reset()
    assert session.plan({b, c}) == ([b, c], [])  # a new session knows nothing
    assert next_epoch(2**31 - 1) == 1 and next_epoch(1) == 2
