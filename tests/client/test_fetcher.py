"""Decoding a Fetch response's records the way Kafka's consumers do (pure function)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from databus.client.fetcher import decode_fetched
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
