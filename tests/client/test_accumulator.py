"""The record accumulator as a pure data structure: time is a number passed in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from databus.client.accumulator import RecordAccumulator
from databus.protocol.records import decode_records, record_size_upper_bound


def make(**kw):
    completed = []
    defaults = dict(
        batch_size=1000,
        linger_ms=10,
        buffer_memory=10_000,
        delivery_timeout_ms=1000,
        retry_backoff_ms=50,
        on_batch_complete=lambda t, p: completed.append((t, p)),
    )
    defaults.update(kw)
    return RecordAccumulator(**defaults), completed


def leader_of(topic, partition):
    return {0: 1, 1: 2}.get(partition, -1)


def add(acc, partition, now, value=b"x" * 100, key=None, topic="t"):
    return acc.append(topic, partition, 1000, key, value, (), object(), now)


def test_linger_makes_a_partial_batch_ready():
    acc, _ = make()
    add(acc, 0, now=0)
    nodes, wait, unknown = acc.ready(5, leader_of)
    assert nodes == set() and wait == 5 and not unknown
    nodes, _, _ = acc.ready(10, leader_of)
    assert nodes == {1}


def test_a_batch_within_the_timer_granularity_of_its_linger_is_ready():
    """Timers that fire up to 1 ms late (trio's) are asked to wake 1 ms early, and the batch
    goes then: it waits linger.ms at most, not linger.ms plus the timer's lateness."""
    acc, _ = make(timer_granularity_ms=1.0)
    add(acc, 0, now=0)
    nodes, wait, _ = acc.ready(5, leader_of)
    assert nodes == set() and wait == 4
    assert acc.ready(8.9, leader_of)[0] == set()
    assert acc.ready(9, leader_of)[0] == {1}
    assert [b.partition for b in acc.drain(9, 1, leader_of, 10**6)] == [0]


def test_full_batch_is_ready_at_once_and_completes_for_partitioner():
    acc, completed = make()
    batches = {id(add(acc, 0, now=0)) for _ in range(12)}  # ~120 bytes each, 1000 per batch
    assert len(batches) == 2
    assert completed == [("t", 0)]  # the hook fired when the first batch filled
    nodes, _, _ = acc.ready(0, leader_of)
    assert nodes == {1}


def test_drain_takes_one_batch_per_partition_and_mutes_it():
    acc, _ = make()
    for _ in range(20):
        add(acc, 0, now=0)
    add(acc, 1, now=0)
    drained = acc.drain(100, 1, leader_of, max_request_size=1 << 20)
    assert [b.partition for b in drained] == [0]
    assert acc.ready(100, leader_of)[0] == {2}  # partition 0 is muted while in flight
    acc.complete(drained[0])
    assert acc.ready(100, leader_of)[0] == {1, 2}


def test_drained_batch_decodes_to_the_appended_records():
    acc, _ = make(batch_size=1 << 20)
    for i in range(3):
        acc.append("t", 0, 1000 + i, b"k%d" % i, b"v%d" % i, (("h", b"1"),), object(), 0)
    (batch,) = acc.drain(100, 1, leader_of, 1 << 20)
    header, records = decode_records(batch.build(7, 0, 42))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 42)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (i, 1000 + i, b"k%d" % i, b"v%d" % i, (("h", b"1"),)) for i in range(3)
    ]


def test_memory_accounting_returns_to_zero():
    acc, _ = make()
    for _ in range(30):
        add(acc, 0, now=0)
    assert 3000 <= acc.buffered_bytes <= 30 * record_size_upper_bound(None, b"x" * 100, ())
    assert not acc.has_room(10_000 - acc.buffered_bytes + 1)
    while acc.batches:
        for b in acc.drain(100, 1, leader_of, 1 << 20):
            acc.complete(b)
    assert acc.buffered_bytes == 0


def test_reenqueue_keeps_order_and_waits_for_backoff():
    acc, _ = make()
    for _ in range(20):
        add(acc, 0, now=0)
    first = acc.drain(100, 1, leader_of, 1 << 20)[0]
    acc.reenqueue(first, now_ms=200)
    nodes, wait, _ = acc.ready(220, leader_of)
    assert nodes == set() and wait == 30  # retry.backoff.ms
    again = acc.drain(250, 1, leader_of, 1 << 20)
    assert again == [first]  # the retried batch goes before the newer ones
    assert first.attempts == 2


def test_expire_only_queued_batches_past_delivery_timeout():
    acc, _ = make()
    add(acc, 0, now=0)
    add(acc, 1, now=500)
    in_flight = acc.drain(10, 1, leader_of, 1 << 20)
    assert acc.expire(1200) == []  # partition 1's batch has until 1500
    expired = acc.expire(1600)
    assert [b.partition for b in expired] == [1] and acc.expire(1600) == []
    assert in_flight[0].partition == 0 and not in_flight[0].done  # in flight: the sender's


def test_unknown_leader_is_reported():
    acc, _ = make()
    add(acc, 5, now=0)
    nodes, _, unknown = acc.ready(100, leader_of)
    assert nodes == set() and unknown == {"t"}


def test_flush_ignores_linger():
    acc, _ = make(linger_ms=10_000)
    add(acc, 0, now=0)
    assert acc.ready(1, leader_of)[0] == set()
    acc.flushing += 1
    assert acc.ready(1, leader_of)[0] == {1}


def test_pipelines_up_to_max_in_flight_per_partition():
    acc, _ = make(max_in_flight=2)
    for _ in range(40):
        add(acc, 0, now=0)
    first = acc.drain(100, 1, leader_of, 1 << 20)
    second = acc.drain(100, 1, leader_of, 1 << 20)
    assert len(first) == len(second) == 1
    assert acc.drain(100, 1, leader_of, 1 << 20) == []  # window of 2 is full
    acc.complete(first[0])
    assert len(acc.drain(100, 1, leader_of, 1 << 20)) == 1


def test_retries_come_back_in_creation_order_one_at_a_time():
    acc, _ = make(max_in_flight=3)
    for _ in range(50):
        add(acc, 0, now=0)
    a, b, c = (acc.drain(0, 1, leader_of, 1 << 20)[0] for _ in range(3))
    # responses arrive in order: a failed, then b and c (e.g. OUT_OF_ORDER_SEQUENCE) too
    acc.reenqueue(a, now_ms=0)
    acc.reenqueue(b, now_ms=0)
    acc.reenqueue(c, now_ms=0)
    assert list(acc.batches[("t", 0)])[:3] == [a, b, c]
    assert acc.drain(100, 1, leader_of, 1 << 20) == [a]
    assert acc.drain(100, 1, leader_of, 1 << 20) == []  # recovering: one at a time
    acc.complete(a)
    assert acc.drain(100, 1, leader_of, 1 << 20) == [b]
    acc.complete(b)
    assert acc.drain(100, 1, leader_of, 1 << 20) == [c]
    acc.complete(c)
    assert ("t", 0) not in acc.recovering  # back to the full window
    assert len(acc.drain(100, 1, leader_of, 1 << 20) + acc.drain(100, 1, leader_of, 1 << 20)) == 2


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "drain", "ok", "fail"]), st.integers(0, 2)),
                max_size=120),
       st.integers(1, 5))
def test_model_pipelining_with_failures_keeps_partition_order(ops, window):
    """Against an idempotent broker model (a batch is accepted only if every earlier batch of
    its partition was; anything else is refused, retriably), any interleaving of appends,
    drains, successes and failures ends with each partition's batches accepted once, in
    creation order, and all memory returned."""
    acc, _ = make(max_in_flight=window, batch_size=300, buffer_memory=10**9,
                  delivery_timeout_ms=10**12, retry_backoff_ms=1, linger_ms=0)
    now = 0
    requests: list[list] = []  # in flight, in connection order
    accepted: dict[int, list[int]] = {0: [], 1: [], 2: []}
    created: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def leader(topic, partition):
        return 1

    def answer(ok_wanted: bool) -> None:
        for batch in requests.pop(0):
            expected_next = len(accepted[batch.partition])
            in_order = created[batch.partition].index(batch.order) == expected_next
            if ok_wanted and in_order:
                accepted[batch.partition].append(batch.order)
                acc.complete(batch)
            else:
                acc.reenqueue(batch, now)

    for op, p in ops:
        now += 10
        if op == "append":
            batch = acc.append("t", p, 0, None, b"x" * 100, (), object(), now)
            if batch.order not in created[p]:
                created[p].append(batch.order)
        elif op == "drain":
            got = acc.drain(now, 1, leader, 1 << 20)
            if got:
                requests.append(got)
        elif requests:
            answer(op == "ok")
    for _ in range(10_000):  # then the network heals: drain and acknowledge until empty
        now += 10
        if requests:
            answer(True)
        got = acc.drain(now, 1, leader, 1 << 20)
        if got:
            requests.append(got)
        if not requests and not acc.batches:
            break
    for p in range(3):
        assert accepted[p] == created[p]
    assert acc.buffered_bytes == 0 and not acc.in_flight and not acc.recovering


class Sink:
    def __init__(self):
        self.told = []

    def batch_done(self, start, count, first_offset, append_ms, error):
        self.told.append((start, count, first_offset, error))


def test_append_many_fills_batches_in_order_with_one_segment_per_batch():
    acc, completed = make(batch_size=1000)
    sink = Sink()
    records = [(1000 + i, None, b"%03d" % i + b"x" * 97, ()) for i in range(25)]
    assert acc.append_many("t", 0, records, sink, now_ms=0)  # started a batch
    batches = list(acc.batches[("t", 0)])
    assert [b.record_count for b in batches] == [8, 8, 8, 1]  # ~120 bytes per record
    assert [b.segments for b in batches] == [
        [(sink, 0, 8, 0)], [(sink, 8, 8, 0)], [(sink, 16, 8, 0)], [(sink, 24, 1, 0)]
    ]
    assert completed == [("t", 0)] * 3  # the partitioner hears about each full batch
    # A later call continues the open batch: its segment starts at that batch's record 1.
    other = Sink()
    assert not acc.append_many("t", 0, records[:2], other, now_ms=1)
    assert acc.batches[("t", 0)][-1].segments[-1] == (other, 0, 2, 1)
    decoded = []
    for batch in acc.batches[("t", 0)]:
        decoded += [r.value[:3] for r in decode_records(batch.build(-1, -1, -1))[1]]
    assert decoded == [b"%03d" % i for i in range(25)] + [b"000", b"001"]


@given(st.lists(st.integers(min_value=0, max_value=400), min_size=1, max_size=60),
       st.integers(min_value=200, max_value=3000))
@settings(max_examples=60, deadline=None)
def test_append_many_segments_cover_every_record_once(sizes, batch_size):
    acc, _ = make(batch_size=batch_size, buffer_memory=1 << 30)
    sink = Sink()
    records = [(5, None, bytes([i % 256]) * n, ()) for i, n in enumerate(sizes)]
    acc.append_many("t", 0, records, sink, now_ms=0)
    seen = []
    for batch in acc.batches[("t", 0)]:
        values = [r.value for r in decode_records(batch.build(-1, -1, -1))[1]]
        for s, start, count, index in batch.segments:
            assert s is sink
            seen += list(zip(range(start, start + count), values[index : index + count]))
        assert sum(count for _, _, count, _ in batch.segments) == batch.record_count
    assert seen == list(enumerate(r[2] for r in records))


def test_a_clock_given_for_now_is_read_only_when_a_batch_starts():
    acc, _ = make(batch_size=240)
    reads = []

    def clock():
        reads.append(1)
        return 1000.0 * len(reads)

    sink = object()
    for _ in range(5):  # 61 B of header + 57 B per record: three fit in 240 B, not four
        acc.append_many("t", 0, ((0, None, bytes(50), ()),), sink, clock)
    batches = list(acc.batches[("t", 0)])
    assert [b.record_count for b in batches] == [3, 2]
    assert len(reads) == 2
    assert [b.created_ms for b in batches] == [1000.0, 2000.0]


def test_append_record_fills_the_open_batch_and_leaves_no_segments():
    acc, completed = make()
    clock = []
    batches, counts = [], []
    for i in range(12):
        batch, count = acc.append_record("t", 0, 1000 + i, None, b"x" * 100, (),
                                         lambda: clock.append(1) or 7.0)
        batches.append(batch)
        counts.append(count)
        assert count == batch.record_count
    first, second = batches[0], batches[-1]
    assert first is not second and first.closed and not second.closed
    assert counts == [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4]  # the record's index + 1
    assert not first.segments and first.result is not second.result
    assert len(clock) == 2 and first.created_ms == 7.0  # the clock: once per batch
    assert completed == [("t", 0)]
    assert acc.buffered_bytes == first.size + second.size


def test_an_expired_open_batch_takes_no_more_records():
    acc, _ = make()
    expiring, _ = acc.append_record("t", 0, 1000, None, b"x", (), lambda: 0.0)
    assert acc.expire(1000) == [expiring]
    after, _ = acc.append_record("t", 0, 1001, None, b"y", (), lambda: 1000.0)
    assert after is not expiring and expiring.record_count == 1
