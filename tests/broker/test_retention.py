"""The broker runs retention every log.retention.check.interval.ms (a background task)."""

from __future__ import annotations

import time

from confluent_kafka.admin import AdminClient, NewTopic

from databus.protocol.entities import build
from tests.helpers.broker import BrokerProcess

from .clients import (
    Msg,
    aiokafka_consume,
    confluent_consume,
    confluent_produce,
    kafka_python_consume,
)
from .test_api_versions import make, req
from .wire import WireClient


def log_start_offset(client, topic: str) -> int:
    mod = req(2, 6)
    response = client.request(make(2, 6, replica_id=-1, isolation_level=0, topics=(
        build(mod.ListOffsetsTopic, name=topic, partitions=(
            build(mod.ListOffsetsPartition, partition_index=0, timestamp=-2,
                  current_leader_epoch=-1),)),)))
    return response.topics[0].partitions[0].offset


def test_retention_bytes_deletes_old_segments_in_the_background(tmp_path):
    with BrokerProcess(tmp_path, {"log.retention.check.interval.ms": 200}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("retained", 1, config={
            "segment.bytes": "2000", "retention.bytes": "6000"})])["retained"].result(30)
        confluent_produce(broker.bootstrap, "retained",
                          [Msg(None, b"%04d" % i + b"x" * 200) for i in range(200)],
                          **{"batch.num.messages": 5})
        with WireClient(broker.bootstrap) as client:
            deadline = time.monotonic() + 60
            low, previous = 0, -1
            while low == 0 or low != previous:  # until retention has run and settled
                assert time.monotonic() < deadline, f"retention never settled ({low})"
                previous = low
                time.sleep(0.5)  # a few retention checks (200 ms apart) run meanwhile
                low = log_start_offset(client, "retained")
        assert 0 < low < 200
        assert "retention:" in broker.log_text()
        rest = confluent_consume(broker.bootstrap, "retained", 200 - low)
        assert [g.offset for g in rest] == list(range(low, 200))
        assert rest[0].value.startswith(b"%04d" % low)
        # a consumer whose position retention deleted is out of range: it resets to the new
        # log start (auto.offset.reset=earliest) and reads the rest, with no protocol error
        for consume in (confluent_consume, kafka_python_consume, aiokafka_consume):
            rest = consume(broker.bootstrap, "retained", 200 - low, offset=0)
            assert [g.offset for g in rest] == list(range(low, 200)), consume.__name__
