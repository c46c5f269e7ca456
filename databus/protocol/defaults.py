"""Kafka's default values that more than one databus model states, each stated once here.

A default that only one model uses stays in that model, beside its name; the ones below are
shared: the broker's ``log.*`` settings and the topic config derived from them, the broker's
group settings and the coordinator they configure, the producer's settings and the sidecar
(and SDK) that apply them.  The values are Kafka's (Java broker and client, 3.x/4.x).

No imports: the SDK reads this module and must stay light.
"""

from __future__ import annotations

LONG_MAX = 2**63 - 1  # Java's Long.MAX_VALUE: Kafka's "no limit" for counts and times
DAY_MS = 24 * 3600 * 1000

# -- producer (and the sidecar that runs producers for apps) ---------------------------------
# batch.size of our producer (and the sidecar's, and a RecordBatch builder's cap): the one
# default here that is librdkafka's, not Kafka's 16384.  A Produce request carries one batch
# per partition, and each request costs a Python client (and the broker) far more than
# Java's: with 16 KiB batches our send() loop spent 6.4-6.8 µs of CPU per 100-byte record,
# with 256 KiB-1 MB 3.4-4.5 (librdkafka ~2).  linger.ms still bounds how long a batch
# waits, so at low rates nothing changes (docs/client.md).
BATCH_SIZE = 1_000_000
BUFFER_MEMORY = 32 * 1024 * 1024  # buffer.memory
MAX_BLOCK_MS = 60_000  # max.block.ms
REQUEST_TIMEOUT_MS = 30_000  # request.timeout.ms
DEFAULT_API_TIMEOUT_MS = 60_000  # default.api.timeout.ms (consumer and admin)

# -- broker log.* settings = the defaults of every topic's config ----------------------------
LOG_SEGMENT_BYTES = 1 << 30  # log.segment.bytes / segment.bytes
LOG_ROLL_MS = 7 * DAY_MS  # log.roll.ms / segment.ms
LOG_RETENTION_MS = 7 * DAY_MS  # log.retention.ms / retention.ms
LOG_RETENTION_BYTES = -1  # log.retention.bytes / retention.bytes (-1: no limit)
LOG_CLEANUP_POLICY = "delete"  # log.cleanup.policy / cleanup.policy
LOG_FLUSH_INTERVAL_MESSAGES = LONG_MAX  # log.flush.interval.messages / flush.messages
# message.max.bytes / max.message.bytes: 1 MiB of records plus the 12-byte batch log overhead
MESSAGE_MAX_BYTES = 1024 * 1024 + 12
LOG_FLUSH_OFFSET_CHECKPOINT_INTERVAL_MS = 60_000  # log.flush.offset.checkpoint.interval.ms

# -- broker group coordinator ----------------------------------------------------------------
GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
GROUP_MAX_SESSION_TIMEOUT_MS = 30 * 60 * 1000  # group.max.session.timeout.ms
OFFSETS_TOPIC_NUM_PARTITIONS = 50  # offsets.topic.num.partitions
OFFSETS_RETENTION_MINUTES = 7 * 24 * 60  # offsets.retention.minutes
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000  # offsets.retention.check.interval.ms
