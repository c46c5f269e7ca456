import os
import struct
import threading

import pytest

from databus.protocol.records import (
    CorruptRecordError,
    RecordTooLargeError,
    decode_batches,
    iter_headers,
    parse_header,
)
from databus.storage.errors import InvalidRecordError, OffsetOutOfRangeError, kafka_error_code

from .conftest import batch


def offsets_of(data: bytes) -> list[int]:
    return [r.offset for _h, records in decode_batches(data) for r in records]


def test_append_assigns_offsets_and_read_returns_identical_bytes(open_log):
    plog = open_log()
    b1, b2 = batch([b"a", b"b", b"c"]), batch([b"d"])
    info = plog.append(b1 + b2)
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 3, 4)
    assert [base for base, _ in info.batches] == [0, 3]
    assert plog.log_end_offset == 4
    info = plog.append(batch([b"e", b"f"]))
    assert (info.first_offset, info.last_offset) == (4, 5)
    data = plog.read(0, 1 << 20)
    assert offsets_of(data) == [0, 1, 2, 3, 4, 5]
    # bytes are stored as sent, except the base offset (outside the CRC)
    assert data[8:len(b1)] == b1[8:]
    assert parse_header(data).base_offset == 0


def test_read_starts_at_the_batch_holding_the_offset_and_returns_whole_batches(open_log):
    plog = open_log()
    sizes = []
    for _i in range(5):
        b = batch([b"x" * 10] * 3)
        sizes.append(len(b))
        plog.append(b)
    # offset 4 is inside the second batch (3..5)
    data = plog.read(4, 1)
    assert len(data) == sizes[1], "at least one whole batch even above max_bytes"
    assert parse_header(data).base_offset == 3
    data = plog.read(4, sizes[1] * 2 + 5)
    assert [h.base_offset for _, h in iter_headers(data)] == [3, 6]
    assert plog.read(15, 100) == b""
    assert [h.base_offset for _, h in iter_headers(plog.read(0, 1 << 20, max_offset=9))] == [0, 3, 6]
    assert plog.read(9, 1 << 20, max_offset=9) == b""
    with pytest.raises(OffsetOutOfRangeError, match="offset 16 is outside t-0's range"):
        plog.read(16, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)


def test_bad_batch_anywhere_in_the_request_appends_nothing(open_log):
    plog = open_log(max_message_bytes=500)
    plog.append(batch([b"ok"]))
    good = batch([b"x"])
    corrupt = bytearray(batch([b"y"]))
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C") as exc:
        plog.append(good + bytes(corrupt))
    assert kafka_error_code(exc.value) == 2
    with pytest.raises(CorruptRecordError, match="claims"):
        plog.append(good + good[:-3])
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        plog.append(bytes(bad_magic))
    with pytest.raises(RecordTooLargeError, match="max.message.bytes=500") as exc:
        plog.append(good + batch([b"z" * 600]))
    assert kafka_error_code(exc.value) == 10
    lying = bytearray(batch([b"a", b"b"]))
    struct.pack_into(">i", lying, 23, 5)  # lastOffsetDelta 5 but 2 records (CRC fixed below)
    import crc32c
    struct.pack_into(">I", lying, 17, crc32c.crc32c(bytes(lying[21:])))
    with pytest.raises(InvalidRecordError, match="2 records but lastOffsetDelta 5"):
        plog.append(bytes(lying))
    with pytest.raises(InvalidRecordError):
        plog.append(b"")
    assert plog.log_end_offset == 1
    assert offsets_of(plog.read(0, 1 << 20)) == [0]
    assert plog.active_segment.size == len(batch([b"ok"]))


def test_roll_by_segment_bytes_and_reads_across_segments(open_log):
    plog = open_log(segment_bytes=300)
    for i in range(12):
        plog.append(batch([b"%03d" % i] * 2))
    assert len(plog.segments) > 3
    names = sorted(os.listdir(plog.directory))
    bases = [s.base_offset for s in plog.segments]
    for base in bases:
        assert f"{base:020d}.log" in names and f"{base:020d}.index" in names
        assert f"{base:020d}.timeindex" in names
    for offset in range(24):
        data = plog.read(offset, 1)
        h = parse_header(data)
        assert h.base_offset <= offset <= h.base_offset + h.last_offset_delta


def test_roll_by_segment_ms_uses_batch_timestamps(open_log, clock):
    plog = open_log(segment_ms=1000)
    plog.append(batch(ts=10_000))
    plog.append(batch(ts=10_900))
    assert len(plog.segments) == 1
    plog.append(batch(ts=11_001))
    assert len(plog.segments) == 2 and plog.active_segment.base_offset == 2


def test_roll_by_segment_ms_without_timestamps_uses_creation_time(open_log, clock):
    plog = open_log(segment_ms=1000)
    plog.append(batch(ts=-1))
    clock.ms += 999
    plog.append(batch(ts=-1))
    assert len(plog.segments) == 1
    clock.ms += 2
    plog.append(batch(ts=-1))
    assert len(plog.segments) == 2


def test_offset_for_timestamp(open_log):
    plog = open_log(segment_bytes=400, index_interval_bytes=50)
    expected = {}
    for i in range(20):
        plog.append(batch([b"r"] * 2, ts=1000 + 10 * i))  # batch i: offsets 2i, 2i+1; max 1000+10i+1
        expected[i] = 2 * i
    assert plog.offset_for_timestamp(0) == (0, 1001)
    assert plog.offset_for_timestamp(1001) == (0, 1001)
    assert plog.offset_for_timestamp(1002) == (2, 1011)
    assert plog.offset_for_timestamp(1105) == (22, 1111)
    assert plog.offset_for_timestamp(1191) == (38, 1191)
    assert plog.offset_for_timestamp(1192) is None


def test_log_append_time_rewrites_header_and_keeps_crc_valid(open_log):
    plog = open_log(message_timestamp_type="LogAppendTime")
    info = plog.append(batch([b"a", b"b"], ts=5), now_ms=123456)
    assert info.log_append_time == 123456
    data = plog.read(0, 1000)
    (h, records), = decode_batches(data)  # decode_batches checks the CRC
    assert h.max_timestamp == 123456 and h.timestamp_type == 1
    assert [r.timestamp for r in records] == [123456, 123456]


def test_flush_advances_recovery_point_and_needs_flush_policy(open_log, clock):
    plog = open_log(flush_interval_messages=3)
    assert not plog.needs_flush()
    plog.append(batch([b"a", b"b"]))
    assert not plog.needs_flush() and plog.recovery_point == 0 and not plog.is_durable(0)
    plog.append(batch([b"c"]))
    assert plog.needs_flush()
    assert plog.flush() == 3 and plog.is_durable(2) and not plog.needs_flush()
    plog2 = open_log(flush_interval_ms=1000)
    plog2.append(batch())
    assert not plog2.needs_flush()
    clock.ms += 1000
    assert plog2.needs_flush()


def test_flush_on_another_thread_while_appending_and_rolling(open_log):
    plog = open_log(segment_bytes=2000)
    stop = threading.Event()
    points = []
    errors = []

    def flusher():
        try:
            while not stop.is_set():
                points.append(plog.flush())
        except BaseException as exc:  # noqa: BLE001  (asserted below)
            errors.append(exc)

    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for i in range(400):
            plog.append(batch([b"%d" % i] * 3))
    finally:
        stop.set()
        thread.join()
    assert not errors
    assert points == sorted(points), "the recovery point never goes back"
    assert plog.flush() == 1200
    offset = 0
    while offset < plog.log_end_offset:
        got = offsets_of(plog.read(offset, 1 << 20))
        assert got == list(range(offset, offset + len(got)))
        offset += len(got)


def test_roll_when_the_indexes_are_full(open_log):
    plog = open_log(segment_index_bytes=24, index_interval_bytes=0)  # 3 offset entries
    for i in range(10):
        plog.append(batch([b"%d" % i]))
    # first batch of a segment is not indexed, the next 3 are: 4 batches per segment
    assert [s.base_offset for s in plog.segments] == [0, 4, 8]
    assert all(len(s.index) <= 3 for s in plog.segments)


def test_append_with_given_offsets(open_log):
    plog = open_log()
    plog.append(batch([b"a"], base_offset=10), assign_offsets=False)
    assert plog.log_end_offset == 11
    with pytest.raises(InvalidRecordError, match="offset 5, below the log end offset 11"):
        plog.append(batch([b"b"], base_offset=5), assign_offsets=False)
    plog.append(batch([b"c", b"d"], base_offset=20), assign_offsets=False)
    assert plog.log_end_offset == 22
    assert parse_header(plog.read(15, 1)).base_offset == 20, "a gap reads as the next batch"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib use
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_batches_from_a_real_client_are_stored_and_read_back(open_log, codec):
    """kafka-python's own RecordBatch v2 builder (every codec), idempotent fields set."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def client_batch(seq):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec,
                                            is_transactional=False, producer_id=77,
                                            producer_epoch=0, base_sequence=seq,
                                            batch_size=1 << 20)
        for i in range(5):
            builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i,
                           value=b"value %d" % (seq + i) * 20, headers=[("h", b"x")])
        return bytes(builder.build())

    plog = open_log()
    first, second = client_batch(0), client_batch(5)
    assert plog.append(first).last_offset == 4
    assert plog.append(second).first_offset == 5
    assert plog.append(second).duplicate
    data = plog.read(0, 1 << 20)
    assert data == first + second[:7] + b"\x05" + second[8:]
    (h1, r1), (_h2, r2) = decode_batches(data)
    assert h1.codec == codec and [r.offset for r in r1 + r2] == list(range(10))
    assert r2[0].headers == (("h", b"x"),)


def test_compacted_log_refuses_records_without_a_key_and_appends_nothing(open_log):
    from databus.protocol.records import CODEC_GZIP, build_batch
    from databus.storage.errors import RecordValidationError

    plog = open_log(cleanup_policy="compact")
    plog.append(build_batch([(b"k0", b"v0", (), 1_000)]))
    first = build_batch([(b"k1", b"v1", (), 1_000), (None, b"v2", (), 1_001)])
    second = build_batch([(None, b"v3", (), 1_002), (b"k4", None, (), 1_003)], codec=CODEC_GZIP)
    with pytest.raises(RecordValidationError) as refused:
        plog.append(first + second)
    # indexes count records from the first of the append; the tombstone (key, no value) is fine
    assert [i for i, _m in refused.value.record_errors] == [1, 2]
    assert all(m == "Compacted topic cannot accept message without key in topic partition t-0."
               for _i, m in refused.value.record_errors)
    assert "rejected due to 2 record errors" in str(refused.value)
    assert kafka_error_code(refused.value) == 87  # INVALID_RECORD
    assert plog.log_end_offset == 1, "nothing of the refused append is stored"
    assert offsets_of(plog.read(0, 1 << 20)) == [0]


def test_keys_are_checked_only_while_the_log_is_compacted(open_log):
    import dataclasses

    from databus.protocol.records import build_batch
    from databus.storage.errors import RecordValidationError

    plog = open_log()  # cleanup.policy=delete: records stay opaque, a keyless one is stored
    keyless = build_batch([(None, b"v", (), 1_000)])
    assert plog.append(keyless).first_offset == 0
    plog.config = dataclasses.replace(plog.config, cleanup_policy="compact,delete")
    with pytest.raises(RecordValidationError):
        plog.append(keyless)
    assert plog.append(build_batch([(b"k", b"v", (), 1_000)])).first_offset == 1


@pytest.mark.parametrize("topic_codec", ["lz4", "uncompressed", "zstd"])
def test_topic_compression_type_recompresses_batches_in_another_codec(open_log, topic_codec):
    """compression.type other than producer: batches arrive gzip / none / zstd and are
    stored in the topic's codec with their records, offsets and producer fields intact."""
    from databus.protocol.records import CODEC_BY_NAME, decode_batches, parse_header

    plog = open_log(compression_type=topic_codec)
    want = CODEC_BY_NAME["none" if topic_codec == "uncompressed" else topic_codec]
    sent = [batch([b"a%d" % i for i in range(5)], codec=c, producer_id=7, producer_epoch=0,
                  base_sequence=5 * n)
            for n, c in enumerate((1, 0, 4))]
    for data in sent:
        plog.append(data)
    stored = plog.read(0, 1 << 20)
    got = decode_batches(stored)
    assert [h.codec for h, _ in got] == [want] * 3
    assert [(h.base_offset, h.producer_id, h.base_sequence) for h, _ in got] == [
        (0, 7, 0), (5, 7, 5), (10, 7, 10)]
    assert [[r.value for r in rs] for _, rs in got] == [[b"a%d" % i for i in range(5)]] * 3
    assert parse_header(stored).records_count == 5
    # the idempotence state follows the rebuilt batches: a retry is still a duplicate
    assert plog.append(sent[2]).duplicate
