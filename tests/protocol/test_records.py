"""RecordBatch v2 records: pinned golden bytes, the builder's contract, round trips over
arbitrary records and codecs, and malformed input that must raise CorruptRecordError only."""

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from databus.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CONTROL_COMMIT,
    HEADER_SIZE,
    BatchBuilder,
    CorruptRecordError,
    Record,
    UnsupportedCodecError,
    build_batch,
    control_record_type,
    decode_batches,
    decode_records,
    decode_records_at,
    keyless_records,
    parse_header,
    record_size_upper_bound,
    set_base_offset,
    validate_batch,
)

TS = 1_700_000_000_000
ALL_CODECS = sorted(CODEC_NAMES)

# Written by kafka-python 3.0's DefaultRecordBatchBuilder (magic 2, codec none, producer id
# 1000, epoch 2, base sequence 7; it writes partitionLeaderEpoch 0) for GOLDEN_RECORDS.
GOLDEN_HEX = (
    "0000000000000000000000590000000002d39a19370000000000020000018bcf"
    "e568000000018bcfe5680500000000000003e800020000000700000003280000"
    "00066b65790a76616c75650204683104763112000a02010002026e0110000604"
    "046b320100"
)
GOLDEN_RECORDS = [
    Record(0, TS, b"key", b"value", (("h1", b"v1"),)),
    Record(1, TS + 5, None, b"", (("n", None),)),
    Record(2, TS + 3, b"k2", None),
]
GOLDEN_PRODUCER = {"producer_id": 1000, "producer_epoch": 2, "base_sequence": 7}


def test_golden_batch_decodes_to_its_records():
    header, records = decode_records(bytes.fromhex(GOLDEN_HEX))
    assert records == GOLDEN_RECORDS
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (0, 2, 3)
    assert (header.base_timestamp, header.max_timestamp) == (TS, TS + 5)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1000, 2, 7)
    assert header.codec == CODEC_NONE and header.timestamp_type == 0


def test_build_batch_reproduces_golden_bytes():
    built = build_batch(GOLDEN_RECORDS, partition_leader_epoch=0, **GOLDEN_PRODUCER)
    assert built.hex() == GOLDEN_HEX


def test_batch_builder_reproduces_golden_bytes_and_sizes_exactly():
    builder = BatchBuilder(partition_leader_epoch=0, **GOLDEN_PRODUCER)
    for r in GOLDEN_RECORDS:
        assert builder.append(r.timestamp, r.key, r.value, r.headers)
    built = builder.build()
    assert built.hex() == GOLDEN_HEX
    assert builder.uncompressed_size == len(built)
    assert builder.record_count == 3


def test_decode_at_position_and_after_base_offset_rewrite():
    golden = bytes.fromhex(GOLDEN_HEX)
    buf = bytearray(b"junk" + golden)
    set_base_offset(buf, 4, 500)
    header, records = decode_records(buf, 4)
    assert header.base_offset == 500
    assert [r.offset for r in records] == [500, 501, 502]
    assert [r.value for r in records] == [r.value for r in GOLDEN_RECORDS]


# -- builder contract ------------------------------------------------------------------


def test_append_refuses_a_record_past_batch_size_and_keeps_the_batch_intact():
    builder = BatchBuilder(batch_size=HEADER_SIZE + 3 * 110)
    value = b"v" * 100
    while builder.append(TS, None, value):
        pass
    assert builder.record_count == 3
    size, count = builder.uncompressed_size, builder.record_count
    assert not builder.append(TS, b"key", value)
    assert (builder.uncompressed_size, builder.record_count) == (size, count)
    built = builder.build()
    assert len(built) == size <= builder.batch_size
    _, records = decode_records(built)
    assert [r.offset for r in records] == [0, 1, 2]


def test_first_record_always_fits_even_when_larger_than_batch_size():
    builder = BatchBuilder(batch_size=100)
    assert builder.append(TS, b"k", b"x" * 1000)
    assert not builder.append(TS, b"k", b"y")
    _, records = decode_records(builder.build())
    assert records == [Record(0, TS, b"k", b"x" * 1000)]


# Large values (past the 2-byte varint lengths) are made by repeating a short draw: their
# size is what matters, and drawing 16 KB of entropy trips hypothesis's data_too_large check.
large = st.binary(min_size=1, max_size=64).map(lambda seed: (seed * (16400 // len(seed) + 1))[:16400])
payloads = st.one_of(st.none(), st.binary(max_size=300), large)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=payloads,
    value=payloads,
    headers=st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=200)),
                     max_size=4).map(tuple),
    timestamp_delta=st.integers(-(2**62), 2**62),
    offset_delta=st.integers(1, 2**31 - 1),
)
def test_record_size_upper_bound_holds_for_any_record(
    key, value, headers, timestamp_delta, offset_delta
):
    builder = BatchBuilder(batch_size=1 << 30)
    builder.append(TS, None, None)
    before = builder.uncompressed_size
    builder.append(TS + timestamp_delta, key, value, headers, offset_delta=offset_delta)
    assert builder.uncompressed_size - before <= record_size_upper_bound(key, value, headers)
    alone = build_batch([(key, value, headers, TS)])
    assert len(alone) <= HEADER_SIZE + record_size_upper_bound(key, value, headers)


def test_record_size_upper_bound_counts_utf8_header_names_at_their_widest():
    headers = (("\U0001F600" * 10, None),)  # 40 bytes of UTF-8 in 10 characters
    builder = BatchBuilder()
    builder.append(TS, None, None, headers)
    assert builder.uncompressed_size - HEADER_SIZE <= record_size_upper_bound(None, None, headers)


def test_producer_state_set_before_build_and_rebuild_without_recompressing():
    builder = BatchBuilder(codec=CODEC_ZSTD)
    for i in range(10):
        builder.append(TS + i, b"key", b"value %d" % i)
    builder.set_producer_state(42, 3, 100)
    first = builder.build()
    builder.set_producer_state(42, 4, 0)
    second = builder.build()
    h1, h2 = validate_batch(first), validate_batch(second)
    assert (h1.producer_id, h1.producer_epoch, h1.base_sequence) == (42, 3, 100)
    assert (h2.producer_id, h2.producer_epoch, h2.base_sequence) == (42, 4, 0)
    assert first[HEADER_SIZE:] == second[HEADER_SIZE:]
    assert h1.last_sequence == 109
    assert decode_records(first)[1] == decode_records(second)[1]


def test_attributes_transactional_control_and_timestamp_type():
    batch = build_batch(
        [(b"k", b"v", (), TS)],
        codec=CODEC_GZIP,
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        timestamp_type=1,
        partition_leader_epoch=12,
    )
    h = validate_batch(batch)
    assert h.is_transactional and not h.is_control
    assert h.codec == CODEC_GZIP and h.timestamp_type == 1
    assert h.partition_leader_epoch == 12


def test_log_append_time_batches_report_max_timestamp_for_every_record():
    batch = bytearray(build_batch([(None, b"a", (), TS), (None, b"b", (), TS + 9)]))
    # The broker stamps LogAppendTime: attribute bit 3 and maxTimestamp, then a fresh CRC.
    header = parse_header(batch)
    struct.pack_into(">h", batch, 21, header.attributes | ATTR_TIMESTAMP_TYPE)
    struct.pack_into(">q", batch, 35, TS + 5000)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    _, records = decode_records(bytes(batch))
    assert [r.timestamp for r in records] == [TS + 5000, TS + 5000]


def test_control_batch_commit_marker():
    key = struct.pack(">hh", 0, CONTROL_COMMIT)
    value = struct.pack(">hi", 0, 5)
    batch = build_batch(
        [(key, value, (), TS)], control=True, transactional=True, producer_id=9, producer_epoch=1
    )
    h, [record] = decode_records(batch)
    assert h.is_control and h.is_transactional
    assert control_record_type(record.key) == CONTROL_COMMIT
    with pytest.raises(CorruptRecordError):
        control_record_type(b"\x00")


def test_compacted_batch_keeps_original_offsets_and_last_offset_delta():
    kept = [Record(1003, TS, b"a", b"1"), Record(1007, TS + 1, b"b", None)]
    batch = build_batch(kept, base_offset=1000, codec=CODEC_LZ4, last_offset_delta=9)
    h, records = decode_records(batch)
    assert records == kept
    assert (h.base_offset, h.last_offset_delta, h.records_count, h.next_offset) == (
        1000,
        9,
        2,
        1010,
    )


@pytest.mark.parametrize("codec", ALL_CODECS, ids=[CODEC_NAMES[c] for c in ALL_CODECS])
def test_empty_batch_after_compaction(codec):
    batch = build_batch(
        [], base_offset=50, last_offset_delta=4, producer_id=3, producer_epoch=0, codec=codec
    )
    h, records = decode_records(batch)
    assert records == []
    assert (h.records_count, h.last_offset, h.base_timestamp, h.max_timestamp) == (0, 54, -1, -1)


def test_record_like_objects_and_tuples_are_accepted():
    class Like:
        def __init__(self, offset, timestamp, key, value, headers):
            self.offset, self.timestamp = offset, timestamp
            self.key, self.value, self.headers = key, value, headers

    batch = build_batch(
        [Like(None, TS, b"a", b"1", [("x", b"y")]), (b"b", bytearray(b"2"), [], TS + 1, 5)]
    )
    _, records = decode_records(batch)
    assert records == [Record(0, TS, b"a", b"1", (("x", b"y"),)), Record(5, TS + 1, b"b", b"2")]


@pytest.mark.parametrize(
    "records, error, match",
    [
        ([(None, "text", (), TS)], TypeError, "value must be bytes"),
        ([(1, b"v", (), TS)], TypeError, "key must be bytes"),
        ([(None, b"v", ((b"k", b"v"),), TS)], TypeError, "header keys must be str"),
        ([(None, b"v", (), 1.5)], TypeError, "timestamp must be an int"),
        ([(None, b"v", (), TS, 5), (None, b"v", (), TS, 5)], ValueError, "must exceed"),
        ([(None, b"v", TS)], ValueError, "record tuples are"),
        ([object()], TypeError, "cannot take a record"),
    ],
)
def test_bad_records_are_refused_with_a_clear_error(records, error, match):
    with pytest.raises(error, match=match):
        build_batch(records)


def test_unknown_codec_is_refused():
    with pytest.raises(UnsupportedCodecError, match="codec id 5"):
        build_batch([(None, b"v", (), TS)], codec=5)


def test_decode_batches_skips_a_partial_tail_like_a_fetch_response():
    a = build_batch([(None, b"a", (), TS)], base_offset=0)
    b = build_batch([(None, b"b", (), TS), (None, b"c", (), TS)], base_offset=1, codec=CODEC_SNAPPY)
    c = build_batch([(None, b"d", (), TS)], base_offset=3)
    decoded = decode_batches(a + b + c[:-5])
    assert [[r.value for r in recs] for _, recs in decoded] == [[b"a"], [b"b", b"c"]]


# -- round trips -----------------------------------------------------------------------

blobs = st.none() | st.binary(max_size=300)
headers_st = st.lists(st.tuples(st.text(max_size=20), blobs), max_size=4).map(tuple)
# Timestamps within 2**61 of zero: any two differ by less than 2**62, so every delta fits
# the varlong (test_build_batch_refuses_a_timestamp_delta_past_int64 covers the rest).
record_st = st.tuples(blobs, blobs, headers_st, st.integers(-(2**61), 2**61))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(record_st, min_size=1, max_size=25),
    codec=st.sampled_from(ALL_CODECS),
    base_offset=st.integers(0, 2**62),
)
def test_round_trip_arbitrary_records_through_every_codec(records, codec, base_offset):
    batch = build_batch(records, codec=codec, base_offset=base_offset)
    header, decoded = decode_records(batch)
    expected = [
        Record(base_offset + i, ts, key, value, headers)
        for i, (key, value, headers, ts) in enumerate(records)
    ]
    assert decoded == expected
    assert header.codec == codec
    assert header.size == len(batch)
    assert header.max_timestamp == max(r[3] for r in records)
    assert header.base_timestamp == records[0][3]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_st, min_size=1, max_size=25), codec=st.sampled_from(ALL_CODECS))
def test_keyless_records_agrees_with_decoding(records, codec):
    batch = build_batch(records, codec=codec)
    assert keyless_records(batch) == [i for i, r in enumerate(records) if r[0] is None]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_st, min_size=1, max_size=25), codec=st.sampled_from(ALL_CODECS),
       gaps=st.lists(st.integers(1, 3), min_size=25, max_size=25),
       pick=st.sets(st.integers(0, 90)))
def test_decode_records_at_agrees_with_decoding_then_filtering(records, codec, gaps, pick):
    # Offsets with gaps, as compaction leaves them; 1000 + the picked offsets.
    offsets = [1000 + sum(gaps[:i]) for i in range(len(records))]
    batch = build_batch([(*r, o) for r, o in zip(records, offsets)], codec=codec,
                        base_offset=1000)
    wanted = {1000 + p for p in pick}
    header, everything = decode_records(batch)
    assert decode_records_at(batch, 0, wanted) == (
        header, [r for r in everything if r.offset in wanted])


def test_keyless_records_golden_and_multi_byte_lengths():
    assert keyless_records(bytes.fromhex(GOLDEN_HEX)) == [1]
    # 3-byte record lengths and timestamp deltas, a key of 200 bytes, an empty key (not null)
    big = build_batch([(None, b"v" * 20_000, (), TS), (b"k" * 200, b"v", (), TS + 10**12),
                       (b"", b"v" * 70_000, (), TS - 10**12), (None, None, (), TS)],
                      codec=CODEC_GZIP)
    assert keyless_records(big) == [0, 3]
    at = len(big)
    assert keyless_records(big + big, at) == [0, 3]


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=30),
    batch_size=st.integers(HEADER_SIZE, 3000),
)
def test_builder_splits_a_stream_into_batches_that_decode_to_it(records, batch_size):
    batches, builder = [], BatchBuilder(batch_size=batch_size)
    for key, value, headers, ts in records:
        if not builder.append(ts, key, value, headers):
            batches.append(builder.build())
            builder = BatchBuilder(batch_size=batch_size)
            assert builder.append(ts, key, value, headers)
    batches.append(builder.build())
    decoded = []
    for batch in batches:
        _, recs = decode_records(batch)
        assert len(batch) <= batch_size or len(recs) == 1
        decoded += [(r.key, r.value, r.headers, r.timestamp) for r in recs]
    assert decoded == list(records)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(record_st, min_size=1, max_size=30),
    batch_size=st.integers(HEADER_SIZE, 3000),
    ts_jump=st.booleans(),
)
def test_append_many_writes_the_same_bytes_as_append_one_by_one(records, batch_size, ts_jump):
    """The bulk path and the per-record path fill batches identically, byte for byte,
    stopping at the same record (batch.size, or a timestamp delta beyond a varlong)."""
    rows = [(ts, key, value, headers) for key, value, headers, ts in records]
    if ts_jump and len(rows) > 2:
        rows[2] = (2**63 - 1 if rows[0][0] < 0 else -(2**63), *rows[2][1:])
    one_by_one, bulk = [], []
    builder = BatchBuilder(batch_size=batch_size)
    for row in rows:
        if not builder.append(*row):
            one_by_one.append(builder.build())
            builder = BatchBuilder(batch_size=batch_size)
            assert builder.append(*row)
    one_by_one.append(builder.build())
    start = 0
    while start < len(rows):
        builder = BatchBuilder(batch_size=batch_size)
        stop = builder.append_many(rows, start)
        assert stop > start  # an empty batch always takes the next record
        bulk.append(builder.build())
        start = stop
    assert bulk == one_by_one


def test_append_many_refuses_a_bad_timestamp_like_append():
    builder = BatchBuilder()
    with pytest.raises(TypeError, match="timestamp must be an int"):
        builder.append_many([(1.5, None, b"v", ())])
    assert builder.append_many([(1, None, b"v", ()), ("x", None, b"v", ())]) == 1


# -- malformed input: CorruptRecordError and nothing else --------------------------------


def _sample_batches():
    yield bytes.fromhex(GOLDEN_HEX)
    for codec in ALL_CODECS:
        yield build_batch(
            [(b"key%d" % i, b"value " * i, (("h", b"x"),), TS + i) for i in range(20)],
            codec=codec,
        )


@pytest.mark.parametrize(
    "batch", list(_sample_batches()), ids=["golden"] + [CODEC_NAMES[c] for c in ALL_CODECS]
)
def test_every_truncation_is_corrupt(batch):
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            decode_records(batch[:cut])


@pytest.mark.parametrize(
    "batch", list(_sample_batches()), ids=["golden"] + [CODEC_NAMES[c] for c in ALL_CODECS]
)
def test_every_flipped_byte_under_the_crc_is_corrupt(batch):
    for pos in range(8, len(batch)):
        if 12 <= pos < 16:
            continue  # partitionLeaderEpoch: outside the CRC by design, rewritten by brokers
        mutated = bytearray(batch)
        mutated[pos] ^= 0x41
        with pytest.raises(CorruptRecordError):
            decode_records(bytes(mutated))


def _with_payload(batch: bytes, payload: bytes, records_count: int | None = None) -> bytes:
    """The batch with another payload, its length, count and CRC made consistent again."""
    out = bytearray(batch[:HEADER_SIZE] + payload)
    struct.pack_into(">i", out, 8, len(out) - 12)
    if records_count is not None:
        struct.pack_into(">i", out, 57, records_count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@settings(max_examples=400, deadline=None)
@given(
    which=st.integers(0, len(ALL_CODECS)),
    data=st.data(),
)
def test_mangled_payload_with_a_valid_crc_decodes_or_is_corrupt(which, data):
    batch = list(_sample_batches())[which]
    payload = bytearray(batch[HEADER_SIZE:])
    for _ in range(data.draw(st.integers(1, 4))):
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, max(len(payload) - 1, 0)))
        if action == "flip" and payload:
            payload[pos] = data.draw(st.integers(0, 255))
        elif action == "insert":
            payload[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del payload[pos : pos + data.draw(st.integers(1, 8))]
        else:
            del payload[pos:]
    count = data.draw(st.none() | st.integers(-1, 2**31 - 1))
    mangled = _with_payload(batch, bytes(payload), count)
    try:
        keyless = keyless_records(mangled)  # reads less, so may pass where decoding fails
        assert all(0 <= i < parse_header(mangled).records_count for i in keyless)
    except CorruptRecordError:
        pass
    try:
        header, records = decode_records(mangled)
    except CorruptRecordError:
        return
    assert len(records) == header.records_count


@settings(max_examples=300, deadline=None)
@given(garbage=st.binary(max_size=200), fix_crc=st.booleans())
def test_arbitrary_bytes_are_corrupt_or_a_valid_batch(garbage, fix_crc):
    buf = bytearray(garbage)
    if fix_crc and len(buf) >= HEADER_SIZE:
        buf[16] = 2
        struct.pack_into(">i", buf, 8, len(buf) - 12)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:])))
    try:
        decode_records(bytes(buf))
    except CorruptRecordError:
        pass


def test_corrupt_error_names_the_problem():
    golden = bytes.fromhex(GOLDEN_HEX)
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        decode_records(golden[:-1] + b"\x01")
    with pytest.raises(CorruptRecordError, match="bytes left after its 2 records"):
        decode_records(_with_payload(golden, golden[HEADER_SIZE:], records_count=2))
    with pytest.raises(CorruptRecordError, match="invalid zstd data"):
        zstd_batch = build_batch([(None, b"v", (), TS)], codec=CODEC_ZSTD)
        decode_records(_with_payload(zstd_batch, b"not a zstd frame"))


def test_builder_starts_a_new_batch_when_the_timestamp_delta_overflows():
    # found by hypothesis: timestamp deltas are varlongs, so records 2**63 ms apart cannot
    # share a batch; the builder must refuse the second one rather than raise
    builder = BatchBuilder(batch_size=1 << 20)
    assert builder.append(-(2**62), None, None)
    assert not builder.append(2**62, None, None)
    second = BatchBuilder(batch_size=1 << 20)
    assert second.append(2**62, None, None)
    assert [r.timestamp for r in decode_records(builder.build())[1]] == [-(2**62)]
    assert [r.timestamp for r in decode_records(second.build())[1]] == [2**62]


def test_build_batch_refuses_a_timestamp_delta_past_int64():
    """A record is never dropped silently: one whose timestamp delta from the batch's first
    record overflows int64 makes build_batch fail, naming the timestamp."""
    with pytest.raises(ValueError, match=str(2**62)):
        build_batch([(None, None, (), -(2**62)), (None, None, (), 2**62)])
