"""Topic-level ``compression.type``: a topic created with lz4 stores lz4 batches whatever the
three clients sent (gzip, snappy, none); every client reads them back; ``databus dump-log``
shows the codec; AlterConfigs switches the codec of later batches."""

from __future__ import annotations

import subprocess
import sys

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from .clients import (
    Msg,
    aiokafka_consume,
    aiokafka_produce,
    confluent_consume,
    confluent_produce,
    got_view,
    kafka_python_consume,
    kafka_python_produce,
)


def codecs_on_disk(broker, topic: str) -> list[str]:
    log = broker.data_dir / f"{topic}-0" / ("0" * 20 + ".log")
    out = subprocess.run([sys.executable, "-m", "databus.cli", "dump-log", str(log)],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split("compresscodec: ")[1].split()[0]
            for line in out.splitlines() if "compresscodec: " in line]


def test_lz4_topic_stores_lz4_whatever_the_producers_send(broker):
    topic = "tc-lz4"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"compression.type": "lz4"})])[topic].result(30)
    sent = [Msg(b"k%d" % i, b"value-%d " % i * 20) for i in range(30)]
    confluent_produce(broker.bootstrap, topic, sent[:10], **{
        "compression.type": "gzip", "enable.idempotence": True, "acks": "all"})
    kafka_python_produce(broker.bootstrap, topic, sent[10:20], compression_type="snappy",
                         acks="all")
    aiokafka_produce(broker.bootstrap, topic, sent[20:], acks="all")
    codecs = codecs_on_disk(broker, topic)
    assert codecs and set(codecs) == {"lz4"}
    want = [(m.key, m.value, ()) for m in sent]
    for consume in (confluent_consume, kafka_python_consume, aiokafka_consume):
        assert got_view(consume(broker.bootstrap, topic, 30)) == want, consume.__name__

    altered = admin.incremental_alter_configs([ConfigResource(
        "topic", topic, incremental_configs=[_set("compression.type", "zstd")])])
    for future in altered.values():
        future.result(30)
    confluent_produce(broker.bootstrap, topic, [Msg(b"z", b"after")],
                      **{"compression.type": "gzip"})
    assert codecs_on_disk(broker, topic)[len(codecs):] == ["zstd"]


def _set(name: str, value: str):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    return ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
