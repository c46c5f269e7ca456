"""KIP-1191's public names (share groups' dead-letter topics, Kafka 4.4): the group and
topic configs and the headers a dead letter carries.  One home for the broker that writes
dead letters (broker/share/dlq.py), the sidecar whose queue mode hands its dead letters to
the broker, and the tools that read them (``databus dlq``, ``databus groups describe``)."""

from __future__ import annotations

# The KIP-584 feature whose level 2 says the cluster has share-group dead-letter topics.
SHARE_VERSION = "share.version"
SHARE_VERSION_DLQ = 2

DLQ_TOPIC_CONFIG = "errors.deadletterqueue.topic.name"  # group config
DLQ_COPY_CONFIG = "errors.deadletterqueue.copy.record.enable"  # group config
DLQ_ENABLE_TOPIC_CONFIG = "errors.deadletterqueue.group.enable"  # topic config
DLQ_TOPIC_PREFIX = "dlq."  # the broker's errors.deadletterqueue.topic.name.prefix default

HEADER_TOPIC = "__dlq.errors.topic"
HEADER_PARTITION = "__dlq.errors.partition"
HEADER_OFFSET = "__dlq.errors.offset"
HEADER_GROUP = "__dlq.errors.group"
HEADER_DELIVERY_COUNT = "__dlq.errors.delivery.count"
HEADER_MESSAGE = "__dlq.errors.message"
