"""Real Kafka clients from PyPI against a real broker process: produce, consume, compare.

confluent-kafka (librdkafka), kafka-python and aiokafka each produce and consume with every
codec; messages carry keys, null keys, headers, null values; cross-client results are
byte-identical; per-key order is kept; offsets by earliest/latest/timestamp; a 100-partition
topic; a 1 MiB value.  One broker per module (started by the ``broker`` fixture) with
``message.max.bytes`` raised for the big value.
"""

from __future__ import annotations

import pytest

from tests.helpers.broker import BrokerProcess

from .clients import (
    CODECS,
    Msg,
    aiokafka_consume,
    aiokafka_produce,
    by_partition_offset,
    confluent_consume,
    confluent_produce,
    got_view,
    kafka_python_consume,
    kafka_python_produce,
    sample_messages,
    sent_view,
)

MAX_MESSAGE = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("clients"),
                       {"message.max.bytes": MAX_MESSAGE}) as running:
        yield running


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_idempotent_all_codecs(kbroker, codec):
    topic = f"cf-{codec}"
    messages = sample_messages(400, tag=codec)
    acks = confluent_produce(kbroker.bootstrap, topic, messages, **{
        "compression.type": codec, "enable.idempotence": True, "acks": "all"})
    assert [a[1] for a in acks] == list(range(400))
    got = confluent_consume(kbroker.bootstrap, topic, 400)
    assert [g.offset for g in got] == list(range(400))
    assert got_view(got) == sent_view(messages)
    # the same bytes through the two other clients
    assert got_view(kafka_python_consume(kbroker.bootstrap, topic, 400)) == sent_view(messages)
    assert got_view(aiokafka_consume(kbroker.bootstrap, topic, 400)) == sent_view(messages)


def _python_client_messages(codec: str) -> list[Msg]:
    # kafka-python and aiokafka cannot send a null header value; everything else is the same
    return [m._replace(headers=tuple(h for h in m.headers if h[1] is not None))
            for m in sample_messages(300, tag=codec)]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_all_codecs(kbroker, codec):
    topic = f"kp-{codec}"
    messages = _python_client_messages(codec)
    conf = {"acks": "all"}
    if codec != "none":
        conf["compression_type"] = codec
    acks = kafka_python_produce(kbroker.bootstrap, topic, messages, **conf)
    assert [a[1] for a in acks] == list(range(300))
    assert got_view(kafka_python_consume(kbroker.bootstrap, topic, 300)) == sent_view(messages)
    assert got_view(confluent_consume(kbroker.bootstrap, topic, 300)) == sent_view(messages)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_all_codecs(kbroker, codec):
    topic = f"aio-{codec}"
    messages = _python_client_messages(codec)
    conf = {"acks": "all", "enable_idempotence": True}
    if codec != "none":
        conf["compression_type"] = codec
    acks = aiokafka_produce(kbroker.bootstrap, topic, messages, **conf)
    assert [a[1] for a in acks] == list(range(300))
    assert got_view(aiokafka_consume(kbroker.bootstrap, topic, 300)) == sent_view(messages)
    assert got_view(confluent_consume(kbroker.bootstrap, topic, 300)) == sent_view(messages)


PRODUCERS = {
    "confluent": lambda b, t, m, acks: confluent_produce(b, t, m, acks=acks),
    "kafka-python": lambda b, t, m, acks: kafka_python_produce(
        b, t, m, acks=acks if acks == "all" else int(acks)),
    "aiokafka": lambda b, t, m, acks: aiokafka_produce(
        b, t, m, acks=acks if acks == "all" else int(acks)),
}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_acks_levels(kbroker, client, acks):
    topic = f"acks-{client}-{acks}"
    messages = _python_client_messages(f"acks{acks}")[:200]
    PRODUCERS[client](kbroker.bootstrap, topic, messages, acks)
    assert got_view(confluent_consume(kbroker.bootstrap, topic, 200)) == sent_view(messages)


def test_one_mib_values_every_client(kbroker):
    big = [Msg(b"big", bytes(range(256)) * 4096), Msg(None, b"\x00" * (1 << 20))]
    confluent_produce(kbroker.bootstrap, "big-cf", big, **{"message.max.bytes": MAX_MESSAGE})
    kafka_python_produce(kbroker.bootstrap, "big-kp", big, max_request_size=MAX_MESSAGE)
    aiokafka_produce(kbroker.bootstrap, "big-aio", big, max_request_size=MAX_MESSAGE)
    for topic in ("big-cf", "big-kp", "big-aio"):
        assert got_view(confluent_consume(kbroker.bootstrap, topic, 2)) == sent_view(big)
        assert got_view(kafka_python_consume(kbroker.bootstrap, topic, 2)) == sent_view(big)
        assert got_view(aiokafka_consume(kbroker.bootstrap, topic, 2)) == sent_view(big)


def test_per_key_order_across_partitions(kbroker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic("ordered", 4)])["ordered"].result(30)
    messages = [Msg(f"k{i % 13}".encode(), f"{i % 13}:{i // 13}".encode()) for i in range(2600)]
    acks = confluent_produce(kbroker.bootstrap, "ordered", messages, **{
        "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 50})
    # the Java-compatible partitioner: the same key always lands in the same partition
    partition_of_key = {}
    for m, (partition, _) in zip(messages, acks, strict=True):
        assert partition_of_key.setdefault(m.key, partition) == partition
    got = by_partition_offset(confluent_consume(kbroker.bootstrap, "ordered", 2600, range(4)))
    assert len(got) == 2600
    last_seq: dict[bytes, int] = {}
    for g in got:
        key, seq = g.value.decode().split(":")
        assert int(seq) == last_seq.get(g.key, -1) + 1, f"key {key} out of order"
        last_seq[g.key] = int(seq)


def test_offsets_earliest_latest_and_by_timestamp(kbroker):
    from confluent_kafka import Consumer, TopicPartition

    base = 1_750_000_000_000
    messages = [Msg(None, b"t%d" % i, timestamp=base + i * 1000) for i in range(50)]
    confluent_produce(kbroker.bootstrap, "times", messages, **{"batch.num.messages": 10})
    consumer = Consumer({"bootstrap.servers": kbroker.bootstrap, "group.id": "times"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("times", 0), timeout=10)
        assert (low, high) == (0, 50)
        (found,) = consumer.offsets_for_times([TopicPartition("times", 0, base + 20_500)], 10)
        assert found.offset == 21
        (beyond,) = consumer.offsets_for_times([TopicPartition("times", 0, base + 10**9)], 10)
        assert beyond.offset == -1  # no record that recent: OFFSET_END
    finally:
        consumer.close()
    from_ts = confluent_consume(kbroker.bootstrap, "times", 29, offset=21)
    assert [g.value for g in from_ts] == [b"t%d" % i for i in range(21, 50)]
    assert [g.timestamp for g in from_ts] == [base + i * 1000 for i in range(21, 50)]
    # reading from "latest" sees only what is produced afterwards
    from confluent_kafka import OFFSET_END

    confluent_produce(kbroker.bootstrap, "times", [Msg(None, b"after")])
    tail = confluent_consume(kbroker.bootstrap, "times", 1, offset=50)
    assert [g.value for g in tail] == [b"after"]
    assert confluent_consume(kbroker.bootstrap, "times", 1, offset=OFFSET_END, timeout=2) == []


def test_out_of_range_position_resets_and_reads_everything(kbroker):
    """A position past the log end (a stale offset) is OFFSET_OUT_OF_RANGE; with
    auto.offset.reset=earliest every client resets and reads it all.  confluent_consume also
    fails on any librdkafka protocol error: a null-records answer once made librdkafka spin on
    "Protocol parse failure ... invalid MessageSetSize -1" and read nothing."""
    messages = [Msg(None, b"oor-%d" % i) for i in range(10)]
    confluent_produce(kbroker.bootstrap, "oor", messages)
    expected = [(i, b"oor-%d" % i) for i in range(10)]
    for consume in (confluent_consume, kafka_python_consume, aiokafka_consume):
        got = consume(kbroker.bootstrap, "oor", 10, offset=500)
        assert [(g.offset, g.value) for g in got] == expected, consume.__name__


def test_hundred_partitions(kbroker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic("wide", 100)])["wide"].result(30)
    messages = [Msg(None, b"p%d-%d" % (i % 100, i // 100), partition=i % 100)
                for i in range(1000)]
    acks = confluent_produce(kbroker.bootstrap, "wide", messages, acks="all")
    assert sorted(acks) == [(p, o) for p in range(100) for o in range(10)]
    got = confluent_consume(kbroker.bootstrap, "wide", 1000, range(100))
    assert sorted((g.partition, g.offset, g.value) for g in got) == [
        (p, o, b"p%d-%d" % (p, o)) for p in range(100) for o in range(10)
    ]


def test_auto_create_off_reports_unknown_topic(tmp_path):
    from confluent_kafka import KafkaError, Producer

    with BrokerProcess(tmp_path, {"auto.create.topics.enable": False}) as strict:
        producer = Producer({"bootstrap.servers": strict.bootstrap,
                             "topic.metadata.propagation.max.ms": 500,
                             "message.timeout.ms": 10000})
        errors = []
        producer.produce("nope", b"x", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
        assert [e.code() for e in errors] in (
            [KafkaError._UNKNOWN_TOPIC], [KafkaError.UNKNOWN_TOPIC_OR_PART]
        )
        metadata = producer.list_topics("nope", timeout=5)
        assert metadata.topics["nope"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
