"""Fixtures for the client tests: librdkafka's mock cluster and our broker.

``mock_cluster``: ``confluent_kafka.Producer({"test.mock.num.brokers": 3})`` keeps three real
loopback brokers alive while the object lives (librdkafka's built-in mock cluster).  The
clean way to learn their addresses is the client's own metadata: ``list_topics().brokers``
holds each mock broker's host and port.  Topics auto-create on Metadata with 4 partitions
whose leaders are spread over the three brokers; the mock reports no controller, so
CreateTopics is not available there.  One mock per test session; tests use distinct topics.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass

import pytest


@dataclass
class MockCluster:
    handle: object  # the confluent_kafka.Producer that owns the mock brokers
    bootstrap: str
    brokers: dict[int, tuple[str, int]]

    def leaders(self, topic: str) -> dict[int, int]:
        md = self.handle.list_topics(topic, timeout=10)
        return {p.id: p.leader for p in md.topics[topic].partitions.values()}


@pytest.fixture(scope="session")
def mock_cluster():
    confluent_kafka = pytest.importorskip("confluent_kafka")
    handle = confluent_kafka.Producer(
        {"test.mock.num.brokers": 3, "bootstrap.servers": "", "log_level": 3}
    )
    md = handle.list_topics(timeout=10)
    brokers = {b.id: (b.host, b.port) for b in md.brokers.values()}
    assert len(brokers) == 3
    bootstrap = ",".join(f"{h}:{p}" for h, p in brokers.values())
    yield MockCluster(handle, bootstrap, brokers)
    handle.flush(5)


_counter = itertools.count()


@pytest.fixture
def topic(request):
    """A fresh topic name for one test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")[:60]
    return f"{name}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
