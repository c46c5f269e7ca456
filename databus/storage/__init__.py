"""The broker's log-structured storage engine (no network, no trio).

Entry points: ``log_manager.LogManager`` (a data directory: topics, open/recovery, flush,
retention, compaction, close), ``partition_log.PartitionLog`` (append, read,
offset_for_timestamp, flush), ``config.LogConfig`` (Kafka topic configs) and
``errors`` (storage errors with their Kafka error codes).  docs/storage.md describes the
on-disk format, durability and the recovery passes.
"""
