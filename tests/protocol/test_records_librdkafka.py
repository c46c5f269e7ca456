"""Batches written by librdkafka (confluent-kafka), captured from its built-in mock cluster.

librdkafka's encodings differ from the Java client's in the ways our decoder must tolerate:
its snappy is one raw block (no xerial framing) and its zstd frames come from a streaming
compressor.  The mock broker stores produced batches as sent, so a raw Fetch (our framing on
kio, over a plain socket) returns librdkafka's own bytes.
"""

import datetime
import socket
import struct

import pytest
import zstandard
from confluent_kafka import Producer
from kio.schema.fetch.v4 import FetchRequest, FetchResponse
from kio.schema.fetch.v4.request import FetchPartition, FetchTopic

from databus.protocol.codecs import XERIAL_HEADER
from databus.protocol.framing import decode_response, encode_request
from databus.protocol.records import CODEC_BY_NAME, HEADER_SIZE, decode_batches, iter_headers

TS = 1_700_000_000_000
MESSAGES = [
    (b"key-%d" % i, b"librdkafka value %d " % i * 20, [("h", b"%d" % i), ("null", None)])
    for i in range(50)
]


def _raw_fetch(host: str, port: int, topic: str, partition: int) -> bytes:
    request = FetchRequest(
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        max_bytes=10 << 20,
        isolation_level=0,
        topics=(
            FetchTopic(
                topic=topic,
                partitions=(
                    FetchPartition(
                        partition=partition, fetch_offset=0, partition_max_bytes=10 << 20
                    ),
                ),
            ),
        ),
    )
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(encode_request(request, correlation_id=1, client_id="records-test"))
        size_bytes = _read_exactly(sock, 4)
        frame = _read_exactly(sock, struct.unpack(">i", size_bytes)[0])
    correlation_id, response = decode_response(frame, FetchResponse.__api_key__, 4)
    assert correlation_id == 1
    [topic_response] = response.responses
    [partition_response] = topic_response.partitions
    assert partition_response.error_code == 0
    return partition_response.records


def _read_exactly(sock, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("mock broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize("codec_name", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_librdkafka_batches_decode(codec_name):
    topic = f"librdkafka-{codec_name}"
    producer = Producer(
        {
            "test.mock.num.brokers": 1,
            "compression.type": codec_name,
            "linger.ms": 50,
            "enable.idempotence": True,
        }
    )
    try:
        for key, value, headers in MESSAGES:
            producer.produce(
                topic, value=value, key=key, headers=headers, partition=0, timestamp=TS
            )
        assert producer.flush(30) == 0
        metadata = producer.list_topics(topic, timeout=10)
        leader = metadata.topics[topic].partitions[0].leader
        broker = metadata.brokers[leader]
        raw = _raw_fetch(broker.host, broker.port, topic, 0)
    finally:
        producer.flush(5)
        del producer  # the mock cluster lives as long as its producer
    payloads = [raw[pos + HEADER_SIZE : pos + h.size] for pos, h in iter_headers(raw)]
    if codec_name == "snappy":  # the reason decompress sniffs: no xerial framing here
        assert not any(p.startswith(XERIAL_HEADER[:8]) for p in payloads)
    if codec_name == "zstd":  # streaming frames: no content size to size the output with
        assert all(
            zstandard.get_frame_parameters(p).content_size == zstandard.CONTENTSIZE_UNKNOWN
            for p in payloads
        )
    batches = decode_batches(raw)
    assert batches, "the mock broker returned no batch"
    assert {h.codec for h, _ in batches} == {CODEC_BY_NAME[codec_name]}
    assert all(h.producer_id >= 0 and h.base_sequence >= 0 for h, _ in batches)
    records = [r for _, recs in batches for r in recs]
    assert [r.offset for r in records] == list(range(len(MESSAGES)))
    assert [(r.key, r.value, list(r.headers)) for r in records] == MESSAGES
    assert all(r.timestamp == TS for r in records)
