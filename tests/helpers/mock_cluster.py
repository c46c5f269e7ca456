"""librdkafka's built-in mock cluster: three real loopback brokers that live as long as the
``confluent_kafka.Producer`` holding them (``test.mock.num.brokers``).

    cluster = MockCluster()       # or the session's ``mock_cluster`` fixture (tests/conftest.py)
    cluster.bootstrap             # "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3"
    cluster.leaders("topic")      # {partition: leader broker id}
    cluster.close()

The clean way to learn the brokers' addresses is the client's own metadata
(``list_topics().brokers``).  Topics auto-create on Metadata with 4 partitions whose leaders
are spread over the three brokers; the mock reports no controller, so CreateTopics is not
available there.
"""

from __future__ import annotations


class MockCluster:
    def __init__(self) -> None:
        import confluent_kafka

        self.handle = confluent_kafka.Producer(
            {"test.mock.num.brokers": 3, "bootstrap.servers": "", "log_level": 0})
        metadata = self.handle.list_topics(timeout=10)
        self.brokers = {b.id: (b.host, b.port) for b in metadata.brokers.values()}
        assert len(self.brokers) == 3
        self.bootstrap = ",".join(f"{host}:{port}" for host, port in self.brokers.values())

    def leaders(self, topic: str) -> dict[int, int]:
        metadata = self.handle.list_topics(topic, timeout=10)
        return {p.id: p.leader for p in metadata.topics[topic].partitions.values()}

    def close(self) -> None:
        """The brokers stop with the handle."""
        if self.handle is not None:
            self.handle.flush(5)
            self.handle = None
