"""Every version the broker advertises for its own APIs is exercised here over the wire.

The parametrization comes from the broker's handler table, so advertising a new version without
teaching this test to exercise it fails.  Each exercise checks real behaviour (the produced
batch comes back from Fetch, a created topic shows up in Metadata, ...), not just "no error".
"""

from __future__ import annotations

import datetime
import struct
import sys
import time
import uuid

import pytest

from databus.broker.handlers import handler_table
from databus.protocol.entities import build
from databus.protocol.errors import ErrorCode
from databus.protocol.framing import request_schema
from databus.protocol.records import build_batch, parse_header

from .wire import WireClient

BROKER_MODULES = {
    "databus.broker.handlers.api_versions", "databus.broker.handlers.metadata",
    "databus.broker.handlers.produce", "databus.broker.handlers.fetch",
    "databus.broker.handlers.list_offsets", "databus.broker.handlers.admin",
    "databus.broker.handlers.init_producer_id",
    "databus.broker.handlers.delete_records", "databus.broker.handlers.partitions",
    "databus.broker.handlers.telemetry", "databus.broker.handlers.reassignments",
}
TABLE = handler_table()
OURS = [r for r in TABLE.values() if r.handler.__module__ in BROKER_MODULES]
CASES = [(r.api_key, v) for r in OURS for v in range(r.min_version, r.max_version + 1)]
ZERO_UUID = uuid.UUID(int=0)
MS = datetime.timedelta(milliseconds=1)


def req(api_key: int, version: int):
    return sys.modules[request_schema(api_key, version).__module__]


def make(api_key: int, version: int, **fields):
    return build(request_schema(api_key, version), **fields)


def metadata(client, topics, version=9, allow=True):
    mod = req(3, version)
    return client.request(make(
        3, version, allow_auto_topic_creation=allow, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
        topics=tuple(build(mod.MetadataRequestTopic, name=t, topic_id=ZERO_UUID) for t in topics),
    ))


def create_topic(client, name, partitions=1, configs=(), version=5):
    mod = req(19, version)
    return client.request(make(
        19, version, timeout=10000 * MS, validate_only=False,
        topics=(build(mod.CreatableTopic, name=name, num_partitions=partitions,
                      replication_factor=1, assignments=(),
                      configs=tuple(build(mod.CreatableTopicConfig, name=k, value=v)
                                    for k, v in configs)),),
    ))


def produce(client, topic, batch, version=7, acks=1):
    mod = req(0, version)
    # v13+ names the topic by id (KIP-516)
    topic_id = metadata(client, [topic], version=12).topics[0].topic_id if version >= 13 else None
    return client.request(make(
        0, version, acks=acks, timeout=5000 * MS, transactional_id=None,
        topic_data=(build(mod.TopicProduceData, name=topic, topic_id=topic_id, partition_data=(
            build(mod.PartitionProduceData, index=0, records=batch),)),),
    ))


def a_batch(n=3, tag=b"x"):
    return build_batch([(b"k%d" % i, tag + b"%d" % i, (), 1_700_000_000_000 + i)
                        for i in range(n)])


@pytest.fixture(scope="module")
def client(broker):
    with WireClient(broker.bootstrap) as wire:
        yield wire


def ex_api_versions(client, v):
    response = client.request(make(18, v, client_software_name="wire-test",
                                   client_software_version="1.0"))
    assert response.error_code == ErrorCode.none
    listed = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}
    assert listed == {(r.api_key, r.min_version, r.max_version) for r in TABLE.values()}


def ex_metadata(client, v):
    topic = f"wire-md-{v}"
    response = metadata(client, [topic], version=v)
    (entry,) = response.topics
    assert entry.name == topic and entry.error_code == ErrorCode.none
    assert [p.partition_index for p in entry.partitions] == [0]
    (node,) = response.brokers
    assert entry.partitions[0].leader_id == node.node_id
    if v >= 1:
        assert response.controller_id == node.node_id and entry.is_internal is False
    if v >= 2:
        assert response.cluster_id
    if v >= 10:
        assert entry.topic_id != ZERO_UUID


def ex_produce(client, v):
    topic = f"wire-produce-{v}"
    metadata(client, [topic])
    if v < 3:  # kio has no schema: hand-encode v0-2, expect UNSUPPORTED_VERSION per partition
        name = topic.encode()
        body = (struct.pack(">hi", 1, 5000) + struct.pack(">i", 1) + struct.pack(">h", len(name))
                + name + struct.pack(">i", 1) + struct.pack(">ii", 0, 3) + b"abc")
        head = struct.pack(">hhih", 0, v, 4242, 4) + b"wire"
        client.send_raw(struct.pack(">i", len(head) + len(body)) + head + body)
        frame = client.read_frame()
        correlation, count, name_len = struct.unpack_from(">iih", frame, 0)
        assert (correlation, count) == (4242, 1)
        pos = 10 + name_len
        _n, index, error, offset = struct.unpack_from(">iihq", frame, pos)
        assert (index, error, offset) == (0, ErrorCode.unsupported_version, -1)
        return
    first = produce(client, topic, a_batch(3), version=v)
    second = produce(client, topic, a_batch(2), version=v)
    (t,) = second.responses
    (p,) = t.partition_responses
    assert first.responses[0].partition_responses[0].base_offset == 0
    assert (p.error_code, p.base_offset) == (ErrorCode.none, 3)


def ex_fetch(client, v):
    topic = f"wire-fetch-{v}"
    metadata(client, [topic])
    batch = a_batch(4, tag=b"fetch")
    produce(client, topic, batch)
    mod = req(1, v)
    topic_id = metadata(client, [topic], version=12).topics[0].topic_id  # v13+ name it so
    response = client.request(make(
        1, v, replica_id=-1, max_wait=100 * MS, min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
        rack_id="", topics=(build(mod.FetchTopic, topic=topic, topic_id=topic_id, partitions=(
            build(mod.FetchPartition, partition=0, fetch_offset=2, partition_max_bytes=1 << 20,
                  current_leader_epoch=-1, log_start_offset=-1),)),),
    ))
    (t,) = response.responses
    assert (t.topic_id if v >= 13 else t.topic) == (topic_id if v >= 13 else topic)
    (p,) = t.partitions
    assert p.error_code == ErrorCode.none and p.high_watermark == 4
    # the whole batch containing offset 2, untouched but for its base offset (bytes 0-7)
    assert p.records[8:] == batch[8:]
    assert parse_header(p.records).base_offset == 0


def list_offsets_v0(client, topic: str, partitions) -> bytes:
    """A hand-encoded ListOffsets v0 (kio has no schema) and its answer after the
    correlation id: ``partitions`` are (partition, timestamp, max_num_offsets)."""
    name = topic.encode()
    body = struct.pack(">ii", -1, 1) + struct.pack(">h", len(name)) + name \
        + struct.pack(">i", len(partitions)) + b"".join(struct.pack(">iqi", *p) for p in partitions)
    head = struct.pack(">hhih", 2, 0, 4243, 4) + b"wire"
    client.send_raw(struct.pack(">i", len(head) + len(body)) + head + body)
    frame = client.read_frame()
    assert frame[:4] == struct.pack(">i", 4243)
    return frame[4:]


def ex_list_offsets_v0(client, topic):
    def golden(*partitions):  # (partition, error, offsets) -> the v0 answer's bytes
        name = topic.encode()
        return struct.pack(">ih", 1, len(name)) + name + struct.pack(">i", len(partitions)) \
            + b"".join(struct.pack(f">ihi{len(o)}q", p, e, len(o), *o) for p, e, o in partitions)

    assert list_offsets_v0(client, topic, [(0, -1, 1)]) == golden((0, 0, [5]))
    assert list_offsets_v0(client, topic, [(0, -2, 1)]) == golden((0, 0, [0]))
    # latest with room for more: the log end, then the (one) segment's base, newest first
    assert list_offsets_v0(client, topic, [(0, -1, 10), (0, -2, 10)]) == golden(
        (0, 0, [5, 0]), (0, 0, [0]))
    # v0 knows no MAX_TIMESTAMP; partition 7 does not exist
    assert list_offsets_v0(client, topic, [(0, -3, 1), (7, -1, 1)]) == golden(
        (0, ErrorCode.unsupported_version, []), (7, ErrorCode.unknown_topic_or_partition, []))


def test_list_offsets_v0_lists_segment_boundaries_newest_first(client):
    topic = "wire-lo-v0-segments"
    create_topic(client, topic, configs=[("segment.bytes", "100")])
    for _ in range(3):  # each batch is over 100 bytes: one segment each
        produce(client, topic, a_batch(2))
    after_writes = int(time.time() * 1000) + 1
    time.sleep(0.01)  # the queries' "now" is later than after_writes

    def offsets(timestamp, most=10):
        frame = list_offsets_v0(client, topic, [(0, timestamp, most)])
        pos = 4 + 2 + len(topic) + 4 + 4
        error, count = struct.unpack_from(">hi", frame, pos)
        assert error == ErrorCode.none
        return list(struct.unpack_from(f">{count}q", frame, pos + 6))

    assert offsets(-1) == [6, 4, 2, 0]  # the log end, then each segment's base
    assert offsets(-1, most=2) == [6, 4]
    assert offsets(-2) == [0]
    # by time: the segments last written before it (the log end counts as written now)
    assert offsets(after_writes) == [4, 2, 0]
    assert offsets(1) == []


def ex_list_offsets(client, v):
    topic = f"wire-lo-{v}"
    metadata(client, [topic])
    produce(client, topic, a_batch(5))
    if v == 0:
        ex_list_offsets_v0(client, topic)
        return
    mod = req(2, v)

    def answer(ts):
        response = client.request(make(
            2, v, replica_id=-1, isolation_level=0, timeout=5000 * MS, topics=(build(
                mod.ListOffsetsTopic, name=topic, partitions=(build(
                    mod.ListOffsetsPartition, partition_index=0, timestamp=ts,
                    current_leader_epoch=-1, max_num_offsets=1),)),),
        ))
        return response.topics[0].partitions[0]

    def query(ts):
        part = answer(ts)
        assert part.error_code == ErrorCode.none
        return part.offset

    assert query(-1) == 5
    assert query(-2) == 0
    assert query(1_700_000_000_003) == 3
    # an older batch after the newest: MAX_TIMESTAMP (-3, v7+) still finds offset 4
    produce(client, topic, build_batch([(b"k", b"old", (), 1_600_000_000_000)]))
    if v >= 7:
        part = answer(-3)
        assert (part.error_code, part.offset, part.timestamp) == (
            ErrorCode.none, 4, 1_700_000_000_004)
    else:
        assert answer(-3).error_code == ErrorCode.unsupported_version
    if v >= 8:
        assert query(-4) == 0  # EARLIEST_LOCAL: no tiered storage, the log start
    else:
        assert answer(-4).error_code == ErrorCode.unsupported_version


def ex_create_topics(client, v):
    topic = f"wire-ct-{v}"
    response = create_topic(client, topic, 2, [("retention.ms", "60000")], version=v)
    (result,) = response.topics
    assert result.error_code == ErrorCode.none, result.error_message
    if v >= 5:
        assert result.num_partitions == 2
        configs = {c.name: c.value for c in result.configs}
        assert configs["retention.ms"] == "60000"
    again = create_topic(client, topic, 2, version=v).topics[0]
    assert again.error_code == ErrorCode.topic_already_exists
    if v >= 5:  # as from Kafka: -1s and an empty (not null) configs array
        assert (again.num_partitions, again.replication_factor, again.configs) == (-1, -1, ())
    entry = metadata(client, [topic], allow=False).topics[0]
    assert len(entry.partitions) == 2


def ex_delete_topics(client, v):
    topic = f"wire-dt-{v}"
    assert create_topic(client, topic).topics[0].error_code == ErrorCode.none
    if v >= 6:
        mod = req(20, v)
        request = make(20, v, timeout=10000 * MS, topics=(
            build(mod.DeleteTopicState, name=topic, topic_id=ZERO_UUID),))
    else:
        request = make(20, v, timeout=10000 * MS, topic_names=(topic,))
    (result,) = client.request(request).responses
    assert result.error_code == ErrorCode.none
    gone = metadata(client, [topic], allow=False).topics[0]
    assert gone.error_code == ErrorCode.unknown_topic_or_partition


def ex_create_partitions(client, v):
    topic = f"wire-cp-{v}"
    create_topic(client, topic)
    mod = req(37, v)
    response = client.request(make(37, v, timeout=10000 * MS, validate_only=False, topics=(
        build(mod.CreatePartitionsTopic, name=topic, count=3, assignments=None),)))
    assert response.results[0].error_code == ErrorCode.none
    assert len(metadata(client, [topic], allow=False).topics[0].partitions) == 3


def ex_describe_configs(client, v):
    topic = f"wire-dc-{v}"
    create_topic(client, topic, configs=[("cleanup.policy", "compact")])
    mod = req(32, v)
    response = client.request(make(32, v, include_synonyms=False, include_documentation=False,
                                   resources=(build(mod.DescribeConfigsResource,
                                                    resource_type=2, resource_name=topic,
                                                    configuration_keys=None),)))
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    configs = {c.name: c for c in result.configs}
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert configs["retention.ms"].config_source == 5  # DEFAULT_CONFIG


def describe_topic_configs(client, topic):
    mod = req(32, 4)
    response = client.request(make(32, 4, include_synonyms=False, include_documentation=False,
                                   resources=(build(mod.DescribeConfigsResource,
                                                    resource_type=2, resource_name=topic,
                                                    configuration_keys=None),)))
    (result,) = response.results
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: (c.value, c.config_source) for c in result.configs}


def alter_topic(client, api_key, v, topic, configs, validate_only=False):
    """AlterConfigs (33: configs = (name, value)) or IncrementalAlterConfigs (44: configs =
    (name, op, value)) on one topic: its (error_code, error_message)."""
    mod = req(api_key, v)
    if api_key == 44:
        entries = tuple(build(mod.AlterableConfig, name=n, config_operation=op, value=value)
                        for n, op, value in configs)
    else:
        entries = tuple(build(mod.AlterableConfig, name=n, value=value) for n, value in configs)
    response = client.request(make(api_key, v, validate_only=validate_only, resources=(
        build(mod.AlterConfigsResource, resource_type=2, resource_name=topic,
              configs=entries),)))
    (result,) = response.responses
    assert (result.resource_type, result.resource_name) == (2, topic)
    return result.error_code, result.error_message


def ex_alter_configs(client, v):
    topic = f"wire-ac-{v}"
    create_topic(client, topic, configs=[("retention.ms", "60000")])
    assert alter_topic(client, 33, v, topic, [("segment.bytes", "100000")]) == (
        ErrorCode.none, None)
    configs = describe_topic_configs(client, topic)
    assert configs["segment.bytes"] == ("100000", 1)  # DYNAMIC_TOPIC_CONFIG
    # the whole set is replaced: retention.ms is back to its default
    assert configs["retention.ms"] == (str(7 * 24 * 3600 * 1000), 5)  # DEFAULT_CONFIG
    code, message = alter_topic(client, 33, v, topic, [("retention.ms", "soon")])
    assert code == ErrorCode.invalid_config and "retention.ms" in message


def ex_incremental_alter_configs(client, v):
    topic = f"wire-iac-{v}"
    create_topic(client, topic, configs=[("retention.ms", "60000")])
    ops = [("segment.bytes", 0, "100000"), ("cleanup.policy", 2, "compact"),
           ("retention.ms", 1, None)]
    assert alter_topic(client, 44, v, topic, ops) == (ErrorCode.none, None)
    configs = describe_topic_configs(client, topic)
    assert configs["segment.bytes"] == ("100000", 1)
    assert configs["cleanup.policy"] == ("compact,delete", 1)
    assert configs["retention.ms"] == (str(7 * 24 * 3600 * 1000), 5)
    code, message = alter_topic(client, 44, v, topic, [("segment.bytes", 2, "5")])
    assert code == ErrorCode.invalid_config and "segment.bytes" in message


def ex_describe_cluster(client, v):
    response = client.request(make(60, v, include_cluster_authorized_operations=False,
                                   endpoint_type=1))
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == metadata(client, []).cluster_id
    (node,) = response.brokers
    assert response.controller_id == node.broker_id


def ex_init_producer_id(client, v):
    def init():
        return client.request(make(22, v, transactional_id=None,
                                   transaction_timeout=60000 * MS, producer_id=-1,
                                   producer_epoch=-1))

    first, second = init(), init()
    assert first.error_code == second.error_code == ErrorCode.none
    assert first.producer_id >= 0 and first.producer_epoch == 0
    assert second.producer_id != first.producer_id


def ex_describe_log_dirs(client, v):
    topic = f"wire-logdirs-{v}"
    create_topic(client, topic, partitions=2)
    batch = a_batch(4)
    produce(client, topic, batch)
    mod = req(35, v)
    asked = client.request(make(35, v, topics=(
        build(mod.DescribableLogDirTopic, topic=topic, partitions=(0, 1, 7)),
        build(mod.DescribableLogDirTopic, topic="wire-logdirs-missing", partitions=(0,)))))
    (result,) = asked.results
    assert result.error_code == ErrorCode.none and result.log_dir
    # The broker stores batches as they came: partition 0 holds exactly the batch's bytes.
    # A partition the topic lacks (7) and a missing topic are left out, as Kafka does.
    (t,) = result.topics
    assert t.name == topic
    assert [(p.partition_index, p.partition_size, p.offset_lag) for p in t.partitions] == [
        (0, len(batch), 0), (1, 0, 0)]
    every = client.request(make(35, v, topics=None))
    assert topic in {t.name for t in every.results[0].topics}
    if v >= 4:
        assert 0 < result.usable_bytes <= result.total_bytes


def ex_delete_records(client, v):
    topic = f"wire-dr-{v}"
    metadata(client, [topic])
    produce(client, topic, a_batch(5))
    mod = req(21, v)

    def delete(offset, partition=0):
        response = client.request(make(21, v, timeout=5000 * MS, topics=(build(
            mod.DeleteRecordsTopic, name=topic, partitions=(build(
                mod.DeleteRecordsPartition, partition_index=partition, offset=offset),)),)))
        (t,) = response.topics
        (p,) = t.partitions
        assert (t.name, p.partition_index) == (topic, partition)
        return p.error_code, p.low_watermark

    assert delete(2) == (ErrorCode.none, 2)
    assert delete(6) == (ErrorCode.offset_out_of_range, -1)
    assert delete(7, partition=3) == (ErrorCode.unknown_topic_or_partition, -1)
    assert delete(-1) == (ErrorCode.none, 5)


def ex_offset_for_leader_epoch(client, v):
    topic = f"wire-ofle-{v}"
    metadata(client, [topic])
    produce(client, topic, a_batch(3))
    mod = req(23, v)

    def ask(current, epoch, partition=0):
        response = client.request(make(23, v, replica_id=-1, topics=(build(
            mod.OffsetForLeaderTopic, topic=topic, partitions=(build(
                mod.OffsetForLeaderPartition, partition=partition,
                current_leader_epoch=current, leader_epoch=epoch),)),)))
        p = response.topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0, 0) == (ErrorCode.none, 0, 3)  # epoch 0 ends at the log end
    assert ask(-1, 0) == (ErrorCode.none, 0, 3)
    assert ask(0, 5) == (ErrorCode.none, -1, -1)  # an epoch never reached: undefined
    assert ask(1, 0) == (ErrorCode.unknown_leader_epoch, -1, -1)
    assert ask(0, 0, partition=4) == (ErrorCode.unknown_topic_or_partition, -1, -1)


def ex_describe_producers(client, v):
    topic = f"wire-dp-{v}"
    metadata(client, [topic])
    produce(client, topic, build_batch([(None, b"x", (), 1_700_000_000_123)] * 2,
                                       producer_id=4242, producer_epoch=3, base_sequence=0))
    mod = req(61, v)
    response = client.request(make(61, v, topics=(
        build(mod.TopicRequest, name=topic, partition_indexes=(0, 9)),)))
    (t,) = response.topics
    p0, p9 = t.partitions
    assert p0.error_code == ErrorCode.none
    assert [(s.producer_id, s.producer_epoch, s.last_sequence, s.last_timestamp,
             s.coordinator_epoch, s.current_txn_start_offset) for s in p0.active_producers] == [
        (4242, 3, 1, 1_700_000_000_123, -1, -1)]
    assert p9.error_code == ErrorCode.unknown_topic_or_partition


def ex_describe_topic_partitions(client, v):
    a, b = f"wire-dtp-{v}-a", f"wire-dtp-{v}-b"
    create_topic(client, a, partitions=3)
    create_topic(client, b, partitions=2)
    mod = req(75, v)

    def page(limit, cursor=None, names=(a, b, "wire-dtp-missing")):
        return client.request(make(75, v, response_partition_limit=limit, cursor=cursor,
                                   topics=tuple(build(mod.TopicRequest, name=n) for n in names)))

    first = page(4)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [
        (a, [0, 1, 2]), (b, [0])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (b, 1)
    rest = page(4, build(mod.Cursor, topic_name=b, partition_index=1))
    assert [(t.name, t.error_code, [p.partition_index for p in t.partitions])
            for t in rest.topics] == [(b, ErrorCode.none, [1]),
                                      ("wire-dtp-missing", ErrorCode.unknown_topic_or_partition,
                                       [])]
    assert rest.next_cursor is None
    assert rest.topics[0].topic_id == metadata(client, [b], version=12).topics[0].topic_id


def ex_get_telemetry_subscriptions(client, v):
    fresh = client.request(make(71, v, client_instance_id=ZERO_UUID))
    assert fresh.error_code == ErrorCode.none and fresh.client_instance_id != ZERO_UUID
    assert fresh.requested_metrics == ()  # nothing to push: the client stays quiet
    mine = uuid.uuid4()
    assert client.request(make(71, v, client_instance_id=mine)).client_instance_id == mine


def ex_push_telemetry(client, v):
    got = client.request(make(71, v, client_instance_id=ZERO_UUID))

    def push(subscription, terminating=False, metrics=b""):
        return client.request(make(72, v, client_instance_id=got.client_instance_id,
                                   subscription_id=subscription, terminating=terminating,
                                   compression_type=0, metrics=metrics)).error_code

    assert push(got.subscription_id + 1) == ErrorCode.unknown_subscription_id
    assert push(got.subscription_id, terminating=True) == ErrorCode.none


def ex_list_config_resources(client, v):
    mod = req(44, 1)
    configs = (build(mod.AlterableConfig, name="metrics", config_operation=0, value="*"),
               # no client of these tests matches: the telemetry exercises stay unsubscribed
               build(mod.AlterableConfig, name="match", config_operation=0,
                     value="client_id=nobody"))
    altered = client.request(make(44, 1, validate_only=False, resources=(
        build(mod.AlterConfigsResource, resource_type=16, resource_name=f"wire-lcr-{v}",
              configs=configs),)))
    assert altered.responses[0].error_code == ErrorCode.none
    listed = client.request(make(74, v, **({"resource_types": (16,)} if v >= 1 else {})))
    assert listed.error_code == ErrorCode.none
    assert f"wire-lcr-{v}" in [r.resource_name for r in listed.config_resources]


def ex_alter_partition_reassignments(client, v):
    topic = f"wire-apr-{v}"
    create_topic(client, topic, 2)
    node = metadata(client, [topic]).brokers[0].node_id
    mod = req(45, v)

    def alter(*partitions, name=topic):
        response = client.request(make(45, v, timeout=10000 * MS,
                                       allow_replication_factor_change=True, topics=(
            build(mod.ReassignableTopic, name=name, partitions=tuple(
                build(mod.ReassignablePartition, partition_index=p, replicas=r)
                for p, r in partitions)),)))
        assert response.error_code == ErrorCode.none
        (topic_result,) = response.responses
        return [(p.partition_index, p.error_code) for p in topic_result.partitions]

    # to this node (where it is): done at once; another node, empty, twice: refused
    assert alter((0, (node,)), (1, (node + 1,)), (1, ()), (0, (node, node))) == [
        (0, ErrorCode.none), (1, ErrorCode.invalid_replica_assignment),
        (1, ErrorCode.invalid_replica_assignment), (0, ErrorCode.invalid_replica_assignment)]
    assert alter((2, (node,))) == [(2, ErrorCode.unknown_topic_or_partition)]
    assert alter((0, (node,)), name="wire-apr-none") == [
        (0, ErrorCode.unknown_topic_or_partition)]
    assert alter((0, None)) == [(0, ErrorCode.no_reassignment_in_progress)]  # cancel


def ex_list_partition_reassignments(client, v):
    topic = f"wire-lpr-{v}"
    create_topic(client, topic)
    mod = req(46, v)
    for topics in (None, (build(mod.ListPartitionReassignmentsTopics, name=topic,
                                partition_indexes=(0,)),)):
        response = client.request(make(46, v, timeout=10000 * MS, topics=topics))
        assert (response.error_code, response.topics) == (ErrorCode.none, ())


EXERCISES = {
    18: ex_api_versions, 3: ex_metadata, 0: ex_produce, 1: ex_fetch, 2: ex_list_offsets,
    19: ex_create_topics, 20: ex_delete_topics, 37: ex_create_partitions,
    32: ex_describe_configs, 60: ex_describe_cluster, 22: ex_init_producer_id,
    33: ex_alter_configs, 44: ex_incremental_alter_configs, 35: ex_describe_log_dirs,
    21: ex_delete_records, 23: ex_offset_for_leader_epoch, 61: ex_describe_producers,
    75: ex_describe_topic_partitions, 71: ex_get_telemetry_subscriptions,
    72: ex_push_telemetry, 74: ex_list_config_resources, 45: ex_alter_partition_reassignments,
    46: ex_list_partition_reassignments,
}


def test_every_api_of_the_broker_has_an_exercise():
    assert {r.api_key for r in OURS} == set(EXERCISES)


@pytest.mark.parametrize(("api_key", "version"), CASES, ids=[f"key{k}-v{v}" for k, v in CASES])
def test_advertised_version_works(client, api_key, version):
    EXERCISES[api_key](client, version)
