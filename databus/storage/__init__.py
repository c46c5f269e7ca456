"""The broker's log-structured storage engine (no network, no trio); it owns the data
directory: every file in it is written here, metadata files through ``durable.atomic_write``.

Entry points: ``log_manager.LogManager`` (a data directory: topics, open/recovery, flush,
retention, compaction, close), ``partition_log.PartitionLog`` (append, read,
offset_for_timestamp, flush), ``config.LogConfig`` (Kafka topic configs),
``meta_properties`` (the cluster id) and ``errors`` (storage errors with their Kafka error
codes).

Thread contract: one *owner* thread (the broker's trio thread) does everything that reads a
log or changes its segment list, so reads take no lock.  Other threads run only
``PartitionLog.flush`` / ``LogManager.flush_all`` / ``write_checkpoints`` (a per-log lock
guards the snapshot of what to fsync) and the steps that ``LogManager.retention_steps`` /
``compaction_steps`` yield (steps.py): the expensive part of a run (scanning, writing and
fsyncing cleaned segments, unlinking files) on its own descriptors and files, while the
owner thread keeps appending and reading; the swap of a cleaned segment into the log is done
by the generator on the owner thread.  docs/storage.md describes the on-disk format,
durability, the threads and the recovery passes.
"""
