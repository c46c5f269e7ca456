"""Client settings: Kafka's names and defaults, clear errors naming the bad key."""

from __future__ import annotations

import pytest

from databus.client.config import ConsumerConfig, ProducerConfig
from databus.client.errors import ConfigError


def test_producer_defaults_are_kafkas_but_batch_size():
    cfg = ProducerConfig.from_kafka({})
    assert cfg.linger_ms == 5
    assert cfg.batch_size == 1_000_000  # librdkafka's (defaults.BATCH_SIZE)
    assert cfg.buffer_memory == 32 * 1024 * 1024
    assert cfg.max_block_ms == 60000
    assert cfg.acks == -1
    assert cfg.enable_idempotence is True
    assert cfg.max_in_flight_requests_per_connection == 5
    assert cfg.delivery_timeout_ms == 120000
    assert cfg.request_timeout_ms == 30000
    assert cfg.max_request_size == 1048576
    assert cfg.compression_type == "none"
    assert cfg.retries == 2147483647


def test_dotted_keys_and_string_values():
    cfg = ProducerConfig.from_kafka(
        {"linger.ms": "20", "compression.type": "LZ4", "acks": "1", "batch.size": 1000}
    )
    assert (cfg.linger_ms, cfg.compression_type, cfg.acks, cfg.batch_size) == (20, "lz4", 1, 1000)
    # acks=1 conflicts with the default idempotence: like Java, the default yields
    assert cfg.enable_idempotence is False
    assert cfg.to_kafka()["linger.ms"] == 20


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match="unknown ProducerConfig key 'linger.msec'"):
        ProducerConfig.from_kafka({"linger.msec": 5})


@pytest.mark.parametrize(
    "settings,needle",
    [
        ({"compression.type": "brotli"}, "'compression.type'"),
        ({"acks": "most"}, "'acks'"),
        ({"linger.ms": -1}, "'linger.ms'"),
        ({"buffer.memory": 0}, "'buffer.memory'"),
    ],
)
def test_invalid_values_are_named(settings, needle):
    with pytest.raises(ConfigError, match=needle):
        ProducerConfig.from_kafka(settings)


def test_explicit_idempotence_conflict_is_an_error():
    with pytest.raises(ConfigError, match="enable.idempotence=true conflicts with acks=0"):
        ProducerConfig.from_kafka({"enable.idempotence": True, "acks": 0})


def test_delivery_timeout_must_cover_linger_and_request_timeout():
    with pytest.raises(ConfigError, match="delivery.timeout.ms"):
        ProducerConfig.from_kafka({"delivery.timeout.ms": 1000, "request.timeout.ms": 30000})


def test_consumer_defaults_and_assignors():
    cfg = ConsumerConfig.from_kafka({"group.id": "g"})
    assert cfg.auto_offset_reset == "latest"
    assert cfg.enable_auto_commit is True
    assert cfg.auto_commit_interval_ms == 5000
    assert cfg.session_timeout_ms == 45000
    assert cfg.heartbeat_interval_ms == 3000
    assert cfg.fetch_min_bytes == 1
    assert cfg.fetch_max_wait_ms == 500
    assert cfg.max_partition_fetch_bytes == 1048576
    assert cfg.max_poll_records == 500
    assert cfg.partition_assignment_strategy == ("range", "cooperative-sticky")
    java = ConsumerConfig.from_kafka(
        {"partition.assignment.strategy":
         "org.apache.kafka.clients.consumer.RoundRobinAssignor,sticky"}
    )
    assert java.partition_assignment_strategy == ("roundrobin", "sticky")


def test_consumer_bad_assignor_and_heartbeat():
    with pytest.raises(ConfigError, match="unknown assignor 'fair'"):
        ConsumerConfig.from_kafka({"partition.assignment.strategy": "fair"})
    with pytest.raises(ConfigError, match="heartbeat.interval.ms"):
        ConsumerConfig.from_kafka({"heartbeat.interval.ms": 5000, "session.timeout.ms": 4000})
    with pytest.raises(ConfigError, match="'auto.offset.reset'"):
        ConsumerConfig.from_kafka({"auto.offset.reset": "smallest"})
