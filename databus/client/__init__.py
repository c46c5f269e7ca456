"""databus's own trio Kafka client: producer, consumer (groups, assignors), admin.

It speaks the Kafka protocol (databus.protocol) to any Kafka cluster, not only databus's
broker.  Modules: connection (one broker connection, pipelined), cluster (metadata and
connections), accumulator + sender + producer, fetcher + group + consumer, assignors/,
partitioners, admin, sync (blocking facades), config (Kafka's settings), errors.
"""

from ..protocol.types import TopicPartition
from .admin import Admin
from .consumer import Consumer, ConsumerRecord, ConsumerStatistics
from .producer import DeliveryFuture, Producer, ProducerStatistics, RecordMetadata

__all__ = [
    "Admin",
    "Consumer",
    "ConsumerRecord",
    "ConsumerStatistics",
    "DeliveryFuture",
    "Producer",
    "ProducerStatistics",
    "RecordMetadata",
    "TopicPartition",
]
