"""The synchronous facade: the trio client in a thread, driven from plain code."""

from __future__ import annotations

import pytest

from databus.client import errors
from databus.client.sync import SyncAdmin, SyncConsumer, SyncProducer


def test_sync_round_trip(broker, topic):
    with SyncAdmin(broker.bootstrap) as admin:
        assert admin.create_topics({topic: 2}) == {topic: None}
    with SyncProducer(broker.bootstrap) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k", partition=i % 2) for i in range(20)]
        producer.flush(30)
        reports = [f.result(timeout=10) for f in futures]
    assert sorted(r.offset for r in reports if r.partition == 0) == list(range(10))
    with SyncConsumer(broker.bootstrap, {"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        got = []
        for _ in range(40):
            got.extend(consumer.poll(0.5))
            if len(got) >= 20:
                break
        assert sorted(r.value for r in got) == sorted(b"v%d" % i for i in range(20))
        assert consumer.assignment() == {(topic, 0), (topic, 1)}


def test_sync_errors_cross_the_thread(broker, topic):
    with SyncProducer(broker.bootstrap, {"max.request.size": 100}) as producer:
        with pytest.raises(errors.MessageTooLargeError):
            producer.send(topic, b"x" * 1000)
    with pytest.raises(errors.ConfigError, match="linger.msec"):
        SyncProducer(broker.bootstrap, {"linger.msec": 1})
