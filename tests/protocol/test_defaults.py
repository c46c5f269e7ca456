"""Kafka's defaults, stated once (databus.protocol.defaults), agree wherever a model uses them."""

from databus.broker.config import BrokerConfig
from databus.broker.coordinator.group_state import CoordinatorConfig
from databus.client.config import ProducerConfig
from databus.config import SidecarSettings
from databus.protocol import defaults
from databus.protocol.records import BatchBuilder
from databus.storage.config import LogConfig


def test_the_values_are_kafkas():
    assert defaults.BUFFER_MEMORY == 33554432
    assert defaults.BATCH_SIZE == 1_000_000  # librdkafka's, not Kafka's 16384 (docs/client.md)
    assert (defaults.MAX_BLOCK_MS, defaults.REQUEST_TIMEOUT_MS) == (60000, 30000)
    assert (defaults.LOG_SEGMENT_BYTES, defaults.MESSAGE_MAX_BYTES) == (1073741824, 1048588)
    assert defaults.LOG_ROLL_MS == defaults.LOG_RETENTION_MS == 604800000
    assert (defaults.GROUP_MIN_SESSION_TIMEOUT_MS, defaults.GROUP_MAX_SESSION_TIMEOUT_MS) == (
        6000, 1800000)
    assert (defaults.OFFSETS_RETENTION_MINUTES, defaults.OFFSETS_TOPIC_NUM_PARTITIONS) == (10080, 50)


def test_a_default_broker_gives_topics_kafkas_topic_defaults():
    derived = BrokerConfig().topic_defaults()
    topic = LogConfig().to_topic_config()
    assert derived == {key: topic[key] for key in derived}


def test_the_coordinator_defaults_are_the_brokers():
    broker, coordinator = BrokerConfig(), CoordinatorConfig()
    assert coordinator.initial_rebalance_delay_ms == broker.group_initial_rebalance_delay_ms
    assert coordinator.min_session_timeout_ms == broker.group_min_session_timeout_ms
    assert coordinator.max_session_timeout_ms == broker.group_max_session_timeout_ms


def test_the_sidecar_and_the_record_batch_use_the_producers_defaults():
    producer = ProducerConfig()
    assert SidecarSettings().buffer_memory == producer.buffer_memory
    assert BatchBuilder().batch_size == producer.batch_size
