"""Decoding a Fetch response's records the way Kafka's consumers do (pure function)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.client.fetcher import decode_fetched, decode_fetched_columns
from databus.protocol import records as records_module
from databus.protocol import speedups
from databus.protocol.records import CorruptRecordError, Record, build_batch


def batch(base: int, count: int, codec: int = 0, **kw) -> bytes:
    records = [Record(base + i, 1000 + base + i, b"k%d" % (base + i), b"v%d" % (base + i))
               for i in range(count)]
    return build_batch(records, base_offset=base, codec=codec, **kw)


def control(base: int, kind: int, producer_id: int) -> bytes:
    key = struct.pack(">hh", 0, kind)  # version 0, 0 = ABORT / 1 = COMMIT
    return build_batch([Record(base, 5, key, b"\x00\x00\x00\x00\x00\x00")], base_offset=base,
                       control=True, transactional=True, producer_id=producer_id,
                       producer_epoch=0)


def test_skips_records_before_the_fetch_offset_in_the_first_batch():
    data = batch(0, 10) + batch(10, 5, codec=3)
    records, next_offset = decode_fetched("t", 0, data, 7)
    assert [r.offset for r in records] == list(range(7, 15))
    assert records[0].key == b"k7" and records[0].timestamp == 1007 and records[0].topic == "t"
    assert next_offset == 15


def test_partial_trailing_batch_is_left_for_the_next_fetch():
    data = batch(0, 3) + batch(3, 3)[:-5]
    records, next_offset = decode_fetched("t", 0, data, 0)
    assert [r.offset for r in records] == [0, 1, 2] and next_offset == 3
    assert decode_fetched("t", 0, b"", 9) == ([], 9)


def test_control_batches_are_skipped_but_move_the_position():
    data = batch(0, 2) + control(2, 1, producer_id=9)
    records, next_offset = decode_fetched("t", 0, data, 0)
    assert [r.offset for r in records] == [0, 1] and next_offset == 3


def test_read_committed_drops_aborted_transactions():
    aborted_txn = batch(0, 3, transactional=True, producer_id=7, producer_epoch=0)
    committed_txn = batch(3, 2, transactional=True, producer_id=8, producer_epoch=0)
    data = aborted_txn + committed_txn + control(5, 0, 7) + control(6, 1, 8) + batch(7, 1)
    records, next_offset = decode_fetched("t", 0, data, 0, aborted=[(7, 0)])
    assert [r.offset for r in records] == [3, 4, 7] and next_offset == 8
    everything, _ = decode_fetched("t", 0, data, 0)  # read_uncommitted keeps them
    assert [r.offset for r in everything] == [0, 1, 2, 3, 4, 7]


def test_corrupt_batch_is_an_error_naming_it():
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_fetched("t", 0, bytes(data), 0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 20), min_size=1, max_size=6), st.data())
def test_offsets_are_exactly_from_the_fetch_offset_to_the_end(sizes, data):
    buf, base = b"", 100
    for i, n in enumerate(sizes):
        buf += batch(base, n, codec=i % 5)
        base += n
    fetch = data.draw(st.integers(100, base))
    records, next_offset = decode_fetched("t", 3, buf, fetch)
    assert [r.offset for r in records] == list(range(fetch, base))
    assert all(r.value == b"v%d" % r.offset and r.partition == 3 for r in records)
    assert next_offset == (max(fetch, base))


def test_a_decompression_bomb_is_refused_without_inflating_it():
    from databus.protocol.codecs import CODEC_ZSTD, DecompressedTooLargeError

    # ~1 KiB of zstd holding one 4 MiB record, under a 1 MiB bound
    bomb = build_batch([Record(0, 1, None, b"\0" * (4 << 20))], codec=CODEC_ZSTD)
    assert len(bomb) < 2048
    with pytest.raises(CorruptRecordError, match="decompresses to more than the limit of "
                       "1048576 bytes") as caught:
        decode_fetched("t", 0, bomb, 0, max_decompressed=1 << 20)
    assert isinstance(caught.value.__cause__, DecompressedTooLargeError)
    records, _ = decode_fetched("t", 0, bomb, 0, max_decompressed=5 << 20)  # within it
    assert len(records[0].value) == 4 << 20


# -- columns: the same records as the per-record path ----------------------------------------

fetch_record_st = st.tuples(
    st.one_of(st.none(), st.binary(max_size=30)),  # key
    st.one_of(st.none(), st.binary(max_size=60)),  # value
    st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=6))),
             max_size=3).map(tuple),  # headers
    st.integers(0, 2**41),  # timestamp
    st.integers(1, 3),  # step to the next offset: more than 1 is a compacted gap
)
batch_st = st.tuples(
    st.lists(fetch_record_st, min_size=1, max_size=8),
    st.sampled_from([0, 1, 2, 3, 4]),  # every codec
    st.sampled_from(["plain", "committed", "aborted"]),  # transactions end with a marker
    st.booleans(),  # LogAppendTime
)


def fetch_response(batches) -> tuple[bytes, list[tuple[int, int]]]:
    """Records of a Fetch response: the batches one after the other, a transaction's batch
    followed by its COMMIT or ABORT marker; and the response's aborted transactions."""
    data, aborted, offset = b"", [], 0
    for producer_id, (recs, codec, kind, log_append) in enumerate(batches, start=1):
        records, at = [], offset
        for key, value, headers, ts, step in recs:
            records.append(Record(at, ts, key, value, headers))
            at += step
        transactional = kind != "plain"
        data += build_batch(records, base_offset=offset, codec=codec,
                            timestamp_type=int(log_append), transactional=transactional,
                            producer_id=producer_id if transactional else -1,
                            producer_epoch=0 if transactional else -1)
        offset = records[-1].offset + 1
        if transactional:
            if kind == "aborted":
                aborted.append((producer_id, records[0].offset))
            data += control(offset, 0 if kind == "aborted" else 1, producer_id)
            offset += 1
    return data, aborted


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(batch_st, min_size=1, max_size=5), skip=st.integers(0, 12),
       read_committed=st.booleans(), cut=st.integers(0, 40))
def test_columns_hold_the_records_the_record_path_hands_out(batches, skip, read_committed, cut):
    data, aborted = fetch_response(batches)
    data = data[: len(data) - cut]  # the broker may cut the last batch at the fetch size
    kw = {"aborted": aborted if read_committed else None}
    saved = records_module._native
    try:
        for implementation in (speedups.native, None):
            records_module.use_native(implementation)
            records, next_offset = decode_fetched("t", 2, data, skip, **kw)
            columns, next_columns = decode_fetched_columns("t", 2, data, skip, **kw)
            expected = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records]
            assert list(columns.rows()) == expected
            assert next_columns == next_offset
            arrow = columns.to_arrow().to_pylist()
            assert [(row["topic"], row["partition"], row["offset"], row["timestamp"], row["key"],
                     row["value"], tuple((h["key"], h["value"]) for h in row["headers"]))
                    for row in arrow] == [("t", 2, *record) for record in expected]
    finally:
        records_module.use_native(saved)
