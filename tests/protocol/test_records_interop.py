"""Golden interop: batches written by real Kafka clients' record code (kafka-python's pure
Python DefaultRecordBatchBuilder, aiokafka's compiled one) decode with ours, and ours decode
with theirs, for every codec; byte-identical where the format is deterministic (codec none)."""

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from databus.protocol.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    Record,
    build_batch,
    decode_records,
)

TS = 1_700_000_000_000
CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
IDS = [CODEC_NAMES[c] for c in CODECS]


def sample_records(n=200):
    """Compressible records (so the clients keep the codec), with the awkward cases: null
    key, null value, empty value, headers with a null value, non-ASCII header keys, a big
    value that spans several snappy/lz4 blocks, timestamps out of order."""
    records = []
    for i in range(n):
        key = None if i % 7 == 0 else b"user-%d" % (i % 13)
        value = None if i % 11 == 5 else (b"" if i % 17 == 3 else b"payload %05d " % i * 8)
        headers = [] if i % 3 else [("trace-id", b"%032x" % i), ("zoné", None)]
        records.append(Record(i, TS + (i * 37) % 1000, key, value, tuple(headers)))
    records.append(Record(n, TS - 5, b"big", bytes(range(256)) * 800, ()))
    return records


RECORDS = sample_records()


def _fill(builder):
    for r in RECORDS:
        meta = builder.append(
            r.offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers)
        )
        assert meta is not None
    return bytes(builder.build())


def _as_records(theirs):
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_kafka_python_batch_decodes_with_ours(codec):
    batch = _fill(KpBuilder(2, codec, False, 4000, 1, 50, 1 << 30))
    header, records = decode_records(batch)
    assert header.codec == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4000, 1, 50)
    assert records == RECORDS


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_aiokafka_batch_decodes_with_ours(codec):
    batch = _fill(AioBuilder(2, codec, 0, -1, -1, -1, 1 << 30))
    header, records = decode_records(batch)
    assert header.codec == codec
    assert records == RECORDS


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_our_batch_decodes_with_kafka_python(codec):
    unnumbered = [(r.key, r.value, r.headers, r.timestamp) for r in RECORDS]
    batch = build_batch(
        unnumbered, codec=codec, base_offset=1000, producer_id=9, producer_epoch=0, base_sequence=0
    )
    theirs = KpBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert _as_records(theirs) == [r._replace(offset=r.offset + 1000) for r in RECORDS]
    assert (theirs.producer_id, theirs.base_sequence, theirs.last_offset_delta) == (
        9,
        0,
        len(RECORDS) - 1,
    )


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_our_batch_decodes_with_aiokafka(codec):
    batch = build_batch(RECORDS, codec=codec)
    theirs = AioBatch(batch)
    assert theirs.validate_crc()
    assert theirs.compression_type == codec
    assert _as_records(theirs) == RECORDS


@pytest.mark.parametrize(
    "builder_cls, leader_epoch",
    # the clients leave partitionLeaderEpoch for the broker: kafka-python writes 0, aiokafka -1
    [(KpBuilder, 0), (AioBuilder, -1)],
    ids=["kafka-python", "aiokafka"],
)
def test_uncompressed_batches_are_byte_identical(builder_cls, leader_epoch):
    theirs = _fill(builder_cls(2, CODEC_NONE, 0, 77, 3, 1000, 1 << 30))
    ours = build_batch(
        RECORDS,
        producer_id=77,
        producer_epoch=3,
        base_sequence=1000,
        partition_leader_epoch=leader_epoch,
    )
    assert ours == theirs


def test_transactional_batch_matches_kafka_python():
    builder = KpBuilder(2, CODEC_NONE, True, 5, 0, 0, 1 << 30)
    builder.append(0, timestamp=TS, key=b"k", value=b"v", headers=[])
    theirs = bytes(builder.build())
    ours = build_batch(
        [(b"k", b"v", (), TS)],
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
        partition_leader_epoch=0,
    )
    assert ours == theirs
