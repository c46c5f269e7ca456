"""The mirror's copy path: fetched records from column buffers re-encoded with one more
header (records.scan_columns, BatchBuilder.append_columns; C in _speedups, Python twins in
records.py) give byte for byte the batches the per-record path gives: the consumer's
ConsumerRecords, the loop check, a provenance header appended, BatchBuilder.append_many.

Over random fetch responses: batches compressed with every codec, keys, headers (some
already carrying a provenance header, from the target's cluster or another), control
batches, aborted transactions under read_committed, compacted gaps in the offsets."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from databus.client.accumulator import RecordAccumulator
from databus.client.fetcher import decode_fetched, decode_fetched_columns
from databus.mirror import provenance
from databus.protocol import records
from databus.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchBuilder,
    build_batch,
    build_control_batch,
    scan_columns,
    set_base_offset,
)

try:
    from databus.protocol import _speedups
except ImportError:  # reported by tests/protocol/test_speedups.py
    _speedups = None

IMPLEMENTATIONS = [pytest.param(None, id="python"), pytest.param(
    _speedups, id="C", marks=pytest.mark.skipif(_speedups is None,
                                                reason="the C extension is not built here"))]

TARGET = provenance.prefix("B")      # the target's cluster: copies from it are passed over
PREFIX = b"A/eu/stream/3/"           # what this mirror writes: source cluster A
HEADER = provenance.HEADER

header_st = st.one_of(
    st.tuples(st.text(max_size=6), st.one_of(st.none(), st.binary(max_size=8))),
    st.tuples(st.just(HEADER), st.sampled_from([b"B/us/stream/0/7", b"C/x/t/1/2", None, b"B"])),
)
record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=60)),          # key
    st.one_of(st.none(), st.binary(max_size=200)),         # value
    st.lists(header_st, max_size=3).map(tuple),
    st.integers(0, 2**41),                                 # timestamp
    st.integers(1, 3),                                     # offset step: > 1 is a compacted gap
)
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=12),
    st.sampled_from([0, 1, 2, 3, 4]),                      # codec
    st.sampled_from(["plain", "committed", "aborted"]),    # transactional, and how it ends
)


def fetch_response(batches) -> tuple[bytes, list[tuple[int, int]]]:
    """Concatenated batches as a Fetch response carries them, and its aborted transactions."""
    out, aborted, offset, pid = [], [], 0, 100
    for recs, codec, kind in batches:
        items, o = [], offset
        for key, value, headers, ts, step in recs:
            items.append((key, value, headers, ts, o))
            o += step
        txn = kind != "plain"
        pid += 1
        batch = bytearray(build_batch(items, base_offset=offset, codec=codec,
                                      producer_id=pid if txn else -1,
                                      producer_epoch=0 if txn else -1, transactional=txn))
        out.append(bytes(batch))
        first, offset = offset, o
        if txn:
            if kind == "aborted":
                aborted.append((pid, first))
            marker = bytearray(build_control_batch(
                pid, 0, CONTROL_ABORT if kind == "aborted" else CONTROL_COMMIT))
            set_base_offset(marker, 0, offset)
            out.append(bytes(marker))
            offset += 1
    return b"".join(out), aborted


def per_record(data: bytes, fetch_offset: int, aborted, batch_size: int):
    """The old copy: ConsumerRecords -> loop check -> provenance header -> append_many."""
    got, _ = decode_fetched("stream", 3, data, fetch_offset, aborted=aborted)
    kept, skipped = [], []
    for r in got:
        if r.headers and provenance.came_from(r.headers, TARGET):
            skipped.append(r.offset)
            continue
        kept.append((r.timestamp, r.key, r.value,
                     (*r.headers, (HEADER, PREFIX + str(r.offset).encode()))))
    built, builder, start = [], BatchBuilder(batch_size=batch_size), 0
    while start < len(kept):
        stop = builder.append_many(kept, start)
        if stop < len(kept):
            built.append(builder.build())
            builder = BatchBuilder(batch_size=batch_size)
        start = stop
    if builder.record_count:
        built.append(builder.build())
    return [r.offset for r in got], skipped, built


def columnar(data: bytes, fetch_offset: int, aborted, batch_size: int):
    cols, _ = decode_fetched_columns("stream", 3, data, fetch_offset, aborted=aborted)
    row, stop = cols.row_range
    skipped, too_large, _ = scan_columns(cols.buffers, row, stop, HEADER, TARGET, len(PREFIX),
                                         2**30)
    assert too_large == -1
    built, builder = [], BatchBuilder(batch_size=batch_size)
    while row < stop:
        row = builder.append_columns(cols.buffers, row, stop, HEADER, PREFIX, TARGET)
        if row < stop:
            built.append(builder.build())
            builder = BatchBuilder(batch_size=batch_size)
    if builder.record_count:
        built.append(builder.build())
    return list(cols.offsets), [cols.offsets[i] for i in skipped], built


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request):
    saved = records._native
    records.use_native(request.param)
    yield request.param
    records.use_native(saved)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch_st, min_size=1, max_size=5), skip=st.integers(0, 6),
       batch_size=st.integers(61, 4000))
def test_the_columnar_copy_builds_the_batches_of_the_per_record_copy(
        implementation, batches, skip, batch_size):
    data, aborted = fetch_response(batches)
    expected = per_record(data, skip, aborted, batch_size)
    assert columnar(data, skip, aborted, batch_size) == expected


def test_a_record_from_the_target_is_passed_over_and_the_others_numbered_on(implementation):
    data, _ = fetch_response([([
        (b"k0", b"v0", (), 10, 1),
        (b"k1", b"v1", ((HEADER, b"B/us/stream/0/9"),), 11, 1),   # came from the target
        (None, b"v2", (("h", None),), 12, 2),
        (b"k3", None, ((HEADER, b"C/x/t/1/2"),), 13, 1),           # another cluster: copied
    ], 0, "plain")])
    cols, _ = decode_fetched_columns("stream", 3, data, 0)
    offsets, skipped, built = columnar(data, 0, None, 2**20)
    assert (offsets, skipped) == ([0, 1, 2, 4], [1])
    _, out = records.decode_records(built[0])
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in out] == [
        (0, 10, b"k0", b"v0", ((HEADER, PREFIX + b"0"),)),
        (1, 12, None, b"v2", (("h", None), (HEADER, PREFIX + b"2"))),
        (2, 13, b"k3", None, ((HEADER, b"C/x/t/1/2"), (HEADER, PREFIX + b"4"))),
    ]


def test_the_size_check_names_the_first_record_over_the_limit(implementation):
    data, _ = fetch_response([([(b"k", b"v" * 10, (), 1, 1), (b"k", b"v" * 500, (), 2, 1),
                                (b"k", b"v" * 900, (), 3, 1)], 0, "plain")])
    cols, _ = decode_fetched_columns("stream", 3, data, 0)
    row, stop = cols.row_range
    # record 1: 1 + 500 + len(HEADER) + len(PREFIX) + 1 digit bytes, + 64
    size = 1 + 500 + len(HEADER.encode()) + len(PREFIX) + 1
    assert scan_columns(cols.buffers, row, stop, HEADER, TARGET, len(PREFIX), size + 64) == (
        [], 2, 1 + 900 + len(HEADER.encode()) + len(PREFIX) + 1)
    assert scan_columns(cols.buffers, row, stop, HEADER, TARGET, len(PREFIX), size + 63) == (
        [], 1, size)


class Segments:
    def __init__(self) -> None:
        self.done: list[tuple[int, int, int]] = []

    def batch_done(self, start, count, first_offset, append_ms, error) -> None:
        self.done.append((start, count, first_offset))


def test_the_accumulator_numbers_a_sinks_records_across_batches_without_the_skipped(
        implementation):
    recs = [(b"k", b"v" * 50, ((HEADER, b"B/x/t/0/1"),) if i % 4 == 1 else (), i, 1)
            for i in range(40)]
    data, _ = fetch_response([(recs, 0, "plain")])
    cols, _ = decode_fetched_columns("stream", 3, data, 0)
    row, stop = cols.row_range
    skipped, _, _ = scan_columns(cols.buffers, row, stop, HEADER, TARGET, len(PREFIX), 2**30)
    acc = RecordAccumulator(batch_size=400, linger_ms=0, buffer_memory=2**20,
                            delivery_timeout_ms=1000, retry_backoff_ms=10)
    sink = Segments()
    acc.append_columns("t", 0, cols.buffers, (row, stop), (HEADER, PREFIX, TARGET), skipped,
                       sink, 0.0)
    batches = list(acc.batches[("t", 0)])
    assert len(batches) > 2
    base = 0
    for batch in batches:  # each lands at the next offsets of the target
        for s, start, count, index in batch.segments:
            s.batch_done(start, count, base + index, -1, None)
        base += batch.record_count
    covered = [i for start, count, _ in sink.done for i in range(start, start + count)]
    assert covered == list(range(30))  # 40 rows, 10 passed over, numbered 0..29 in order
    assert [first for _, _, first in sink.done] == [start for start, _, _ in sink.done]
