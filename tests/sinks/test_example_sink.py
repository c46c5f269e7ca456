"""docs/examples/databus-example-sink installed with pip as a user would, run by ``databus
sinks``: its files hold every record exactly once across a kill -9, and the records it
rejects (no value) reach the dead-letter topic."""

from __future__ import annotations

import json

import confluent_kafka
import pytest

from tests.plugins.conftest import install_example

from .harness import CONSUMER, Service, sinks_config, wait_for


@pytest.fixture(scope="module")
def example_sink():
    return install_example("databus-example-sink", "databus_example_sink")


def lines(path):
    out = []
    for file in sorted(path.glob("*.jsonl")):
        out += [json.loads(line) for line in file.read_text().splitlines()]
    return out


def test_example_sink_exactly_once_across_a_kill_9(example_sink, broker, tmp_path):
    out = tmp_path / "lines"
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4000):
        producer.produce("lines", None if i == 77 else b"v%d" % i, key=b"%d" % i,
                         partition=i % 4)
    assert producer.flush(30) == 0
    config = sinks_config(broker, {"lines": {
        "plugin": "jsonlines", "topics": "lines", "consumer": {**CONSUMER, "max.poll.records": 50},
        "config": {"path": str(out), "flush.size": 1}}})  # a file per poll
    service = Service(tmp_path, "sinks", config)
    try:
        service.start()
        wait_for(lambda: len(list(out.glob("*.jsonl"))) >= 8, "some files", timeout=60,
                 log=service.log)
        service.kill9()
        service.start()
        wait_for(lambda: len(lines(out)) >= 3999, "the export", timeout=120, log=service.log)
        assert service.stop() == 0
    finally:
        service.close()
    offsets = sorted((int(f.name.split("+")[1]), line["offset"])
                     for f in out.glob("*.jsonl") for line in map(json.loads,
                                                                  f.read_text().splitlines()))
    missing = sorted({(i % 4, i // 4) for i in range(4000) if i != 77} - set(offsets))
    assert len(offsets) == len(set(offsets)) == 3999, (missing[:3], missing[-3:], sorted(
        f.name for f in out.glob("*.jsonl")), service.log())
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap,
                                         "group.id": "check", "auto.offset.reset": "earliest"})
    consumer.subscribe(["lines.dlq"])
    try:
        msg = None
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.key() == b"77"
        assert dict(msg.headers())["__connect.errors.exception.message"] == (
            b"a record without a value")
    finally:
        consumer.close()
