"""Fetch semantics over the wire: long poll woken by appends, byte limits, offset errors."""

from __future__ import annotations

import datetime
import threading
import time
import uuid

import pytest

from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.fetch_encoding import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    encode_fetch_body,
)
from databus.protocol.records import build_batch, iter_headers

from .test_api_versions import create_topic, make, metadata, req
from .wire import WireClient

MS = datetime.timedelta(milliseconds=1)
VERSION = 11


def fetch_request(topic, offsets: dict[int, int], *, version=VERSION, max_wait_ms=100,
                  min_bytes=1, max_bytes=1 << 20, partition_max_bytes=1 << 20,
                  isolation_level=0, topic_id=None):
    """A sessionless Fetch of ``topic`` (v13+: by ``topic_id``)."""
    mod = req(1, version)
    return make(
        1, version, replica_id=-1, max_wait=max_wait_ms * MS, min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=isolation_level, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id="",
        topics=(build(mod.FetchTopic, topic=topic, topic_id=topic_id, partitions=tuple(
            build(mod.FetchPartition, partition=p, fetch_offset=o,
                  partition_max_bytes=partition_max_bytes, current_leader_epoch=-1,
                  log_start_offset=-1)
            for p, o in offsets.items())),),
    )


def fetch(client, topic, offsets: dict[int, int], **kwargs):
    response = client.request(fetch_request(topic, offsets, **kwargs))
    return {p.partition_index: p for p in response.responses[0].partitions}


def batch_of(n: int, size: int = 100) -> bytes:
    return build_batch([(None, bytes([i % 256]) * size, (), 1_700_000_000_000)
                        for i in range(n)])


def produce_to(client, topic, partition, data):
    mod = req(0, 7)
    response = client.request(make(
        0, 7, acks=1, timeout=5000 * MS, transactional_id=None,
        topic_data=(build(mod.TopicProduceData, name=topic, partition_data=(
            build(mod.PartitionProduceData, index=partition, records=data),)),),
    ))
    part = response.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none
    return part.base_offset


@pytest.fixture
def client(broker):
    with WireClient(broker.bootstrap, timeout=200) as wire:
        yield wire


def test_long_poll_is_woken_by_an_append(broker, client):
    metadata(client, ["poll-wake"])
    result = {}

    def waiting_fetch():
        with WireClient(broker.bootstrap, timeout=200) as waiter:
            # max_wait of 150 s: only an append can end this wait with data in time for
            # the assertion (on the deadline it would come back empty)
            result["parts"] = fetch(waiter, "poll-wake", {0: 0}, max_wait_ms=150_000)

    thread = threading.Thread(target=waiting_fetch)
    thread.start()
    try:
        time.sleep(0.5)  # let the fetch park (if it comes later it simply finds the data)
        produce_to(client, "poll-wake", 0, batch_of(3))
        # woken by the append, the fetch answers long before its 150 s deadline would
        thread.join(60)
        assert not thread.is_alive(), "the parked fetch was not woken by the append"
    finally:
        thread.join(200)
    part = result["parts"][0]
    assert part.error_code == ErrorCode.none and part.high_watermark == 3
    assert [h.records_count for _, h in iter_headers(part.records)] == [3]


def test_min_bytes_not_reached_returns_what_there_is_at_max_wait(client):
    metadata(client, ["poll-minbytes"])
    produce_to(client, "poll-minbytes", 0, batch_of(2))
    part = fetch(client, "poll-minbytes", {0: 0}, min_bytes=10 << 20, max_wait_ms=200)[0]
    assert [h.records_count for _, h in iter_headers(part.records)] == [2]


def test_first_partition_gets_one_whole_batch_beyond_max_bytes(client):
    metadata(client, ["limits"])  # auto-created with 1 partition; add one
    mod = req(37, 3)
    client.request(make(37, 3, timeout=10000 * MS, validate_only=False, topics=(
        build(mod.CreatePartitionsTopic, name="limits", count=2, assignments=None),)))
    big = batch_of(50, size=1000)  # ~50 KB
    produce_to(client, "limits", 0, big)
    produce_to(client, "limits", 0, batch_of(5))
    produce_to(client, "limits", 1, batch_of(5))
    parts = fetch(client, "limits", {0: 0, 1: 0}, max_bytes=1000)
    # partition 0: the whole first batch although it is 50x max_bytes, and nothing more
    assert [h.records_count for _, h in iter_headers(parts[0].records)] == [50]
    # partition 1: the budget is spent, so nothing, but no error and the right watermark
    assert (parts[1].error_code, len(parts[1].records), parts[1].high_watermark) == (0, 0, 5)
    # partition_max_bytes below the batch size still returns that one batch
    parts = fetch(client, "limits", {0: 0}, partition_max_bytes=10)
    assert [h.records_count for _, h in iter_headers(parts[0].records)] == [50]
    # enough room for both batches of partition 0
    parts = fetch(client, "limits", {0: 0, 1: 0}, max_bytes=10 << 20)
    assert [h.records_count for _, h in iter_headers(parts[0].records)] == [50, 5]
    assert [h.records_count for _, h in iter_headers(parts[1].records)] == [5]


def test_offsets_outside_the_log_are_out_of_range(client):
    metadata(client, ["ranges"])
    produce_to(client, "ranges", 0, batch_of(4))
    parts = fetch(client, "ranges", {0: 5})
    assert parts[0].error_code == ErrorCode.offset_out_of_range
    at_end = fetch(client, "ranges", {0: 4}, max_wait_ms=0)[0]
    assert (at_end.error_code, len(at_end.records), at_end.high_watermark,
            at_end.last_stable_offset, at_end.log_start_offset) == (0, 0, 4, 4, 0)
    mid_batch = fetch(client, "ranges", {0: 2})[0]
    assert [h.base_offset for _, h in iter_headers(mid_batch.records)] == [0]


@pytest.mark.parametrize("isolation_level", [0, 1])
@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_error_and_empty_partitions_on_the_wire(broker, client, version, isolation_level):
    """The broker's own bytes for out of range, unknown partition, unknown topic and an empty
    partition are Kafka's: empty records (never null), -1 offsets on errors, aborted
    transactions null for read_uncommitted and [] for read_committed.  The encoder that
    wrote these is pinned by golden bytes (test_fetch_encoding.py)."""
    topic = f"wire-errors-{version}-{isolation_level}"
    create_topic(client, topic, partitions=2)
    produce_to(client, topic, 0, batch_of(4))
    cases = [
        (topic, {0: 500, 1: 0, 7: 0}),  # out of range, empty (at the end), unknown partition
        (f"never-created-{version}", {0: 0}),  # unknown topic (a fetch never creates one)
    ]
    empty_aborted = () if isolation_level else None
    # v13+ address topics by id: the topic's own, and one no topic has (UNKNOWN_TOPIC_ID)
    ids = [metadata(client, [topic], version=12).topics[0].topic_id, uuid.uuid4()]
    by_id = version >= 13
    expected = [
        [(ids[0] if by_id else topic, [
            PartitionResult(0, ErrorCode.offset_out_of_range),
            PartitionResult(1, 0, 0, 0, 0, empty_aborted),
            PartitionResult(7, ErrorCode.unknown_topic_or_partition)])],
        [(ids[1] if by_id else cases[1][0], [PartitionResult(
            0, ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition)])],
    ]
    for (name, offsets), want, topic_id in zip(cases, expected, ids, strict=True):
        correlation = client.send(fetch_request(name, offsets, version=version, max_wait_ms=0,
                                                isolation_level=isolation_level,
                                                topic_id=topic_id))
        frame = client.read_frame()
        header = 4 + (1 if version >= 12 else 0)  # correlation id (+ tagged fields)
        assert frame[:4] == correlation.to_bytes(4, "big")
        assert frame[header:].hex() == b"".join(encode_fetch_body(version, want)).hex()


def test_unknown_partition(client):
    metadata(client, ["ranges2"])
    parts = fetch(client, "ranges2", {7: 0})
    assert parts[7].error_code == ErrorCode.unknown_topic_or_partition


def test_broker_fetch_max_bytes_caps_what_a_client_asks_for(tmp_path):
    from tests.helpers.broker import BrokerProcess

    with BrokerProcess(tmp_path, {"fetch.max.bytes": 4096}) as capped, \
            WireClient(capped.bootstrap) as client:
        metadata(client, ["capped"])
        for _ in range(5):
            produce_to(client, "capped", 0, batch_of(10, size=200))  # ~2.1 KB each
        parts = fetch(client, "capped", {0: 0}, max_bytes=1 << 30, partition_max_bytes=1 << 30)
        sizes = [h.size for _, h in iter_headers(parts[0].records)]
        assert len(sizes) == 1 and sum(sizes) <= 4096
