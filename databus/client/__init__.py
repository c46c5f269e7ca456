"""databus's own trio Kafka client: producer, consumer (groups, assignors), admin.

It speaks the Kafka protocol (databus.protocol) to any Kafka cluster, not only databus's
broker.  Modules: connection (one broker connection, pipelined), cluster (metadata and
connections), accumulator + sender + producer, fetcher + group + consumer, share +
share_consumer (share groups, KIP-932), reader (records by offset), assignors/,
partitioners, admin, sync (blocking facades), config (Kafka's settings), errors.

The names below are the client's public surface: console tools, the sidecar's users and
plugins import from ``databus.client``, never from its modules (tests/test_layering.py).
"""

from ..protocol.columns import RecordColumns, arrow_table
from ..protocol.types import TopicPartition
from . import errors
from .admin import Admin
from .cluster import Cluster
from .config import (
    AdminConfig,
    ConsumerConfig,
    ProducerConfig,
    ShareConsumerConfig,
    parse_overrides,
)
from .consumer import Consumer, ConsumerRecord, ConsumerStatistics
from .errors import AuthenticationError, KafkaError
from .offsets import EARLIEST, LATEST, list_offsets
from .producer import DeliveryFuture, Producer, ProducerStatistics, RecordMetadata
from .reader import RecordReader
from .share import AcknowledgeType
from .share_consumer import ShareConsumer
from .sync import SyncAdmin, SyncConsumer, SyncProducer, SyncRecordReader, SyncShareConsumer
from .transactions import PreparedTransaction, TransactionError, complete_transactions

__all__ = [
    "EARLIEST",
    "LATEST",
    "AcknowledgeType",
    "Admin",
    "AdminConfig",
    "Cluster",
    "Consumer",
    "ConsumerRecord",
    "ConsumerConfig",
    "ConsumerStatistics",
    "DeliveryFuture",
    "AuthenticationError",
    "KafkaError",
    "Producer",
    "ProducerConfig",
    "ProducerStatistics",
    "PreparedTransaction",
    "RecordColumns",
    "RecordMetadata",
    "RecordReader",
    "arrow_table",
    "ShareConsumer",
    "ShareConsumerConfig",
    "SyncAdmin",
    "SyncConsumer",
    "SyncProducer",
    "SyncRecordReader",
    "SyncShareConsumer",
    "TopicPartition",
    "TransactionError",
    "complete_transactions",
    "errors",
    "list_offsets",
    "parse_overrides",
]
